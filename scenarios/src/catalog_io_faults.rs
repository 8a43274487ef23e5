//! Scenarios for the host's own failures: a spawn the OS refuses, a control channel that
//! breaks or takes writes in pieces, `accept` out of descriptors, a clock that jumps
//! forward with the whole machine, and a file system that is full or fails a rename
//! mid-publish. Each fault is drawn from the seed BUGGIFY-style (at chosen points, or
//! with a seeded chance at each opportunity while it lasts), and each scenario's
//! predicate says what the core decided for the plan it drew.

use core::time::Duration;

use servery_core::config::RawConfig;
use servery_core::supervisor::{ExitReason, FailureReason};
use servery_sim::{Behavior, Fault, FaultKind, Outcome, SimCommand, SimSpec, labels};

use crate::catalog::{at, behave, expect, fault, secs, spec, uploads, workers};
use crate::{Ctx, End, Plan, fast_config};

/// What `fork` says when the host refuses a process, as the real parent reports it.
const SPAWN_ERRORS: [&str; 2] = [
    "cannot start servery: Resource temporarily unavailable (os error 11)",
    "cannot start servery: Cannot allocate memory (os error 12)",
];

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)*) => {
        if !$cond {
            return Err(format!($($fmt)*));
        }
    };
}

/// `restart_backoff_initial * 2^i` capped at the maximum, summed over the first `n`.
fn backoffs(c: &RawConfig, n: u32) -> f64 {
    let r = &c.recovery;
    (0..n)
        .map(|i| {
            (r.restart_backoff_initial * f64::from(1u32 << i.min(30))).min(r.restart_backoff_max)
        })
        .sum()
}

/// The restart limit and its backoffs for the scenarios here, which all run
/// [`fast_config`]: a slot whose spawns keep failing gives up at its `LIMIT`-th failed
/// replacement, `backoffs(LIMIT)` after the fault that emptied it.
const LIMIT: u32 = 5;

fn spawns_fail(error: &'static str) -> Behavior {
    Behavior::SpawnFails(error.to_owned())
}

