//! servery: a file server that supervises its own worker processes.
//!
//! - [`parent`]: the supervisor parent, the real [`servery_core::driver::ParentIo`].
//! - [`worker`]: a worker process, driving [`servery_core::worker::WorkerLifecycle`].
//! - [`http`]: static file serving for one worker.
//! - [`tls`]: TLS identities and handshakes (rustls).
//! - [`ctl`]: the `servery ctl` client.
//! - [`write`]: the broker-backed write flow behind uploads.
// Denied rather than forbidden so that `os`, and only it, can allow it.
#![deny(unsafe_code)]

/// `println!` that ignores a closed stdout (see [`out`]).
macro_rules! say {
    ($($arg:tt)*) => { $crate::out::stdout_line(format_args!($($arg)*)) };
}

/// `eprintln!` that ignores a closed stderr (see [`out`]).
macro_rules! tell {
    ($($arg:tt)*) => { $crate::out::stderr_line(format_args!($($arg)*)) };
}

pub mod access_log;
pub mod app;
mod banner;
pub mod build_info;
pub mod cgi;
pub mod civil_time;
pub mod cli;
pub mod clock;
pub mod cluster;
pub mod ctl;
pub mod entry;
pub mod fdpass;
pub mod http;
pub mod http3;
pub mod knobs;
mod log_record;
pub mod logging;
pub mod open_files;
pub mod operator_file;
pub mod os;
pub mod out;
pub mod packaging;
pub mod parent;
pub mod proxy;
pub mod served_root;
pub mod settings;
pub mod tftp;
pub mod tls;
pub mod worker;
pub mod write;

/// Runtime error, e.g. a listener could not be bound.
pub const EXIT_RUNTIME: i32 = 1;
/// The configuration is invalid; nothing was started.
pub const EXIT_CONFIG: i32 = 2;
