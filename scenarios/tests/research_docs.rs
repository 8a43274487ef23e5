//! The figures `docs/policy-research.md` quotes from the reproductions are the tool's
//! own output: each block between `<!-- generated: KEY -->` and `<!-- end generated:
//! KEY -->` is made again here and must match. After a change that moves a figure, run
//! with `SERVERY_UPDATE_DOCS=1` to rewrite the blocks, and read the prose around them.
//! The findings' blocks also print the claims their prose makes, each checked; one that
//! no longer holds fails the test whatever the document says.

use std::path::PathBuf;

use servery_core::supervisor::Platform;
use servery_scenarios::research::age::AgeModel;
use servery_scenarios::research::cli::resolve;
use servery_scenarios::research::compare::{run_matrix, summarize};
use servery_scenarios::research::{findings, policy, reproduce, workload};

fn doc_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/policy-research.md")
}

/// The text between the block's markers (without the code fence), and its byte range.
fn block(doc: &str, key: &str) -> Option<(std::ops::Range<usize>, String)> {
    let open = format!("<!-- generated: {key} -->\n```text\n");
    let close = format!("```\n<!-- end generated: {key} -->");
    let start = doc.find(&open)? + open.len();
    let end = start + doc[start..].find(&close)?;
    Some((start..end, doc[start..end].to_string()))
}

/// The supervisor's age-replacement table: one worker, `worker_max_age` varied.
fn age_on_the_supervisor() -> String {
    let names = ["never", "60", "30", "20", "10", "5"];
    let policies: Vec<policy::Policy> = names
        .iter()
        .map(|n| {
            let file = resolve(&format!("age-replacement/age-{n}"), "policies");
            policy::load(&file).unwrap_or_else(|e| panic!("{n}: {e}"))
        })
        .collect();
    let w =
        workload::load(&resolve("age-replacement", "workloads")).unwrap_or_else(|e| panic!("{e}"));
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
    let cells = run_matrix(
        &policies,
        std::slice::from_ref(&w),
        0..40,
        jobs,
        Platform::Posix,
    );
    let model = AgeModel::standard();
    let mut s = String::from(
        "worker_max_age  simulated A [95 %]         closed form, overlap  boots an hour  peak processes  peak memory\n",
    );
    for (name, cell) in names.iter().zip(&cells) {
        let sm = summarize(cell);
        let get = |metric: &str| sm.estimate(metric).unwrap_or_else(|| panic!("{metric}"));
        let lost = get("capacity_seconds_lost");
        let a = |x: f64| 1.0 - x / w.duration_s;
        let age = name.parse::<f64>().unwrap_or(f64::INFINITY);
        let label = if age.is_finite() {
            format!("{name} s")
        } else {
            "never".into()
        };
        s.push_str(&format!(
            "{label:<15} {:.4} [{:.4}, {:.4}]   {:.4}                {:>5.0}          {:>1.0}               {:.0} MB\n",
            a(lost.mean),
            a(lost.hi),
            a(lost.lo),
            model.availability_overlapped(age),
            get("boots").mean,
            get("peak_processes").mean,
            get("peak_memory_mb").mean,
        ));
    }
    s
}

/// The pool-aware backoff comparison (issue 41's "And use it"): the seed's per-slot
/// backoff against `restart_backoff_keep_one`, at the seed's restart limit and with the
/// limit raised out of the way, under the crash workloads; means and the verdict's answer.
pub const POOL_POLICIES: [&str; 6] = [
    "seed-defaults",
    "seed-defaults-keep-one",
    "seed-defaults-shared",
    "seed-limit-1000",
    "seed-limit-1000-keep-one",
    "seed-limit-1000-shared",
];
pub const POOL_WORKLOADS: [&str; 5] = [
    "crash-storm",
    "crash-storm-short",
    "crash-blip-6",
    "poison-request",
    "boot-loop",
];
pub const POOL_SEEDS: u64 = 30;

fn pool_aware_backoff() -> String {
    use servery_scenarios::research::{cli::VERDICT_SEED, ranking, verdict_report};
    let policies: Vec<policy::Policy> = POOL_POLICIES
        .iter()
        .map(|n| policy::load(&resolve(n, "policies")).unwrap_or_else(|e| panic!("{n}: {e}")))
        .collect();
    let workloads: Vec<workload::Workload> = POOL_WORKLOADS
        .iter()
        .map(|n| workload::load(&resolve(n, "workloads")).unwrap_or_else(|e| panic!("{n}: {e}")))
        .collect();
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
    let cells = run_matrix(&policies, &workloads, 0..POOL_SEEDS, jobs, Platform::Posix);
    let mut s = String::from(
        "workload           policy                      availability  p_failed  restarts  capacity s lost\n",
    );
    for cell in &cells {
        let sm = summarize(cell);
        let get = |metric: &str| sm.estimate(metric).map_or(f64::NAN, |e| e.mean);
        let failed = cell.runs.iter().filter(|r| r.failed).count() as f64 / cell.runs.len() as f64;
        s.push_str(&format!(
            "{:<18} {:<27} {:.4}        {:.2}      {:>7.1}   {:>9.1}\n",
            cell.workload,
            cell.policy,
            get("availability"),
            failed,
            get("restarts"),
            get("capacity_seconds_lost"),
        ));
    }
    let verdicts =
        ranking::judge(&cells, policies.len(), VERDICT_SEED).unwrap_or_else(|e| panic!("{e}"));
    s.push_str(&verdict_report::answer_text(&verdicts));
    s
}

