//! Applications in the workers: recycling by memory (a leak with passing peaks), an
//! interpreter that wedges holding its lock, a shutdown overrunning the drain, and an
//! application that fails its startup (import or lifespan) in a reload or in the first
//! generation. The real-process counterparts are tests/apps.rs (a leaking Flask
//! application on one worker; a request spinning in C; a broken deploy) and
//! tests/apps_asgi.rs (a failing lifespan at the start and in a reload).

use core::time::Duration;

use servery_sim::rng::SimRng;
use servery_sim::{
    AppModel, AppStage, AppStartup, Behavior, Fault, Outcome, SimCommand, lifespan_timeout_reason,
};

use crate::catalog::{at, behave, expect, fault, secs, spec, workers};
use crate::{Ctx, End, Plan, fast_config};
use servery_core::config::CpuAffinity;
use servery_core::control::{Answer, Refusal};
use servery_core::cpu_affinity::CpuSet;
use servery_core::supervisor::{ExitReason, FailureReason, Role, WorkerState};
use servery_sim::labels;

const MIB: u64 = 1 << 20;
/// `worker_max_rss` in the memory scenario, and a worker's memory at rest.
const MEMORY_LIMIT: u64 = 64 * MIB;
const MEMORY_AT_REST: u64 = 24 * MIB;
/// The most heartbeats in a row a worker may report above the limit: two for the rule,
/// then the recycles queued before its own (one at a time, at most three other workers,
/// each a boot and a drain of milliseconds), its replacement's boot and its own drain,
/// all within a heartbeat interval or two.
const MEMORY_STREAK_BOUND: u32 = 6;

pub(crate) fn memory_recycle(ctx: &mut Ctx) -> Plan {
    let n = workers(ctx, 1, 4);
    let mut config = fast_config(n);
    config.recovery.worker_max_rss = MEMORY_LIMIT as i64;
    let mut spec = spec(ctx, config.clone(), 30.0);
    let rate = 40.0;
    spec.workload.request_rate = rate;
    // A worker crosses the limit after 2 to 8 seconds of its share of the load.
    let seconds = 2.0 + ctx.rng.unit() * 6.0;
    let per_worker = rate / n as f64 * seconds;
    let per_request = ((MEMORY_LIMIT - MEMORY_AT_REST) as f64 / per_worker) as u64;
    spec.workload.app = Some(AppModel {
        memory_base: MEMORY_AT_REST,
        memory_per_request: per_request.max(1),
        peak_chance: 0.05 + ctx.rng.unit() * 0.15,
        peak_bytes: MEMORY_LIMIT,
        oom_limit: None,
        shutdown_ms: None,
    });
    let mut e = expect(&config, End::Ready);
    e.zero_failed = true;
    e.extra = Some(|o, e| {
        let mut recycled = 0;
        for exit in &o.exits {
            if exit.reason != Some(ExitReason::RecycleMemory) {
                continue;
            }
            recycled += 1;
            let streak = o.memory_streaks.get(&exit.worker).copied().unwrap_or(0);
            if streak < 2 {
                return Err(format!(
                    "memory rule: worker {} was recycled by memory after {streak} heartbeat(s) above worker_max_rss; it takes two in a row",
                    exit.worker
                ));
            }
        }
        if let Some((worker, streak)) = o
            .memory_streaks
            .iter()
            .find(|(_, s)| **s > MEMORY_STREAK_BOUND)
        {
            return Err(format!(
                "memory rule: worker {worker} reported memory above worker_max_rss at {streak} heartbeats in a row without being recycled (bound {MEMORY_STREAK_BOUND})"
            ));
        }
        if recycled == 0 {
            return Err("no worker was recycled by memory".into());
        }
        if o.max_live_processes > e.workers + 1 {
            return Err(format!(
                "{} processes at once while recycling by memory (N + 1 = {})",
                o.max_live_processes,
                e.workers + 1
            ));
        }
        o.coverage.insert(labels::RECYCLED_BY_MEMORY);
        Ok(())
    });
    Plan { spec, expect: e }
}