/// The spawn-failure family: the first generation (the service fails before it was ever
/// ready, naming the OS error), a crash replacement that fails `k` times then works
/// (ready, or the restart limit), a window in which every spawn fails (recovered when it
/// closes inside the limit, failed within the backoffs' sum when it does not), and a
/// recycle replacement (the old worker serves on; recycling retries, then is suspended).
pub(crate) fn spawn_failure(ctx: &mut Ctx) -> Plan {
    let n = workers(ctx, 1, 3);
    let config = fast_config(n);
    assert_eq!(config.recovery.worker_restart_limit, i64::from(LIMIT));
    let mut spec = spec(ctx, config.clone(), 12.0);
    let error = SPAWN_ERRORS[ctx.rng.range(0, 1) as usize];
    let on = ctx.kinds.has(FaultKind::SpawnFails);
    let first = n as u64;
    let mut e = expect(&config, End::Ready);
    let case = ctx.rng.range(0, 3);
    match case {
        0 => {
            let victim = ctx.rng.range(0, first - 1);
            spec.behavior = behave(ctx.kinds, move |info, _| {
                if info.index == victim {
                    spawns_fail(error)
                } else {
                    Behavior::Healthy
                }
            });
            if on {
                e = expect(&config, End::Failed(FailureReason::StartupFailure));
                e.extra = Some(|o, _| {
                    names_the_refused_spawn(o)?;
                    let at = o.failure_at_ms.unwrap_or(u64::MAX);
                    ensure!(
                        at <= 100,
                        "a refused first spawn failed the service at {at} ms"
                    );
                    Ok(())
                });
            }
        }
        1 | 2 => {
            let t = at(ctx, 1.0, 8.0);
            let pick = ctx.rng.next_u64();
            let crashed = fault(ctx.kinds, &mut spec, t, Fault::CrashWorker { pick });
            let gives_up = if case == 2 {
                // Every spawn fails from the crash on, for good or until a point between
                // two attempts (`k` failed, the next one works): attempts come
                // `backoffs(j)` after the reap, which follows the crash within 3 ms.
                let forever = ctx.rng.chance(0.4);
                let k = ctx.rng.range(1, u64::from(LIMIT) - 1) as u32;
                let window = if forever {
                    secs(1.0e5)
                } else {
                    secs((backoffs(&config, k) + backoffs(&config, k + 1)) / 2.0)
                };
                spec.behavior = behave(ctx.kinds, move |info, _| {
                    if info.now >= t && info.now < t + window {
                        spawns_fail(error)
                    } else {
                        Behavior::Healthy
                    }
                });
                forever
            } else {
                // The next `k` spawns fail, then they work.
                let k = ctx.rng.range(1, u64::from(LIMIT) + 1);
                spec.behavior = behave(ctx.kinds, move |info, _| {
                    if info.index >= first && info.index < first + k {
                        spawns_fail(error)
                    } else {
                        Behavior::Healthy
                    }
                });
                k >= u64::from(LIMIT)
            };
            if crashed && on && gives_up {
                e = expect(&config, End::Failed(FailureReason::RestartLimit));
                e.extra = Some(|o, _| {
                    names_the_refused_spawn(o)?;
                    let crash = o.exits.first().map_or(0, |x| x.at_ms);
                    let bound = crash + (backoffs(&fast_config(1), LIMIT) * 1000.0) as u64 + 100;
                    let at = o.failure_at_ms.unwrap_or(u64::MAX);
                    ensure!(
                        at <= bound,
                        "failing spawns gave up at {at} ms; the crash was reaped at {crash} ms and {LIMIT} backoffs end by {bound} ms"
                    );
                    ensure!(
                        o.spawn_failures == u64::from(LIMIT),
                        "{} spawns failed before the limit, expected {LIMIT}",
                        o.spawn_failures
                    );
                    Ok(())
                });
            } else {
                e.extra = Some(|o, _| {
                    // Every failed spawn is a restart of its slot, on top of the crash.
                    let restarts = o.liveness.as_ref().map_or(u64::MAX, |s| s.restarts);
                    let want = o.crash_faults + o.spawn_failures;
                    ensure!(
                        restarts == want,
                        "{restarts} restarts at the liveness point, expected {want} ({} crashes, {} refused spawns)",
                        o.crash_faults,
                        o.spawn_failures
                    );
                    if o.spawn_failures > 0 {
                        o.coverage.insert("spawn failures recovered");
                    }
                    Ok(())
                });
            }
        }
        _ => {
            let k = ctx.rng.range(1, 4);
            spec.commands.push((at(ctx, 1.0, 6.0), SimCommand::Recycle));
            spec.behavior = behave(ctx.kinds, move |info, _| {
                if info.index >= first && info.index < first + k {
                    spawns_fail(error)
                } else {
                    Behavior::Healthy
                }
            });
            e.zero_failed = true;
            e.extra = Some(if on && k >= 3 {
                |o, _| {
                    ensure!(
                        o.recycling_suspended,
                        "three refused replacements must suspend recycling"
                    );
                    no_restarts(o)
                }
            } else {
                |o, e| {
                    ensure!(
                        !o.recycling_suspended,
                        "recycling was suspended below the retry limit"
                    );
                    let want = 2 * e.workers as u64 + o.spawn_failures;
                    ensure!(
                        o.spawns == want,
                        "{} spawns, expected {want}: every worker recycled once, each refusal retried",
                        o.spawns
                    );
                    no_restarts(o)
                }
            });
        }
    }
    Plan { spec, expect: e }
}

fn names_the_refused_spawn(o: &Outcome) -> Result<(), String> {
    match &o.failure_message {
        Some(m) if m.contains("could not spawn") && m.contains("(os error") => Ok(()),
        m => Err(format!(
            "the failure does not name the refused spawn: {m:?}"
        )),
    }
}

fn no_restarts(o: &Outcome) -> Result<(), String> {
    match &o.liveness {
        Some(s) if s.restarts == 0 => Ok(()),
        Some(s) => Err(format!(
            "{} restarts: a healthy worker was replaced ({:?})",
            s.restarts, s.last_failure
        )),
        None => Err("no liveness snapshot".into()),
    }
}

