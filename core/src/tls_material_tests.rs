//! The TLS material machine: rotation on time, keys kept exactly as long as their last
//! ticket lives, identities taken once, and the parent handing the material to every
//! worker (at its start and on every change).

use super::*;
use crate::proto::{FrameDecoder, MAX_FRAME_DEFAULT, ParentMessage, encode_parent};
use proptest::prelude::*;

const HOUR: Duration = Duration::from_secs(3600);

fn at(d: Duration) -> Instant {
    Instant::ZERO + d
}

fn entropy(seed: u8) -> [u8; TICKET_ENTROPY_LEN] {
    [seed; TICKET_ENTROPY_LEN]
}

fn summary() -> CertSummary {
    CertSummary {
        subject: "CN=a.test".into(),
        not_after_unix: 2_000_000_000,
        not_before_unix: 1_990_000_000,
    }
}

fn state(policy: TicketPolicy) -> TlsState {
    TlsState::new(
        Instant::ZERO,
        policy,
        "CERT".into(),
        "KEY".into(),
        summary(),
        entropy(1),
        [7; STATELESS_RESET_KEY_LEN],
    )
    .expect("fits")
}

fn generations(s: &TlsState) -> Vec<u64> {
    s.material()
        .ticket_keys
        .iter()
        .map(|k| k.generation)
        .collect()
}

/// Run the machine's timer at `now`, answering a mint request with `seed`.
fn tick(s: &mut TlsState, now: Instant, seed: u8) {
    s.handle_timeout(now);
    while let Some(TlsAction::MintTicketKey) = s.poll_action() {
        s.handle(now, TlsInput::TicketEntropy(Box::new(entropy(seed))));
    }
}

#[test]
fn keys_rotate_on_schedule_and_the_previous_one_lives_one_ticket_lifetime() {
    let mut s = state(TicketPolicy::default());
    assert!(s.take_changed(), "the first material is news");
    assert_eq!(generations(&s), [1]);
    assert_eq!(s.poll_timeout(), Some(at(6 * HOUR)));
    tick(&mut s, at(6 * HOUR - Duration::from_secs(1)), 9);
    assert_eq!(generations(&s), [1], "nothing before the rotation is due");
    assert!(!s.take_changed());
    tick(&mut s, at(6 * HOUR), 2);
    assert_eq!(
        generations(&s),
        [2, 1],
        "the previous key still opens tickets"
    );
    assert_eq!(s.material().ticket_keys[0].name, [2; TICKET_KEY_NAME_LEN]);
    assert!(s.take_changed());
    tick(&mut s, at(12 * HOUR), 3);
    assert_eq!(
        generations(&s),
        [3, 2],
        "key 1 retired at 6 h: its last ticket expired at 12 h"
    );
    s.check_invariants().expect("invariants");
    assert_eq!(s.status().ticket_key_generation, 3);
}

#[test]
fn a_late_answer_keeps_the_old_key_sealing_and_a_lost_one_is_asked_again() {
    let mut s = state(TicketPolicy::default());
    s.handle_timeout(at(6 * HOUR));
    assert_eq!(s.poll_action(), Some(TlsAction::MintTicketKey));
    s.handle_timeout(at(6 * HOUR + Duration::from_secs(30)));
    assert_eq!(s.poll_action(), None, "one request at a time");
    assert_eq!(generations(&s), [1]);
    assert_eq!(
        s.poll_timeout(),
        Some(at(6 * HOUR + MINT_RETRY)),
        "an unanswered request is repeated"
    );
    s.handle_timeout(at(6 * HOUR + MINT_RETRY));
    assert_eq!(s.poll_action(), Some(TlsAction::MintTicketKey));
    s.handle(
        at(6 * HOUR + MINT_RETRY),
        TlsInput::TicketEntropy(Box::new(entropy(5))),
    );
    assert_eq!(generations(&s), [2, 1]);
}

#[test]
fn randomness_nobody_asked_for_mints_nothing() {
    let mut s = state(TicketPolicy::default());
    s.take_changed();
    s.handle(at(HOUR), TlsInput::TicketEntropy(Box::new(entropy(7))));
    assert_eq!(generations(&s), [1]);
    assert!(!s.take_changed());
}

#[test]
fn a_new_identity_bumps_the_generation_and_the_same_one_changes_nothing() {
    let mut s = state(TicketPolicy::default());
    s.take_changed();
    let same = TlsInput::Identity {
        cert_pem: "CERT".into(),
        key_pem: "KEY".into(),
        summary: summary(),
    };
    s.handle(at(HOUR), same);
    assert!(!s.take_changed());
    assert_eq!(s.material().identity.generation, 1);
    let new = TlsInput::Identity {
        cert_pem: "CERT2".into(),
        key_pem: "KEY2".into(),
        summary: CertSummary {
            subject: "CN=b.test".into(),
            not_after_unix: 1,
            not_before_unix: 0,
        },
    };
    s.handle(at(HOUR), new);
    assert!(s.take_changed());
    let m = s.material();
    assert_eq!(
        (m.identity.generation, m.identity.cert_pem.as_str()),
        (2, "CERT2")
    );
    assert_eq!(generations(&s), [1], "the ticket keys are not touched");
    assert_eq!(s.status().summary.subject, "CN=b.test");
}

