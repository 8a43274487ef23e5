//! The synchronization primitives [`super::single_flight`] uses: `std`'s, or loom's when the
//! crate is built with the `loom` feature so loom can explore every interleaving. A feature,
//! not the customary `--cfg loom`: tokio also reacts to that cfg (it compiles out `net` and
//! `signal`, which the rest of this crate needs), and a RUSTFLAGS cfg rebuilds every
//! dependency.

#[cfg(feature = "loom")]
pub(crate) use loom::sync::{Arc, Mutex, MutexGuard};
#[cfg(not(feature = "loom"))]
pub(crate) use std::sync::{Arc, Mutex, MutexGuard};
