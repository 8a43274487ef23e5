//! Recycling on memory (decision 0110): a workload whose requests leak
//! (`memory_growth_mb_per_request`) against recycling by age, by requests and by the
//! resident memory a worker reports (`worker_max_rss`, the measurement-based
//! rejuvenation of the literature), with what each rule promises in closed form.
//!
//! servery judges a request limit and an RSS limit at heartbeats: a worker is recycled at
//! the first beat that reports at least `max_requests_per_worker` requests, and at the
//! second beat in a row that reports more than `worker_max_rss` bytes. So the memory a
//! worker reaches is the rule's bound plus what it took in during one beat (requests)
//! or two (RSS); an age bounds it only through the load.

use crate::research::compare::{Cell, summarize};
use crate::research::policy::Policy;
use crate::research::stats::Estimate;
use crate::research::workload::Workload;

const MIB: f64 = 1024.0 * 1024.0;

/// What a policy's recycling rule is on: the rule's own bound on a worker's memory (MiB),
/// or for an age the mean a worker reaches at the workload's peak rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MemoryRule {
    None,
    /// `max_requests_per_worker` (the largest the jitter allows).
    Requests {
        limit: f64,
        bound_mib: f64,
    },
    /// `worker_max_rss`.
    Rss {
        bound_mib: f64,
    },
    /// `worker_max_age`: a worker serving its share of the peak rate for the whole age
    /// reaches `at_peak_mib` on average.
    Age {
        age_s: f64,
        at_peak_mib: f64,
    },
}

/// The leak a request keeps, in MiB, as the simulator applies it (whole bytes).
pub fn leak_mib(w: &Workload) -> f64 {
    (w.memory_growth_mb_per_request * MIB).floor() / MIB
}

/// The workload's highest request rate (its base rate or a step's).
pub fn peak_rate(w: &Workload) -> f64 {
    w.load_steps
        .iter()
        .map(|[_, rate]| *rate)
        .fold(w.request_rate, f64::max)
}

pub fn rule(p: &Policy, w: &Workload) -> MemoryRule {
    let r = &p.recovery;
    let g = leak_mib(w);
    if r.worker_max_rss > 0 {
        MemoryRule::Rss {
            bound_mib: r.worker_max_rss as f64 / MIB,
        }
    } else if r.max_requests_per_worker > 0 {
        let limit = r.max_requests_per_worker as f64;
        MemoryRule::Requests {
            limit,
            bound_mib: w.memory_base_mb + g * limit,
        }
    } else if r.worker_max_age > 0.0 {
        let share = peak_rate(w) / w.workers.max(1) as f64;
        MemoryRule::Age {
            age_s: r.worker_max_age,
            at_peak_mib: w.memory_base_mb + g * share * r.worker_max_age,
        }
    } else {
        MemoryRule::None
    }
}

/// Recycles over a run with an age and no jitter: each of N slots recycles at every
/// multiple of the age that falls before the run's end (each generation's boot of a few
/// milliseconds puts a multiple that equals the end just past it).
pub fn age_recycles(workers: i64, duration_s: f64, age_s: f64) -> f64 {
    workers as f64 * ((duration_s / age_s).ceil() - 1.0).max(0.0)
}

/// The comparison's table: one row per policy, the cells of one workload in order.
pub fn table(policies: &[Policy], cells: &[Cell], w: &Workload) -> String {
    let mut s = String::from(
        "policy                                      recycles [95 %]        closed form  peak worker RSS MiB [95 %]  the rule's bound\n",
    );
    for (p, cell) in policies.iter().zip(cells) {
        let sm = summarize(cell);
        let get = |metric: &str| -> Estimate {
            sm.estimate(metric).unwrap_or(Estimate {
                mean: f64::NAN,
                lo: f64::NAN,
                hi: f64::NAN,
            })
        };
        let (recycles, rss) = (get("recycles"), get("peak_worker_rss_mb"));
        let (closed, bound) = match rule(p, w) {
            MemoryRule::None => ("-".to_string(), "none".to_string()),
            MemoryRule::Requests { limit, bound_mib } => (
                "-".into(),
                format!("{bound_mib:.1} ({limit:.0} requests) + one beat"),
            ),
            MemoryRule::Rss { bound_mib } => ("-".into(), format!("{bound_mib:.1} + two beats")),
            MemoryRule::Age { age_s, at_peak_mib } => {
                let jitter_free = p.recovery.worker_max_age_jitter == 0.0;
                (
                    if jitter_free {
                        format!("{:.0}", age_recycles(w.workers, w.duration_s, age_s))
                    } else {
                        "-".into()
                    },
                    format!("none ({at_peak_mib:.1} on average at the peak rate)"),
                )
            }
        };
        s.push_str(&format!(
            "{:<43} {:>5.1} [{:>5.1}, {:>5.1}]  {:>11}  {:>6.1} [{:>6.1}, {:>6.1}]    {bound}\n",
            cell.policy, recycles.mean, recycles.lo, recycles.hi, closed, rss.mean, rss.lo, rss.hi,
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn workload() -> Workload {
        crate::research::workload::from_text(
            Path::new("w.toml"),
            "name = \"w\"\nfault_class = \"none\"\nworkers = 4\nduration_s = 900.0\n\
             request_rate = 10.0\nload_steps = [[300.0, 60.0], [600.0, 10.0]]\n\
             memory_base_mb = 50.0\nmemory_growth_mb_per_request = 0.05\n\
             [faults]\nkind = \"steady\"\n",
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn policy(recovery: &str) -> Policy {
        crate::research::policy::from_text(
            Path::new("p.toml"),
            &format!("name = \"p\"\n[recovery]\n{recovery}\n"),
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn each_rule_states_its_bound_in_the_workloads_terms() {
        let w = workload();
        assert_eq!(peak_rate(&w), 60.0);
        // 0.05 MiB is 52,428.8 bytes: the simulator keeps 52,428 a request.
        assert!((leak_mib(&w) - 52_428.0 / MIB).abs() < 1e-12);
        match rule(&policy("max_requests_per_worker = 2000"), &w) {
            MemoryRule::Requests { limit, bound_mib } => {
                assert_eq!(limit, 2000.0);
                assert!((bound_mib - (50.0 + 2000.0 * 52_428.0 / MIB)).abs() < 1e-9);
            }
            other => panic!("requests rule read as {other:?}"),
        }
        assert_eq!(
            rule(&policy("worker_max_rss = 157286400"), &w),
            MemoryRule::Rss { bound_mib: 150.0 }
        );
        match rule(&policy("worker_max_age = 120.0"), &w) {
            // 60 requests/s over 4 workers for 120 s: 1,800 requests.
            MemoryRule::Age { age_s, at_peak_mib } => {
                assert_eq!(age_s, 120.0);
                assert!((at_peak_mib - (50.0 + 1800.0 * 52_428.0 / MIB)).abs() < 1e-9);
            }
            other => panic!("age rule read as {other:?}"),
        }
        assert_eq!(rule(&policy(""), &w), MemoryRule::None);
        assert_eq!(age_recycles(4, 900.0, 120.0), 28.0);
        assert_eq!(age_recycles(4, 900.0, 300.0), 8.0);
        assert_eq!(age_recycles(4, 900.0, 1000.0), 0.0);
    }
}
