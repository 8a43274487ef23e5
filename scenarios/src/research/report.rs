//! The comparison as JSON (`--json`) and as a text table.

use std::fmt::Write as _;

use serde_json::{Map, Value, json};

use crate::research::compare::{Cell, Summary, paired, summarize};
use crate::research::stats::Estimate;

fn metrics_json(cell: &Cell, s: &Summary) -> Value {
    let mut m = Map::new();
    for (name, e) in &s.metrics {
        m.insert((*name).into(), e.json());
    }
    let q = |q: [f64; 3]| json!({"p50": finite(q[0]), "p90": finite(q[1]), "p99": finite(q[2])});
    m.insert("time_to_detect_quantiles_s".into(), q(s.detect_q));
    m.insert("time_to_recover_quantiles_s".into(), q(s.recover_q));
    m.insert("p_failed".into(), s.p_failed.json());
    // The same figure under the name that says whether failing was right.
    let class_key = match cell.class.name() {
        "permanent" => "p_failed_permanent",
        "transient" => "p_failed_transient",
        _ => "p_failed_no_fault",
    };
    m.insert(class_key.into(), s.p_failed.json());
    Value::Object(m)
}

fn finite(x: f64) -> Value {
    if x.is_finite() { json!(x) } else { Value::Null }
}

/// `{"policies": [...], "differences": [...]}`: one entry per policy × workload, and each
/// policy's paired difference from the first policy under the same workload.
pub fn json(cells: &[Cell], policies: usize) -> Value {
    let summaries: Vec<Summary> = cells.iter().map(summarize).collect();
    let entries: Vec<Value> = cells
        .iter()
        .zip(&summaries)
        .map(|(c, s)| {
            json!({
                "name": c.policy,
                "workload": c.workload,
                "fault_class": c.class.name(),
                "seeds": c.runs.len(),
                "metrics": metrics_json(c, s),
            })
        })
        .collect();
    let mut diffs = Vec::new();
    for group in cells.chunks(policies.max(1)) {
        let base = &group[0];
        for c in &group[1..] {
            let m: Map<String, Value> = paired(base, c)
                .into_iter()
                .map(|(name, e)| (name.to_string(), e.json()))
                .collect();
            diffs.push(json!({
                "workload": c.workload,
                "policy": c.policy,
                "baseline": base.policy,
                "metrics": m,
            }));
        }
    }
    json!({"policies": entries, "differences": diffs})
}

fn est(e: &Estimate, digits: usize) -> String {
    if e.mean.is_nan() {
        return "-".into();
    }
    format!("{:.d$} [{:.d$}, {:.d$}]", e.mean, e.lo, e.hi, d = digits)
}

/// A readable table: one block per workload, each followed by its `trailers` entry
/// (the verdict) when there is one.
pub fn text(cells: &[Cell], policies: usize, trailers: &[String]) -> String {
    let mut s = String::new();
    for (w, group) in cells.chunks(policies.max(1)).enumerate() {
        let _ = writeln!(
            s,
            "\n== {} ({} faults, {} seeds)",
            group[0].workload,
            group[0].class.name(),
            group[0].runs.len()
        );
        for c in group {
            let sm = summarize(c);
            let _ = writeln!(s, "-- {}", c.policy);
            let _ = writeln!(s, "   P(failed)             {}", est(&sm.p_failed, 3));
            for (name, e) in &sm.metrics {
                let _ = writeln!(s, "   {name:<21} {}", est(e, 4));
            }
            if sm.recover_q[0].is_finite() {
                let _ = writeln!(
                    s,
                    "   recover p50/p90/p99   {:.2} / {:.2} / {:.2} s",
                    sm.recover_q[0], sm.recover_q[1], sm.recover_q[2]
                );
            }
        }
        let base = &group[0];
        for c in &group[1..] {
            let _ = writeln!(s, "-- {} minus {} (paired)", c.policy, base.policy);
            for (name, e) in paired(base, c) {
                let _ = writeln!(s, "   {name:<21} {}", est(&e, 4));
            }
        }
        if let Some(t) = trailers.get(w) {
            s.push_str(t);
        }
    }
    s
}
