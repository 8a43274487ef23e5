//! Black-box test helpers for the real `servery` binary.
#![forbid(unsafe_code)]
