use core::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::rng::CoreRng;
use crate::time::Instant;

const DAY: i64 = 86_400;
const T0: i64 = 1_800_000_000;

fn facts(serial: &str, not_before: i64, not_after: i64) -> CertFacts {
    CertFacts {
        not_before: UnixTime(not_before),
        not_after: UnixTime(not_after),
        names: vec!["a.test".into(), "b.test".into()],
        serial: serial.into(),
    }
}

fn cert(serial: &str, not_before: i64, not_after: i64) -> Certificate {
    Certificate {
        facts: facts(serial, not_before, not_after),
        cert_pem: format!("CERT {serial}"),
        key_pem: format!("KEY {serial}"),
    }
}

fn config() -> ManagerConfig {
    ManagerConfig::new(vec!["a.test".into(), "B.test".into()])
}

fn manager() -> CertManager {
    CertManager::new(config(), CoreRng::from_seed([7; 32]))
}

fn at(secs: u64) -> Instant {
    Instant::from_nanos(secs * 1_000_000_000)
}

fn wall(secs: u64) -> UnixTime {
    UnixTime(T0 + secs as i64)
}

fn actions(m: &mut CertManager) -> Vec<AcmeAction> {
    std::iter::from_fn(|| m.poll_action()).collect()
}

fn challenge(token: &str) -> Challenge {
    Challenge {
        token: token.into(),
        key_authorization: format!("{token}.thumb_print-1"),
    }
}

/// From nothing to an installed certificate, step by step.
fn issue(m: &mut CertManager, t: u64, order: u64, c: Certificate) {
    m.handle(
        at(t),
        wall(t),
        AcmeEvent::Challenges {
            order,
            challenges: vec![challenge("tok1")],
        },
    );
    m.handle(
        at(t),
        wall(t),
        AcmeEvent::Issued {
            order,
            certificate: c,
        },
    );
    m.handle(at(t), wall(t), AcmeEvent::Stored { order });
}

#[test]
fn issuance_from_nothing_publishes_answers_stores_installs_and_schedules() {
    let mut m = manager();
    m.handle(at(0), wall(0), AcmeEvent::Loaded(None));
    assert_eq!(
        actions(&mut m),
        [AcmeAction::Order {
            order: 1,
            domains: config().domains
        }]
    );
    m.handle(
        at(1),
        wall(1),
        AcmeEvent::Challenges {
            order: 1,
            challenges: vec![challenge("tok1")],
        },
    );
    assert_eq!(
        actions(&mut m),
        [
            AcmeAction::Publish(vec![challenge("tok1")]),
            AcmeAction::Answer { order: 1 }
        ]
    );
    let c = cert("01", T0, T0 + 90 * DAY);
    m.handle(
        at(2),
        wall(2),
        AcmeEvent::Issued {
            order: 1,
            certificate: c.clone(),
        },
    );
    assert_eq!(
        actions(&mut m),
        [
            AcmeAction::Withdraw,
            AcmeAction::Store {
                order: 1,
                certificate: c.clone()
            }
        ]
    );
    m.handle(at(3), wall(3), AcmeEvent::Stored { order: 1 });
    assert_eq!(
        actions(&mut m),
        [
            AcmeAction::InstallIdentity {
                cert_pem: c.cert_pem.clone(),
                key_pem: c.key_pem.clone()
            },
            AcmeAction::AskRenewalInfo {
                serial: "01".into()
            }
        ]
    );
    // Renewal at two thirds of 90 days: day 60.
    assert_eq!(
        m.poll_timeout(),
        Some(at(3) + Duration::from_secs(60 * 86_400 - 3))
    );
    assert_eq!(m.status().next_attempt, Some(UnixTime(T0 + 60 * DAY)));
    assert_eq!(m.status().phase, "valid");
    m.check_invariants().expect("invariants");
}

