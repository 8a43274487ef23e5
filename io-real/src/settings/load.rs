//! The layers, per setting: command line > environment > `--config` file > default.
//!
//! clap already gives the command line precedence over the environment over the
//! default, and says which one a value came from (`ArgMatches::value_source`). The file
//! goes in between by parsing twice: the first parse tells which settings the command
//! line and the environment left at their defaults; the file's values for exactly those
//! are then added to the arguments as `--flag=value` and everything is parsed again, so a
//! file value passes through the same value parsers and the same rules between
//! arguments (`requires`, `conflicts_with`) as the flag.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

use clap::FromArgMatches;
use clap::parser::ValueSource;

use super::file::{self, FileRead, Given};
use super::{CONFIG_ID, Setting, Shape, command, table};
use crate::cli::Cli;

/// Where a setting's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Cli,
    Env(String),
    File {
        path: PathBuf,
        line: usize,
    },
    Default,
    /// Neither given nor defaulted (an optional setting left out).
    Unset,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Cli => f.write_str("cli"),
            Source::Env(name) => write!(f, "env {name}"),
            Source::File { path, line } => write!(f, "file {}:{line}", path.display()),
            Source::Default => f.write_str("default"),
            Source::Unset => f.write_str("unset"),
        }
    }
}

/// One setting's effective value.
#[derive(Debug, Clone, PartialEq)]
pub struct Effective {
    pub setting: Setting,
    /// A switch's state, or the values as clap holds them (empty when unset).
    pub value: Given,
    pub source: Source,
}

/// The configuration as read from the command line, the environment and the file.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub cli: Cli,
    /// The arguments as started (a reload parses them again).
    pub argv: Vec<OsString>,
    /// What the file held, when there is one (its problems are configuration errors).
    pub file: Option<FileRead>,
    /// Every setting, in `--help` order.
    pub effective: Vec<Effective>,
}

impl Loaded {
    /// The file's problems, to be reported with every other configuration error.
    pub fn file_errors(&self) -> &[String] {
        self.file.as_ref().map_or(&[], |f| &f.errors)
    }
}

/// The arguments cannot be parsed at all (usage errors), or not once the file's values
/// are added (which adds the file's own problems, so all are shown together).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
#[error("{}", self.problems().join("; "))]
pub struct LoadError {
    pub clap: clap::Error,
    pub file_errors: Vec<String>,
    /// The file's values were part of the parse that failed.
    pub with_file: Option<PathBuf>,
}

impl LoadError {
    /// Two settings given together that may not be.
    pub fn is_conflict(&self) -> bool {
        self.clap.kind() == clap::error::ErrorKind::ArgumentConflict
    }

    /// Every problem, one line each: the file's, then clap's.
    pub fn problems(&self) -> Vec<String> {
        let mut all = self.file_errors.clone();
        let with = self
            .with_file
            .as_ref()
            .map(|p| format!(" (with the settings of {})", p.display()))
            .unwrap_or_default();
        all.push(format!("{}{with}", file::clap_message(&self.clap)));
        all
    }
}

/// Read the configuration `argv` (and the current environment, and the file it names)
/// describes.
pub fn load(argv: &[OsString]) -> Result<Loaded, LoadError> {
    let plain = |clap| LoadError {
        clap,
        file_errors: Vec::new(),
        with_file: None,
    };
    let first = command().try_get_matches_from(argv).map_err(plain)?;
    let settings = table();
    let read = first.get_one::<PathBuf>(CONFIG_ID).map(|path| {
        let mut cmd = command();
        cmd.build();
        let mut read = file::read(path, &settings, &cmd);
        file::resolve_relative_paths(&mut read, &settings);
        read
    });
    let from_file = |id: &str| {
        read.as_ref()
            .and_then(|r| r.values.iter().find(|v| v.id == id))
            .filter(|_| {
                !matches!(
                    first.value_source(id),
                    Some(ValueSource::CommandLine | ValueSource::EnvVariable)
                )
            })
    };
    let mut options: Vec<OsString> = Vec::new();
    let mut positionals: Vec<OsString> = Vec::new();
    for setting in &settings {
        let Some(v) = from_file(&setting.id) else {
            continue;
        };
        match (&v.value, &setting.flag) {
            (Given::Switch(true), Some(flag)) => options.push(flag.into()),
            (Given::Switch(_), _) => {}
            (Given::Values(values), Some(flag)) => {
                options.extend(values.iter().map(|x| OsString::from(format!("{flag}={x}"))));
            }
            (Given::Values(values), None) => positionals.extend(values.iter().map(OsString::from)),
        }
    }
    let matches = if options.is_empty() && positionals.is_empty() {
        first.clone()
    } else {
        // The options go first, where no `--` of the command line can turn them into
        // positionals; the directory goes last.
        let mut args: Vec<OsString> = argv.iter().take(1).cloned().collect();
        args.extend(options);
        args.extend(argv.iter().skip(1).cloned());
        if !positionals.is_empty() {
            if !argv.iter().any(|a| a == "--") {
                args.push("--".into());
            }
            args.extend(positionals);
        }
        command()
            .try_get_matches_from(&args)
            .map_err(|clap| LoadError {
                clap,
                file_errors: read.as_ref().map(|r| r.errors.clone()).unwrap_or_default(),
                with_file: read.as_ref().map(|r| r.path.clone()),
            })?
    };
    let cli = Cli::from_arg_matches(&matches).map_err(plain)?;
    let effective = settings
        .into_iter()
        .map(|setting| {
            let value = current(&matches, &setting);
            let source = match (from_file(&setting.id), first.value_source(&setting.id)) {
                (Some(v), _) => Source::File {
                    path: read.as_ref().map(|r| r.path.clone()).unwrap_or_default(),
                    line: v.line,
                },
                (None, Some(ValueSource::CommandLine)) => Source::Cli,
                (None, Some(ValueSource::EnvVariable)) => Source::Env(setting.env.clone()),
                (None, Some(_)) => Source::Default,
                (None, None) => Source::Unset,
            };
            Effective {
                setting,
                value,
                source,
            }
        })
        .collect();
    Ok(Loaded {
        cli,
        argv: argv.to_vec(),
        file: read,
        effective,
    })
}

/// The value clap holds for `setting`: a switch's state, or its values as text.
fn current(matches: &clap::ArgMatches, setting: &Setting) -> Given {
    if setting.shape == Shape::Switch {
        return Given::Switch(matches.get_flag(&setting.id));
    }
    Given::Values(
        matches
            .get_raw(&setting.id)
            .into_iter()
            .flatten()
            .map(|v: &OsStr| v.to_string_lossy().into_owned())
            .collect(),
    )
}
