//! Published servers' policies run on servery's supervisor: systemd's fixed start-limit
//! window ends a run `failed` exactly at the start systemd would refuse, granian's RSS
//! limit recycles leaking workers, uvicorn's health check detects hangs at its timeout,
//! and a comparison's provenance command reproduces it.

use std::path::Path;
use std::process::Command;

use servery_core::supervisor::Platform;
use servery_scenarios::research::cli::resolve;
use servery_scenarios::research::compare::{run_one, unit_starts};
use servery_scenarios::research::{policy, workload};

fn load_policy(name: &str) -> policy::Policy {
    policy::load(&resolve(name, "policies")).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn workload_text(text: &str) -> workload::Workload {
    workload::from_text(Path::new("w.toml"), text).unwrap_or_else(|e| panic!("{e}"))
}

/// The shipped boot loop, cut to 150 s at 2 requests/s so the debug build stays quick.
fn boot_loop() -> workload::Workload {
    let mut w =
        workload::load(&resolve("boot-loop", "workloads")).unwrap_or_else(|e| panic!("{e}"));
    w.duration_s = 150.0;
    w.request_rate = 2.0;
    w
}

#[test]
fn systemd_fails_the_run_at_the_first_start_its_fixed_window_refuses() {
    let systemd = load_policy("systemd-defaults");
    let limit = systemd
        .start_limit()
        .unwrap_or_else(|| panic!("a start limit"));
    assert_eq!((limit.interval_s, limit.burst), (10.0, 5));
    // The same supervisor without the limit applied: the run systemd's follows up to
    // its refusal.
    let mut unlimited = systemd.clone();
    unlimited.published = None;
    let w = boot_loop();
    let (mut failed, mut survived) = (0, 0);
    for seed in 0..8 {
        let m = run_one(&systemd, &w, seed, Platform::Posix).unwrap_or_else(|e| panic!("{e}"));
        let draw = w.draw(seed);
        let spec = w.spec(&unlimited, seed, Platform::Posix, &draw);
        let free = servery_sim::simulate(spec).unwrap_or_else(|e| panic!("{e}"));
        let refused = limit
            .first_refused(&unit_starts(&free, w.workers))
            .filter(|t| *t <= w.duration_s);
        assert_eq!(m.failed, refused.is_some(), "seed {seed}");
        let Some(at) = refused else {
            survived += 1;
            continue;
        };
        failed += 1;
        let give_up = m.give_up_s.unwrap_or(f64::NAN);
        assert!(
            (give_up - (at - draw.onset_s).max(0.0)).abs() < 1e-9,
            "seed {seed}: gave up {give_up} s after the onset, refused at {at}"
        );
        // The cut run is the free run up to the refusal: the same boots before it.
        let free_boots: Vec<f64> = free
            .spawn_times_ms
            .iter()
            .skip(w.workers as usize)
            .map(|&ms| ms as f64 / 1000.0)
            .filter(|t| *t < at)
            .collect();
        assert_eq!(
            m.boot_times, free_boots,
            "seed {seed}: refused at {at}, free {:?}",
            free.spawn_times_ms
        );
    }
    // Fast loops trip the limit, slow ones (b over the 10 s interval) never do.
    assert!(
        failed > 0 && survived > 0,
        "failed {failed}, survived {survived}"
    );
}

#[test]
fn granian_rss_limit_recycles_a_leaking_worker_on_the_supervisor() {
    let leak = workload_text(
        "name = \"leak\"\nfault_class = \"none\"\nworkers = 2\nduration_s = 200.0\n\
         request_rate = 10.0\nmemory_base_mb = 50.0\nmemory_growth_mb_per_request = 1.0\n\
         [faults]\nkind = \"steady\"\n",
    );
    let rss_only = policy::from_text(
        Path::new("granian-rss.toml"),
        "name = \"granian-rss\"\n[granian]\nworkers_max_rss_mib = 512\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rss_only.recovery.worker_max_rss, 512 * 1024 * 1024);
    let plain = load_policy("seed-defaults");
    for seed in 0..2 {
        let r = run_one(&rss_only, &leak, seed, Platform::Posix).unwrap_or_else(|e| panic!("{e}"));
        let p = run_one(&plain, &leak, seed, Platform::Posix).unwrap_or_else(|e| panic!("{e}"));
        // 5 requests/s a worker, 1 MiB each: past 512 MiB after about 93 s.
        assert!(r.recycles >= 2.0, "seed {seed}: {} recycles", r.recycles);
        assert_eq!(p.recycles, 0.0, "no limit, no recycle");
    }
}

#[test]
fn uvicorn_health_check_detects_a_hang_at_its_timeout_and_kills_at_once() {
    let mut hang = workload::load(&resolve("hang", "workloads")).unwrap_or_else(|e| panic!("{e}"));
    hang.duration_s = 200.0;
    hang.request_rate = 2.0;
    let (uvicorn, seed_defaults) = (load_policy("uvicorn"), load_policy("seed-defaults"));
    let mean = |p: &policy::Policy| {
        let xs: Vec<f64> = (0..6)
            .flat_map(|s| {
                run_one(p, &hang, s, Platform::Posix)
                    .unwrap_or_else(|e| panic!("{e}"))
                    .detect_s
            })
            .collect();
        xs.iter().sum::<f64>() / xs.len().max(1) as f64
    };
    let (u, s) = (mean(&uvicorn), mean(&seed_defaults));
    // uvicorn: 5 s without an answer, then SIGKILL — counted from the last answer, up
    // to one 0.5 s check before the pause began, so 4.5–5 s; the seed: 5 s from a beat
    // up to 1 s before the pause, then TERM, 1 s, KILL: 5–6 s.
    assert!((4.5..5.1).contains(&u), "uvicorn detects in {u} s");
    assert!(s > u + 0.4, "seed defaults {s} s against uvicorn {u} s");
}

#[test]
fn a_policy_for_two_servers_or_setting_a_field_twice_is_refused_and_jitter_is_the_supervisors() {
    let p = Path::new("p.toml");
    let two = policy::from_text(
        p,
        "name = \"x\"\n[gunicorn]\nmax_requests = 10\n[uvicorn]\n",
    );
    assert!(
        two.as_ref()
            .is_err_and(|e| e.to_string().contains("one server")),
        "{two:?}"
    );
    let twice = policy::from_text(
        p,
        "name = \"x\"\n[gunicorn]\nmax_requests = 10\n[recovery]\nmax_requests_per_worker = 5\n",
    );
    assert!(
        twice
            .as_ref()
            .is_err_and(|e| e.to_string().contains("recovery.max_requests_per_worker")),
        "{twice:?}"
    );
    // Jittered restart delays are the supervisor's own (core's restart_backoff_jitter).
    let jitter = policy::from_text(p, "name = \"x\"\n[restart_jitter]\nkind = \"full\"\n");
    assert_eq!(
        jitter
            .as_ref()
            .ok()
            .map(|p| p.recovery.restart_backoff_jitter),
        Some(servery_core::config::RestartJitter::Full),
        "{jitter:?}"
    );
    let grpc = policy::from_text(p, "name = \"x\"\n[restart_jitter]\nkind = \"grpc\"\n")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (
            grpc.recovery.restart_backoff_jitter,
            grpc.recovery.restart_backoff_initial,
            grpc.recovery.restart_backoff_max
        ),
        (
            servery_core::config::RestartJitter::Proportional,
            1.0,
            120.0
        )
    );
    let both = policy::from_text(
        p,
        "name = \"x\"\n[restart_jitter]\nkind = \"full\"\n[recovery]\nrestart_backoff_jitter = \"none\"\n",
    );
    assert!(
        both.as_ref().is_err_and(|e| e
            .to_string()
            .contains("recovery.restart_backoff_jitter is set in [recovery] too")),
        "{both:?}"
    );
    let recycling_unit = policy::from_text(
        p,
        "name = \"x\"\n[systemd]\n[recovery]\nworker_max_age = 60.0\n",
    );
    assert!(recycling_unit.is_err(), "{recycling_unit:?}");
}

#[test]
fn a_systemd_policy_is_swept_by_its_own_fields_not_by_the_limit_grid() {
    let args = servery_scenarios::research::cli::CompareArgs {
        policies: vec!["systemd-defaults".into()],
        workloads: vec!["crash-storm-short".into()],
        seeds: 1,
        jobs: 1,
        out: Some(std::env::temp_dir().join("servery-research-never-written")),
        json: false,
        platform: Platform::Posix,
        grid: Some((vec![1], vec![10.0])),
    };
    let e = servery_scenarios::research::cli::compare(&args)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("systemd.start_limit_burst"), "{e}");
    let sweep = servery_scenarios::research::sweep::from_text(
        Path::new("s.toml"),
        "name = \"sd\"\n[systemd]\n[[vary]]\nfield = \"systemd.start_limit_burst\"\nvalues = [3, 10]\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let bursts: Vec<Option<u32>> = sweep
        .iter()
        .map(|p| p.start_limit().map(|l| l.burst))
        .collect();
    assert_eq!(bursts, [Some(3), Some(10)]);
    let shipped = servery_scenarios::research::sweep::load_all(&resolve(
        "sweeps/systemd-start-limit",
        "policies",
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(shipped.len(), 6, "3 bursts x 2 intervals");
}

/// The command a comparison's provenance names, run again, gives the same figures.
#[test]
fn the_provenance_command_reproduces_the_comparison() {
    let bin = env!("CARGO_BIN_EXE_servery-scenarios");
    let run = |args: &[&str]| {
        let out = Command::new(bin)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap_or_else(|e| panic!("{e}"))
    };
    let first = run(&[
        "compare",
        "--policy",
        "seed-defaults",
        "--policy",
        "systemd-defaults",
        "--workload",
        "crash-storm-short",
        "--seeds",
        "3",
        "--jobs",
        "2",
        "--json",
    ]);
    let command = first["provenance"]["command"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let args: Vec<&str> = command
        .split_once(" -- ")
        .map(|(_, rest)| rest.split(' ').collect())
        .unwrap_or_default();
    assert_eq!(args.first(), Some(&"compare"), "{command}");
    let again = run(&args);
    assert_eq!(first["policies"], again["policies"]);
    assert_eq!(first["differences"], again["differences"]);
    assert_eq!(first["provenance"], again["provenance"]);
}