/// Recycling on memory (decision 0110): the leak workload against no recycling, a
/// request limit, an RSS limit and two ages, 20 paired seeds.
pub const MEMORY_POLICIES: [&str; 4] = [
    "seed-defaults",
    "seed-defaults-max-requests",
    "seed-defaults-max-rss",
    "sweeps/max-age",
];
pub const MEMORY_SEEDS: u64 = 20;

fn recycling_on_memory() -> String {
    use servery_scenarios::research::{memory, sweep};
    let policies: Vec<policy::Policy> = MEMORY_POLICIES
        .iter()
        .flat_map(|n| {
            sweep::load_all(&resolve(n, "policies")).unwrap_or_else(|e| panic!("{n}: {e}"))
        })
        .collect();
    let w = workload::load(&resolve("leak", "workloads")).unwrap_or_else(|e| panic!("{e}"));
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
    let cells = run_matrix(
        &policies,
        std::slice::from_ref(&w),
        0..MEMORY_SEEDS,
        jobs,
        Platform::Posix,
    );
    memory::table(&policies, &cells, &w)
}

/// The kernel's OOM kill against RSS recycling (`leak-oom`): the seed defaults without a
/// memory rule, and with an RSS limit under the kernel's, 20 paired seeds.
fn oom_or_rss() -> String {
    let policies: Vec<policy::Policy> = ["seed-defaults", "seed-defaults-max-rss"]
        .iter()
        .map(|n| policy::load(&resolve(n, "policies")).unwrap_or_else(|e| panic!("{n}: {e}")))
        .collect();
    let w = workload::load(&resolve("leak-oom", "workloads")).unwrap_or_else(|e| panic!("{e}"));
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
    let cells = run_matrix(
        &policies,
        std::slice::from_ref(&w),
        0..MEMORY_SEEDS,
        jobs,
        Platform::Posix,
    );
    let mut s = String::from(
        "policy                 OOM kills  recycles  availability  within 1 s  capacity s lost  peak worker RSS MiB\n",
    );
    for cell in &cells {
        let sm = summarize(cell);
        let get = |metric: &str| sm.estimate(metric).map_or(f64::NAN, |e| e.mean);
        s.push_str(&format!(
            "{:<22} {:>9.1}  {:>8.1}  {:.4}        {:.4}      {:>15.1}  {:.1}\n",
            cell.policy,
            get("restarts"),
            get("recycles"),
            get("availability"),
            get("served_within_bound"),
            get("capacity_seconds_lost"),
            get("peak_worker_rss_mb"),
        ));
    }
    s
}

#[test]
fn the_documents_generated_figures_are_the_tools_output() {
    let path = doc_path();
    let mut doc = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
    // The findings' blocks, made together: they share their runs.
    let findings = findings::generate(jobs).unwrap_or_else(|e| panic!("{e}"));
    let broken: Vec<String> = findings
        .iter()
        .flat_map(|(key, text)| {
            text.lines()
                .filter(|l| l.starts_with(findings::BROKEN_CLAIM))
                .map(move |l| format!("{key}: {l}"))
        })
        .collect();
    assert!(
        broken.is_empty(),
        "a claim of docs/policy-research.md's findings no longer holds (the prose says \
         it; rewrite the finding and its check):\n{}",
        broken.join("\n")
    );
    let generate = |key: &str| -> String {
        if let Some((_, text)) = findings.iter().find(|(k, _)| k == key) {
            return text.clone();
        }
        match key {
            "reproduce huang-1995"
            | "reproduce age-replacement"
            | "reproduce garg-1995"
            | "reproduce dohi-2000" => {
                let model = key.trim_start_matches("reproduce ");
                let text =
                    reproduce::reproduce(model, None, false).unwrap_or_else(|e| panic!("{e}"));
                format!("{}\n", text.trim_end())
            }
            "age-replacement on the supervisor" => age_on_the_supervisor(),
            "pool-aware backoff" => pool_aware_backoff(),
            "recycling on memory" => recycling_on_memory(),
            "recycling or the OOM killer" => oom_or_rss(),
            _ => panic!("no generator for {key}"),
        }
    };
    let update = std::env::var_os("SERVERY_UPDATE_DOCS").is_some();
    let mut stale = Vec::new();
    let keys = [
        "reproduce huang-1995",
        "reproduce age-replacement",
        "age-replacement on the supervisor",
        "reproduce garg-1995",
        "reproduce dohi-2000",
        "pool-aware backoff",
        "recycling on memory",
        "recycling or the OOM killer",
    ]
    .into_iter()
    .chain(findings.iter().map(|(k, _)| k.as_str()));
    for key in keys {
        let (range, quoted) = block(&doc, key).unwrap_or_else(|| panic!("no block {key:?}"));
        let fresh = generate(key);
        if quoted != fresh {
            if update {
                doc.replace_range(range, &fresh);
            } else {
                let line = quoted
                    .lines()
                    .zip(fresh.lines())
                    .find(|(a, b)| a != b)
                    .map(|(a, b)| format!("\n  doc:  {a}\n  tool: {b}"))
                    .unwrap_or_else(|| "\n  (one is longer)".into());
                stale.push(format!("{key}:{line}"));
            }
        }
    }
    if update {
        std::fs::write(&path, doc).unwrap_or_else(|e| panic!("{e}"));
    }
    assert!(
        stale.is_empty(),
        "docs/policy-research.md quotes figures the tool no longer prints (rerun with \
         SERVERY_UPDATE_DOCS=1 and reread the prose):\n{}",
        stale.join("\n")
    );
}
