//! The access log (`--access-log`): workers record one line per request ([`recorder`]),
//! the parent's broker queues the batches, and the parent's one writer writes them
//! ([`writer`]). Lines are formatted by [`format`].

pub mod args;
pub mod format;
pub mod recorder;
pub mod writer;
