//! The flags of the parent's discovery services.

use clap::Args;

/// `--qr` and `--discoverable`.
#[derive(Debug, Clone, Args, serde::Serialize, serde::Deserialize)]
#[command(next_help_heading = "Discovery (done by the parent alone, for any number of workers)")]
pub struct DiscoveryArgs {
    /// Print the LAN URL and a QR code of it to standard output once the service is ready,
    /// and again after each reload (once per committed generation). The URL is a bound
    /// address, or for 0.0.0.0 / :: this machine's first LAN address.
    #[arg(long, env = "SERVERY_QR", value_parser = clap::builder::BoolishValueParser::new())]
    pub qr: bool,
    /// Advertise the service with mDNS/DNS-SD once it is ready: _http._tcp (_https._tcp
    /// with TLS), plus _webdav._tcp (_webdavs._tcp) with --dav, TXT `path=/` and `gen=N`
    /// (the generation). Updated in place on reload, withdrawn when servery stops or fails.
    #[arg(long, env = "SERVERY_DISCOVERABLE", value_parser = clap::builder::BoolishValueParser::new())]
    pub discoverable: bool,
}

crate::knobs::core_fields! {
    impl DiscoveryArgs {
        qr => features.qr;
        discoverable => features.mdns;
    }
}
