//! Instructions per request, counted by callgrind, judged against a committed baseline
//! (`docs/benchmarks/instructions.toml`; decision 0067). Instruction counts do not move
//! with the machine's load or speed, so a threshold on them can run in CI where a
//! threshold on time cannot.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// Growth beyond this fraction of the baseline fails; a fall beyond it asks for the
/// baseline to be lowered.
pub const TOLERANCE: f64 = 0.03;

/// The reason [`baseline_line`] writes, which the baseline refuses: whoever commits a
/// new figure says why.
const NO_REASON_YET: &str = "WHY IT CHANGED";

/// Dumps per measurement of `request_instructions`: its warm-up, K and 2K batches.
const DUMPS_PER_MEASUREMENT: usize = 3;

/// One committed figure: instructions per request of a class on a path, and why it is
/// what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub per_request: u64,
    pub reason: String,
}

/// The committed baseline file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Baseline {
    /// K, the requests of the smaller measured batch the figures were taken with.
    pub requests: u32,
    /// Keyed "CLASS PATH", as `request_instructions` names its measurements.
    pub entries: BTreeMap<String, Entry>,
}

/// Reads the baseline: `requests = K` and an `[instructions]` table of
/// `"CLASS PATH" = { per_request = N, reason = "…" }`, every reason given.
pub fn parse_baseline(text: &str) -> Result<Baseline, String> {
    let table: toml::Table = toml::from_str(text).map_err(|e| e.to_string())?;
    let requests = table
        .get("requests")
        .and_then(toml::Value::as_integer)
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| *n > 0)
        .ok_or("`requests = K` (a positive count) is missing")?;
    let rows = table
        .get("instructions")
        .and_then(toml::Value::as_table)
        .ok_or("the [instructions] table is missing")?;
    let mut entries = BTreeMap::new();
    for (name, row) in rows {
        let per_request = row
            .get("per_request")
            .and_then(toml::Value::as_integer)
            .and_then(|n| u64::try_from(n).ok())
            .filter(|n| *n > 0)
            .ok_or(format!(
                "{name:?}: `per_request` (a positive count) is missing"
            ))?;
        let reason = row
            .get("reason")
            .and_then(toml::Value::as_str)
            .map(str::trim)
            .filter(|r| !r.is_empty() && *r != NO_REASON_YET)
            .ok_or(format!(
                "{name:?}: a `reason` is missing (say why the figure is what it is)"
            ))?;
        entries.insert(
            name.clone(),
            Entry {
                per_request,
                reason: reason.to_owned(),
            },
        );
    }
    Ok(Baseline { requests, entries })
}

/// The line that records `per_request` for `name` in the baseline file.
pub fn baseline_line(name: &str, per_request: u64) -> String {
    format!("\"{name}\" = {{ per_request = {per_request}, reason = \"{NO_REASON_YET}\" }}")
}

/// What the measurement says against the baseline.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// One row per measurement: name, baseline, measured, change.
    pub table: Vec<String>,
    /// Growth beyond the tolerance, measurements without a baseline, baseline lines
    /// nothing measured: each fails the test.
    pub failures: Vec<String>,
    /// Falls beyond the tolerance: the baseline could be lowered.
    pub notices: Vec<String>,
}

pub fn judge(baseline: &Baseline, measured: &[(String, u64)]) -> Verdict {
    let mut verdict = Verdict::default();
    for (name, count) in measured {
        let Some(entry) = baseline.entries.get(name) else {
            verdict
                .table
                .push(format!("{name:24} {:>12} {count:>12}", "-"));
            verdict.failures.push(format!(
                "{name}: {count} instructions per request and no baseline; add\n    {}",
                baseline_line(name, *count)
            ));
            continue;
        };
        let base = entry.per_request;
        #[expect(clippy::cast_precision_loss, reason = "counts far below 2^52")]
        let change = (*count as f64 - base as f64) / base as f64;
        verdict.table.push(format!(
            "{name:24} {base:>12} {count:>12} {:>+8.2} %",
            change * 100.0
        ));
        if change > TOLERANCE {
            verdict.failures.push(format!(
                "{name}: {count} instructions per request, {:+.2} % over the baseline's {base} \
                 (more than {:.0} %). If the growth is meant, put this line in \
                 docs/benchmarks/instructions.toml, saying why:\n    {}",
                change * 100.0,
                TOLERANCE * 100.0,
                baseline_line(name, *count)
            ));
        } else if change < -TOLERANCE {
            verdict.notices.push(format!(
                "{name}: {count} instructions per request, {:+.2} % under the baseline's \
                 {base}: lower the baseline so that the guard holds the gain:\n    {}",
                change * 100.0,
                baseline_line(name, *count)
            ));
        }
    }
    for name in baseline.entries.keys() {
        if !measured.iter().any(|(m, _)| m == name) {
            verdict.failures.push(format!(
                "{name}: in the baseline but not measured; remove its line"
            ));
        }
    }
    verdict
}