#[test]
fn an_identity_the_channel_cannot_carry_is_refused_and_the_old_one_kept() {
    let mut s = state(TicketPolicy::default());
    s.take_changed();
    s.handle(
        at(HOUR),
        TlsInput::Identity {
            cert_pem: "C".repeat(MAX_FRAME_DEFAULT),
            key_pem: "K".into(),
            summary: summary(),
        },
    );
    assert!(!s.take_changed());
    assert_eq!(s.material().identity.cert_pem, "CERT");
    let refusal = s.status().last_refusal.expect("reported");
    assert!(refusal.contains("at most"), "{refusal}");
    assert!(
        TlsState::new(
            Instant::ZERO,
            TicketPolicy::default(),
            "C".repeat(MAX_FRAME_DEFAULT),
            String::new(),
            summary(),
            entropy(1),
            [7; STATELESS_RESET_KEY_LEN],
        )
        .is_err()
    );
}

#[test]
fn the_material_round_trips_the_channel_and_hides_its_secrets_from_debug() {
    let mut s = state(TicketPolicy::default());
    tick(&mut s, at(6 * HOUR), 2);
    let message = ParentMessage::TlsMaterial(Box::new(s.material()));
    let mut wire = Vec::new();
    encode_parent(&message, &mut wire).expect("fits");
    let mut decoder = FrameDecoder::new(MAX_FRAME_DEFAULT);
    decoder.push(&wire);
    assert_eq!(decoder.next_parent_message(), Ok(Some(message.clone())));
    let shown = format!("{message:?}");
    assert!(
        !shown.contains("KEY") && !shown.contains("[2, 2") && !shown.contains("[7, 7"),
        "{shown}"
    );
    assert!(
        shown.contains("StatelessResetKey(<redacted>)") && shown.contains("IdentityPem"),
        "the reset key is named, its bytes are not: {shown}"
    );
}

#[test]
fn malformed_key_lists_are_refused() {
    let good = state(TicketPolicy::default()).material();
    for bad in [
        TlsMaterial {
            ticket_keys: Vec::new(),
            ..good.clone()
        },
        TlsMaterial {
            ticket_keys: vec![good.ticket_keys[0].clone(); 2],
            ..good.clone()
        },
        TlsMaterial {
            ticket_keys: (1..=5)
                .rev()
                .map(|generation| TicketKey {
                    generation,
                    ..good.ticket_keys[0].clone()
                })
                .collect(),
            ..good.clone()
        },
    ] {
        let mut wire = Vec::new();
        encode_parent(&ParentMessage::TlsMaterial(Box::new(bad)), &mut wire).expect("encodes");
        let mut decoder = FrameDecoder::new(MAX_FRAME_DEFAULT);
        decoder.push(&wire);
        assert!(decoder.next_parent_message().is_err());
    }
}

proptest! {
    /// Whatever the policy and however late the timer runs or the randomness comes, a
    /// key stays available to open tickets for the whole lifetime of the last ticket it
    /// sealed, no key outlives that, and the newest key seals.
    #[test]
    fn every_ticket_opens_for_its_whole_lifetime(
        rotate_mins in 1u64..600,
        lifetime_pct in 1u64..=300,
        steps in proptest::collection::vec((1u64..400, any::<bool>()), 1..80),
    ) {
        let rotate = Duration::from_secs(rotate_mins * 60);
        let lifetime = rotate * u32::try_from(lifetime_pct).unwrap_or(1) / 100;
        let policy = TicketPolicy { rotate_every: rotate, ticket_lifetime: lifetime };
        let mut s = state(policy);
        // generation → the last moment it sealed.
        let mut last_sealed: std::collections::BTreeMap<u64, Instant> = Default::default();
        let mut now = Instant::ZERO;
        last_sealed.insert(1, now);
        for (mins, answer) in steps {
            now = now + Duration::from_secs(mins * 60);
            // The key sealing until this moment sealed up to it.
            last_sealed.insert(generations(&s)[0], now);
            s.handle_timeout(now);
            if let Some(TlsAction::MintTicketKey) = s.poll_action()
                && answer
            {
                s.handle(now, TlsInput::TicketEntropy(Box::new(entropy(3))));
            }
            s.check_invariants().map_err(TestCaseError::fail)?;
            // Rotations never touch the stateless-reset key: tokens already given out
            // stay verifiable for their connections' lives.
            prop_assert_eq!(s.material().stateless_reset_key.0, [7; STATELESS_RESET_KEY_LEN]);
            let kept = generations(&s);
            last_sealed.insert(kept[0], now);
            for (generation, sealed) in &last_sealed {
                let ticket_alive = now < *sealed + lifetime;
                prop_assert_eq!(
                    kept.contains(generation),
                    ticket_alive || *generation == kept[0],
                    "key {} at {} (last sealed {}): kept {:?}", generation, now, sealed, kept
                );
            }
        }
    }

    #[test]
    fn tls_material_frames_of_any_shape_never_panic(
        body in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let mut wire = Vec::new();
        wire.extend_from_slice(&u32::try_from(body.len() + 1).unwrap_or(0).to_be_bytes());
        wire.push(0x06);
        wire.extend_from_slice(&body);
        let mut decoder = FrameDecoder::new(MAX_FRAME_DEFAULT);
        decoder.push(&wire);
        let _ = decoder.next_parent_message();
    }
}