#[test]
fn a_valid_stored_certificate_is_used_without_an_order() {
    let mut m = manager();
    let c = cert("05", T0 - DAY, T0 + 89 * DAY);
    m.handle(at(0), wall(0), AcmeEvent::Loaded(Some(c.clone())));
    let acts = actions(&mut m);
    assert!(
        matches!(&acts[0], AcmeAction::InstallIdentity { cert_pem, .. } if *cert_pem == c.cert_pem)
    );
    assert!(!acts.iter().any(|a| matches!(a, AcmeAction::Order { .. })));
    assert_eq!(m.status().orders, 0);
}

#[test]
fn an_expired_or_foreign_stored_certificate_is_not_served_and_an_order_starts() {
    for stored in [
        cert("06", T0 - 90 * DAY, T0 - 1),
        Certificate {
            facts: CertFacts {
                names: vec!["a.test".into()],
                ..facts("07", T0 - DAY, T0 + DAY)
            },
            ..cert("07", 0, 1)
        },
    ] {
        let mut m = manager();
        m.handle(at(0), wall(0), AcmeEvent::Loaded(Some(stored)));
        let acts = actions(&mut m);
        assert!(matches!(acts[..], [AcmeAction::Order { .. }]), "{acts:?}");
        assert!(m.status().last_error.is_some());
    }
}

#[test]
fn the_ari_window_decides_the_renewal_time() {
    let mut m = manager();
    m.handle(
        at(0),
        wall(0),
        AcmeEvent::Loaded(Some(cert("09", T0, T0 + 90 * DAY))),
    );
    actions(&mut m);
    m.handle(
        at(10),
        wall(10),
        AcmeEvent::RenewalWindow {
            serial: "09".into(),
            start: UnixTime(T0 + 10 * DAY),
            end: UnixTime(T0 + 11 * DAY),
        },
    );
    let next = m.status().next_attempt.expect("scheduled");
    assert!(
        (T0 + 10 * DAY..=T0 + 11 * DAY).contains(&next.0),
        "{next} outside the window"
    );
    // A window for another certificate is ignored.
    m.handle(
        at(11),
        wall(11),
        AcmeEvent::RenewalWindow {
            serial: "other".into(),
            start: UnixTime(T0 + DAY),
            end: UnixTime(T0 + DAY + 1),
        },
    );
    assert_eq!(m.status().next_attempt, Some(next));
    // A window already open: order at once.
    m.handle(
        at(12),
        wall(12),
        AcmeEvent::RenewalWindow {
            serial: "09".into(),
            start: UnixTime(T0),
            end: UnixTime(T0 + 1),
        },
    );
    assert!(matches!(
        actions(&mut m)[..],
        [AcmeAction::Order { order: 1, .. }]
    ));
}

#[test]
fn an_older_or_invalid_issuance_keeps_the_certificate_in_service_and_retries() {
    let mut m = manager();
    let c = cert("10", T0, T0 + 90 * DAY);
    m.handle(at(0), wall(0), AcmeEvent::Loaded(Some(c)));
    m.handle(at(1), wall(1), AcmeEvent::RenewNow);
    actions(&mut m);
    for (order, bad, why) in [
        (1, cert("11", T0 - DAY, T0 + 89 * DAY), "no later than"),
        (2, cert("12", T0 + DAY, T0 + 91 * DAY), "not valid yet"),
        (3, cert("13", T0 - 100 * DAY, T0 - DAY), "expired"),
        // The same expiry (a replayed issuance) is not newer either.
        (4, cert("14", T0 + 1, T0 + 90 * DAY), "no later than"),
    ] {
        if order > 1 {
            m.handle(at(1), wall(1), AcmeEvent::RenewNow);
        }
        issue(&mut m, 2, order, bad);
        let acts = actions(&mut m);
        assert!(
            !acts.iter().any(|a| matches!(
                a,
                AcmeAction::InstallIdentity { .. } | AcmeAction::Store { .. }
            )),
            "{acts:?}"
        );
        assert_eq!(m.current().expect("kept").serial, "10");
        let err = m.status().last_error.expect("reported");
        assert!(err.contains(why), "{err}");
        assert_eq!(m.status().phase, "retrying");
        m.check_invariants().expect("invariants");
    }
}

