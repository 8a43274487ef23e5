//! `--tftp` and its settings (fixed for the parent's life).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use clap::Args;
use servery_core::config::RawTftp;

fn defaults() -> RawTftp {
    RawTftp::default()
}

/// TFTP (`--tftp`): served by the parent alone, whatever the worker count.
#[derive(Debug, Clone, Args, serde::Serialize, serde::Deserialize)]
#[command(next_help_heading = "TFTP (served by the parent)")]
pub struct TftpArgs {
    /// Serve the root over TFTP (RFC 1350 with the blksize, tsize, timeout and windowsize
    /// options), read-only unless --tftp-write. Names are relative to the root; hidden
    /// files follow --show-hidden.
    #[arg(long, env = "SERVERY_TFTP", value_parser = clap::builder::BoolishValueParser::new())]
    pub tftp: bool,
    /// Address the TFTP socket listens on.
    #[arg(long, value_name = "ADDR", env = "SERVERY_TFTP_BIND", default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    pub tftp_bind: IpAddr,
    /// UDP port for TFTP (69 is the standard one and needs privilege; 0 picks a free port,
    /// printed at start).
    #[arg(
        long,
        value_name = "N",
        env = "SERVERY_TFTP_PORT",
        default_value_t = 69
    )]
    pub tftp_port: u16,
    /// Accept TFTP writes (needs --upload): a write takes the same target lease and
    /// budget as an HTTP upload, lands in a private temporary file and is published
    /// atomically when complete.
    #[arg(long, env = "SERVERY_TFTP_WRITE", value_parser = clap::builder::BoolishValueParser::new())]
    pub tftp_write: bool,
    /// Transfers in progress at once; one more is refused with an ERROR ("busy").
    #[arg(long, value_name = "N", env = "SERVERY_TFTP_MAX_TRANSFERS", default_value_t = defaults().max_transfers, allow_negative_numbers = true)]
    pub tftp_max_transfers: i64,
    /// The largest file one transfer may read or write, in bytes.
    #[arg(long, value_name = "BYTES", env = "SERVERY_TFTP_MAX_SIZE", default_value_t = defaults().max_transfer_size, allow_negative_numbers = true)]
    pub tftp_max_size: i64,
    /// Retransmissions of one packet before a silent client is dropped.
    #[arg(long, value_name = "N", env = "SERVERY_TFTP_RETRIES", default_value_t = defaults().retries, allow_negative_numbers = true)]
    pub tftp_retries: i64,
    /// Seconds to wait for the client before retransmitting, unless the client asks for
    /// its own (the timeout option, 1-255 s).
    #[arg(long, value_name = "SECS", env = "SERVERY_TFTP_TIMEOUT", default_value_t = defaults().timeout, allow_negative_numbers = true)]
    pub tftp_timeout: f64,
}

crate::knobs::core_fields! {
    impl TftpArgs {
        tftp => features.tftp;
        tftp_write => features.tftp_write;
        tftp_max_transfers => tftp.max_transfers;
        tftp_max_size => tftp.max_transfer_size;
        tftp_retries => tftp.retries;
        tftp_timeout => tftp.timeout;
    }
}

impl TftpArgs {
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.tftp_bind, self.tftp_port)
    }
}