mod parent {
    use super::*;
    use crate::config::RawConfig;
    use crate::ids::WorkerId;
    use crate::parent::{Parent, ParentAction};
    use crate::proto::WorkerMessage;
    use crate::supervisor::{Action, Event, Platform};

    fn actions(p: &mut Parent) -> Vec<ParentAction> {
        std::iter::from_fn(|| p.poll_action()).collect()
    }

    fn material_sent_to(acts: &[ParentAction]) -> Vec<(WorkerId, u64, u64)> {
        acts.iter()
            .filter_map(|a| match a {
                ParentAction::Supervisor(Action::Send {
                    worker,
                    message: ParentMessage::TlsMaterial(m),
                }) => Some((*worker, m.identity.generation, m.ticket_keys[0].generation)),
                _ => None,
            })
            .collect()
    }

    fn tls_parent(workers: i64) -> Parent {
        let raw = RawConfig {
            workers,
            ..RawConfig::default()
        };
        let mut p = Parent::new(raw.validate().expect("valid"), Platform::Posix, [1; 32]);
        let tls = state(TicketPolicy::default());
        let material = tls.material();
        p.start_tls(tls);
        assert_eq!(
            p.tls().map(TlsState::material),
            Some(material),
            "the parent holds what it serves"
        );
        p
    }

    /// Every worker prepared, then (after the quorum's COMMIT) ready.
    fn serve(p: &mut Parent, workers: &[WorkerId]) {
        for message in [WorkerMessage::Prepared, WorkerMessage::Ready] {
            for &w in workers {
                let message = message.clone();
                p.handle(Instant::ZERO, Event::Message { worker: w, message });
            }
        }
    }

    #[test]
    fn every_spawn_is_followed_by_the_current_material() {
        let mut p = tls_parent(2);
        p.handle(Instant::ZERO, Event::Start);
        let acts = actions(&mut p);
        let spawns: Vec<usize> = acts
            .iter()
            .enumerate()
            .filter(|(_, a)| matches!(a, ParentAction::Supervisor(Action::Spawn { .. })))
            .map(|(i, _)| i)
            .collect();
        assert_eq!(spawns.len(), 2);
        for i in spawns {
            let ParentAction::Supervisor(Action::Spawn { worker, .. }) = &acts[i] else {
                unreachable!()
            };
            assert_eq!(material_sent_to(&acts[i + 1..i + 2]), [(*worker, 1, 1)]);
        }
    }

    #[test]
    fn a_new_identity_and_a_rotation_reach_every_connected_worker() {
        let mut p = tls_parent(2);
        p.handle(Instant::ZERO, Event::Start);
        actions(&mut p);
        serve(&mut p, &[WorkerId(1), WorkerId(2)]);
        actions(&mut p);
        p.handle(
            at(HOUR),
            Event::Tls(TlsInput::Identity {
                cert_pem: "NEW".into(),
                key_pem: "NEWKEY".into(),
                summary: summary(),
            }),
        );
        let acts = actions(&mut p);
        assert_eq!(
            material_sent_to(&acts),
            [(WorkerId(1), 2, 1), (WorkerId(2), 2, 1)]
        );
        assert!(p.poll_timeout().is_some_and(|t| t <= at(6 * HOUR)));
        p.handle_timeout(at(6 * HOUR));
        let acts = actions(&mut p);
        assert!(
            acts.contains(&ParentAction::Tls(TlsAction::MintTicketKey)),
            "{acts:?}"
        );
        p.handle(
            at(6 * HOUR),
            Event::Tls(TlsInput::TicketEntropy(Box::new(entropy(4)))),
        );
        let acts = actions(&mut p);
        assert_eq!(
            material_sent_to(&acts),
            [(WorkerId(1), 2, 2), (WorkerId(2), 2, 2)]
        );
        p.check_invariants().expect("invariants");
    }

