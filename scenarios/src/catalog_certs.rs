//! The certificate manager and the TLS hand-off (issue 22, decision 0028): renewal on
//! time, CA failures with retry, a worker crash during a hand-off, a reload during a
//! renewal.
//!
//! The predicates judge the simulator's record of the run (`Outcome::certs`): every
//! identity the parent's TLS material took, with the certificate's facts; every order the
//! CA received; every failure the manager counted; every worker's first message; the
//! longest a live accepting worker served an older identity than the parent's; and every
//! request's handshake, with the identity it was served with.

use core::time::Duration;

use servery_core::config::RawConfig;
use servery_sim::certs::{CaFailure, CertOutcome, CertPlan, Misissue};
use servery_sim::{Fault, Outcome, SimCommand};

use crate::catalog::{at, expect, fault, secs, spec, workers};
use crate::{Ctx, End, Expect, Plan, fast_config};

/// How long after the parent's identity changes every live accepting worker must hold
/// it: a control-channel delivery (well under a millisecond here) with a wide margin.
pub(crate) const HANDOFF_BOUND_MS: u64 = 50;

macro_rules! ensure {
    ($cond:expr, $($why:tt)+) => {
        if !$cond {
            return Err(format!($($why)+));
        }
    };
}

// ----- what every certificate scenario holds ----------------------------------------------

/// No request failed for want of an identity or was served with an expired one; every
/// worker's first message was the identity current when it was spawned; every live
/// worker held a new identity within the bound; the CA only validated answerable
/// challenges; and no identity replaced another with an invalid or older certificate.
fn handed_off(c: &CertOutcome) -> Result<(), String> {
    ensure!(
        c.handshake_failures == 0,
        "{} handshakes failed: a worker held no identity",
        c.handshake_failures
    );
    ensure!(
        c.served_invalid == 0,
        "{} requests were served with an expired or not yet valid certificate",
        c.served_invalid
    );
    for s in &c.start_messages {
        ensure!(
            s.generation.is_some_and(|g| g >= s.current_at_spawn),
            "w{}'s first message carried identity {:?}, generation {} was current at its spawn",
            s.worker,
            s.generation,
            s.current_at_spawn
        );
    }
    ensure!(
        c.max_handoff_lag_ms <= HANDOFF_BOUND_MS,
        "a live worker served an older identity for {} ms after the parent's changed (bound {HANDOFF_BOUND_MS} ms)",
        c.max_handoff_lag_ms
    );
    ensure!(
        c.challenges_unanswered == 0,
        "the CA validated {} times before the challenges were answerable",
        c.challenges_unanswered
    );
    never_worse(c)
}

/// Each installed certificate is valid when installed, covers every domain, and expires
/// strictly later than the one it replaces.
fn never_worse(c: &CertOutcome) -> Result<(), String> {
    let mut previous: Option<&servery_core::acme::CertFacts> = None;
    for i in &c.installs {
        let Some(f) = &i.facts else {
            ensure!(
                previous.is_none(),
                "the placeholder replaced a certificate at {} ms",
                i.at_ms
            );
            continue;
        };
        ensure!(
            f.not_before <= i.wall && i.wall < f.not_after,
            "certificate {} installed at {} outside its validity [{}, {})",
            f.serial,
            i.wall,
            f.not_before,
            f.not_after
        );
        if let Some(d) = c.domains.iter().find(|d| !f.names.contains(d)) {
            return Err(format!(
                "certificate {} installed without the name {d}",
                f.serial
            ));
        }
        if let Some(p) = previous {
            ensure!(
                f.not_after > p.not_after,
                "certificate {} (until {}) replaced {} (until {}): not newer",
                f.serial,
                f.not_after,
                p.serial,
                p.not_after
            );
        }
        previous = Some(f);
    }
    Ok(())
}

/// Each certificate in service was replaced before it expired, by an order placed when
/// the rule says: inside the CA's renewal window when it gave one, else at two thirds of
/// the lifetime (a second of slack for the wall clock's resolution).
fn renewed_on_time(c: &CertOutcome) -> Result<(), String> {
    let certs: Vec<_> = c
        .installs
        .iter()
        .filter_map(|i| i.facts.as_ref().map(|f| (i, f)))
        .collect();
    ensure!(
        certs.len() >= 2,
        "{} certificates installed: nothing was renewed",
        certs.len()
    );
    for pair in certs.windows(2) {
        let ((prev_i, prev), (next_i, _)) = (pair[0], pair[1]);
        ensure!(
            next_i.wall < prev.not_after,
            "certificate {} expired at {} before its renewal was installed at {}",
            prev.serial,
            prev.not_after,
            next_i.wall
        );
        let order = c
            .orders
            .iter()
            .find(|o| o.at_ms >= prev_i.at_ms)
            .ok_or("no order after an install")?;
        let (lo, hi) = match c.windows.get(&prev.serial) {
            Some(&(start, end)) => (start, end),
            None => {
                let life = prev.not_before.until(prev.not_after);
                let due = prev.not_before.plus(life * 2 / 3);
                (due, due)
            }
        };
        ensure!(
            lo.0 - 1 <= order.wall.0 && order.wall.0 <= hi.0 + 1,
            "the renewal of {} was ordered at {}, outside [{lo}, {hi}]",
            prev.serial,
            order.wall
        );
    }
    Ok(())
}