/// The control channel: for a while every write may go out in pieces (both ways, up to
/// 5 ms apart), and the parent's write to a worker may fail. Pieces must decode as the
/// frames they were (no protocol error, nobody replaced); a failed write means the channel
/// is broken, which the core treats as the channel's end: that worker, and only it, is
/// ended and replaced.
pub(crate) fn control_channel(ctx: &mut Ctx) -> Plan {
    let mut config = fast_config(workers(ctx, 1, 3));
    // Access-log appends are broker requests: the parent answers each, so it writes to
    // every serving worker all the time.
    config.features.access_log = true;
    let mut spec = spec(ctx, config.clone(), 12.0);
    spec.workload.access_log = true;
    if ctx.rng.chance(0.5) {
        uploads(&mut spec, 10.0, 2);
    }
    let short = ctx.rng.chance(0.75);
    let (t, d) = (at(ctx, 0.0, 6.0), secs(1.0 + ctx.rng.unit() * 7.0));
    if short {
        fault(ctx.kinds, &mut spec, t, Fault::ShortWrites(d));
    }
    for _ in 0..ctx.rng.range(0, 2) {
        let t = at(ctx, 1.0, 10.0);
        let pick = ctx.rng.next_u64();
        fault(ctx.kinds, &mut spec, t, Fault::ControlWriteFails { pick });
    }
    let mut e = expect(&config, End::Ready);
    e.extra = Some(|o, _| {
        ensure!(
            !o.coverage.contains(labels::MALFORMED_FRAME_REPLACED)
                && o.exits
                    .iter()
                    .all(|x| x.reason != Some(ExitReason::ProtocolError)),
            "a frame that arrived in pieces was taken for a protocol error: {:?}",
            o.exits
        );
        for &(worker, at) in &o.write_failures {
            ensure!(
                o.exits.iter().any(|x| x.worker == worker && x.at_ms >= at),
                "w{worker}, whose control write failed at {at} ms, was never reaped"
            );
        }
        let restarts = o.liveness.as_ref().map_or(u64::MAX, |s| s.restarts);
        let broken = o.write_failures.len() as u64;
        ensure!(
            restarts <= broken,
            "{restarts} restarts for {broken} broken channels: a healthy worker was replaced"
        );
        if broken == 0 {
            ensure!(
                o.failed_requests() == 0 && o.uploads.failed_fault == 0,
                "{} requests failed with every channel intact",
                o.failed_requests()
            );
        }
        Ok(())
    });
    Plan { spec, expect: e }
}

/// `accept` fails with EMFILE for a while, in one worker or in all of them: connections
/// wait in the listen backlog and are served once descriptors are back. Nothing is lost
/// (simulated clients have no timeout of their own) and nobody is replaced: a worker out
/// of descriptors still beats.
pub(crate) fn accept_emfile(ctx: &mut Ctx) -> Plan {
    let config = fast_config(workers(ctx, 1, 3));
    let mut spec = spec(ctx, config.clone(), 12.0);
    spec.workload.request_rate = 40.0;
    for _ in 0..ctx.rng.range(1, 2) {
        let t = at(ctx, 1.0, 10.0);
        let every = ctx.rng.chance(0.6);
        let pick = ctx.rng.next_u64();
        let duration = secs(0.2 + ctx.rng.unit() * 2.8);
        let pick = (!every).then_some(pick);
        fault(
            ctx.kinds,
            &mut spec,
            t,
            Fault::AcceptFails { pick, duration },
        );
    }
    let mut e = expect(&config, End::Ready);
    e.zero_failed = true;
    e.extra = Some(|o, _| no_restarts(o));
    Plan { spec, expect: e }
}

