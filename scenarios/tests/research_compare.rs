//! The policy comparison: shipped files load and validate, every policy meets the same
//! faults on a seed, the JSON has the documented shape, and each workload reaches its
//! interesting states across seeds (sometimes-coverage).

use std::path::Path;

use servery_core::supervisor::Platform;
use servery_scenarios::research::cli::{CompareArgs, compare, resolve};
use servery_scenarios::research::compare::{run_matrix, run_one};
use servery_scenarios::research::provenance::csv_rows;
use servery_scenarios::research::workload::FaultClass;
use servery_scenarios::research::{policy, workload};

/// Every policy file shipped at the top of `policies/` (the sweeps' and the age
/// replacement's folders hold their own), by name.
fn shipped_policies() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            Some(name.strip_suffix(".toml")?.to_owned())
        })
        .collect();
    names.sort();
    names
}

const WORKLOADS: &[&str] = &[
    "steady",
    "crash-storm",
    "boot-loop",
    "aging",
    "poison-request",
    "hang",
];

fn load_policy(name: &str) -> policy::Policy {
    policy::load(&resolve(name, "policies")).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn load_workload(name: &str) -> workload::Workload {
    workload::load(&resolve(name, "workloads")).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// A shipped workload cut to 150 s at 2 requests/s: the same faults, fewer events, so
/// the debug build's tests stay in seconds.
fn short(name: &str) -> workload::Workload {
    let mut w = load_workload(name);
    w.duration_s = w.duration_s.min(150.0);
    w.request_rate = 2.0;
    w
}

#[test]
fn every_shipped_policy_and_workload_loads_and_validates() {
    let policies = shipped_policies();
    assert!(policies.len() >= 11, "{policies:?}");
    for p in &policies {
        let policy = load_policy(p);
        assert_eq!(&policy.name, p, "a file's name field matches its file name");
        for w in WORKLOADS {
            let w = load_workload(w);
            assert!(policy.config(w.workers).validate().is_ok());
        }
    }
    for w in WORKLOADS {
        assert_eq!(&load_workload(w).name, w);
    }
}

#[test]
fn a_bad_workload_names_its_field() {
    let text = "name = \"x\"\nfault_class = \"transient\"\nduration_s = 60.0\n[faults]\nkind = \"crash-storm\"\nstart_s = 1.0\noutage_s = [5.0, 1.0]\n";
    let e = workload::from_text(Path::new("w.toml"), text)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("faults.outage_s"), "{e}");
    let unknown = "name = \"x\"\nfault_class = \"none\"\nduration_s = 60.0\nspeed = 1\n[faults]\nkind = \"steady\"\n";
    let e = workload::from_text(Path::new("w.toml"), unknown)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("speed"), "{e}");
    // The kernel's limit acts on the per-request leak, above the base memory.
    let steady = "name = \"x\"\nfault_class = \"none\"\nduration_s = 60.0\n";
    for (fields, why) in [
        ("oom_limit_mb = 200.0\n", "memory_growth_mb_per_request"),
        (
            "memory_growth_mb_per_request = 0.05\noom_limit_mb = 40.0\n",
            "above memory_base_mb",
        ),
    ] {
        let text = format!("{steady}{fields}[faults]\nkind = \"steady\"\n");
        let e = workload::from_text(Path::new("w.toml"), &text)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("oom_limit_mb") && e.contains(why),
            "OOM limit rule: {fields:?} is refused naming oom_limit_mb and {why:?}: {e}"
        );
    }
}

#[test]
fn every_policy_meets_the_same_faults_on_a_seed() {
    for name in ["crash-storm", "poison-request", "hang", "boot-loop"] {
        let w = load_workload(name);
        for seed in 0..5 {
            assert_eq!(w.draw(seed), w.draw(seed), "{name}: a draw replays");
        }
        assert_ne!(w.draw(0), w.draw(1), "{name}: seeds differ");
    }
    // Aging: the k-th process lives as long under every policy (its lifetime is the
    // seed's k-th draw), so two policies that boot alike see the same crashes.
    let aging = short("aging");
    let a = run_one(&load_policy("seed-defaults"), &aging, 3, Platform::Posix);
    let b = run_one(&load_policy("seed-defaults"), &aging, 3, Platform::Posix);
    assert_eq!(a.ok(), b.ok(), "a run replays bit for bit");
}

