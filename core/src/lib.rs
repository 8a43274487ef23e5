//! The pure lifecycle core of servery.
//!
//! Every machine here is sans-IO in the style of quinn-proto and rustls: it takes events
//! together with the current time, hands back actions, and reports its next deadline. It
//! never sleeps, reads a clock, spawns a process, touches a file or draws OS randomness;
//! time and entropy come in from the driver (`io-real` for production, `io-sim` for the
//! seeded simulation). The driver loop itself is written once, in [`driver`], over the
//! [`driver::ParentIo`] trait that both drivers implement.
#![forbid(unsafe_code)]

pub mod acme;
pub mod broker;
pub mod chunk_flow;
pub mod cluster;
pub mod config;
pub mod control;
pub mod cpu_affinity;
pub mod dav_lock;
pub mod driver;
pub mod ids;
pub mod parent;
pub mod precondition;
pub mod proto;
pub mod proxy_admission;
pub mod request_stats;
pub mod rng;
pub mod singletons;
pub mod state_dir;
pub mod supervisor;
pub mod tftp;
pub mod time;
pub mod tls_material;
pub mod tree_flow;
pub mod upload_budget;
pub mod upstream_choice;
pub mod upstream_health;
pub mod worker;
pub mod write_flow;

pub use config::{ConfigError, RawConfig, ValidConfig};
pub use ids::{Generation, LeaseId, ReloadId, RequestId, Slot, WorkerId};
pub use time::Instant;
