//! Pauses that end: a worker stopped (`SIGSTOP`) and continued (`SIGCONT`) after a drawn
//! while, around the heartbeat timeout. The supervisor judges silence, not pauses: one
//! that ends before the deadline must be waited out, a longer one ended as hung.

use servery_core::supervisor::ExitReason;
use servery_sim::{Fault, Outcome};

use crate::catalog::{at, expect, fault, secs, spec, workers};
use crate::{Ctx, End, Expect, Plan, fast_config};

/// Pause lengths, as multiples of the heartbeat timeout: from well inside it to well
/// past it (and past `heartbeat_timeout + force_timeout`, where KILL beats the resume).
const PAUSE_RANGE: (f64, f64) = (0.1, 2.5);

/// One to three pauses of ready workers in the first 12 s (each of a worker not paused
/// then). With one worker, every request waits out its pause.
pub(crate) fn pause(ctx: &mut Ctx) -> Plan {
    let config = fast_config(workers(ctx, 1, 4));
    let timeout = config.recovery.heartbeat_timeout;
    let mut spec = spec(ctx, config.clone(), 15.0);
    for _ in 0..ctx.rng.range(1, 3) {
        let t = at(ctx, 1.0, 12.0);
        let pick = ctx.rng.next_u64();
        let (lo, hi) = PAUSE_RANGE;
        let duration = secs(timeout * (lo + ctx.rng.unit() * (hi - lo)));
        fault(
            ctx.kinds,
            &mut spec,
            t,
            Fault::PauseWorker { pick, duration },
        );
    }
    let mut e = expect(&config, End::Ready);
    e.allow_forced = false;
    e.extra = Some(check);
    Plan { spec, expect: e }
}

/// Each pause by its length: shorter than `heartbeat_timeout - heartbeat_interval` (the
/// last beat before the stop is at most an interval old), its worker was never ended as
/// hung and resumed; longer than the timeout (+ 0.1 s for the channels), it was ended as
/// hung. In between either may happen. With only short pauses nothing was restarted and
/// no request failed.
fn check(o: &mut Outcome, e: &Expect) -> Result<(), String> {
    let c = fast_config(1);
    let r = &c.recovery;
    let waited_ms = ((r.heartbeat_timeout - r.heartbeat_interval) * 1000.0) as u64;
    let hung_ms = ((r.heartbeat_timeout + 0.1) * 1000.0) as u64;
    // When the pause that began at `from` got its worker ended as hung: the worker's
    // exit, if it was for a hang and this was its last pause before it (a worker that
    // resumed may be paused again).
    let hung = |w: u64, from: u64| {
        let exit = o.exits.iter().find(|x| x.worker == w)?;
        let hang = matches!(
            exit.reason,
            Some(ExitReason::HealthFailure | ExitReason::DrainHang)
        );
        let last = !o
            .pauses
            .iter()
            .any(|p| p.0 == w && from < p.1 && p.1 <= exit.at_ms);
        (hang && last && from <= exit.at_ms).then_some(exit.at_ms)
    };
    let mut all_short = true;
    let (mut waited, mut ended) = (false, false);
    for &(worker, from, until) in &o.pauses {
        let length = until - from;
        match hung(worker, from) {
            Some(at) if length < waited_ms => {
                return Err(format!(
                    "w{worker}, paused {length} ms from {from} ms, was ended as hung at {at} ms: \
                     its pause ended before the {waited_ms} ms its heartbeats allow"
                ));
            }
            None if length > hung_ms => {
                return Err(format!(
                    "w{worker}, paused {length} ms from {from} ms, was never ended as hung"
                ));
            }
            Some(_) => ended = true,
            None => waited |= length < waited_ms,
        }
        all_short &= length < waited_ms;
    }
    if all_short && !o.pauses.is_empty() {
        let restarts = o.liveness.as_ref().map_or(u64::MAX, |s| s.restarts);
        if restarts != 0 || o.failed_requests() != 0 {
            return Err(format!(
                "pauses shorter than the heartbeat deadline cost {restarts} restarts and {} failed requests",
                o.failed_requests()
            ));
        }
    }
    // With one worker every request waits out a pause that ends: after one of 1 s or
    // more, some answer took far longer than a healthy one's few ms (at 20 requests/s a
    // request arrives in its first 0.9 s all but surely).
    let longest_waited = o
        .pauses
        .iter()
        .filter(|p| hung(p.0, p.1).is_none())
        .map(|p| p.2 - p.1)
        .max()
        .unwrap_or(0);
    let slowest_ms = o.request_latency_us.iter().max().copied().unwrap_or(0) / 1000;
    if e.workers == 1 && longest_waited >= 1000 && slowest_ms < 100 {
        return Err(format!(
            "a {longest_waited} ms pause of the only worker was waited out, but no answer took over {slowest_ms} ms"
        ));
    }
    if waited {
        o.coverage
            .insert("pause waited out, its requests answered late");
    }
    if ended {
        o.coverage.insert("pause past the deadline ended as hung");
    }
    Ok(())
}