#[test]
fn compare_json_has_the_documented_shape() {
    let args = CompareArgs {
        policies: vec!["seed-defaults".into(), "kubernetes-kep4603".into()],
        workloads: vec!["poison-request".into()],
        seeds: 4,
        jobs: 2,
        out: None,
        json: true,
        platform: Platform::Posix,
        grid: None,
    };
    let out = compare(&args).unwrap_or_else(|e| panic!("{e}"));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    let entries = v["policies"].as_array().cloned().unwrap_or_default();
    assert_eq!(entries.len(), 2);
    for e in &entries {
        assert_eq!(e["workload"], "poison-request");
        assert_eq!(e["seeds"], 4);
        for metric in [
            "availability",
            "capacity_seconds_lost",
            "time_to_detect_s",
            "time_to_recover_s",
            "restarts",
            "recycles",
            "boots",
            "p_failed",
            "p_failed_transient",
            "peak_processes",
            "peak_memory_mb",
            "amplification",
            "served_within_bound",
        ] {
            let m = &e["metrics"][metric];
            assert!(m["mean"].is_number(), "{metric}: {m}");
            let ci = m["ci"].as_array().cloned().unwrap_or_default();
            assert_eq!(ci.len(), 2, "{metric}");
            let (lo, hi, mean) = (ci[0].as_f64(), ci[1].as_f64(), m["mean"].as_f64());
            assert!(lo <= mean && mean <= hi, "{metric}: {m}");
        }
    }
    assert_eq!(entries[0]["name"], "seed-defaults");
    let diffs = v["differences"].as_array().cloned().unwrap_or_default();
    assert_eq!(diffs.len(), 1);
    assert_eq!(diffs[0]["baseline"], "seed-defaults");
    assert!(diffs[0]["metrics"]["availability"]["ci"].is_array());
    assert!(diffs[0]["metrics"]["served_within_bound"]["ci"].is_array());
    let prov = &v["provenance"];
    assert!(prov["commit"].is_string(), "{prov}");
    assert_eq!(prov["seeds"]["count"], 4);
    assert_eq!(prov["platform"], "posix");
    assert_eq!(
        prov["command"],
        "cargo run --release -p servery-scenarios -- compare --policy seed-defaults \
         --policy kubernetes-kep4603 --workload poison-request --seeds 4 --platform posix --json"
    );
    assert_eq!(
        prov["policies"][1]["recovery"]["restart_backoff_initial"],
        1.0
    );
    assert_eq!(prov["workloads"][0]["faults"]["kind"], "poison-request");
}