/// After each failure the next order waits `first × 2^(k−1)`, capped, drawn from its
/// upper half; with three retries or more, the waits are not all the full value.
fn retried_with_backoff(c: &CertOutcome) -> Result<(), String> {
    let policy = c.retry.ok_or("no retry policy recorded")?;
    let mut jittered = false;
    let mut waits = 0;
    for f in &c.failures {
        ensure!(
            !f.error.is_empty(),
            "failure {} left no error in the status",
            f.failures
        );
        let Some(next) = c.orders.iter().find(|o| o.at_ms >= f.at_ms) else {
            continue;
        };
        let wait = next.at_ms - f.at_ms;
        let exp = f.failures.saturating_sub(1).min(31);
        let full = (policy.first * (1u32 << exp)).min(policy.cap);
        let full_ms = full.as_millis() as u64;
        ensure!(
            full_ms / 2 <= wait + 1 && wait <= full_ms + 1,
            "retry {} came {wait} ms after the failure, outside [{}, {full_ms}] ms",
            f.failures,
            full_ms / 2
        );
        jittered |= wait + full_ms / 100 < full_ms;
        waits += 1;
    }
    ensure!(
        waits < 3 || jittered,
        "{waits} retries, each after the full backoff: no jitter"
    );
    Ok(())
}

fn certs(o: &Outcome) -> &CertOutcome {
    &o.certs
}

// ----- acme-renewal-on-time -----------------------------------------------------------------

pub(crate) fn renewal_on_time(ctx: &mut Ctx) -> Plan {
    let n = workers(ctx, 1, 4);
    let config = fast_config(n);
    let lifetime = ctx.rng.range(18, 30);
    let age = ctx.rng.range(0, lifetime / 3);
    let ari = ctx.rng.chance(0.5).then(|| {
        let start = 0.4 + 0.2 * ctx.rng.unit();
        (start, start + 0.05 + 0.15 * ctx.rng.unit())
    });
    // Two renewals: the stored certificate's and the first renewal's.
    let fault_phase = (lifetime - age + lifetime) as f64;
    let recycle_at = at(ctx, 2.0, fault_phase - 2.0);
    let mut spec = spec(ctx, config.clone(), fault_phase);
    spec.commands.push((recycle_at, SimCommand::Recycle));
    spec.workload.certs = Some(CertPlan {
        lifetime: Duration::from_secs(lifetime),
        stored_age: Some(Duration::from_secs(age)),
        ari,
        ..CertPlan::default()
    });
    let mut e = expect(&config, End::Ready);
    e.zero_failed = true;
    e.extra = Some(|o, _| {
        handed_off(certs(o))?;
        renewed_on_time(certs(o))?;
        ensure!(
            certs(o).failures.is_empty(),
            "the CA never failed, yet {} failures",
            certs(o).failures.len()
        );
        o.coverage.insert("certificate renewed on time");
        Ok(())
    });
    Plan { spec, expect: e }
}

// ----- acme-ca-failures-retry ---------------------------------------------------------------

const FAILURES: [CaFailure; 4] = [
    CaFailure::Unreachable,
    CaFailure::Refused,
    CaFailure::ValidationFailed,
    CaFailure::Silent,
];
const MISISSUES: [Misissue; 3] = [Misissue::Older, Misissue::Expired, Misissue::MissingName];

pub(crate) fn ca_failures_retry(ctx: &mut Ctx) -> Plan {
    let n = workers(ctx, 1, 3);
    let config = fast_config(n);
    let lifetime = 72;
    // Renewal is due at 48 s; the CA fails from before that until 4–8 s past it. Four
    // failed attempts (two-second timeouts, waits of at most 1, 2, 4 s) and a wrong
    // certificate after them still leave the renewal well before the expiry at 72 s.
    let outage_end = at(ctx, 52.0, 56.0);
    let failure = FAILURES[ctx.rng.range(0, 3) as usize];
    let misissue = ctx
        .rng
        .chance(0.5)
        .then(|| (1, MISISSUES[ctx.rng.range(0, 2) as usize]));
    let mut spec = spec(ctx, config.clone(), 75.0);
    spec.workload.certs = Some(CertPlan {
        lifetime: Duration::from_secs(lifetime),
        outages: vec![(secs(42.0), outage_end, failure)],
        misissue: misissue.into_iter().collect(),
        attempt_timeout: secs(2.0),
        ..CertPlan::default()
    });
    let mut e = expect(&config, End::Ready);
    e.zero_failed = true;
    e.extra = Some(|o, _| {
        let c = certs(o);
        handed_off(c)?;
        ensure!(!c.failures.is_empty(), "the CA's outage failed no attempt");
        retried_with_backoff(c)?;
        renewed_on_time_after_failures(c)?;
        if c.failures.iter().any(|f| f.failures >= 3) {
            o.coverage
                .insert("ca failures retried at the cap, then renewed");
        }
        Ok(())
    });
    Plan { spec, expect: e }
}

