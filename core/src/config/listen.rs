//! Which listener set a generation's workers accept on.
//!
//! The driver binds sockets; the core decides when a set is bound (before a reload's
//! candidates exist), which set each worker is started with (its `Spawn`'s configuration)
//! and when the parent's copy of a set closes (decision 0035). A driver therefore keeps
//! its bound sets keyed by this value and nothing else about them.

use core::fmt;

/// The serving listeners a generation uses, as configured. The addresses are fixed while
/// servery runs; the port may change on reload. Generations with equal values share one
/// set of sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Listen {
    /// `None`: the default port, or the first free one after it, found when bound.
    /// `Some(0)`: a port the OS picks when bound.
    pub port: Option<u16>,
}

impl fmt::Display for Listen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.port {
            None => f.write_str("port (default)"),
            Some(0) => f.write_str("port (any free)"),
            Some(port) => write!(f, "port {port}"),
        }
    }
}