    fn spawned(acts: &[ParentAction]) -> Vec<WorkerId> {
        acts.iter()
            .filter_map(|a| match a {
                ParentAction::Supervisor(Action::Spawn { worker, .. }) => Some(*worker),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_worker_that_crashes_during_a_hand_off_is_replaced_with_the_new_material() {
        let mut p = tls_parent(2);
        p.handle(Instant::ZERO, Event::Start);
        actions(&mut p);
        serve(&mut p, &[WorkerId(1), WorkerId(2)]);
        actions(&mut p);
        p.handle(
            at(HOUR),
            Event::Tls(TlsInput::Identity {
                cert_pem: "NEW".into(),
                key_pem: "NEWKEY".into(),
                summary: summary(),
            }),
        );
        actions(&mut p);
        // Worker 2 dies before it read the new identity.
        p.handle(
            at(HOUR),
            Event::ChannelClosed {
                worker: WorkerId(2),
            },
        );
        p.handle(
            at(HOUR),
            Event::Exited {
                worker: WorkerId(2),
                status: crate::supervisor::ExitStatus::Signal(9),
            },
        );
        let mut acts = actions(&mut p);
        // The replacement may wait out a backoff.
        for _ in 0..100 {
            if !spawned(&acts).is_empty() {
                break;
            }
            let t = p.poll_timeout().expect("a deadline for the restart");
            p.handle_timeout(t);
            acts.extend(actions(&mut p));
        }
        assert!(!spawned(&acts).is_empty(), "no replacement: {acts:?}");
        let replacement = spawned(&acts)[0];
        assert!(
            material_sent_to(&acts)
                .iter()
                .any(|&(w, identity, _)| w == replacement && identity == 2),
            "{acts:?}"
        );
        p.check_invariants().expect("invariants");
    }

    #[test]
    fn a_reload_during_a_rotation_starts_its_workers_with_the_current_keys_and_hands_them_the_next()
    {
        let mut p = tls_parent(1);
        p.handle(Instant::ZERO, Event::Start);
        actions(&mut p);
        serve(&mut p, &[WorkerId(1)]);
        actions(&mut p);
        p.handle_timeout(at(6 * HOUR));
        let acts = actions(&mut p);
        assert!(acts.contains(&ParentAction::Tls(TlsAction::MintTicketKey)));
        // The reload arrives before the randomness does.
        p.handle(
            at(6 * HOUR),
            Event::Command(crate::supervisor::Command::Reload {
                id: crate::ids::ReloadId(1),
                config: Box::new(RawConfig::default()),
            }),
        );
        let acts = actions(&mut p);
        let new = spawned(&acts);
        assert_eq!(new.len(), 1);
        assert_eq!(material_sent_to(&acts), [(new[0], 1, 1)], "the current key");
        p.handle(
            at(6 * HOUR),
            Event::Tls(TlsInput::TicketEntropy(Box::new(entropy(9)))),
        );
        let acts = actions(&mut p);
        assert_eq!(
            material_sent_to(&acts),
            [(WorkerId(1), 1, 2), (new[0], 1, 2)],
            "the old generation and the new one both get the next key"
        );
        p.check_invariants().expect("invariants");
    }
}

#[test]
fn a_certificate_is_expiring_in_its_renewal_window_and_expired_past_its_end() {
    use crate::tls_material::{CertExpiry, RENEWAL_WINDOW_SECS};
    const DAY: i64 = 86_400;
    let ninety_days = CertSummary {
        subject: "CN=a.test".into(),
        not_before_unix: 1_000 * DAY,
        not_after_unix: 1_090 * DAY,
    };
    assert_eq!(
        ninety_days.renewal_window_from_unix(),
        1_090 * DAY - RENEWAL_WINDOW_SECS
    );
    assert_eq!(ninety_days.expiry(1_059 * DAY), CertExpiry::Valid);
    assert_eq!(ninety_days.expiry(1_060 * DAY), CertExpiry::Expiring);
    assert_eq!(ninety_days.expiry(1_090 * DAY - 1), CertExpiry::Expiring);
    assert_eq!(ninety_days.expiry(1_090 * DAY), CertExpiry::Expired);
    // Six days long: the last two are the window, not all six.
    let six_days = CertSummary {
        not_before_unix: 0,
        not_after_unix: 6 * DAY,
        ..ninety_days.clone()
    };
    assert_eq!(six_days.expiry(3 * DAY), CertExpiry::Valid);
    assert_eq!(six_days.expiry(4 * DAY), CertExpiry::Expiring);
    assert_eq!(CertSummary::default().expiry(5), CertExpiry::Unknown);
}