/// `fast_config`'s timings, for the wedge's bound.
const HEARTBEAT_INTERVAL: f64 = 0.5;
const HEARTBEAT_TIMEOUT: f64 = 2.0;
const FORCE_TIMEOUT: f64 = 0.5;
/// From the wedge to the reap: the probe's last answer counts for two intervals, the
/// worker's timer may fire up to an interval after, then the parent's heartbeat timeout
/// from the last beat, TERM and at most the force timeout, and the reap.
const WEDGE_BOUND_MS: u64 =
    ((3.0 * HEARTBEAT_INTERVAL + HEARTBEAT_TIMEOUT + FORCE_TIMEOUT + 0.25) * 1000.0) as u64;

pub(crate) fn app_wedge(ctx: &mut Ctx) -> Plan {
    let n = workers(ctx, 1, 4);
    let config = fast_config(n);
    let r = &config.recovery;
    debug_assert!(
        r.heartbeat_interval == HEARTBEAT_INTERVAL
            && r.heartbeat_timeout == HEARTBEAT_TIMEOUT
            && r.force_timeout == FORCE_TIMEOUT
    );
    let mut spec = spec(ctx, config.clone(), 20.0);
    spec.workload.app = Some(AppModel {
        memory_base: MEMORY_AT_REST,
        memory_per_request: 0,
        peak_chance: 0.0,
        peak_bytes: 0,
        oom_limit: None,
        shutdown_ms: None,
    });
    let after = ctx.rng.range(3, 40);
    // The first three spawns may wedge (the restart limit is five in thirty seconds).
    spec.behavior = behave(ctx.kinds, move |info, rng| {
        if info.index < 3 && rng.chance(0.6) {
            Behavior::AppWedgesAfterRequests(after)
        } else {
            Behavior::Healthy
        }
    });
    let mut e = expect(&config, End::Ready);
    e.extra = Some(|o, _| {
        for &(worker, wedged_at) in &o.app_wedges {
            let Some(exit) = o.exits.iter().find(|x| x.worker == worker) else {
                return Err(format!(
                    "app-liveness rule: worker {worker}'s application wedged at {wedged_at} ms and the worker was never ended"
                ));
            };
            // (A stop before the bound ends it sooner: the TERM finds a worker whose own
            // threads run, and it exits at once.)
            let took = exit.at_ms.saturating_sub(wedged_at);
            if took > WEDGE_BOUND_MS {
                return Err(format!(
                    "app-liveness rule: worker {worker}'s application wedged at {wedged_at} ms and the worker was reaped {took} ms later (bound {WEDGE_BOUND_MS} ms)"
                ));
            }
            match exit.reason {
                Some(ExitReason::HealthFailure) => {
                    o.coverage.insert(labels::APP_WEDGE_REPLACED);
                }
                // Ended otherwise before its silence ran out (the stop, a recycle).
                Some(ExitReason::CleanExit | ExitReason::ForcedTermination) => {}
                other => {
                    return Err(format!(
                        "app-liveness rule: worker {worker}'s application wedged; it ended as {other:?}, not as a hang (health_failure)"
                    ));
                }
            }
        }
        Ok(())
    });
    Plan { spec, expect: e }
}

/// The drain timeout of the shutdown scenario (`fast_config`'s).
const DRAIN_MS: u64 = 3_000;
/// How late after its due time a worker's exit may be reaped: its own timer's, the
/// control channel's and the reap's delays.
const EXIT_SLACK_MS: u64 = 250;