#[test]
fn failures_back_off_exponentially_with_jitter_up_to_the_cap_and_success_resets() {
    let mut m = manager();
    m.handle(at(0), wall(0), AcmeEvent::Loaded(None));
    let policy = RetryPolicy::default();
    let mut t = 0;
    let mut waits = Vec::new();
    for order in 1..=12 {
        actions(&mut m);
        m.handle(
            at(t),
            wall(t),
            AcmeEvent::Failed {
                order,
                error: AcmeError::Refused("rate limited".into()),
            },
        );
        let due = m.poll_timeout().expect("retry armed");
        let wait = due - at(t);
        waits.push(wait);
        let full = policy
            .first
            .saturating_mul(1 << (order - 1))
            .min(policy.cap);
        assert!(
            wait >= full / 2 && wait <= full,
            "{order}: {wait:?} vs {full:?}"
        );
        t += wait.as_secs() + 1;
        m.handle_timeout(at(t));
    }
    assert!(waits.last().expect("some") <= &policy.cap);
    let acts = actions(&mut m);
    let [
        AcmeAction::AttemptFailed { failures: 12, .. },
        AcmeAction::Order { order: 13, .. },
    ] = acts[..]
    else {
        panic!("{acts:?}")
    };
    issue(&mut m, t, 13, cert("20", T0, T0 + 90 * DAY + t as i64));
    assert_eq!(m.status().failures, 0);
    assert_eq!(m.status().last_error, None);
}

#[test]
fn an_attempt_that_never_ends_times_out_and_stale_results_are_ignored() {
    let mut m = manager();
    m.handle(at(0), wall(0), AcmeEvent::Loaded(None));
    actions(&mut m);
    assert_eq!(m.poll_timeout(), Some(at(600)));
    m.handle_timeout(at(600));
    assert!(
        m.status()
            .last_error
            .expect("timeout")
            .contains("did not finish")
    );
    let due = m.poll_timeout().expect("retry");
    m.handle_timeout(due);
    actions(&mut m);
    // The first order's late issuance is not the second's.
    issue(&mut m, 700, 1, cert("30", T0, T0 + 90 * DAY));
    assert!(actions(&mut m).is_empty());
    assert!(m.current().is_none());
}

#[test]
fn a_certificate_that_expires_while_it_is_stored_is_not_installed() {
    let (mut m, _) = first_order_offers(vec![challenge("tok1")]);
    // Valid when issued, at T0 + 2, for two more seconds only.
    m.handle(
        at(2),
        wall(2),
        AcmeEvent::Issued {
            order: 1,
            certificate: cert("31", T0, T0 + 4),
        },
    );
    actions(&mut m);
    m.handle(at(4), wall(4), AcmeEvent::Stored { order: 1 });
    assert!(
        !actions(&mut m)
            .iter()
            .any(|a| matches!(a, AcmeAction::InstallIdentity { .. })),
        "an expired certificate is not put in service"
    );
    assert!(m.current().is_none());
    assert_eq!(m.status().phase, "retrying");
    assert!(
        m.status()
            .last_error
            .expect("the attempt failed")
            .contains("expired")
    );
}

/// A manager with nothing stored, its first order answered with `challenges`: the manager
/// and what it then asks for.
fn first_order_offers(challenges: Vec<Challenge>) -> (CertManager, Vec<AcmeAction>) {
    let mut m = manager();
    m.handle(at(0), wall(0), AcmeEvent::Loaded(None));
    actions(&mut m);
    m.handle(
        at(1),
        wall(1),
        AcmeEvent::Challenges {
            order: 1,
            challenges,
        },
    );
    let acts = actions(&mut m);
    (m, acts)
}

