//! The synchronization primitives [`super::single_flight`] uses: `std`'s, or loom's when the
//! crate is built with `RUSTFLAGS="--cfg servery_loom"` so loom can explore every
//! interleaving. The cfg has its own name rather than the customary `loom` because tokio
//! also reacts to `--cfg loom` (it compiles out `net` and `signal`), which would break the
//! rest of this crate.
// `servery_loom` is not a cfg rustc knows; it is set by hand for the model-checking run.
#![allow(unexpected_cfgs)]

#[cfg(servery_loom)]
pub(crate) use loom::sync::{Arc, Mutex, MutexGuard};
#[cfg(not(servery_loom))]
pub(crate) use std::sync::{Arc, Mutex, MutexGuard};
