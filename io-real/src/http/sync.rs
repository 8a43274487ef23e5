//! The synchronization primitives [`super::single_flight`] uses. They are named through
//! this module so that the model check (`io-real/tests/single_flight_loom.rs`) can compile
//! the same source file beside a `sync` module of loom's primitives instead: loom then
//! explores every interleaving without this crate, or any dependency, being rebuilt for it
//! (a `--cfg loom` would also change tokio, which compiles out `net` and `signal` under it).

pub(crate) use std::sync::{Arc, Mutex, MutexGuard};