#[test]
fn an_invalid_policy_is_refused_with_its_field_before_anything_runs() {
    let dir = std::env::temp_dir().join(format!("servery-research-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_default();
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "name = \"bad\"\n[recovery]\nheartbeat_interval = 5.0\nheartbeat_timeout = 5.0\n",
    )
    .unwrap_or_default();
    let args = CompareArgs {
        policies: vec![bad.display().to_string()],
        workloads: vec!["steady".into()],
        seeds: 2,
        jobs: 1,
        out: Some(dir.join("out")),
        json: false,
        platform: Platform::Posix,
        grid: None,
    };
    let e = compare(&args)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("recovery.heartbeat_timeout"), "{e}");
    assert!(
        !dir.join("out").exists(),
        "nothing written for a refused input"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sometimes-coverage: across a few seeds each workload reaches the states that make it
/// worth running - a crash storm both survived and fatal (short and long outages under a
/// limiting policy), a boot loop that gives up, a fast loop never giving up under a
/// policy without a limit, aging crashes and recycles, poison and hang restarts.
#[test]
fn each_workload_reaches_its_interesting_states_across_seeds() {
    let seeds = 0..6;
    let policies = [
        load_policy("seed-defaults"),
        load_policy("kubernetes-kep4603"),
    ];
    let workloads: Vec<_> = WORKLOADS.iter().map(|w| short(w)).collect();
    let cells = run_matrix(&policies, &workloads, seeds.clone(), 2, Platform::Posix);
    // Recycling only where it is the point (a policy that restarts every 10 ms without
    // a limit would spend the test's time booting through a crash storm).
    let mut recycling = load_policy("gunicorn-recycling");
    recycling.recovery.max_requests_per_worker = 40;
    let recycled = run_matrix(&[recycling], &[short("steady")], seeds, 2, Platform::Posix);
    assert!(
        recycled[0]
            .runs
            .iter()
            .any(|m| m.recycles > 0.0 && !m.failed)
    );
    let cell = |p: &str, w: &str| {
        cells
            .iter()
            .find(|c| c.policy == p && c.workload == w)
            .unwrap_or_else(|| panic!("{p} x {w} ran"))
    };
    let any =
        |p: &str,
         w: &str,
         f: &dyn Fn(&servery_scenarios::research::metrics::RunMetrics) -> bool| {
            cell(p, w).runs.iter().any(f)
        };
    assert!(any("seed-defaults", "crash-storm", &|m| m.failed));
    assert!(any("kubernetes-kep4603", "crash-storm", &|m| !m.failed
        && !m.recover_s.is_empty()));
    assert!(any("seed-defaults", "boot-loop", &|m| m.failed));
    assert!(
        any("seed-defaults", "boot-loop", &|m| !m.failed),
        "a slow loop that never trips the limit"
    );
    assert!(any("kubernetes-kep4603", "boot-loop", &|m| !m.failed
        && m.restarts > 5.0));
    assert!(any("seed-defaults", "aging", &|m| m.restarts > 0.0 && !m.failed));
    assert!(any("seed-defaults", "poison-request", &|m| m.restarts >= 4.0));
    assert!(any("seed-defaults", "hang", &|m| !m.detect_s.is_empty()
        && m.detect_s.iter().all(|d| *d >= 4.0)));
    // Requests that waited out a crash storm's outage in the listener were served, but
    // late: availability counts them, the latency bound does not.
    assert!(any("kubernetes-kep4603", "crash-storm", &|m| m
        .served_within_bound
        < m.availability - 0.01));
    assert!(cells.iter().all(|c| {
        c.runs
            .iter()
            .all(|m| m.served_within_bound <= m.availability)
    }));
    assert!(cells.iter().all(|c| c.runs.len() == 6));
    assert!(cells.iter().any(|c| c.class == FaultClass::Permanent));
    assert!(
        cells
            .iter()
            .all(|c| c.runs.iter().all(|m| m.peak_processes <= 5.0))
    );
}

#[test]
fn out_writes_csv_and_plots_and_the_grid_orders_p_failed_by_the_limit() {
    let dir = std::env::temp_dir().join(format!("servery-research-out-{}", std::process::id()));
    let args = CompareArgs {
        policies: vec!["seed-defaults".into()],
        workloads: vec!["crash-storm-short".into()],
        seeds: 4,
        jobs: 2,
        out: Some(dir.clone()),
        json: false,
        platform: Platform::Windows,
        grid: Some((vec![1, 5], vec![10.0, 60.0])),
    };
    compare(&args).unwrap_or_else(|e| panic!("{e}"));
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
    let runs = read("runs.csv");
    assert_eq!(csv_rows(&runs).count(), 1 + 4, "{runs}");
    assert!(read("summary.csv").contains("seed-defaults,crash-storm-short,transient,4,p_failed"));
    // Every CSV says where it came from and how to make it again.
    for csv in [
        "runs.csv",
        "summary.csv",
        "verdict.csv",
        "ranks.csv",
        "answer.csv",
        "p-failed-grid-crash-storm-short.csv",
    ] {
        let body = read(csv);
        let commented = |key: &str| body.lines().any(|l| l.starts_with(&format!("# {key}: ")));
        for key in [
            "commit", "command", "seeds", "platform", "policy", "workload",
        ] {
            assert!(commented(key), "{csv} lacks {key}:\n{body}");
        }
        assert!(body.contains("# seeds: 0..4 (4 paired seeds)"), "{body}");
        assert!(
            body.contains(
                "--policy seed-defaults --workload crash-storm-short --seeds 4 --platform windows"
            ),
            "{body}"
        );
        assert!(
            body.contains("\"worker_restart_limit\":5"),
            "full policy values: {body}"
        );
        assert!(body.contains("\"outage_s\":[0.0,0.2]"), "{body}");
    }
    assert!(read("p-failed-grid-crash-storm-short.csv").contains("# grid: "));
    // One policy: nothing to pair, the one policy is the answer.
    let answer = read("answer.csv");
    assert!(
        csv_rows(&answer).any(|r| r
            == "crash-storm-short,transient,seed-defaults,seed-defaults,seed-defaults,seed-defaults,seed-defaults,seed-defaults"),
        "{answer}"
    );
    for svg in [
        "availability-vs-parameter-crash-storm-short.svg",
        "p-failed-vs-parameter-crash-storm-short.svg",
        "recover-cdf-crash-storm-short.svg",
        "boots-over-time-crash-storm-short.svg",
        "p-failed-grid-crash-storm-short.svg",
    ] {
        let body = read(svg);
        assert!(body.starts_with("<svg") && body.contains("</svg>"), "{svg}");
        // The same drawing as PDF, every label set (one text-showing operator each).
        let name = svg.replace(".svg", ".pdf");
        let pdf = std::fs::read(dir.join(&name)).unwrap_or_default();
        let pdf = String::from_utf8_lossy(&pdf);
        assert!(
            pdf.starts_with("%PDF-1.4") && pdf.ends_with("%%EOF\n"),
            "{name} is not a whole PDF"
        );
        assert_eq!(
            pdf.matches(" Tj ET").count(),
            body.matches("<text").count(),
            "{name}: every label of {svg} set once"
        );
    }
    // Four workers crashing at once: a limit of 1 fails every run, 5 none.
    let grid = read("p-failed-grid-crash-storm-short.csv");
    let grid: String = csv_rows(&grid).collect::<Vec<_>>().join("\n");
    assert!(grid.contains("crash-storm-short,1,10,1,"), "{grid}");
    assert!(grid.contains("crash-storm-short,5,60,0,"), "{grid}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The hang workload's pauses straddle the heartbeat timeout: across a few seeds, some
/// worker resumes from a pause and runs on, and some is ended as hung for one.
#[test]
fn hang_pauses_are_both_waited_out_and_ended_as_hung() {
    let w = short("hang");
    let policy = load_policy("seed-defaults");
    let (mut resumed, mut ended) = (false, false);
    for seed in 0..4 {
        let draw = w.draw(seed);
        let o = servery_sim::simulate(w.spec(&policy, seed, Platform::Posix, &draw))
            .unwrap_or_else(|e| panic!("{e}"));
        resumed |= o
            .coverage
            .contains(servery_sim::labels::PAUSED_WORKER_RESUMED);
        ended |= o
            .exits
            .iter()
            .any(|e| e.reason == Some(servery_core::supervisor::ExitReason::HealthFailure));
    }
    assert!(resumed && ended, "resumed {resumed}, ended as hung {ended}");
}

/// The verdict on a seeded comparison: a six-worker blip fails the seed defaults in
/// every seed and KEP-4603 (no limit) in none, which restarts six workers where the
/// failed service restarts none. So KEP-4603 is first on availability and P(failed),
/// the seed defaults on restarts: both on the front, no single best, KEP-4603 preferred.
#[test]
fn the_verdict_ranks_with_corrected_intervals_and_answers_per_workload() {
    let args = CompareArgs {
        policies: vec!["seed-defaults".into(), "kubernetes-kep4603".into()],
        workloads: vec!["crash-blip-6".into()],
        seeds: 6,
        jobs: 2,
        out: None,
        json: true,
        platform: Platform::Posix,
        grid: None,
    };
    let out = compare(&args).unwrap_or_else(|e| panic!("{e}"));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    let w = &v["verdict"]["workloads"][0];
    assert_eq!(w["workload"], "crash-blip-6", "{v}");
    assert_eq!(w["comparisons"], 3);
    assert!(
        w["bootstrap_resamples"].as_u64().unwrap_or(0) >= 2_000,
        "{w}"
    );
    let level = w["interval_level"].as_f64().unwrap_or(0.0);
    assert!((level - (1.0 - 0.05 / 3.0)).abs() < 1e-12, "{w}");
    let rank = |p: usize, c: &str| w["policies"][p]["criteria"][c]["rank"].as_u64();
    assert_eq!(
        [
            rank(0, "availability"),
            rank(0, "p_failed"),
            rank(0, "restarts")
        ],
        [Some(2), Some(2), Some(1)],
        "{w}"
    );
    assert_eq!(
        [
            rank(1, "availability"),
            rank(1, "p_failed"),
            rank(1, "restarts")
        ],
        [Some(1), Some(1), Some(2)],
        "{w}"
    );
    let mean = |p: usize, c: &str| w["policies"][p]["criteria"][c]["mean"].as_f64();
    assert_eq!(mean(0, "p_failed"), Some(1.0));
    assert_eq!(mean(1, "p_failed"), Some(0.0));
    assert_eq!(
        mean(1, "restarts"),
        Some(6.0),
        "six workers, each restarted once"
    );
    assert_eq!(w["pairs"].as_array().map(Vec::len), Some(3));
    for pair in w["pairs"].as_array().cloned().unwrap_or_default() {
        let ci = &pair["a_minus_b"]["ci"];
        let (lo, hi) = (ci[0].as_f64().unwrap_or(0.0), ci[1].as_f64().unwrap_or(0.0));
        assert!(lo * hi > 0.0, "every pair differs here: {pair}");
    }
    let answer = &v["verdict"]["answer"][0];
    assert_eq!(answer["best"], serde_json::Value::Null, "{answer}");
    assert_eq!(
        answer["pareto_front"],
        serde_json::json!(["seed-defaults", "kubernetes-kep4603"])
    );
    assert_eq!(
        answer["preferred"],
        serde_json::json!(["kubernetes-kep4603"])
    );
    assert_eq!(
        answer["first_on"]["restarts"],
        serde_json::json!(["seed-defaults"])
    );
    // The text carries the same answer, as one table.
    let text = compare(&CompareArgs {
        json: false,
        ..args
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let row = text
        .lines()
        .find(|l| l.starts_with("crash-blip-6"))
        .unwrap_or_default();
    assert!(
        row.contains("none (trade-off)")
            && row.contains("kubernetes-kep4603  seed-defaults, kubernetes-kep4603"),
        "{text}"
    );
}

#[test]
fn a_workload_sweep_runs_every_point_and_more_pauses_cost_more_restarts() {
    let args = CompareArgs {
        policies: vec!["seed-defaults".into()],
        workloads: vec!["sweeps/hang-rate".into()],
        seeds: 4,
        jobs: 2,
        out: None,
        json: false,
        platform: Platform::Posix,
        grid: None,
    };
    let (policies, workloads) =
        servery_scenarios::research::cli::load_inputs(&args).unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<&str> = workloads.iter().map(|w| w.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "hang faults.rate_per_s=0.01 faults.pause_mean_s=5.0",
            "hang faults.rate_per_s=0.01 faults.pause_mean_s=20.0",
            "hang faults.rate_per_s=0.0333 faults.pause_mean_s=5.0",
            "hang faults.rate_per_s=0.0333 faults.pause_mean_s=20.0",
            "hang faults.rate_per_s=0.1 faults.pause_mean_s=5.0",
            "hang faults.rate_per_s=0.1 faults.pause_mean_s=20.0",
        ],
        "workload sweep rule: one workload per point, named by its values"
    );
    // The same point's faults at a tenth of the rate: fewer pauses, fewer workers ended.
    let (slow, fast) = (&workloads[1], &workloads[5]);
    let shorten = |w: &workload::Workload| {
        let mut w = w.clone();
        w.duration_s = 150.0;
        w.request_rate = 2.0;
        w
    };
    let cells = run_matrix(
        &policies,
        &[shorten(slow), shorten(fast)],
        0..4,
        2,
        Platform::Posix,
    );
    let restarts = |i: usize| cells[i].runs.iter().map(|r| r.restarts).sum::<f64>();
    assert!(
        restarts(0) < restarts(1),
        "workload sweep rule: the swept rate reaches the run (restarts over 4 seeds at \
         0.01/s: {}, at 0.1/s: {})",
        restarts(0),
        restarts(1)
    );
}
