//! The verdict as text, JSON and CSV (decision 0090).

use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::research::output::field;
use crate::research::ranking::{Answer, WorkloadVerdict, better_word};
use crate::research::verdict::FAMILY_ALPHA;

fn finite(x: f64) -> Value {
    if x.is_finite() { json!(x) } else { Value::Null }
}

/// `+1` a is better, `-1` b is, `0` neither: as the name of the better policy.
fn winner(v: &WorkloadVerdict, a: usize, b: usize, verdict: i8) -> &str {
    match verdict {
        1 => &v.policies[a],
        -1 => &v.policies[b],
        _ => "",
    }
}

/// One workload's verdict as JSON.
fn workload_json(v: &WorkloadVerdict) -> Value {
    let policies: Vec<Value> = v
        .policies
        .iter()
        .enumerate()
        .map(|(p, name)| {
            let mut criteria = serde_json::Map::new();
            for (k, (c, _)) in v.criteria.iter().enumerate() {
                criteria.insert(
                    (*c).into(),
                    json!({"mean": finite(v.means[k][p]), "rank": v.ranks[k][p]}),
                );
            }
            json!({
                "name": name,
                "criteria": criteria,
                "on_pareto_front": v.front.contains(&p),
            })
        })
        .collect();
    let pairs: Vec<Value> = v
        .pairs
        .iter()
        .map(|d| {
            json!({
                "criterion": d.metric,
                "a": v.policies[d.a],
                "b": v.policies[d.b],
                "a_minus_b": d.difference.json(),
                "better": match d.verdict {
                    0 => Value::Null,
                    x => json!(winner(v, d.a, d.b, x)),
                },
            })
        })
        .collect();
    let (best, trade_off) = match v.answer() {
        Answer::Best(b) => (json!(v.names(&b)), false),
        Answer::TradeOff(_) => (Value::Null, true),
    };
    json!({
        "workload": v.workload,
        "fault_class": v.class.name(),
        "seeds": v.seeds,
        "criteria": v.criteria.iter().map(|(c, b)| json!({"name": c, "better": better_word(*b)})).collect::<Vec<_>>(),
        "comparisons": v.comparisons,
        "interval_level": v.level,
        "bootstrap_resamples": v.resamples,
        "policies": policies,
        "pairs": pairs,
        "pareto_front": v.names(&v.front),
        "preferred": v.names(&v.preferred()),
        "best": best,
        "trade_off": trade_off,
    })
}

/// `{"family_alpha", "workloads": [...], "answer": [...]}`.
pub fn json(verdicts: &[WorkloadVerdict]) -> Value {
    json!({
        "family_alpha": FAMILY_ALPHA,
        "method": "paired differences per seed, percentile bootstrap over seeds, \
                   Bonferroni over every criterion and pair of a workload",
        "workloads": verdicts.iter().map(workload_json).collect::<Vec<_>>(),
        "answer": verdicts.iter().map(answer_json).collect::<Vec<_>>(),
    })
}

fn answer_json(v: &WorkloadVerdict) -> Value {
    let mut first = serde_json::Map::new();
    for (k, (c, _)) in v.criteria.iter().enumerate() {
        first.insert((*c).into(), json!(v.names(&v.first_on(k))));
    }
    json!({
        "workload": v.workload,
        "fault_class": v.class.name(),
        "best": match v.answer() { Answer::Best(b) => json!(v.names(&b)), Answer::TradeOff(_) => Value::Null },
        "pareto_front": v.names(&v.front),
        "preferred": v.names(&v.preferred()),
        "first_on": first,
    })
}

/// The answer cell: the best policies, or the front as a trade-off.
fn answer_words(v: &WorkloadVerdict) -> String {
    match v.answer() {
        Answer::Best(b) => v.names(&b).join(", "),
        Answer::TradeOff(f) => format!(
            "none (a trade-off over the front: {}); preferred by availability, then P(failed), \
             then restarts: {}",
            v.names(&f).join(", "),
            v.names(&v.preferred()).join(", ")
        ),
    }
}

/// One workload's verdict as text: ranks, front and every pair.
pub fn text(v: &WorkloadVerdict) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "-- verdict: {} comparisons ({} criteria x {} pairs), each interval at {:.3} % so all \
         hold together at {:.0} % (Bonferroni); {} bootstrap resamples of the {} paired seeds",
        v.comparisons,
        v.criteria.len(),
        v.comparisons / v.criteria.len().max(1),
        100.0 * v.level,
        100.0 * (1.0 - FAMILY_ALPHA),
        v.resamples,
        v.seeds
    );
    let width = v.policies.iter().map(|p| p.len()).max().unwrap_or(6).max(6);
    let _ = write!(s, "   {:<width$}", "policy");
    for (c, b) in &v.criteria {
        let head = format!("{c} ({} better)", better_word(*b));
        let _ = write!(s, "  {head:<28}");
    }
    let _ = writeln!(s, "  Pareto front");
    for (p, name) in v.policies.iter().enumerate() {
        let _ = write!(s, "   {name:<width$}");
        for k in 0..v.criteria.len() {
            let cell = format!("{:.4} (rank {})", v.means[k][p], v.ranks[k][p]);
            let _ = write!(s, "  {cell:<28}");
        }
        let _ = writeln!(s, "  {}", if v.front.contains(&p) { "yes" } else { "no" });
    }
    for d in &v.pairs {
        let e = &d.difference;
        let verdict = match d.verdict {
            0 => "no difference shown".to_string(),
            x => format!("{} better", winner(v, d.a, d.b, x)),
        };
        let _ = writeln!(
            s,
            "   {:<13} {} - {}: {:+.4} [{:+.4}, {:+.4}]  {verdict}",
            d.metric, v.policies[d.a], v.policies[d.b], e.mean, e.lo, e.hi
        );
    }
    let _ = writeln!(s, "   best: {}", answer_words(v));
    s
}