pub(crate) fn app_shutdown(ctx: &mut Ctx) -> Plan {
    let n = workers(ctx, 1, 4);
    let config = fast_config(n);
    debug_assert!((config.recovery.drain_timeout * 1000.0) as u64 == DRAIN_MS);
    let mut spec = spec(ctx, config.clone(), 12.0);
    // Some shutdowns finish inside the drain, some overrun it.
    spec.workload.app = Some(AppModel {
        memory_base: MEMORY_AT_REST,
        memory_per_request: 0,
        peak_chance: 0.0,
        peak_bytes: 0,
        oom_limit: None,
        shutdown_ms: Some((10, 2 * DRAIN_MS)),
    });
    for _ in 0..ctx.rng.range(1, 2) {
        let t = crate::catalog::at(ctx, 1.0, 10.0);
        spec.commands.push((t, servery_sim::SimCommand::Recycle));
    }
    let mut e = expect(&config, End::Ready);
    // A shutdown cut at the deadline may leave the old worker's end to the drain rules.
    e.allow_forced = true;
    e.extra = Some(|o, _| {
        if o.app_shutdowns.is_empty() {
            return Err("no worker ran its application's shutdown".into());
        }
        for s in &o.app_shutdowns {
            if s.in_flight > 0 {
                return Err(format!(
                    "shutdown rule: worker {} started its application's shutdown with {} request(s) still in flight",
                    s.worker, s.in_flight
                ));
            }
            let Some(exit) = o.exits.iter().find(|x| x.worker == s.worker) else {
                continue;
            };
            let Some(&drain) = o.drains_started.get(&s.worker) else {
                return Err(format!("worker {} shut down without a drain", s.worker));
            };
            let deadline = drain + DRAIN_MS;
            let done = s.started_ms + s.takes_ms;
            if done <= deadline {
                if exit.at_ms < done {
                    return Err(format!(
                        "shutdown rule: worker {} exited at {} ms, before its application's shutdown ended at {done} ms",
                        s.worker, exit.at_ms
                    ));
                }
                if exit.at_ms > done + EXIT_SLACK_MS {
                    return Err(format!(
                        "shutdown rule: worker {} exited at {} ms, long after its application's shutdown ended at {done} ms",
                        s.worker, exit.at_ms
                    ));
                }
                o.coverage.insert(labels::APP_SHUTDOWN_COMPLETED);
            } else {
                if exit.at_ms + 1 < deadline || exit.at_ms > deadline + EXIT_SLACK_MS {
                    return Err(format!(
                        "shutdown rule: worker {}'s application shutdown overran its drain deadline ({deadline} ms) and the worker exited at {} ms, not at the deadline",
                        s.worker, exit.at_ms
                    ));
                }
                o.coverage.insert(labels::APP_SHUTDOWN_CUT);
            }
        }
        Ok(())
    });
    Plan { spec, expect: e }
}

/// The failing applications' reasons (their exception's line), which the service must
/// pass on: in the reload's rejection, or in the failure of a first generation.
const IMPORT_REASON: &str = "ModuleNotFoundError: No module named 'psycopg'";
const LIFESPAN_REASON: &str =
    "ConnectionRefusedError: [Errno 111] Connect call failed ('10.0.0.5', 5432)";

/// How a generation's application starts, drawn per seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StartDraw {
    Fast,
    /// Import and lifespan together take 60 to 85 % of the start timeout.
    Slow,
    FailsImport,
    FailsLifespan,
    /// The lifespan startup runs past the worker's `--lifespan-timeout` (sometimes past
    /// the parent's start timeout too, sometimes on to a failure of its own): the
    /// worker cuts it at the timeout and fails saying so.
    OverrunsLifespan,
}

/// The workers' `--lifespan-timeout` in these scenarios: 70 % of the start timeout, so
/// that it, not the parent's start timeout, cuts an overrunning lifespan, and a slow
/// start (whose lifespan takes at most 0.7 × 0.85 of the start timeout) still fits.
fn lifespan_timeout(start_timeout: f64) -> Duration {
    secs(start_timeout * 0.7)
}

