//! A worker that breaks the control protocol: ended at once as `protocol_error`, not
//! left to its heartbeat timeout, and replaced after the reap like any faulted member.

use super::*;
use crate::proto::ProtoError;

#[test]
fn a_malformed_frame_ends_its_worker_at_once_and_the_slot_is_refilled() {
    for platform in [Platform::Posix, Platform::Windows] {
        let mut h = harness(platform, |r| {
            r.recovery.heartbeat_interval = 1.0;
            r.recovery.heartbeat_timeout = 5.0;
        });
        let ws = h.start();
        h.advance(Duration::from_secs(1));
        beat_one(&mut h, ws[0]);
        let bad = ws[0];
        let acts = h.on(Event::ProtocolViolation {
            worker: bad,
            error: ProtoError::EmptyFrame,
        });
        assert!(
            acts.contains(&Action::WorkerGone { worker: bad }),
            "its channel is untrusted: what it held is revoked now: {acts:?}"
        );
        assert_eq!(kills(&acts), vec![bad], "killed at once: {acts:?}");
        assert!(
            terms(&acts).is_empty() && drains(&acts).is_empty(),
            "no TERM, no drain: nothing it says can be trusted"
        );
        assert!(!h.sup.is_connected(bad));
        let failure = h.sup.last_failure().expect("recorded");
        assert_eq!(
            (failure.worker, failure.reason, failure.at),
            (bad, ExitReason::ProtocolError, h.now)
        );
        assert!(
            failure.message.contains("malformed control frame"),
            "{}",
            failure.message
        );
        // What still arrives from it changes nothing: a beat does not revive it, a second
        // violation does not kill it twice.
        assert!(beat_one(&mut h, bad).is_empty());
        let again = h.on(Event::ProtocolViolation {
            worker: bad,
            error: ProtoError::EmptyFrame,
        });
        assert!(again.is_empty(), "{again:?}");
        let acts = h.on(Event::Exited {
            worker: bad,
            status: ExitStatus::Signal(9),
        });
        assert_eq!(spawns(&acts), 0, "the replacement waits for the backoff");
        assert_eq!(exit_reason(&h, bad), Some(ExitReason::ProtocolError));
        let status = h.sup.status(h.now);
        assert_eq!(
            status.restarts, 1,
            "a protocol error counts against the limit"
        );
        let slot = status
            .recent_exits
            .iter()
            .find(|e| e.worker == bad)
            .map(|e| e.slot)
            .expect("its exit");
        let acts = h.advance(Duration::from_millis(250));
        assert_eq!(spawns(&acts), 1, "replaced after restart_backoff_initial");
        let replacement = acts.iter().find_map(|a| match a {
            Action::Spawn { worker, slot, .. } => Some((*worker, *slot)),
            _ => None,
        });
        assert_eq!(replacement.map(|r| r.1), Some(slot), "in the same slot");
        h.boot(&acts);
        assert_eq!(h.sup.ready_workers(), 2);
        assert_eq!(h.sup.state(), ServiceState::Ready);
    }
}

#[test]
fn a_malformed_frame_with_restarts_disabled_fails_the_service() {
    let mut h = harness(Platform::Posix, |r| r.recovery.worker_restart_limit = 0);
    let ws = h.start();
    let acts = h.on(Event::ProtocolViolation {
        worker: ws[1],
        error: ProtoError::EmptyFrame,
    });
    assert_eq!(kills(&acts), vec![ws[1]]);
    h.on(Event::Exited {
        worker: ws[1],
        status: ExitStatus::Signal(9),
    });
    assert_eq!(h.sup.state(), ServiceState::Failed);
    assert_eq!(
        h.sup.failure().map(|f| f.0),
        Some(FailureReason::RestartsDisabled)
    );
}
