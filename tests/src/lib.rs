//! Black-box test helpers for the real `servery` binary: a temporary tree to serve, a
//! server guard that starts the binary on an ephemeral port and kills whatever is left on
//! drop, a plain HTTP/1.1 GET over `std::net::TcpStream`, the control socket, a load
//! generator, and [`wait_until`], the one way these tests wait: on an observable
//! condition, with a bound.
#![forbid(unsafe_code)]

mod binary;
mod etcd;
mod http;
pub mod instructions;
pub mod netns;
mod other_user;
mod procs;
mod python;
pub mod scenario;
mod server;
mod skipping;
mod tmpfs;
mod tools;
mod tree;
pub mod upstream;
mod waiting;
mod wrk;

use std::time::Duration;

pub use binary::*;
pub use etcd::*;
pub use http::*;
pub use other_user::*;
pub use procs::*;
pub use python::*;
pub use server::*;
pub use skipping::*;
pub use tmpfs::*;
pub use tools::*;
pub use tree::*;
pub use waiting::*;
pub use wrk::*;

pub use serde_json;

/// Lifecycle timings small enough for tests, large enough for a loaded 2-core machine
/// running debug builds: a beat every 0.2 s, a hang declared after 1.5 s.
pub const FAST: &[&str] = &[
    "--heartbeat-interval",
    "0.2",
    "--heartbeat-timeout",
    "1.5",
    "--restart-backoff-initial",
    "0.1",
    "--drain-timeout",
    "2",
    "--force-timeout",
    "0.5",
    "--worker-start-timeout",
    "10",
];

/// The FAST values, for computing bounds.
pub const HEARTBEAT_TIMEOUT: Duration = Duration::from_millis(1500);
pub const BACKOFF_INITIAL: Duration = Duration::from_millis(100);
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);
pub const FORCE_TIMEOUT: Duration = Duration::from_millis(500);
/// Generous time for one debug-build worker process to start and report READY.
pub const START_MARGIN: Duration = Duration::from_millis(2500);

/// The body of `hello.txt` in every [`Tree`].
pub const HELLO: &[u8] = b"hello from servery\n";