/// The one table: which policy is best under which workload.
pub fn answer_text(verdicts: &[WorkloadVerdict]) -> String {
    let mut s = String::from(
        "\n== which policy is best under which workload\n\
         (each workload's verdict holds at a family-wise 95 %; best: ranked first on every \
         criterion; otherwise the Pareto front is a trade-off, and `preferred` narrows it by \
         availability, then P(failed), then restarts)\n",
    );
    let mut rows = vec![[
        "workload".to_string(),
        "faults".into(),
        "best".into(),
        "preferred".into(),
        "Pareto front".into(),
    ]];
    for v in verdicts {
        let best = match v.answer() {
            Answer::Best(b) => v.names(&b).join(", "),
            Answer::TradeOff(_) => "none (trade-off)".into(),
        };
        rows.push([
            v.workload.clone(),
            v.class.name().into(),
            best,
            v.names(&v.preferred()).join(", "),
            v.names(&v.front).join(", "),
        ]);
    }
    let widths: Vec<usize> = (0..5)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for r in &rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(x, w)| format!("{x:<w$}"))
            .collect();
        let _ = writeln!(s, "{}", line.join("  ").trim_end());
    }
    s
}

/// `verdict.csv`: one row per workload × criterion × pair.
pub fn pairs_csv(verdicts: &[WorkloadVerdict]) -> String {
    let mut s = String::from(
        "workload,fault_class,criterion,better_is,policy_a,policy_b,a_minus_b,lo,hi,interval_level,resamples,better_policy\n",
    );
    for v in verdicts {
        for d in &v.pairs {
            let better_is = v
                .criteria
                .iter()
                .find(|(c, _)| *c == d.metric)
                .map_or("", |(_, b)| better_word(*b));
            let _ = writeln!(
                s,
                "{},{},{},{better_is},{},{},{},{},{},{},{},{}",
                field(&v.workload),
                v.class.name(),
                d.metric,
                field(&v.policies[d.a]),
                field(&v.policies[d.b]),
                d.difference.mean,
                d.difference.lo,
                d.difference.hi,
                v.level,
                v.resamples,
                field(winner(v, d.a, d.b, d.verdict)),
            );
        }
    }
    s
}

/// `ranks.csv`: one row per workload × policy.
pub fn ranks_csv(verdicts: &[WorkloadVerdict]) -> String {
    let mut s = String::from("workload,fault_class,policy");
    if let Some(v) = verdicts.first() {
        for (c, _) in &v.criteria {
            let _ = write!(s, ",{c}_mean,{c}_rank");
        }
    }
    s.push_str(",on_pareto_front\n");
    for v in verdicts {
        for (p, name) in v.policies.iter().enumerate() {
            let _ = write!(
                s,
                "{},{},{}",
                field(&v.workload),
                v.class.name(),
                field(name)
            );
            for k in 0..v.criteria.len() {
                let _ = write!(s, ",{},{}", v.means[k][p], v.ranks[k][p]);
            }
            let _ = writeln!(s, ",{}", v.front.contains(&p));
        }
    }
    s
}

/// `answer.csv`: the one table, one row per workload (lists joined with `;`).
pub fn answer_csv(verdicts: &[WorkloadVerdict]) -> String {
    let mut s = String::from("workload,fault_class,best,preferred,pareto_front");
    if let Some(v) = verdicts.first() {
        for (c, _) in &v.criteria {
            let _ = write!(s, ",first_on_{c}");
        }
    }
    s.push('\n');
    for v in verdicts {
        let best = match v.answer() {
            Answer::Best(b) => v.names(&b).join(";"),
            Answer::TradeOff(_) => String::new(),
        };
        let _ = write!(
            s,
            "{},{},{},{},{}",
            field(&v.workload),
            v.class.name(),
            field(&best),
            field(&v.names(&v.preferred()).join(";")),
            field(&v.names(&v.front).join(";"))
        );
        for k in 0..v.criteria.len() {
            let _ = write!(s, ",{}", field(&v.names(&v.first_on(k)).join(";")));
        }
        s.push('\n');
    }
    s
}
