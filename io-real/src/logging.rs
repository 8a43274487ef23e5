//! Logs go to stderr, filtered by `SERVERY_LOG` (tracing's env-filter syntax, default
//! `info`). Workers inherit the parent's stderr, so one terminal shows the whole tree.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

pub fn init() {
    let filter = EnvFilter::try_from_env("SERVERY_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .try_init();
}
