//! `--print-config`: the effective settings as a TOML file `--config` accepts back, each
//! with a trailing comment saying where its value came from.

use std::fmt::Write as _;

use super::Shape;
use super::file::Given;
use super::load::{Effective, Source};

/// The settings as TOML, grouped under their `--help` headings.
pub fn print_toml(effective: &[Effective]) -> String {
    let mut out = String::from(
        "# servery: the effective settings; each comment says where the value came from\n\
         # (cli, env VAR, file PATH:LINE, default). `--config` reads this file back.\n",
    );
    let mut heading: Option<Option<&str>> = None;
    for e in effective {
        let this = e.setting.heading.as_deref();
        if heading != Some(this) {
            let _ = write!(out, "\n# {}\n", this.unwrap_or("Options"));
            heading = Some(this);
        }
        let key = &e.setting.key;
        let note = match (&e.setting.reloadable, &e.source) {
            (true, source) => format!("{source}; reloadable"),
            (false, source) => source.to_string(),
        };
        match (&e.value, e.setting.secret) {
            (Given::Values(values), _) if values.is_empty() => {
                let _ = writeln!(out, "# {key} =  # {}", Source::Unset);
            }
            (Given::Values(values), true) => {
                let _ = writeln!(
                    out,
                    "# {key} = <{} value(s) not shown>  # {note}",
                    values.len()
                );
            }
            (Given::Switch(on), _) => {
                let _ = writeln!(out, "{key} = {on}  # {note}");
            }
            (Given::Values(values), false) => {
                let value = match e.setting.shape {
                    Shape::Many => toml::Value::Array(values.iter().map(|v| scalar(v)).collect()),
                    _ => scalar(&values[0]),
                };
                let _ = writeln!(out, "{key} = {value}  # {note}");
            }
        }
    }
    out
}

/// A value as TOML: a number when the text is exactly a number's own spelling (so the
/// file reads back to the same text), a string otherwise.
fn scalar(text: &str) -> toml::Value {
    if let Ok(n) = text.parse::<i64>()
        && n.to_string() == text
    {
        return toml::Value::Integer(n);
    }
    if let Ok(x) = text.parse::<f64>()
        && x.is_finite()
        && x.to_string() == text
    {
        return toml::Value::Float(x);
    }
    toml::Value::String(text.to_owned())
}
