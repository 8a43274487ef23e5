//! The `--config` file: TOML, one `key = value` per setting at the top level. Every value
//! is checked here with its argument's own clap value parser, so a file value is
//! validated exactly like the flag; every problem is collected, each naming the file, the
//! line and the key.

use std::ffi::OsString;

use clap::error::ErrorKind;
use std::path::{Path, PathBuf};

use toml::de::{DeTable, DeValue};

use super::{Setting, Shape, by_key, suggest};

/// The largest configuration file read: a file of every setting is a few KiB.
pub const FILE_CAP: u64 = 1024 * 1024;

/// One setting as the file gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileValue {
    /// clap's id of the setting.
    pub id: String,
    /// 1-based line of its key.
    pub line: usize,
    /// A switch's state, or the values as text for the value parser.
    pub value: Given,
}

/// A value from the file, as clap reads values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Given {
    Switch(bool),
    Values(Vec<String>),
}

/// What a file held: the values that passed their checks and every problem found.
#[derive(Debug, Clone, Default)]
pub struct FileRead {
    pub path: PathBuf,
    pub values: Vec<FileValue>,
    /// `PATH:LINE: key: problem`, one per problem.
    pub errors: Vec<String>,
}

/// Read and check `path` against `settings` and the command whose value parsers apply.
pub fn read(path: &Path, settings: &[Setting], cmd: &clap::Command) -> FileRead {
    let mut out = FileRead {
        path: path.to_owned(),
        ..FileRead::default()
    };
    let text = match crate::operator_file::read_text(path, FILE_CAP, "a configuration file") {
        Ok(text) => text,
        Err(e) => {
            out.errors.push(format!("--config: {e}"));
            return out;
        }
    };
    parse(&text, settings, cmd, &mut out);
    out
}

/// Makes every relative path the file gives absolute against the file's own folder, as
/// nginx, Caddy and systemd read theirs, so a file means the same whatever directory
/// servery is started from. `-` (standard output for `access_log`) is not a path.
pub fn resolve_relative_paths(read: &mut FileRead, settings: &[Setting]) {
    let folder = std::path::absolute(&read.path)
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_default();
    for value in &mut read.values {
        let is_path = settings.iter().any(|s| s.id == value.id && s.path);
        if let (true, Given::Values(texts)) = (is_path, &mut value.value) {
            for text in texts.iter_mut() {
                if text != "-" && Path::new(text.as_str()).is_relative() {
                    *text = folder.join(&*text).to_string_lossy().into_owned();
                }
            }
        }
    }
}

/// Check the TOML `text` (named `out.path` in messages).
pub fn parse(text: &str, settings: &[Setting], cmd: &clap::Command, out: &mut FileRead) {
    let shown = out.path.display().to_string();
    let at = |span: std::ops::Range<usize>| line_of(text, span.start);
    let table = match DeTable::parse(text) {
        Ok(table) => table,
        Err(e) => {
            let line = e.span().map_or(1, &at);
            let message = e.message().trim_end().to_owned();
            out.errors
                .push(format!("{shown}:{line}: not valid TOML: {message}"));
            return;
        }
    };
    let mut errors: Vec<(usize, String)> = Vec::new();
    for (key, value) in table.get_ref() {
        let line = at(key.span());
        let name = key.get_ref().as_ref();
        let Some(setting) = by_key(settings, name) else {
            let problem = match (value.get_ref(), suggest(settings, name)) {
                (DeValue::Table(_), _) => "tables are not read: settings are top-level keys".into(),
                (_, Some(near)) => format!("no such setting (did you mean `{near}`?)"),
                (_, None) => "no such setting".into(),
            };
            errors.push((line, format!("{shown}:{line}: {name}: {problem}")));
            continue;
        };
        match given(setting, value.get_ref(), cmd) {
            Ok(value) => out.values.push(FileValue {
                id: setting.id.clone(),
                line,
                value,
            }),
            Err(problem) => errors.push((line, format!("{shown}:{line}: {name}: {problem}"))),
        }
    }
    // In the file's order (the parsed table is sorted by key).
    errors.sort();
    out.errors.extend(errors.into_iter().map(|(_, e)| e));
}

fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()
        .iter()
        .take(offset)
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The value for `setting`, checked by its value parser.
fn given(setting: &Setting, value: &DeValue<'_>, cmd: &clap::Command) -> Result<Given, String> {
    let texts = match (setting.shape, value) {
        (Shape::Switch, DeValue::Boolean(on)) => return Ok(Given::Switch(*on)),
        (Shape::Switch, other) => {
            return Err(format!("expected true or false, got {}", kind(other)));
        }
        (Shape::Many, DeValue::Array(items)) => items
            .iter()
            .map(|item| scalar(item.get_ref()))
            .collect::<Result<Vec<_>, _>>()?,
        (_, other) => vec![scalar(other)?],
    };
    // The value alone on a command line: a value parser's refusal is this value's
    // problem; the rules between arguments (`requires`, …) are checked when the file's
    // values join the real command line (`load`).
    for text in &texts {
        let args: Vec<OsString> = match &setting.flag {
            Some(flag) => vec!["servery".into(), format!("{flag}={text}").into()],
            None => vec!["servery".into(), "--".into(), text.into()],
        };
        if let Err(e) = cmd.clone().try_get_matches_from(args)
            && matches!(
                e.kind(),
                ErrorKind::InvalidValue | ErrorKind::ValueValidation | ErrorKind::InvalidUtf8
            )
        {
            return Err(clap_message(&e));
        }
    }
    Ok(Given::Values(texts))
}

/// A scalar as the text a flag would carry.
fn scalar(value: &DeValue<'_>) -> Result<String, String> {
    match value {
        DeValue::String(s) => Ok(s.to_string()),
        DeValue::Integer(i) => i64::from_str_radix(&i.as_str().replace('_', ""), i.radix())
            .map(|n| n.to_string())
            .map_err(|e| format!("integer {i}: {e}")),
        DeValue::Float(f) => Ok(f.as_str().replace('_', "")),
        DeValue::Boolean(b) => Ok(b.to_string()),
        other => Err(format!(
            "expected a string or a number, got {}",
            kind(other)
        )),
    }
}

fn kind(value: &DeValue<'_>) -> &'static str {
    match value {
        DeValue::String(_) => "a string",
        DeValue::Integer(_) => "an integer",
        DeValue::Float(_) => "a float",
        DeValue::Boolean(_) => "a boolean",
        DeValue::Datetime(_) => "a date-time",
        DeValue::Array(_) => "an array",
        DeValue::Table(_) => "a table (settings are top-level keys)",
    }
}

/// A clap error on one line, without clap's `error: ` prefix and the usage after it.
pub fn clap_message(e: &clap::Error) -> String {
    let text = e.to_string();
    let message: Vec<&str> = text
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect();
    let message = message.join(" ");
    message
        .strip_prefix("error: ")
        .unwrap_or(&message)
        .to_owned()
}
