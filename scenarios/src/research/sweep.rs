//! Parameter sweeps from one file: a policy file with `[[vary]]` tables stands for one
//! policy per combination of the values it lists, each held to the same rules as a
//! policy file of its own (decision 0070).
//!
//! ```toml
//! name = "seed"
//! [recovery]
//! worker_restart_limit = 5
//! [[vary]]
//! field = "worker_restart_limit"          # a [recovery] field
//! values = [3, 5, 10]
//! [[vary]]
//! field = "gunicorn.max_requests_jitter"  # or SECTION.FIELD of a published section
//! values = [0, 50]
//! ```
//!
//! Each point is named `NAME FIELD=VALUE …` in the order of the `[[vary]]` tables.

use std::path::Path;

use crate::research::error::{ResearchError, parse, read};
use crate::research::policy::{self, Policy};

/// The most points one sweep may have: past it a typo in a list would run for days.
pub const MAX_POINTS: usize = 1000;

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Vary {
    field: String,
    values: Vec<toml::Value>,
}

/// Every policy the file at `path` stands for: itself, or one per sweep point.
pub fn load_all(path: &Path) -> Result<Vec<Policy>, ResearchError> {
    let text = read(path)?;
    from_text(path, &text)
}

pub fn from_text(path: &Path, text: &str) -> Result<Vec<Policy>, ResearchError> {
    let bad = |message: String| ResearchError::Parse {
        path: path.to_owned(),
        message,
    };
    let mut table: toml::Table = parse(path, text)?;
    let Some(vary) = table.remove("vary") else {
        return Ok(vec![policy::from_text(path, text)?]);
    };
    let vary: Vec<Vary> = vary
        .try_into()
        .map_err(|e: toml::de::Error| bad(format!("vary: {}", e.message())))?;
    let base = table
        .get("name")
        .and_then(toml::Value::as_str)
        .unwrap_or_default()
        .to_string();
    let mut points: Vec<(String, toml::Table)> = vec![(base, table)];
    for v in &vary {
        let (section, key) = v.field.split_once('.').unwrap_or(("recovery", &v.field));
        if v.values.is_empty() {
            return Err(bad(format!("vary {}: values is empty", v.field)));
        }
        if points.len().saturating_mul(v.values.len()) > MAX_POINTS {
            return Err(bad(format!(
                "vary: more than {MAX_POINTS} points; split the sweep"
            )));
        }
        let mut next = Vec::with_capacity(points.len() * v.values.len());
        for (name, t) in &points {
            for value in &v.values {
                let mut t = t.clone();
                let entry = t
                    .entry(section)
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()));
                let Some(fields) = entry.as_table_mut() else {
                    return Err(bad(format!("vary {}: {section} is not a table", v.field)));
                };
                fields.insert(key.to_string(), value.clone());
                next.push((format!("{name} {}={}", v.field, shown(value)), t));
            }
        }
        points = next;
    }
    points
        .into_iter()
        .map(|(name, mut t)| {
            t.insert("name".into(), toml::Value::String(name));
            policy::from_table(path, t)
        })
        .collect()
}

/// A value as a point's name shows it: numbers and booleans as written, strings bare.
fn shown(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => format!("{f:?}"),
        toml::Value::Boolean(b) => b.to_string(),
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(text: &str) -> Result<Vec<String>, String> {
        from_text(Path::new("s.toml"), text)
            .map(|ps| ps.into_iter().map(|p| p.name).collect())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_sweep_is_every_combination_of_its_values_named_by_them() {
        let text = "name = \"s\"\n[[vary]]\nfield = \"worker_restart_limit\"\nvalues = [3, 10]\n\
                    [[vary]]\nfield = \"restart_burst_window\"\nvalues = [0.0, 5.0]\n";
        let ps = from_text(Path::new("s.toml"), text).unwrap_or_else(|e| panic!("{e}"));
        let got: Vec<(String, i64, f64)> = ps
            .iter()
            .map(|p| {
                (
                    p.name.clone(),
                    p.recovery.worker_restart_limit,
                    p.recovery.restart_burst_window,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    "s worker_restart_limit=3 restart_burst_window=0.0".into(),
                    3,
                    0.0
                ),
                (
                    "s worker_restart_limit=3 restart_burst_window=5.0".into(),
                    3,
                    5.0
                ),
                (
                    "s worker_restart_limit=10 restart_burst_window=0.0".into(),
                    10,
                    0.0
                ),
                (
                    "s worker_restart_limit=10 restart_burst_window=5.0".into(),
                    10,
                    5.0
                ),
            ]
        );
        assert_eq!(names("name = \"plain\"\n"), Ok(vec!["plain".into()]));
    }

    #[test]
    fn a_sweep_varies_a_published_sections_field_too() {
        let text = "name = \"g\"\n[gunicorn]\nmax_requests = 1000\n[[vary]]\n\
                    field = \"gunicorn.max_requests_jitter\"\nvalues = [0, 50]\n";
        let ps = from_text(Path::new("s.toml"), text).unwrap_or_else(|e| panic!("{e}"));
        let max: Vec<i64> = ps
            .iter()
            .map(|p| p.recovery.max_requests_per_worker)
            .collect();
        assert_eq!(max, [1000, 1050]);
    }

    #[test]
    fn every_point_is_held_to_the_policy_rules_and_bad_sweeps_say_why() {
        let bad_point = "name = \"s\"\n[recovery]\nrestart_backoff_max = 1.0\n[[vary]]\n\
                         field = \"restart_backoff_initial\"\nvalues = [0.5, 10.0]\n";
        let e = names(bad_point).err().unwrap_or_default();
        assert!(
            e.contains("restart_backoff_max") && e.contains("inverted"),
            "{e}"
        );
        let typo = "name = \"s\"\n[[vary]]\nfield = \"worker_restart_limt\"\nvalues = [1]\n";
        let e = names(typo).err().unwrap_or_default();
        assert!(e.contains("worker_restart_limt"), "{e}");
        let empty = "name = \"s\"\n[[vary]]\nfield = \"worker_restart_limit\"\nvalues = []\n";
        assert!(names(empty).is_err_and(|e| e.contains("empty")));
        let many = format!(
            "name = \"s\"\n[[vary]]\nfield = \"worker_restart_limit\"\nvalues = [{}]\n\
             [[vary]]\nfield = \"worker_restart_window\"\nvalues = [{}]\n",
            (1..=40)
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(","),
            (1..=40)
                .map(|i| format!("{i}.0"))
                .collect::<Vec<_>>()
                .join(",")
        );
        assert!(names(&many).is_err_and(|e| e.contains("1000 points")));
    }
}