impl StartDraw {
    /// One worker's startup, its times drawn from the spawn's own stream.
    fn startup(self, start_timeout: f64, rng: &mut SimRng) -> AppStartup {
        let ms = Duration::from_millis;
        let (import, lifespan, fails) = match self {
            StartDraw::Fast => (ms(rng.range(20, 200)), ms(rng.range(0, 100)), None),
            StartDraw::Slow => {
                let total = start_timeout * (0.6 + 0.25 * rng.unit());
                let import = total * (0.3 + 0.5 * rng.unit());
                (secs(import), secs(total - import), None)
            }
            StartDraw::FailsImport => (
                ms(rng.range(20, 300)),
                Duration::ZERO,
                Some((AppStage::Import, IMPORT_REASON.to_owned())),
            ),
            StartDraw::FailsLifespan => (
                ms(rng.range(20, 200)),
                ms(rng.range(10, 500)),
                Some((AppStage::Lifespan, LIFESPAN_REASON.to_owned())),
            ),
            StartDraw::OverrunsLifespan => {
                let over = lifespan_timeout(start_timeout) + secs(start_timeout * rng.unit());
                let fails_later = rng
                    .chance(0.5)
                    .then(|| (AppStage::Lifespan, LIFESPAN_REASON.to_owned()));
                (ms(rng.range(20, 200)), over, fails_later)
            }
        };
        AppStartup {
            import,
            lifespan,
            fails,
            lifespan_timeout: Some(lifespan_timeout(start_timeout)),
        }
    }

    fn starting(ctx: &mut Ctx) -> StartDraw {
        if ctx.rng.chance(0.5) {
            StartDraw::Fast
        } else {
            StartDraw::Slow
        }
    }

    fn failing(ctx: &mut Ctx) -> StartDraw {
        match ctx.rng.range(0, 2) {
            0 => StartDraw::FailsImport,
            1 => StartDraw::FailsLifespan,
            _ => StartDraw::OverrunsLifespan,
        }
    }
}

/// The slots (a bit each, of `n`) whose application fails: all of them, or some.
fn failing_slots(ctx: &mut Ctx, n: i64) -> u64 {
    let all = (1u64 << n) - 1;
    if ctx.rng.chance(0.4) {
        return all;
    }
    let mask = ctx.rng.next_u64() & all;
    // At least one fails.
    if mask == 0 {
        1 << ctx.rng.range(0, n as u64 - 1)
    } else {
        mask
    }
}

/// An ASGI application at rest: no leak, and (half the time) a short lifespan shutdown.
fn asgi_app(ctx: &mut Ctx) -> AppModel {
    AppModel {
        memory_base: MEMORY_AT_REST,
        memory_per_request: 0,
        peak_chance: 0.0,
        peak_bytes: 0,
        oom_limit: None,
        shutdown_ms: ctx.rng.chance(0.5).then_some((5, 200)),
    }
}

/// Whether `message` carries one of the failing applications' reasons.
fn carries_app_reason(message: &str) -> bool {
    message.contains(IMPORT_REASON) || message.contains(LIFESPAN_REASON)
}

/// When the failing workers' lifespans overran `--lifespan-timeout` (every failing
/// worker of a run draws alike), the reason `message` gives must be the timeout's: the
/// worker cuts the lifespan there, before the application's own failure or the
/// parent's start timeout could come.
fn lifespan_timeout_rule(o: &Outcome, message: &str) -> Result<(), String> {
    let start_timeout = fast_config(1).recovery.worker_start_timeout;
    let timeout_reason = lifespan_timeout_reason(lifespan_timeout(start_timeout));
    if o.coverage.contains(labels::APP_LIFESPAN_TIMED_OUT) && !message.contains(&timeout_reason) {
        return Err(format!(
            "lifespan-timeout rule: the failing workers' lifespan startups overran --lifespan-timeout, and the service reported {message:?} instead of {timeout_reason:?}"
        ));
    }
    Ok(())
}