#[test]
fn unusable_challenges_are_refused_before_anything_is_published() {
    for bad in [
        Challenge {
            token: "../etc".into(),
            key_authorization: "../etc.x".into(),
        },
        Challenge {
            token: "abc".into(),
            key_authorization: "abd.x".into(),
        },
        Challenge {
            token: "a".repeat(MAX_TOKEN + 1),
            key_authorization: format!("{}.x", "a".repeat(MAX_TOKEN + 1)),
        },
    ] {
        let (m, acts) = first_order_offers(vec![challenge("good"), bad]);
        assert!(
            matches!(
                acts[..],
                [AcmeAction::AttemptFailed {
                    stage: Stage::Order,
                    ..
                }]
            ),
            "nothing published, the failure said: {acts:?}"
        );
        assert_eq!(m.status().phase, "retrying");
    }
}

#[test]
fn renew_before_forces_an_early_renewal() {
    let mut m = CertManager::new(
        ManagerConfig {
            renew_before: Duration::from_secs(89 * 86_400),
            ..config()
        },
        CoreRng::from_seed([1; 32]),
    );
    m.handle(
        at(0),
        wall(0),
        AcmeEvent::Loaded(Some(cert("40", T0, T0 + 90 * DAY))),
    );
    assert_eq!(m.status().next_attempt, Some(UnixTime(T0 + DAY)));
}

// Random event orders: whatever arrives, in whatever order and with whatever order ids,
// nothing older replaces what is in service, nothing invalid is installed, retries are
// spaced within the policy, and at most one attempt is in flight.

#[derive(Debug, Clone)]
enum Step {
    Advance(u64),
    Loaded(Option<(i64, i64)>),
    Challenges(u64),
    Issued(u64, i64, i64),
    Stored(u64),
    Failed(u64),
    Window(i64, i64),
    RenewNow,
    Timeout,
}

fn step() -> impl Strategy<Value = Step> {
    let span = || -100 * DAY..100 * DAY;
    prop_oneof![
        (0u64..40 * 86_400).prop_map(Step::Advance),
        proptest::option::of((span(), span())).prop_map(Step::Loaded),
        (0u64..6).prop_map(Step::Challenges),
        ((0u64..6), span(), span()).prop_map(|(o, a, b)| Step::Issued(o, a, b)),
        (0u64..6).prop_map(Step::Stored),
        (0u64..6).prop_map(Step::Failed),
        (span(), span()).prop_map(|(a, b)| Step::Window(a, b)),
        Just(Step::RenewNow),
        Just(Step::Timeout),
    ]
}

