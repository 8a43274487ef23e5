//! Pauses that end (`Fault::PauseWorker`): a worker stopped for less than the heartbeat
//! timeout resumes, is never killed, and answers the requests that waited for it late by
//! about the pause; one stopped past the timeout is ended as hung and replaced.

use core::time::Duration;

use servery_core::config::RawConfig;
use servery_core::supervisor::{ExitReason, Platform};
use servery_sim::{Behavior, Fault, Outcome, SimSpec, Workload, labels, simulate};

const HEARTBEAT_INTERVAL: f64 = 0.5;
const HEARTBEAT_TIMEOUT: f64 = 2.0;
const PAUSE_AT: f64 = 3.0;
const RATE: f64 = 20.0;

fn config(force_timeout: f64) -> RawConfig {
    let mut c = RawConfig {
        workers: 1,
        ..RawConfig::default()
    };
    let r = &mut c.recovery;
    r.restart_backoff_initial = 0.1;
    r.restart_backoff_max = 2.0;
    r.heartbeat_interval = HEARTBEAT_INTERVAL;
    r.heartbeat_timeout = HEARTBEAT_TIMEOUT;
    r.worker_start_timeout = 5.0;
    r.drain_timeout = 3.0;
    r.force_timeout = force_timeout;
    c
}

/// One worker (every request waits for it while it is stopped), paused at 3 s for
/// `pause`, stopped at 12 s.
fn run(seed: u64, platform: Platform, pause: f64, force_timeout: f64) -> Outcome {
    let stop = Duration::from_secs(12);
    let spec = SimSpec {
        seed,
        platform,
        config: config(force_timeout),
        workload: Workload {
            request_rate: RATE,
            until: stop,
            ..Workload::default()
        },
        behavior: Box::new(|_, _| Behavior::Healthy),
        faults: vec![(
            Duration::from_secs_f64(PAUSE_AT),
            Fault::PauseWorker {
                pick: seed,
                duration: Duration::from_secs_f64(pause),
            },
        )],
        commands: Vec::new(),
        host_cpus: servery_core::cpu_affinity::CpuSet::default(),
        liveness_at: stop,
        stop_at: stop,
        end_by: stop + Duration::from_secs(40),
        trace: false,
        listeners_from_service_manager: false,
    };
    simulate(spec).unwrap_or_else(|e| panic!("configuration: {e}"))
}

fn healthy_run(o: &Outcome) {
    assert!(o.violations.is_empty(), "{:?}", o.violations);
    assert!(o.stalled.is_none(), "{:?}", o.stalled);
    assert_eq!(o.exit_code, Some(0), "seed {}", o.seed);
}

fn hung_exits(o: &Outcome) -> usize {
    o.exits
        .iter()
        .filter(|e| e.reason == Some(ExitReason::HealthFailure))
        .count()
}

#[test]
fn a_pause_shorter_than_the_heartbeat_timeout_is_waited_out_and_its_requests_served_late() {
    // Beats are 0.5 s apart, so the last one before the stop is at most 0.5 s old: a
    // pause of up to 1.5 s ends before the 2 s deadline.
    for platform in [Platform::Posix, Platform::Windows] {
        for seed in 0..8 {
            let pause = 0.4 + 1.1 * (seed as f64 / 7.0);
            let o = run(seed, platform, pause, 0.5);
            healthy_run(&o);
            let ctx = format!("seed {seed} {platform:?} pause {pause:.2} s");
            assert_eq!(o.pauses.len(), 1, "{ctx}");
            assert_eq!(hung_exits(&o), 0, "{ctx}: killed as hung: {:?}", o.exits);
            assert_eq!(o.spawns, 1, "{ctx}: replaced");
            assert!(o.coverage.contains(labels::PAUSED_WORKER_RESUMED), "{ctx}");
            assert!(!o.coverage.contains(labels::PAUSED_WORKER_KILLED), "{ctx}");
            assert_eq!(o.failed_requests(), 0, "{ctx}: {:?}", o.requests);
            assert_eq!(o.request_latency_us.len() as u64, o.requests.ok, "{ctx}");
            // The first request to arrive after the stop waits out nearly all of it: at
            // 20 requests/s one comes within a few tenths of a second, and the slowest
            // answer is that one's, late by at most the pause plus a service time.
            let slowest = o.request_latency_us.iter().max().copied().unwrap_or(0) as f64 / 1e6;
            assert!(
                (pause - 0.3..=pause + 0.05).contains(&slowest),
                "{ctx}: slowest answer took {slowest:.3} s"
            );
            let late = o
                .request_latency_us
                .iter()
                .filter(|&&us| us as f64 / 1e6 > 0.1)
                .count() as f64;
            assert!(
                late >= RATE * pause * 0.4,
                "{ctx}: only {late} requests waited for the pause"
            );
        }
    }
}

#[test]
fn a_pause_past_the_heartbeat_timeout_gets_the_worker_killed_and_replaced() {
    for platform in [Platform::Posix, Platform::Windows] {
        for seed in 0..4 {
            let o = run(seed, platform, 6.0, 0.5);
            healthy_run(&o);
            let ctx = format!("seed {seed} {platform:?}");
            assert!(o.coverage.contains(labels::PAUSED_WORKER_KILLED), "{ctx}");
            assert!(!o.coverage.contains(labels::PAUSED_WORKER_RESUMED), "{ctx}");
            let exit = o.exits.iter().find(|e| e.worker == o.pauses[0].0);
            let exit = exit.unwrap_or_else(|| panic!("{ctx}: never reaped: {:?}", o.exits));
            assert_eq!(exit.reason, Some(ExitReason::HealthFailure), "{ctx}");
            // Found silent within the timeout (plus the last beat's age), ended within
            // the force timeout after (POSIX TERM, then KILL; at once on Windows).
            let after = (exit.at_ms - o.pauses[0].1) as f64 / 1000.0;
            assert!(
                (HEARTBEAT_TIMEOUT - HEARTBEAT_INTERVAL..=HEARTBEAT_TIMEOUT + 0.6).contains(&after),
                "{ctx}: ended {after:.3} s after its stop"
            );
            assert_eq!(o.spawns, 2, "{ctx}");
        }
    }
}

#[test]
fn a_term_sent_to_a_paused_worker_runs_when_it_resumes() {
    // Found hung within 1.5–2 s of the stop; the KILL would follow 3 s after the TERM.
    // The pause ends at 3.5 s, before the KILL: a POSIX worker then runs its pending TERM
    // handler and drains, failing nothing; a Windows worker was terminated at once.
    for seed in 0..4 {
        let o = run(seed, Platform::Posix, 3.5, 3.0);
        healthy_run(&o);
        let ctx = format!("seed {seed}");
        assert!(
            o.coverage.contains(labels::PAUSED_WORKER_RAN_PENDING_TERM),
            "{ctx}: {:?}",
            o.coverage
        );
        assert!(!o.coverage.contains(labels::PAUSED_WORKER_KILLED), "{ctx}");
        assert_eq!(hung_exits(&o), 1, "{ctx}: {:?}", o.exits);
        assert_eq!(o.failed_requests(), 0, "{ctx}: {:?}", o.requests);

        let o = run(seed, Platform::Windows, 3.5, 3.0);
        healthy_run(&o);
        assert!(o.coverage.contains(labels::PAUSED_WORKER_KILLED), "{ctx}");
        assert_eq!(o.terms_sent, 0, "{ctx}");
    }
}
