//! Every setting of `servery`, described once: by its clap argument (`cli.rs` and the
//! `args.rs` of each feature). This module reads that description back — the long
//! option, the environment variable, the help heading, whether it repeats, whether it is
//! a switch, whether a reload may change it — into one table, and everything else that
//! names settings derives from the table: the keys of the `--config` file, the order and
//! sources `--print-config` shows, and the reload rule. A flag added to any `Args`
//! struct is therefore a file key, and is covered by the round-trip test, without
//! touching this module.
//!
//! What is a setting: every argument of the serving command that has an environment
//! variable (every serving option has one), except `--config` itself.
//!
//! File keys are the long option without `--` and with `_` for `-` (`--max-connections`
//! → `max_connections`), the names `ctl reload --set` and `--check-config` already use;
//! the positional directory is `dir`.

pub mod file;
mod load;
mod print;
mod reload;
mod status;
mod worker;

#[cfg(test)]
mod tests;

use clap::{Arg, ArgAction, ArgGroup, CommandFactory};

pub use file::FileRead;
pub use load::{Effective, LoadError, Loaded, Source, load};
pub use print::print_toml;
pub use reload::worker_problems;
pub use status::settings_json;
pub use worker::{LiveFields, as_map};

/// The clap group of the settings a reload may change: `group = LIVE` on an argument is
/// how its description says so. Every other setting is fixed for the life of the parent
/// (read once at start by something that is not restarted with the workers), and a reload
/// that changes one is rejected.
pub const LIVE: &str = "reloadable";

/// The argument naming the configuration file: not itself a setting.
pub const CONFIG_ID: &str = "config";

/// The group [`LIVE`] (several members may be given together; it constrains nothing).
pub fn live_group() -> ArgGroup {
    ArgGroup::new(LIVE).multiple(true).required(false)
}

/// What a setting takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// A switch: given or not (`--cors`); in a file a TOML boolean.
    Switch,
    /// One value (`--port 8000`); in a file a string or number.
    One,
    /// A repeatable option (`--bind a --bind b`); in a file an array.
    Many,
}

/// One setting, as its clap argument describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// clap's id (`tls_cert`).
    pub id: String,
    /// The configuration-file key (`tls_cert`).
    pub key: String,
    /// The option (`--tls-cert`), or `None` for the positional directory.
    pub flag: Option<String>,
    /// The environment variable (`SERVERY_TLS_CERT`).
    pub env: String,
    pub shape: Shape,
    /// Whether a reload may change it (member of [`LIVE`]).
    pub reloadable: bool,
    /// The `--help` heading it is listed under.
    pub heading: Option<String>,
    /// Its values are not echoed (`hide_env_values`: credentials).
    pub secret: bool,
    /// The default values as text (none for an optional setting).
    pub default: Vec<String>,
    /// What separates several values in one environment variable (`,` for `--bind`).
    pub delimiter: Option<char>,
    /// Its values are paths (its parser makes a `PathBuf`): a relative one written in a
    /// `--config` file is taken from the file's folder.
    pub path: bool,
}

impl Setting {
    /// How a message names it: the flag, or the key for the positional directory.
    pub fn name(&self) -> &str {
        self.flag.as_deref().unwrap_or(&self.key)
    }
}

/// The serving command with its help text saying which settings a reload may change.
pub fn command() -> clap::Command {
    let live = live_ids();
    crate::cli::Cli::command().mut_args(|arg| {
        if !live.iter().any(|id| id == arg.get_id().as_str()) {
            return arg;
        }
        let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
        let arg = arg.help(format!("{help} [reloadable]"));
        match arg.get_long_help().map(ToString::to_string) {
            Some(long) => arg.long_help(format!("{long} [reloadable]")),
            None => arg,
        }
    })
}

/// The members of [`LIVE`] (clap links an argument to its groups when it builds).
fn live_ids() -> Vec<String> {
    let mut cmd = crate::cli::Cli::command();
    cmd.build();
    cmd.get_groups()
        .filter(|g| g.get_id() == LIVE)
        .flat_map(|g| g.get_args().map(|id| id.as_str().to_owned()))
        .collect()
}

/// Whether `arg` is a setting.
fn is_setting(arg: &Arg) -> bool {
    arg.get_env().is_some() && arg.get_id() != CONFIG_ID
}

/// Every setting, in the order `--help` lists them.
pub fn table() -> Vec<Setting> {
    let live = live_ids();
    let cmd = crate::cli::Cli::command();
    cmd.get_arguments()
        .filter(|a| is_setting(a))
        .map(|arg| {
            let id = arg.get_id().as_str().to_owned();
            let shape = match arg.get_action() {
                ArgAction::SetTrue | ArgAction::SetFalse => Shape::Switch,
                ArgAction::Append => Shape::Many,
                _ => Shape::One,
            };
            Setting {
                key: arg
                    .get_long()
                    .map_or_else(|| id.clone(), |l| l.replace('-', "_")),
                flag: arg.get_long().map(|l| format!("--{l}")),
                env: arg
                    .get_env()
                    .map(|e| e.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                shape,
                reloadable: live.contains(&id),
                heading: arg.get_help_heading().map(str::to_owned),
                secret: arg.is_hide_env_values_set(),
                default: arg
                    .get_default_values()
                    .iter()
                    .map(|v| v.to_string_lossy().into_owned())
                    .collect(),
                delimiter: arg.get_value_delimiter(),
                path: arg.get_value_hint() == clap::ValueHint::AnyPath,
                id,
            }
        })
        .collect()
}

/// The setting `key` names in a file, if any.
pub fn by_key<'a>(table: &'a [Setting], key: &str) -> Option<&'a Setting> {
    table.iter().find(|s| s.key == key)
}

/// The nearest key to a misspelt one (an edit distance of at most 2, or the same key
/// written with `-`), for "did you mean".
pub fn suggest<'a>(table: &'a [Setting], key: &str) -> Option<&'a str> {
    let underscored = key.replace('-', "_");
    if let Some(s) = by_key(table, &underscored) {
        return Some(&s.key);
    }
    table
        .iter()
        .map(|s| (strsim::levenshtein(&underscored, &s.key), &s.key))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k.as_str())
}