pub(crate) fn app_reload_startup_failure(ctx: &mut Ctx) -> Plan {
    let n = workers(ctx, 1, 4);
    let config = fast_config(n);
    let start_timeout = config.recovery.worker_start_timeout;
    let mut spec = spec(ctx, config.clone(), 18.0);
    spec.workload.request_rate = 40.0;
    spec.workload.app = Some(asgi_app(ctx));
    let first = StartDraw::starting(ctx);
    let bad = StartDraw::failing(ctx);
    let siblings = StartDraw::starting(ctx);
    let good = StartDraw::starting(ctx);
    let n_bad = workers(ctx, 1, 4);
    let failing = failing_slots(ctx, n_bad);
    // After the first generation is ready (a slow start takes up to 4.25 s).
    let bad_at = at(ctx, 5.0, 7.0);
    // Its rejection comes within a second (a failing start takes at most 700 ms), or
    // within 3.7 s when the lifespan timeout (3.5 s) cuts it.
    let settle = if bad == StartDraw::OverrunsLifespan {
        at(ctx, 4.5, 6.0)
    } else {
        at(ctx, 3.0, 5.0)
    };
    let good_at = bad_at + settle;
    spec.commands
        .push((bad_at, SimCommand::Reload(Box::new(fast_config(n_bad)))));
    spec.commands
        .push((good_at, SimCommand::Reload(Box::new(fast_config(n)))));
    spec.behavior = behave(ctx.kinds, move |info, rng| {
        let draw = match info.generation.0 {
            1 => first,
            // A rejected reload's generation number is used again by the next one.
            _ if info.now < good_at => {
                if failing >> info.slot.0 & 1 == 1 {
                    bad
                } else {
                    siblings
                }
            }
            _ => good,
        };
        Behavior::AppStartup(draw.startup(start_timeout, rng))
    });
    let mut e = expect(&config, End::Ready);
    e.generation = Some(2);
    e.zero_failed = true;
    e.extra = Some(|o, e| {
        // The reload's answer: a rejection carrying the application's reason.
        let rejection = match &o.answers[..] {
            [
                (0, Answer::Refused(Refusal::Reload(m))),
                (1, Answer::Committed { .. }),
            ] => m,
            other => {
                return Err(format!(
                    "app-reload rule: the failing reload must be refused and the good one committed, in order; the answers were {other:?}"
                ));
            }
        };
        if !carries_app_reason(rejection) && !o.coverage.contains(labels::APP_LIFESPAN_TIMED_OUT) {
            return Err(format!(
                "app-reload rule: the reload was refused with {rejection:?}, which does not carry the application's reason"
            ));
        }
        lifespan_timeout_rule(o, rejection)?;
        // The old generation kept its N workers ready from its first READYs to the stop.
        let n = e.workers as u32;
        let stop = o.stop_ms.unwrap_or(u64::MAX);
        if let Some(full) = o.ready_changes.iter().position(|&(_, r)| r >= n)
            && let Some(&(t, ready)) = o.ready_changes[full..]
                .iter()
                .find(|&&(t, r)| r < n && t < stop)
        {
            return Err(format!(
                "app-reload rule: {ready} of {n} workers were ready at {t} ms; the old generation keeps all its workers ready while a reload fails and until the next one commits"
            ));
        }
        // None of the failed generation's workers is left.
        let status = o
            .liveness
            .as_ref()
            .ok_or("no status at the liveness point")?;
        if let Some(w) = status.workers.iter().find(|w| {
            w.role != Role::Member
                || w.state != WorkerState::Ready
                || w.generation != status.generation
        }) {
            return Err(format!(
                "app-reload rule: {} (generation {}, {:?}, {:?}) is still alive at the liveness point; only the committed generation's ready members may be",
                w.id, w.generation.0, w.role, w.state
            ));
        }
        o.coverage.insert(labels::APP_RELOAD_REJECTED);
        Ok(())
    });
    Plan { spec, expect: e }
}

