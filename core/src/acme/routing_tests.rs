//! The parent's routing of the manager: challenges reach the broker before the driver is
//! told to have them validated, any connected worker can read them, and they are gone
//! once the order ends.

use super::*;
use crate::config::RawConfig;
use crate::ids::WorkerId;
use crate::parent::{Parent, ParentAction};
use crate::proto::{BrokerReply, BrokerRequest, ParentMessage, WorkerMessage};
use crate::supervisor::{Action, Event, Platform};
use crate::time::Instant;

fn actions(p: &mut Parent) -> Vec<ParentAction> {
    std::iter::from_fn(|| p.poll_action()).collect()
}

fn acme(p: &mut Parent, secs: u64, event: AcmeEvent) {
    p.handle(
        Instant::from_nanos(secs * 1_000_000_000),
        Event::Acme {
            wall: UnixTime(1_800_000_000 + secs as i64),
            event: Box::new(event),
        },
    );
}

fn ask(p: &mut Parent, worker: WorkerId, id: u64, token: &str) -> Option<String> {
    p.handle(
        Instant::ZERO,
        Event::Message {
            worker,
            message: WorkerMessage::Broker {
                id,
                request: BrokerRequest::AcmeChallenge {
                    token: token.into(),
                },
            },
        },
    );
    actions(p).into_iter().find_map(|a| match a {
        ParentAction::Supervisor(Action::Send {
            message:
                ParentMessage::Broker {
                    reply: BrokerReply::KeyAuthorization(answer),
                    ..
                },
            ..
        }) => Some(answer),
        _ => None,
    })?
}

#[test]
fn challenges_are_in_the_broker_before_the_answer_and_gone_after_the_order() {
    let mut raw = RawConfig::default();
    raw.features.acme = true;
    let mut p = Parent::new(raw.validate().expect("valid"), Platform::Posix, [2; 32])
        .with_acme(ManagerConfig::new(vec!["a.test".into()]));
    p.handle(Instant::ZERO, Event::Start);
    let w = WorkerId(1);
    for message in [WorkerMessage::Prepared, WorkerMessage::Ready] {
        p.handle(Instant::ZERO, Event::Message { worker: w, message });
    }
    actions(&mut p);
    acme(&mut p, 0, AcmeEvent::Loaded(None));
    assert!(matches!(
        actions(&mut p)[..],
        [ParentAction::Acme(AcmeAction::Order { order: 1, .. })]
    ));
    acme(
        &mut p,
        1,
        AcmeEvent::Challenges {
            order: 1,
            challenges: vec![Challenge {
                token: "tok".into(),
                key_authorization: "tok.thumb".into(),
            }],
        },
    );
    // No Publish reaches the driver; the answer does, and the token is already there.
    assert_eq!(
        actions(&mut p),
        [ParentAction::Acme(AcmeAction::Answer { order: 1 })]
    );
    p.check_invariants().expect("invariants");
    assert_eq!(ask(&mut p, w, 9, "tok").as_deref(), Some("tok.thumb"));
    assert_eq!(ask(&mut p, w, 10, "other"), None);
    acme(
        &mut p,
        2,
        AcmeEvent::Failed {
            order: 1,
            error: AcmeError::ValidationFailed("connection refused".into()),
        },
    );
    assert_eq!(ask(&mut p, w, 11, "tok"), None, "withdrawn with the order");
    p.check_invariants().expect("invariants");
    assert!(p.poll_timeout().is_some(), "the retry is armed");
}

/// A parent with ACME on whose one worker is ready.
fn serving_with_acme(key: u8) -> Parent {
    let mut raw = RawConfig::default();
    raw.features.acme = true;
    let mut p = Parent::new(raw.validate().expect("valid"), Platform::Posix, [key; 32])
        .with_acme(ManagerConfig::new(vec!["a.test".into()]));
    p.handle(Instant::ZERO, Event::Start);
    for message in [WorkerMessage::Prepared, WorkerMessage::Ready] {
        let worker = WorkerId(1);
        p.handle(Instant::ZERO, Event::Message { worker, message });
    }
    actions(&mut p);
    p
}

/// `/readyz` with ACME (decision 0057): a first certificate not issued yet leaves a
/// serving service degraded — still routed, so the CA's HTTP-01 request can reach it —
/// a valid one leaves it ready, and one past its expiry makes it unready.
#[test]
fn readiness_counts_the_certificate_issuing_valid_and_expired() {
    use crate::supervisor::Readiness;
    const T0: i64 = 1_800_000_000;
    const LIFE: i64 = 90 * 86_400;
    let mut issuing = serving_with_acme(2);
    acme(&mut issuing, 0, AcmeEvent::Loaded(None));
    assert_eq!(
        issuing.readiness(UnixTime(T0)),
        Readiness::Degraded,
        "issuing"
    );

    let mut stored = serving_with_acme(3);
    let certificate = Certificate {
        facts: CertFacts {
            not_before: UnixTime(T0 - 10),
            not_after: UnixTime(T0 + LIFE),
            names: vec!["a.test".into()],
            serial: "s1".into(),
        },
        cert_pem: "CERT s1".into(),
        key_pem: "KEY s1".into(),
    };
    acme(&mut stored, 0, AcmeEvent::Loaded(Some(certificate)));
    assert_eq!(stored.readiness(UnixTime(T0)), Readiness::Ready, "valid");
    assert_eq!(
        stored.readiness(UnixTime(T0 + LIFE)),
        Readiness::Unready,
        "the certificate in service has expired"
    );
}