proptest! {
    #[test]
    fn random_event_orders_never_install_an_older_or_invalid_certificate(
        steps in proptest::collection::vec(step(), 1..80),
        seed in any::<u8>(),
    ) {
        let mut m = CertManager::new(config(), CoreRng::from_seed([seed; 32]));
        let mut t = 0u64;
        let mut installed: Vec<(i64, i64, u64)> = Vec::new();
        let mut serial = 0u32;
        // What each certificate's PEM names, to check the installed one's facts.
        let mut issued: std::collections::HashMap<String, (i64, i64)> = Default::default();
        let mut in_flight: Option<u64> = None;
        let floor = config().retry.floor();
        for s in steps {
            let now = at(t);
            let w = wall(t);
            let mut mk = |a: i64, b: i64| {
                serial += 1;
                let c = cert(&format!("{serial:04x}"), T0 + a, T0 + b);
                issued.insert(c.cert_pem.clone(), (T0 + a, T0 + b));
                c
            };
            let retry_before = m.phase().clone();
            match s {
                Step::Advance(d) => t += d,
                Step::Loaded(c) => m.handle(now, w, AcmeEvent::Loaded(c.map(|(a, b)| mk(a, b)))),
                Step::Challenges(o) => m.handle(now, w, AcmeEvent::Challenges { order: o, challenges: vec![challenge("t")] }),
                Step::Issued(o, a, b) => { let c = mk(a, b); m.handle(now, w, AcmeEvent::Issued { order: o, certificate: c }) }
                Step::Stored(o) => m.handle(now, w, AcmeEvent::Stored { order: o }),
                Step::Failed(o) => m.handle(now, w, AcmeEvent::Failed { order: o, error: AcmeError::Unreachable("x".into()) }),
                Step::Window(a, b) => {
                    let serial = m.current().map(|c| c.serial.clone()).unwrap_or_default();
                    m.handle(now, w, AcmeEvent::RenewalWindow { serial, start: UnixTime(T0 + a), end: UnixTime(T0 + b) })
                }
                Step::RenewNow => m.handle(now, w, AcmeEvent::RenewNow),
                Step::Timeout => if let Some(d) = m.poll_timeout() { t = t.max(d.as_nanos().div_ceil(1_000_000_000)); m.handle_timeout(at(t)) },
            }
            let acts: Vec<_> = std::iter::from_fn(|| m.poll_action()).collect();
            for a in acts {
                match a {
                    AcmeAction::InstallIdentity { cert_pem, .. } => {
                        let (nb, na) = issued[&cert_pem];
                        let now_wall = T0 + t as i64;
                        prop_assert!(nb <= now_wall && now_wall < na, "installed outside its validity");
                        if let Some((_, last_na, _)) = installed.last() {
                            prop_assert!(na > *last_na, "installed an older certificate");
                        }
                        installed.push((nb, na, t));
                    }
                    AcmeAction::Order { order, .. } => {
                        prop_assert!(in_flight.is_none_or(|prev| order > prev), "order ids go back");
                        prop_assert!(matches!(m.phase(), Phase::Ordering { order: o, .. } if *o == order), "one attempt at a time");
                        in_flight = Some(order);
                    }
                    _ => {}
                }
            }
            prop_assert!(m.check_invariants().is_ok(), "{:?}", m.check_invariants());
            if let Phase::Waiting { due, retry: true } = m.phase()
                && *m.phase() != retry_before
            {
                let wait = *due - at(t);
                prop_assert!(wait >= floor && wait <= config().retry.cap, "retry in {wait:?}");
            }
            prop_assert!(m.phase().in_flight().is_none_or(|(_, d)| d <= at(t) + config().attempt_timeout));
        }
    }

    #[test]
    fn backoff_is_always_within_the_policy(failures in 0u32..10_000, seed in any::<[u8; 32]>()) {
        let p = RetryPolicy { first: Duration::from_secs(3), cap: Duration::from_secs(1000) };
        let wait = p.backoff(failures, &mut CoreRng::from_seed(seed));
        prop_assert!(wait >= Duration::from_millis(1500) && wait <= p.cap);
    }

    #[test]
    fn challenge_checks_never_panic_and_accept_only_path_safe_tokens(token in ".{0,300}", thumb in ".{0,40}") {
        let c = Challenge { key_authorization: format!("{token}.{thumb}"), token };
        if c.check().is_ok() {
            prop_assert!(c.token.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        }
    }
}

#[test]
fn a_wall_time_reads_as_its_unix_seconds_in_messages() {
    // The scenarios' certificate predicates name times this way.
    assert_eq!(UnixTime(1_800_000_000).to_string(), "@1800000000");
    assert_eq!(UnixTime(-5).to_string(), "@-5");
}

#[test]
fn a_certificate_prints_its_facts_and_never_its_key() {
    let certificate = Certificate {
        facts: CertFacts {
            not_before: UnixTime(1),
            not_after: UnixTime(2),
            names: vec!["files.example".into()],
            serial: "0a1b".into(),
        },
        cert_pem: "-----BEGIN CERTIFICATE-----".into(),
        key_pem: "-----BEGIN PRIVATE KEY----- secret".into(),
    };
    let printed = format!("{certificate:?}");
    assert!(
        printed.contains("files.example") && printed.contains("0a1b"),
        "{printed}"
    );
    assert!(printed.contains("<redacted>"), "{printed}");
    assert!(!printed.contains("secret"), "{printed}");
}

#[test]
fn an_order_may_carry_at_most_max_challenges() {
    let tokens = |n: usize| (0..n).map(|i| challenge(&format!("t{i}"))).collect();
    for (n, published) in [(MAX_CHALLENGES, true), (MAX_CHALLENGES + 1, false)] {
        let (_, acts) = first_order_offers(tokens(n));
        assert_eq!(
            matches!(acts.first(), Some(AcmeAction::Publish(c)) if c.len() == n),
            published,
            "{n} challenges: {acts:?}"
        );
    }
}

/// The CA's window is drawn from, uniformly: not always its start.
#[test]
fn a_renewal_window_is_a_draw_across_it() {
    let c = facts("0a", T0, T0 + 90 * DAY);
    let window = Some((UnixTime(T0 + 10 * DAY), UnixTime(T0 + 11 * DAY)));
    let draws: Vec<i64> = (0..20u8)
        .map(|seed| {
            let mut rng = CoreRng::from_seed([seed; 32]);
            renewal_due(&c, window, Duration::from_secs(DAY as u64), &mut rng).0
        })
        .collect();
    assert!(
        draws
            .iter()
            .all(|d| (T0 + 10 * DAY..=T0 + 11 * DAY).contains(d)),
        "{draws:?}"
    );
    assert!(
        draws.iter().any(|d| *d > T0 + 10 * DAY + DAY / 10),
        "every draw at the window's start: {draws:?}"
    );
}

/// Failures are counted by the stage they happened in and said as an action each; the
/// certificate's health follows what is served: issuing before the first issuance, expired
/// after expiry, renewing while a valid one is served and attempts fail (decision 0057).
#[test]
fn failures_are_counted_by_stage_and_said_and_health_follows_the_certificate() {
    let mut m = manager();
    m.handle(at(0), wall(0), AcmeEvent::Loaded(None));
    assert_eq!(m.health(wall(0)), CertHealth::Issuing);
    actions(&mut m);
    m.handle(
        at(1),
        wall(1),
        AcmeEvent::Failed {
            order: 1,
            error: AcmeError::Refused("rateLimited: too many".into()),
        },
    );
    let said = actions(&mut m);
    assert!(
        matches!(&said[..], [AcmeAction::AttemptFailed { stage: Stage::Order, error, failures: 1, .. }] if error.contains("rateLimited: too many")),
        "{said:?}"
    );
    assert_eq!(m.status().failures_by_stage, [1, 0, 0]);
    assert_eq!(m.health(wall(1)), CertHealth::Issuing);

    // The retry issues: valid, and the last success is when it was stored.
    let due = m.poll_timeout().expect("a retry");
    m.handle_timeout(due);
    let t = due.as_nanos() / 1_000_000_000;
    let order = match actions(&mut m)[..] {
        [AcmeAction::Order { order, .. }] => order,
        ref other => panic!("{other:?}"),
    };
    issue(&mut m, t, order, cert("s1", T0, T0 + 90 * DAY));
    assert_eq!(m.status().last_success, Some(wall(t)));
    assert_eq!(m.health(wall(t)), CertHealth::Good);

    // A renewal that fails validation: still served, so renewing, not unready.
    m.handle(at(t + 1), wall(t + 1), AcmeEvent::RenewNow);
    let renewal = match actions(&mut m).last() {
        Some(AcmeAction::Order { order, .. }) => *order,
        other => panic!("{other:?}"),
    };
    m.handle(
        at(t + 1),
        wall(t + 1),
        AcmeEvent::Challenges {
            order: renewal,
            challenges: vec![challenge("tok2")],
        },
    );
    m.handle(
        at(t + 2),
        wall(t + 2),
        AcmeEvent::Failed {
            order: renewal,
            error: AcmeError::ValidationFailed("connection refused".into()),
        },
    );
    assert_eq!(m.status().failures_by_stage, [1, 1, 0]);
    assert_eq!(m.health(wall(t + 2)), CertHealth::Renewing);
    // Past its expiry nothing valid is served.
    assert_eq!(m.health(UnixTime(T0 + 90 * DAY)), CertHealth::Expired);
}