pub(crate) fn app_first_start_failure(ctx: &mut Ctx) -> Plan {
    let n = workers(ctx, 1, 4);
    let config = fast_config(n);
    let start_timeout = config.recovery.worker_start_timeout;
    let mut spec = spec(ctx, config.clone(), 6.0);
    spec.workload.app = Some(asgi_app(ctx));
    let bad = StartDraw::failing(ctx);
    let siblings = StartDraw::starting(ctx);
    let failing = failing_slots(ctx, n);
    spec.behavior = behave(ctx.kinds, move |info, rng| {
        let draw = if failing >> info.slot.0 & 1 == 1 {
            bad
        } else {
            siblings
        };
        Behavior::AppStartup(draw.startup(start_timeout, rng))
    });
    let mut e = expect(&config, End::Failed(FailureReason::StartupFailure));
    e.end_rule = Some(
        "app-startup rule (first generation: the service fails with the application's reason, restarting nothing)",
    );
    e.extra = Some(|o, e| {
        let message = o.failure_message.clone().unwrap_or_default();
        if !carries_app_reason(&message) && !o.coverage.contains(labels::APP_LIFESPAN_TIMED_OUT) {
            return Err(format!(
                "app-startup rule (first generation): the service failed with {message:?}, which does not carry the application's reason"
            ));
        }
        lifespan_timeout_rule(o, &message)?;
        if o.spawns > e.workers as u64 {
            return Err(format!(
                "app-startup rule (first generation): {} spawns for {} slots; a first generation whose application cannot start fails the service at once, it is not restarted",
                o.spawns, e.workers
            ));
        }
        if o.requests.ok > 0 {
            return Err(format!(
                "app-startup rule (first generation): {} requests were served by a generation that never started",
                o.requests.ok
            ));
        }
        o.coverage.insert(labels::APP_FIRST_START_FAILED);
        Ok(())
    });
    Plan { spec, expect: e }
}

/// Application workers pinned to CPUs (decision 0122): a host whose parent may run on a
/// drawn set of CPUs (with holes, as `taskset -c` or a cgroup's cpuset leaves them), one
/// to five workers, a crash, `ctl recycle`, a reload to another worker count and, half the
/// time, one more to `worker_cpu_affinity = off`. The oracle's CPU affinity rule judges
/// every spawn; the run must show a replacement on its slot's CPUs and a reload that
/// shared them out again.
pub(crate) fn cpu_affinity(ctx: &mut Ctx) -> Plan {
    let n = workers(ctx, 1, 5);
    let mut next_n = workers(ctx, 1, 6);
    if next_n == n {
        next_n = n % 6 + 1;
    }
    let cpus = ctx.rng.range(1, 6);
    let mut pool: Vec<u32> = (0..16).collect();
    let mut host = Vec::new();
    for _ in 0..cpus {
        let i = ctx.rng.range(0, pool.len() as u64 - 1) as usize;
        host.push(pool.swap_remove(i));
    }
    let mut config = fast_config(n);
    config.features.application = true;
    config.worker_cpu_affinity = CpuAffinity::Auto;
    let mut spec = spec(ctx, config.clone(), 14.0);
    spec.host_cpus = CpuSet::new(host);
    let crash = at(ctx, 0.5, 3.0);
    let pick = ctx.rng.next_u64();
    fault(ctx.kinds, &mut spec, crash, Fault::CrashWorker { pick });
    spec.commands.push((at(ctx, 1.0, 4.0), SimCommand::Recycle));
    let mut next = config.clone();
    next.workers = next_n;
    spec.commands.push((
        at(ctx, 5.0, 8.0),
        SimCommand::Reload(Box::new(next.clone())),
    ));
    let mut e = expect(&config, End::Ready);
    e.workers = next_n as usize;
    e.generation = Some(2);
    if ctx.rng.chance(0.5) {
        next.worker_cpu_affinity = CpuAffinity::Off;
        spec.commands
            .push((at(ctx, 10.0, 12.0), SimCommand::Reload(Box::new(next))));
        e.generation = Some(3);
    }
    e.generation_rule = Some("reload rule (every valid reload commits its generation)");
    e.extra = Some(|o, _| {
        for goal in [labels::PINNED_SLOT_REPLACED, labels::CPUS_SHARED_OUT_AGAIN] {
            if !o.coverage.contains(goal) {
                return Err(format!("CPU affinity rule: never reached `{goal}`"));
            }
        }
        Ok(())
    });
    Plan { spec, expect: e }
}
