//! The certificate scenarios' predicates fail for the right reason: each outcome a broken
//! certificate manager or hand-off would produce, made by editing a passing run's record,
//! is rejected with the rule it breaks. (docs/mutation-testing.md lists the mutants of
//! the core itself that the sweep catches.)

use servery_core::acme::UnixTime;
use servery_core::supervisor::Platform;
use servery_scenarios::{find, judge_as, run};
use servery_sim::Outcome;

/// The first seed (from 0) whose POSIX run holds and satisfies `want`.
fn passing(name: &str, want: impl Fn(&Outcome) -> bool) -> (u64, Outcome) {
    let scenario = find(name).expect("scenario");
    (0..100)
        .map(|seed| (seed, run(scenario, seed, Platform::Posix, false)))
        .find(|(_, r)| r.verdict.is_ok() && want(&r.outcome))
        .map(|(seed, r)| (seed, r.outcome))
        .unwrap_or_else(|| panic!("no passing seed of {name} in 0..100 fits"))
}

fn rejected(name: &str, seed: u64, mut outcome: Outcome, because: &str) {
    let scenario = find(name).expect("scenario");
    let verdict = judge_as(scenario, seed, Platform::Posix, &mut outcome);
    let err = verdict.expect_err(because);
    assert!(err.contains(because), "{name} seed {seed}: {err}");
}

#[test]
fn renewal_predicates_reject_late_early_older_and_lagging() {
    let name = "acme-renewal-on-time";
    let (seed, o) = passing(name, |o| {
        o.certs.installs.len() >= 3 && o.certs.windows.is_empty()
    });

    // Ordered late (as if renewal were due at expiry).
    let mut late = o.clone();
    late.certs.orders[0].wall = UnixTime(late.certs.orders[0].wall.0 + 3);
    rejected(name, seed, late, "was ordered at");

    // Installed after the certificate in service had expired.
    let mut expired = o.clone();
    let end = expired.certs.installs[0]
        .facts
        .as_ref()
        .expect("stored")
        .not_after;
    expired.certs.installs[1].wall = end;
    rejected(name, seed, expired, "expired at");

    // A renewal that does not expire later than what it replaced.
    let mut older = o.clone();
    let first = older.certs.installs[0].facts.clone().expect("stored");
    if let Some(f) = older.certs.installs[1].facts.as_mut() {
        f.not_after = first.not_after;
    }
    rejected(name, seed, older, "not newer");

    // One without a configured name.
    let mut unnamed = o.clone();
    if let Some(f) = unnamed.certs.installs[1].facts.as_mut() {
        f.names.pop();
    }
    rejected(name, seed, unnamed, "without the name");

    // A worker left serving the old identity.
    let mut lagging = o.clone();
    lagging.certs.max_handoff_lag_ms = 1_000;
    rejected(name, seed, lagging, "served an older identity");

    // A worker whose first message was not the identity, or an old one.
    let mut unstarted = o.clone();
    unstarted.certs.start_messages[0].generation = None;
    rejected(name, seed, unstarted, "first message");

    // A handshake with no identity, a request served with an expired certificate.
    let mut failed = o.clone();
    failed.certs.handshake_failures = 1;
    rejected(name, seed, failed, "handshakes failed");
    let mut invalid = o;
    invalid.certs.served_invalid = 1;
    rejected(name, seed, invalid, "expired or not yet valid");
}

#[test]
fn retry_predicates_reject_hammering_no_cap_no_jitter_and_replacement() {
    let name = "acme-ca-failures-retry";
    let (seed, o) = passing(name, |o| o.certs.failures.len() >= 3);

    // A retry sooner than half the backoff.
    let mut hammered = o.clone();
    let f = hammered.certs.failures[0].at_ms;
    if let Some(next) = hammered.certs.orders.iter_mut().find(|r| r.at_ms >= f) {
        next.at_ms = f + 1;
    }
    rejected(name, seed, hammered, "outside");

    // Waits past the cap.
    let mut uncapped = o.clone();
    let last = uncapped.certs.failures.len() - 1;
    uncapped.certs.failures[last].failures = 1;
    let f = uncapped.certs.failures[last].at_ms;
    if let Some(next) = uncapped.certs.orders.iter_mut().find(|r| r.at_ms >= f) {
        next.at_ms = f + 60_000;
    }
    rejected(name, seed, uncapped, "outside");

    // Every wait the full backoff: no jitter.
    let mut exact = o.clone();
    let policy = exact.certs.retry.expect("policy");
    // Attempt i (order i) failed as failure i, and order i + 1 is its retry: move each
    // retry, and everything after it, so that it waits the full backoff.
    let c = &mut exact.certs;
    for i in 0..c.failures.len() {
        let k = c.failures[i].failures;
        let full = (policy.first * (1u32 << (k - 1).min(31))).min(policy.cap);
        let next = c.failures[i].at_ms + full.as_millis() as u64;
        let shift = next.saturating_sub(c.orders[i + 1].at_ms);
        c.orders[i + 1..].iter_mut().for_each(|o| o.at_ms += shift);
        c.failures[i + 1..]
            .iter_mut()
            .for_each(|f| f.at_ms += shift);
    }
    rejected(name, seed, exact, "no jitter");

    // A certificate installed while the CA was failing.
    let mut replaced = o.clone();
    replaced.certs.installs[1].at_ms = replaced.certs.failures[1].at_ms;
    rejected(name, seed, replaced, "between failures");

    // No error in the status.
    let mut silent = o;
    silent.certs.failures[0].error.clear();
    rejected(name, seed, silent, "left no error");
}

#[test]
fn forced_renewal_predicates_reject_a_missed_install() {
    for name in ["tls-handoff-worker-crash", "acme-reload-during-renewal"] {
        let (seed, mut o) = passing(name, |o| o.certs.installs.len() >= 2);
        o.certs.installs.pop();
        rejected(name, seed, o, "forced renewals installed");
    }
}
