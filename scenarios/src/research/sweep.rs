//! Parameter sweeps from one file: a policy or workload file with `[[vary]]` tables
//! stands for one policy (workload) per combination of the values it lists, each held to
//! the same rules as a file of its own (decision 0070; workloads, decision 0126).
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
//! In a workload file a bare field is a top-level one (`request_rate`, `workers`) and
//! `faults.FIELD` is one of the `[faults]` model's (`faults.rate_per_s`,
//! `faults.outage_s = [[1.0, 10.0], [10.0, 60.0]]`).
//!
//! Each point is named `NAME FIELD=VALUE …` in the order of the `[[vary]]` tables.

use std::path::Path;

use crate::research::error::{ResearchError, parse, read};
use crate::research::policy::{self, Policy};
use crate::research::workload::{self, Workload};

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
    let Some(points) = points(path, text, Some("recovery"))? else {
        return Ok(vec![policy::from_text(path, text)?]);
    };
    points
        .into_iter()
        .map(|t| policy::from_table(path, t))
        .collect()
}

/// Every workload the file at `path` stands for: itself, or one per sweep point.
pub fn load_workloads(path: &Path) -> Result<Vec<Workload>, ResearchError> {
    let text = read(path)?;
    workloads_from_text(path, &text)
}

pub fn workloads_from_text(path: &Path, text: &str) -> Result<Vec<Workload>, ResearchError> {
    let Some(points) = points(path, text, None)? else {
        return Ok(vec![workload::from_text(path, text)?]);
    };
    points
        .into_iter()
        // Each point is read as the file it would be, so it meets every rule a workload
        // file does (an unknown field, a trace file beside it, the checks).
        .map(|t| workload::from_table(path, t))
        .collect()
}

/// The file's sweep points as tables, each with its `name`, or `None` when it has no
/// `[[vary]]`. A bare field is in `bare_section` (top level when `None`); `SECTION.FIELD`
/// in that section.
fn points(
    path: &Path,
    text: &str,
    bare_section: Option<&str>,
) -> Result<Option<Vec<toml::Table>>, ResearchError> {
    let bad = |message: String| ResearchError::Parse {
        path: path.to_owned(),
        message,
    };
    let mut table: toml::Table = parse(path, text)?;
    let Some(vary) = table.remove("vary") else {
        return Ok(None);
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
        let (section, key) = match (v.field.split_once('.'), bare_section) {
            (Some((section, key)), _) => (Some(section), key),
            (None, section) => (section, v.field.as_str()),
        };
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
                let fields = match section {
                    Some(section) => {
                        let entry = t
                            .entry(section)
                            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
                        entry.as_table_mut().ok_or_else(|| {
                            bad(format!("vary {}: {section} is not a table", v.field))
                        })?
                    }
                    None => &mut t,
                };
                fields.insert(key.to_string(), value.clone());
                next.push((format!("{name} {}={}", v.field, shown(value)), t));
            }
        }
        points = next;
    }
    Ok(Some(
        points
            .into_iter()
            .map(|(name, mut t)| {
                t.insert("name".into(), toml::Value::String(name));
                t
            })
            .collect(),
    ))
}

/// A value as a point's name shows it: numbers and booleans as written, strings bare.
fn shown(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => format!("{f:?}"),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Array(xs) => {
            format!("[{}]", xs.iter().map(shown).collect::<Vec<_>>().join(","))
        }
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

    const HANG: &str = "name = \"h\"\nfault_class = \"transient\"\nduration_s = 60.0\n\
                        [faults]\nkind = \"hang\"\nrate_per_s = 0.03\npause_mean_s = 20.0\n";

    #[test]
    fn a_workload_sweep_varies_fault_and_top_level_fields_named_by_them() {
        let text = format!(
            "{HANG}[[vary]]\nfield = \"faults.rate_per_s\"\nvalues = [0.01, 0.1]\n\
             [[vary]]\nfield = \"request_rate\"\nvalues = [2.0, 20.0]\n"
        );
        let ws = workloads_from_text(Path::new("w.toml"), &text).unwrap_or_else(|e| panic!("{e}"));
        let got: Vec<(String, f64, f64)> = ws
            .iter()
            .map(|w| {
                let workload::FaultModel::Hang { rate_per_s, .. } = w.faults else {
                    panic!("{:?}", w.faults)
                };
                (w.name.clone(), rate_per_s, w.request_rate)
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    "h faults.rate_per_s=0.01 request_rate=2.0".into(),
                    0.01,
                    2.0
                ),
                (
                    "h faults.rate_per_s=0.01 request_rate=20.0".into(),
                    0.01,
                    20.0
                ),
                ("h faults.rate_per_s=0.1 request_rate=2.0".into(), 0.1, 2.0),
                (
                    "h faults.rate_per_s=0.1 request_rate=20.0".into(),
                    0.1,
                    20.0
                ),
            ],
            "workload sweep rule: one workload per combination, the values where the fields say"
        );
        let plain =
            workloads_from_text(Path::new("w.toml"), HANG).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(plain.len(), 1);
        let ranges = "name = \"s\"\nfault_class = \"transient\"\nduration_s = 60.0\n\
                      [faults]\nkind = \"crash-storm\"\nstart_s = 10.0\noutage_s = [1.0, 2.0]\n\
                      [[vary]]\nfield = \"faults.outage_s\"\nvalues = [[1.0, 10.0], [10.0, 60.0]]\n";
        let ws = workloads_from_text(Path::new("w.toml"), ranges).unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<&str> = ws.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "s faults.outage_s=[1.0,10.0]",
                "s faults.outage_s=[10.0,60.0]"
            ]
        );
    }

    #[test]
    fn every_workload_point_is_held_to_the_workload_rules() {
        let typo = format!("{HANG}[[vary]]\nfield = \"faults.rate_per_sec\"\nvalues = [0.1]\n");
        let e = workloads_from_text(Path::new("w.toml"), &typo)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("rate_per_sec"), "a mistyped field is named: {e}");
        let bad = format!("{HANG}[[vary]]\nfield = \"duration_s\"\nvalues = [60.0, -1.0]\n");
        let e = workloads_from_text(Path::new("w.toml"), &bad)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("duration_s"),
            "a point that breaks a rule names it: {e}"
        );
    }
}