/// Through the outage the certificate in service stays; once the CA answers again it is
/// renewed before it expires.
fn renewed_on_time_after_failures(c: &CertOutcome) -> Result<(), String> {
    let first_failure = c.failures.first().map_or(0, |f| f.at_ms);
    let last_failure = c.failures.last().map_or(0, |f| f.at_ms);
    ensure!(
        !c.installs
            .iter()
            .any(|i| i.at_ms >= first_failure && i.at_ms <= last_failure),
        "an identity was installed between failures: the old certificate was not kept"
    );
    let renewed = c.installs.iter().filter(|i| i.facts.is_some()).count();
    ensure!(
        renewed >= 2,
        "the certificate was never renewed after the outage"
    );
    for pair in c.installs.windows(2) {
        if let (Some(prev), Some(_)) = (&pair[0].facts, &pair[1].facts) {
            ensure!(
                pair[1].wall < prev.not_after,
                "certificate {} expired at {} before its renewal at {}",
                prev.serial,
                prev.not_after,
                pair[1].wall
            );
        }
    }
    Ok(())
}

// ----- tls-handoff-worker-crash ------------------------------------------------------------

pub(crate) fn handoff_worker_crash(ctx: &mut Ctx) -> Plan {
    let n = workers(ctx, 2, 4);
    let config = fast_config(n);
    let renew = at(ctx, 2.0, 4.0);
    let again = renew + at(ctx, 2.5, 4.0);
    // Around the install: the CA takes three steps of 5–60 ms.
    let crash = renew + at(ctx, 0.0, 0.25);
    let crash_again = again + at(ctx, 0.0, 0.25);
    let mut spec = spec(ctx, config.clone(), (again + secs(4.0)).as_secs_f64());
    spec.workload.certs = Some(CertPlan {
        lifetime: Duration::from_secs(600),
        renew_now: vec![renew, again],
        ..CertPlan::default()
    });
    let crashed = [crash, crash_again]
        .into_iter()
        .map(|t| {
            let pick = ctx.rng.next_u64();
            fault(ctx.kinds, &mut spec, t, Fault::CrashWorker { pick })
        })
        .fold(false, |a, b| a | b);
    let mut e = expect(&config, End::Ready);
    e.extra = Some(if crashed {
        |o, e| {
            forced_renewals_installed(o, e)?;
            o.coverage.insert("tls hand-off survived a worker crash");
            Ok(())
        }
    } else {
        forced_renewals_installed
    });
    Plan { spec, expect: e }
}

/// Each `ctl acme-renew` installed a new certificate, handed to every worker.
fn forced_renewals_installed(o: &mut Outcome, _: &Expect) -> Result<(), String> {
    let c = certs(o);
    handed_off(c)?;
    let renewals = c.installs.iter().filter(|i| i.facts.is_some()).count() - 1;
    ensure!(
        renewals == c.renew_commands.len(),
        "{} forced renewals installed {renewals} certificates",
        c.renew_commands.len()
    );
    Ok(())
}

// ----- acme-reload-during-renewal ----------------------------------------------------------

pub(crate) fn reload_during_renewal(ctx: &mut Ctx) -> Plan {
    let n = workers(ctx, 1, 4);
    let config = fast_config(n);
    let next: RawConfig = fast_config(workers(ctx, 1, 4));
    let n_next = next.workers as usize;
    let renew = at(ctx, 2.0, 3.0);
    // A slow CA: the order takes 0.6–2.4 s, and the reload lands somewhere in it.
    let reload = renew + at(ctx, 0.0, 2.0);
    let mut spec = spec(ctx, config.clone(), (reload + secs(6.0)).as_secs_f64());
    spec.workload.certs = Some(CertPlan {
        lifetime: Duration::from_secs(600),
        ca_ms: (200, 800),
        renew_now: vec![renew],
        ..CertPlan::default()
    });
    spec.commands
        .push((reload, SimCommand::Reload(Box::new(next))));
    let mut e = expect(&config, End::Ready);
    e.workers = n_next;
    e.generation = Some(2);
    e.zero_failed = true;
    e.extra = Some(|o, e| {
        forced_renewals_installed(o, e)?;
        o.coverage.insert("reload during a renewal handed off");
        Ok(())
    });
    Plan { spec, expect: e }
}
