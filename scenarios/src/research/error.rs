//! Errors of the research tool's inputs: policy and workload files, output directories.

use std::path::PathBuf;

use servery_core::ConfigError;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResearchError {
    #[error("{path}: cannot read: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The file is not the TOML its kind expects (unknown or mistyped field).
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    /// A policy's recovery fields break the real configuration's rules.
    #[error("{path}: {source}")]
    InvalidPolicy { path: PathBuf, source: ConfigError },
    /// A workload's parameters make no sense (field and rule named).
    #[error("{path}: {field}: {rule}")]
    InvalidWorkload {
        path: PathBuf,
        field: &'static str,
        rule: String,
    },
    #[error("two inputs share the name {0:?}: every policy and workload needs its own")]
    DuplicateName(String),
    /// The runs cannot be paired for the verdict (a policy lacks a seed another has).
    #[error("verdict: {0}")]
    Verdict(#[from] crate::research::verdict::VerdictError),
    /// A plot could not be written as PDF (an SVG element the converter does not know).
    #[error("{name}: {source}")]
    Pdf {
        name: String,
        source: crate::research::pdf::PdfError,
    },
    #[error("{path}: cannot write: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

pub(crate) fn read(path: &std::path::Path) -> Result<String, ResearchError> {
    std::fs::read_to_string(path).map_err(|source| ResearchError::Read {
        path: path.to_owned(),
        source,
    })
}

pub(crate) fn parse<T: serde::de::DeserializeOwned>(
    path: &std::path::Path,
    text: &str,
) -> Result<T, ResearchError> {
    toml::from_str(text).map_err(|e| ResearchError::Parse {
        path: path.to_owned(),
        message: e.to_string().trim_end().to_string(),
    })
}
