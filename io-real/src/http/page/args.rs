//! The directory page's command line: folder archives and their limits, flattened into
//! `servery`'s options and received by every worker.

use clap::Args;

use super::archive::{DEFAULT_MAX_ENTRIES, DEFAULT_MAX_SIZE, Limits};

/// Folder archives (`?archive=zip|tar.gz`).
#[derive(Debug, Clone, Args, serde::Serialize, serde::Deserialize)]
#[command(next_help_heading = "Directory page")]
pub struct PageArgs {
    /// Do not offer folders as zip or tar.gz archives (`?archive=` is then refused, 403).
    #[arg(long, env = "SERVERY_NO_ARCHIVE", value_parser = clap::builder::BoolishValueParser::new())]
    pub no_archive: bool,
    /// Files and folders one archive may hold; a larger folder is refused (403) before
    /// anything is sent.
    #[arg(long, value_name = "N", env = "SERVERY_ARCHIVE_MAX_ENTRIES", default_value_t = DEFAULT_MAX_ENTRIES, value_parser = clap::value_parser!(u64).range(1..))]
    pub archive_max_entries: u64,
    /// Bytes of file content one archive may hold; a larger folder is refused (403)
    /// before anything is sent.
    #[arg(long, value_name = "BYTES", env = "SERVERY_ARCHIVE_MAX_SIZE", default_value_t = DEFAULT_MAX_SIZE, value_parser = clap::value_parser!(u64).range(1..))]
    pub archive_max_size: u64,
}

impl PageArgs {
    /// The archive limits a worker serves with; `None` when archives are off.
    pub fn limits(&self) -> Option<Limits> {
        (!self.no_archive).then_some(Limits {
            max_entries: self.archive_max_entries,
            max_size: self.archive_max_size,
        })
    }
}

// Read by the workers that build the page; none is a core field.
crate::knobs::core_fields! {
    impl PageArgs {}
}