/// The whole machine stops and the monotonic clock jumps forward by more than the
/// heartbeat timeout (decision 0017), once or twice, sometimes with a worker hung before
/// or after. Nobody could beat while the machine was stopped, so no healthy worker may be
/// replaced; a hung worker is still ended for its silence, counting the time the parent
/// ran: within `heartbeat_timeout + force_timeout` (+ 1 s) of its stop plus the jumps.
pub(crate) fn clock_jump(ctx: &mut Ctx) -> Plan {
    let config = fast_config(workers(ctx, 1, 4));
    let timeout = config.recovery.heartbeat_timeout;
    let jumps: Vec<(Duration, Duration)> = (0..ctx.rng.range(1, 2))
        .map(|_| {
            let t = at(ctx, 1.0, 12.0);
            (t, secs(timeout * (1.1 + ctx.rng.unit() * 3.9)))
        })
        .collect();
    let total: f64 = jumps.iter().map(|(_, d)| d.as_secs_f64()).sum();
    // The liveness point comes after the jumps have moved the clock on.
    let mut spec = spec(ctx, config.clone(), 12.0 + total);
    for (t, d) in jumps {
        fault(ctx.kinds, &mut spec, t, Fault::ClockJump(d));
    }
    if ctx.rng.chance(0.5) {
        let t = at(ctx, 1.0, 12.0);
        let pick = ctx.rng.next_u64();
        fault(ctx.kinds, &mut spec, t, Fault::HangWorker { pick });
    }
    let mut e = expect(&config, End::Ready);
    e.extra = Some(|o, _| {
        let c = fast_config(1);
        let restarts = o.liveness.as_ref().map_or(u64::MAX, |s| s.restarts);
        ensure!(
            restarts == o.hangs_injected,
            "{restarts} restarts for {} hung workers: a worker frozen with the machine was replaced ({:?})",
            o.hangs_injected,
            o.liveness.as_ref().and_then(|s| s.last_failure.clone())
        );
        let jumped: u64 = o.clock_jumps.iter().map(|(_, d)| d).sum();
        let r = &c.recovery;
        let allowed = ((r.heartbeat_timeout + r.force_timeout + 1.0) * 1000.0) as u64 + jumped;
        for &(worker, stopped) in &o.hangs {
            let exit =
                o.exits.iter().find(|x| x.worker == worker).ok_or_else(|| {
                    format!("w{worker}, stopped at {stopped} ms, was never reaped")
                })?;
            ensure!(
                exit.reason == Some(ExitReason::HealthFailure) && exit.at_ms <= stopped + allowed,
                "w{worker}, stopped at {stopped} ms, was reaped at {} ms as {:?}; expected health_failure by {} ms",
                exit.at_ms,
                exit.reason,
                stopped + allowed
            );
        }
        if o.hangs_injected == 0 {
            ensure!(
                o.failed_requests() == 0,
                "{} requests failed with no worker hung",
                o.failed_requests()
            );
        }
        if !o.clock_jumps.is_empty() {
            o.coverage.insert("clock jump replaced nobody healthy");
        }
        Ok(())
    });
    Plan { spec, expect: e }
}

/// Uploads while the file system is full (temp-file writes fail with ENOSPC: 507) or the
/// publishing rename fails (500), the temp file's fsync fails (500), the directory's fsync
/// after the rename fails (500, the whole file in place), or the power goes between the
/// rename and that fsync (a torn rename: the name shows the old file or the whole new
/// one). No torn or partial file is ever visible, no temp file is left, and every grant
/// comes back: after the faults, uploads to every target succeed again under a budget a
/// leaked reservation would exhaust.
pub(crate) fn upload_io_faults(ctx: &mut Ctx) -> Plan {
    let mut config = fast_config(workers(ctx, 2, 3));
    config.broker.max_active_uploads = 4;
    let mut spec = spec(ctx, config.clone(), 10.0);
    uploads(&mut spec, 20.0, 2);
    spec.workload.chunk_ms = (5, 40);
    for _ in 0..ctx.rng.range(1, 3) {
        let t = at(ctx, 1.0, 7.0);
        let d = secs(0.3 + ctx.rng.unit() * 2.7);
        let f = if ctx.rng.chance(0.5) {
            Fault::DiskFull(d)
        } else {
            Fault::RenameFails(d)
        };
        fault(ctx.kinds, &mut spec, t, f);
    }
    // Drawn after the rest, so the plan's older faults stay as they were.
    if ctx.rng.chance(0.6) {
        let t = at(ctx, 1.0, 7.0);
        let d = secs(0.3 + ctx.rng.unit() * 2.7);
        fault(ctx.kinds, &mut spec, t, Fault::FsyncFails(d));
    }
    if ctx.rng.chance(0.6) {
        let t = at(ctx, 1.0, 7.0);
        let d = secs(0.3 + ctx.rng.unit() * 2.7);
        fault(ctx.kinds, &mut spec, t, Fault::DirSyncFails(d));
    }
    let mut torn = false;
    if ctx.rng.chance(0.5) {
        let t = at(ctx, 1.0, 6.0);
        torn = fault(ctx.kinds, &mut spec, t, Fault::TornRename);
    }
    let mut e = expect(&config, End::Ready);
    // A torn rename takes its worker (and what it served) with it.
    e.zero_failed = !torn;
    e.extra = Some(|o, _| {
        storage_faults_answered(o)?;
        let last = o
            .fault_windows
            .iter()
            .filter(|(k, _, _)| {
                matches!(
                    k,
                    FaultKind::DiskFull
                        | FaultKind::RenameFails
                        | FaultKind::FsyncFails
                        | FaultKind::DirSyncFails
                )
            })
            .map(|&(_, _, until)| until)
            .chain(
                o.injected
                    .iter()
                    .filter(|i| i.kind == FaultKind::TornRename)
                    .map(|i| i.at_ms),
            )
            .max()
            .unwrap_or(0);
        for target in 0..2u8 {
            ensure!(
                o.upload_oks.iter().any(|&(t, at)| t == target && at > last),
                "no upload to target {target} succeeded after the faults ended at {last} ms (a lease or reservation not given back?)"
            );
        }
        ensure!(
            o.uploads.failed_closed == 0,
            "{} uploads failed closed with the parent alive",
            o.uploads.failed_closed
        );
        Ok(())
    });
    Plan { spec, expect: e }
}