/// Instructions per request of each measurement, from the callgrind dump totals in order
/// (warm-up, K, 2K per measurement) and the measurement names in order: (2K − K) / K,
/// so the start-up, the warm-up and each batch's fixed cost cancel.
pub fn per_request(
    dumps: &[u64],
    names: &[String],
    requests: u32,
) -> Result<Vec<(String, u64)>, String> {
    if dumps.len() != names.len() * DUMPS_PER_MEASUREMENT {
        return Err(format!(
            "{} dumps for {} measurements (expected {} each)",
            dumps.len(),
            names.len(),
            DUMPS_PER_MEASUREMENT
        ));
    }
    names
        .iter()
        .zip(dumps.chunks(DUMPS_PER_MEASUREMENT))
        .map(|(name, dumps)| {
            let (once, twice) = (dumps[1], dumps[2]);
            let extra = twice.checked_sub(once).ok_or(format!(
                "{name}: {twice} instructions for 2K requests but {once} for K"
            ))?;
            Ok((name.clone(), extra / u64::from(requests)))
        })
        .collect()
}

/// Runs `program --requests K` under callgrind with a dump at every phase boundary, and
/// returns the measurement names it printed and the total instructions of each dump, in
/// order.
pub fn callgrind(program: &Path, requests: u32, scratch: &Path) -> Result<Measured, String> {
    let out_file = scratch.join("callgrind.out");
    let out = Command::new("valgrind")
        .arg("--tool=callgrind")
        // Threads take turns in a fixed order, so the blocking pool's thread and the
        // runtime's meet the same way from run to run.
        .arg("--fair-sched=yes")
        .arg(format!("--callgrind-out-file={}", out_file.display()))
        .args([
            "--dump-before=*phase_boundary*",
            "--dump-instr=no",
            "--dump-line=no",
        ])
        .arg(program)
        .args(["--requests", &requests.to_string()])
        .current_dir(scratch)
        .output()
        .map_err(|e| format!("run valgrind: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "{} under callgrind failed ({}):\n{stdout}{}",
            program.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let names = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("measure "))
        .map(|l| l.rsplit_once(' ').map_or(l, |(name, _)| name).to_owned())
        .collect();
    let mut dumps = Vec::new();
    for part in 1.. {
        let path = scratch.join(format!("callgrind.out.{part}"));
        let Ok(text) = std::fs::read_to_string(&path) else {
            break;
        };
        let total = text
            .lines()
            .find_map(|l| l.strip_prefix("totals: "))
            .and_then(|t| t.trim().parse().ok())
            .ok_or(format!("no totals in {}", path.display()))?;
        dumps.push(total);
    }
    Ok(Measured { names, dumps })
}

/// What one callgrind run of `request_instructions` gave.
#[derive(Debug)]
pub struct Measured {
    pub names: Vec<String>,
    pub dumps: Vec<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn baseline(rows: &[(&str, u64)]) -> Baseline {
        Baseline {
            requests: 100,
            entries: rows
                .iter()
                .map(|(n, c)| {
                    let entry = Entry {
                        per_request: *c,
                        reason: "measured".into(),
                    };
                    ((*n).to_owned(), entry)
                })
                .collect(),
        }
    }

    fn measured(rows: &[(&str, u64)]) -> Vec<(String, u64)> {
        rows.iter().map(|(n, c)| ((*n).to_owned(), *c)).collect()
    }

    #[test]
    fn growth_within_the_tolerance_passes_and_beyond_it_fails_naming_class_and_growth() {
        let base = baseline(&[("get-1k site", 10_000), ("range hyper", 10_000)]);
        let verdict = judge(
            &base,
            &measured(&[("get-1k site", 10_300), ("range hyper", 10_301)]),
        );
        assert_eq!(verdict.failures.len(), 1, "{verdict:?}");
        let failure = &verdict.failures[0];
        assert!(failure.starts_with("range hyper: 10301"), "{failure}");
        assert!(failure.contains("+3.01 %"), "{failure}");
        assert!(
            failure.contains("\"range hyper\" = { per_request = 10301, reason = "),
            "{failure}"
        );
        assert!(verdict.notices.is_empty(), "{verdict:?}");
    }

    #[test]
    fn a_fall_beyond_the_tolerance_is_a_notice_not_a_failure() {
        let base = baseline(&[("listing site", 10_000)]);
        let verdict = judge(&base, &measured(&[("listing site", 9_699)]));
        assert!(verdict.failures.is_empty(), "{verdict:?}");
        assert_eq!(verdict.notices.len(), 1, "{verdict:?}");
        assert!(verdict.notices[0].contains("-3.01 %"), "{verdict:?}");
        let within = judge(&base, &measured(&[("listing site", 9_700)]));
        assert_eq!(
            within,
            Verdict {
                table: within.table.clone(),
                ..Verdict::default()
            }
        );
    }

    #[test]
    fn a_measurement_without_a_line_or_a_line_without_a_measurement_fails() {
        let base = baseline(&[("propfind site", 10_000)]);
        let verdict = judge(&base, &measured(&[("propfind hyper", 12_000)]));
        assert_eq!(verdict.failures.len(), 2, "{verdict:?}");
        assert!(verdict.failures[0].contains("no baseline"), "{verdict:?}");
        assert!(verdict.failures[1].contains("not measured"), "{verdict:?}");
    }

    #[test]
    fn the_baseline_needs_a_reason_on_every_line() {
        let good = "requests = 50\n[instructions]\n\
                    \"get-1k site\" = { per_request = 123, reason = \"first\" }\n";
        let parsed = parse_baseline(good).expect("parses");
        assert_eq!(parsed.requests, 50);
        assert_eq!(parsed.entries["get-1k site"].per_request, 123);
        let no_reason = good.replace("\"first\"", "\" \"");
        let err = parse_baseline(&no_reason).expect_err("a blank reason");
        assert!(err.contains("reason"), "{err}");
        assert!(parse_baseline("[instructions]\n").is_err());
    }

    #[test]
    fn the_line_printed_is_the_line_the_baseline_reads_once_it_says_why() {
        let line = baseline_line("not-modified hyper", 4242);
        let text = format!("requests = 1\n[instructions]\n{line}\n");
        let err = parse_baseline(&text).expect_err("the placeholder is no reason");
        assert!(err.contains("reason"), "{err}");
        let text = text.replace(NO_REASON_YET, "one header fewer");
        let parsed = parse_baseline(&text).expect("parses");
        assert_eq!(parsed.entries["not-modified hyper"].per_request, 4242);
    }

    #[test]
    fn per_request_is_the_difference_of_the_two_batches_over_k() {
        let names = vec!["a site".to_owned(), "b hyper".to_owned()];
        // Warm-up, K = 10 and 2K = 20 requests, each batch with a fixed 500 on top.
        let dumps = [
            9_999,
            500 + 10 * 70,
            500 + 20 * 70,
            1,
            7 + 10 * 9,
            7 + 20 * 9,
        ];
        assert_eq!(
            per_request(&dumps, &names, 10),
            Ok(vec![("a site".to_owned(), 70), ("b hyper".to_owned(), 9)])
        );
        assert!(per_request(&dumps[..5], &names, 10).is_err());
        assert!(per_request(&[0, 20, 10], &names[..1], 10).is_err());
    }
}
