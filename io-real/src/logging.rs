//! Logs go to stderr, filtered by `SERVERY_LOG` (tracing's env-filter syntax, default
//! `info`), as text or as one JSON object per line (`--log-format`). Workers inherit the
//! parent's stderr, so one stream shows the whole tree; the parent passes its format on
//! in `SERVERY_LOG_FORMAT`.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::parent::ops_args::LogFormat;

/// The variable a worker reads its log format from.
pub const FORMAT_ENV: &str = "SERVERY_LOG_FORMAT";

/// A worker's format: the parent's, as it passed it on.
pub fn worker_format() -> LogFormat {
    match std::env::var(FORMAT_ENV).as_deref() {
        Ok("json") => LogFormat::Json,
        _ => LogFormat::Text,
    }
}

/// Names this process as worker `id` in every JSON record it writes from now on.
pub fn set_worker_id(id: u64) {
    crate::log_record::set_worker_id(id);
}

pub fn init(format: LogFormat) {
    crate::banner::set_format(format);
    let filter = EnvFilter::try_from_env("SERVERY_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder
            .event_format(crate::log_record::JsonRecord::new())
            .try_init(),
    };
}