/// What every plan with storage faults on the write path checks besides the simulator's
/// own rules (`fsync rule:`, `directory-fsync rule:`, `torn-rename rule:`): no worker was
/// replaced but those a torn rename took, and every directory fsync that failed was
/// answered as a failure (the loss counted where an operator looks: a 500).
pub(crate) fn storage_faults_answered(o: &Outcome) -> Result<(), String> {
    let torn = o
        .injected
        .iter()
        .filter(|i| i.kind == FaultKind::TornRename)
        .count() as u64;
    match &o.liveness {
        Some(s) if s.restarts <= torn => {}
        Some(s) => {
            return Err(format!(
                "{} restarts and {torn} torn renames: a healthy worker was replaced ({:?})",
                s.restarts, s.last_failure
            ));
        }
        None => return Err("no liveness snapshot".into()),
    }
    ensure!(
        torn == o.torn_renames.kept + o.torn_renames.undone,
        "torn-rename rule: {torn} torn renames injected, {} judged",
        o.torn_renames.kept + o.torn_renames.undone
    );
    Ok(())
}

/// The host faults chaos takes on top of its own, drawn after everything it drew before
/// they existed (so a seed's older faults stay as they were): short writes, a broken
/// control channel, accept out of descriptors, a full disk and failing renames. Each
/// either delays work or ends one worker as a crash would, which chaos's predicates
/// allow; clock jumps and refused spawns stay out (a jump can outlast a worker's own
/// drain deadline and broker reply timeout; a refused first spawn fails the service).
pub(crate) fn chaos_io_faults(ctx: &mut Ctx, spec: &mut SimSpec) {
    let kinds = ctx.kinds;
    if ctx.rng.chance(0.4) {
        let (t, d) = (at(ctx, 0.0, 25.0), secs(1.0 + ctx.rng.unit() * 9.0));
        fault(kinds, spec, t, Fault::ShortWrites(d));
    }
    if ctx.rng.chance(0.3) {
        let (t, pick) = (at(ctx, 1.0, 25.0), ctx.rng.next_u64());
        fault(kinds, spec, t, Fault::ControlWriteFails { pick });
    }
    if ctx.rng.chance(0.3) {
        let (t, every, pick) = (at(ctx, 1.0, 25.0), ctx.rng.chance(0.5), ctx.rng.next_u64());
        let duration = secs(0.2 + ctx.rng.unit() * 1.8);
        let pick = (!every).then_some(pick);
        fault(kinds, spec, t, Fault::AcceptFails { pick, duration });
    }
    for kind in [FaultKind::DiskFull, FaultKind::RenameFails] {
        if ctx.rng.chance(0.3) {
            let (t, d) = (at(ctx, 1.0, 25.0), secs(0.3 + ctx.rng.unit() * 2.7));
            let f = match kind {
                FaultKind::DiskFull => Fault::DiskFull(d),
                _ => Fault::RenameFails(d),
            };
            fault(kinds, spec, t, f);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoffs_add_up_as_the_supervisor_waits() {
        let c = fast_config(1);
        // 0.1, 0.2, 0.4, 0.8, 1.6 (capped at 2.0 from the sixth on).
        assert!((backoffs(&c, LIMIT) - 3.1).abs() < 1e-9);
        assert!((backoffs(&c, 7) - 7.1).abs() < 1e-9);
    }
}
