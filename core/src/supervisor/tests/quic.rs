//! HTTP/3 socket ownership and steering through recycles, reloads and exits
//! (decision 0079).

use super::*;

/// The steering in force after `acts`, on top of `before`.
fn steering_after(before: Option<QuicSteering>, acts: &[Action]) -> Option<QuicSteering> {
    acts.iter().fold(before, |s, a| match a {
        Action::QuicSteering(next) => Some(next.clone()),
        _ => s,
    })
}

/// Checks the rule at every action: a worker told to drain no longer receives new
/// connections, and a worker spawned already has its socket.
fn check_order(mut steering: Option<QuicSteering>, acts: &[Action]) -> Option<QuicSteering> {
    for a in acts {
        match a {
            Action::QuicSteering(next) => steering = Some(next.clone()),
            Action::Send {
                worker,
                message: ParentMessage::Drain { .. },
            } => {
                let s = steering.as_ref().expect("steering before any drain");
                let socket = s.socket_of(*worker);
                assert!(
                    socket.is_none_or(|i| !s.accepting.contains(&i)),
                    "new QUIC connections steered to draining worker {worker} (socket {socket:?}): \
                     a draining worker must not receive new connections"
                );
            }
            Action::Spawn { worker, .. } => assert!(
                steering
                    .as_ref()
                    .and_then(|s| s.socket_of(*worker))
                    .is_some(),
                "worker {worker} spawned without an HTTP/3 socket"
            ),
            _ => {}
        }
    }
    steering
}

fn http3(raw: &mut RawConfig) {
    raw.features.http3 = true;
}

#[test]
fn a_recycle_gives_the_replacement_its_own_socket_and_steers_new_connections_to_it_before_the_drain()
 {
    let mut h = harness(Platform::Posix, http3);
    let acts = h.on(Event::Start);
    let s = check_order(None, &acts);
    let booted = h.boot(&acts);
    let s = check_order(s, &booted).expect("steering");
    let ws = h.members();
    assert_eq!(s.sockets(), 2);
    assert_eq!(s.accepting, vec![0, 1], "both workers take new connections");
    let acts = h.on(Event::Command(Command::Recycle));
    let s = check_order(Some(s), &acts).expect("steering");
    let rep = acts
        .iter()
        .find_map(|a| match a {
            Action::Spawn { worker, .. } => Some(*worker),
            _ => None,
        })
        .expect("a replacement");
    assert_eq!(s.socket_of(rep), Some(2), "not its predecessor's socket");
    assert_eq!(s.accepting, vec![0, 1], "not before it is ready");
    let acts = h.boot(&acts);
    let s = check_order(Some(s), &acts).expect("steering");
    assert_eq!(drains(&acts), vec![ws[0]]);
    assert_eq!(
        s.accepting,
        vec![1, 2],
        "the draining worker's socket takes none"
    );
    assert_eq!(
        s.socket_of(ws[0]),
        Some(0),
        "still read, for its open connections"
    );
    // It exits: its socket is free (not the end of the group, so it stays), and the next
    // recycle's replacement, spawned at once, takes it.
    let acts = h.on(Event::Exited {
        worker: ws[0],
        status: ExitStatus::Code(0),
    });
    let s = check_order(Some(s), &acts).expect("steering");
    assert_eq!(s.sockets(), 3);
    let next = acts
        .iter()
        .find_map(|a| match a {
            Action::Spawn { worker, .. } => Some(*worker),
            _ => None,
        })
        .expect("the second recycle");
    assert_eq!(s.socket_of(next), Some(0));
    let acts = h.boot(&acts);
    let s = check_order(Some(s), &acts).expect("steering");
    assert_eq!(s.accepting, vec![0, 2]);
    let acts = h.on(Event::Exited {
        worker: ws[1],
        status: ExitStatus::Code(0),
    });
    let s = steering_after(Some(s), &acts).expect("steering");
    assert_eq!(s.sockets(), 3, "socket 1 is before a read one");
    assert_eq!(s.readers[1], None);
}

#[test]
fn a_reload_steers_to_the_new_generation_before_the_old_drains_and_trailing_sockets_go() {
    let mut h = harness(Platform::Posix, http3);
    let acts = h.on(Event::Start);
    let s = check_order(None, &acts);
    let booted = h.boot(&acts);
    let s = check_order(s, &booted);
    let old = h.members();
    let mut raw = RawConfig {
        workers: 1,
        ..RawConfig::default()
    };
    raw.recovery.drain_timeout = 3.0;
    raw.recovery.force_timeout = 0.5;
    http3(&mut raw);
    let acts = h.on(Event::Command(Command::Reload {
        id: ReloadId(1),
        config: Box::new(raw),
    }));
    let s = check_order(s, &acts);
    let acts = h.boot(&acts);
    let s = check_order(s, &acts).expect("steering");
    assert_eq!(drains(&acts).len(), 2, "the old generation drains");
    assert_eq!(s.accepting, vec![2], "only the new generation's socket");
    let mut s = Some(s);
    for w in old {
        let acts = h.on(Event::Exited {
            worker: w,
            status: ExitStatus::Code(0),
        });
        s = check_order(s, &acts);
    }
    let s = s.expect("steering");
    assert_eq!(s.sockets(), 3, "sockets before the one read stay");
    assert_eq!(s.read().collect::<Vec<_>>(), vec![2]);
}

#[test]
fn without_http3_no_steering_is_emitted() {
    let mut h = harness(Platform::Posix, |_| {});
    let acts = h.on(Event::Start);
    let booted = h.boot(&acts);
    assert!(
        !acts
            .iter()
            .chain(&booted)
            .any(|a| matches!(a, Action::QuicSteering(_)))
    );
}

#[test]
fn a_crashed_worker_takes_no_new_connections_and_its_replacement_reads_its_socket() {
    let mut h = harness(Platform::Posix, http3);
    let acts = h.on(Event::Start);
    let s = check_order(None, &acts);
    let booted = h.boot(&acts);
    let s = check_order(s, &booted);
    let ws = h.members();
    let acts = h.on(Event::ChannelClosed { worker: ws[1] });
    let s = check_order(s, &acts).expect("steering");
    assert_eq!(s.accepting, vec![0]);
    let mut acts = h.on(Event::Exited {
        worker: ws[1],
        status: ExitStatus::Signal(9),
    });
    acts.extend(h.advance(Duration::from_secs(5)));
    let s = check_order(Some(s), &acts).expect("steering");
    let rep = acts
        .iter()
        .find_map(|a| match a {
            Action::Spawn { worker, .. } => Some(*worker),
            _ => None,
        })
        .expect("a replacement");
    // The same socket: it answers its predecessor's connections with stateless resets.
    assert_eq!(s.socket_of(rep), Some(1));
}

/// The spawns among `acts`.
fn spawned(acts: &[Action]) -> Vec<WorkerId> {
    acts.iter()
        .filter_map(|a| match a {
            Action::Spawn { worker, .. } => Some(*worker),
            _ => None,
        })
        .collect()
}

#[test]
fn a_worker_whose_channel_is_gone_keeps_its_socket_until_it_is_reaped() {
    let mut h = harness(Platform::Posix, http3);
    let acts = h.on(Event::Start);
    let s = check_order(None, &acts);
    let booted = h.boot(&acts);
    let s = check_order(s, &booted);
    let ws = h.members();
    // A garbage frame: the parent lets the channel go and kills the process, which reads
    // its socket (the last of the groups) until it dies.
    let acts = h.on(Event::ProtocolViolation {
        worker: ws[1],
        error: crate::proto::ProtoError::EmptyFrame,
    });
    let s = check_order(s, &acts).expect("steering");
    assert_eq!(s.accepting, vec![0], "it takes no new connections");
    assert_eq!(
        (s.sockets(), s.socket_of(ws[1])),
        (2, Some(1)),
        "HTTP/3 ownership rule: a worker's socket is its own until the parent reaps it \
         (closed or handed on while the process still reads it)"
    );
    let mut acts = h.on(Event::Exited {
        worker: ws[1],
        status: ExitStatus::Signal(9),
    });
    acts.extend(h.advance(Duration::from_secs(5)));
    let s = check_order(Some(s), &acts).expect("steering");
    let rep = *spawned(&acts).first().expect("a replacement");
    assert_eq!(
        s.socket_of(rep),
        Some(1),
        "HTTP/3 ownership rule: once reaped, the socket is free for the next worker"
    );
    assert_eq!(s.sockets(), 2);
}

#[test]
fn trailing_sockets_close_once_a_reload_to_fewer_workers_has_reaped_their_readers() {
    let mut h = harness(Platform::Posix, |raw| {
        raw.workers = 3;
        http3(raw);
    });
    let acts = h.on(Event::Start);
    let s = check_order(None, &acts);
    let booted = h.boot(&acts);
    let mut s = check_order(s, &booted);
    let old = h.members();
    let mut raw = RawConfig {
        workers: 1,
        ..RawConfig::default()
    };
    raw.recovery.drain_timeout = 3.0;
    raw.recovery.force_timeout = 0.5;
    http3(&mut raw);
    let acts = h.on(Event::Command(Command::Reload {
        id: ReloadId(1),
        config: Box::new(raw),
    }));
    s = check_order(s, &acts);
    let acts = h.boot(&acts);
    s = check_order(s, &acts);
    for w in old {
        let acts = h.on(Event::Exited {
            worker: w,
            status: ExitStatus::Code(0),
        });
        s = check_order(s, &acts);
    }
    let kept = s.clone().expect("steering");
    assert_eq!(
        kept.sockets(),
        4,
        "the new worker reads socket 3: the unread ones before it stay"
    );
    // A recycle: the replacement takes the lowest free socket, and when the old worker
    // is reaped every socket after it goes.
    let acts = h.on(Event::Command(Command::Recycle));
    s = check_order(s, &acts);
    let acts = h.boot(&acts);
    s = check_order(s, &acts);
    let drained = drains(&acts);
    assert_eq!(drained.len(), 1);
    let acts = h.on(Event::Exited {
        worker: drained[0],
        status: ExitStatus::Code(0),
    });
    let s = check_order(s, &acts).expect("steering");
    assert_eq!(
        s.sockets(),
        1,
        "HTTP/3 ownership rule: trailing sockets nobody reads are closed: {s:?}"
    );
    assert_eq!(s.read().collect::<Vec<_>>(), vec![0]);
}

#[test]
fn the_ownership_rule_is_a_supervisor_invariant() {
    let mut s = crate::supervisor::quic::QuicSockets::default();
    let (a, b) = (WorkerId(1), WorkerId(2));
    s.take(a);
    s.take(b);
    let tracked = |w: WorkerId| w == a || w == b;
    assert_eq!(s.check(2, tracked), Ok(()));
    let err = s.check(2, |w| w == a).expect_err("b was reaped");
    assert!(err.starts_with("HTTP/3 ownership rule"), "{err}");
    assert!(err.contains("reaped"), "{err}");
    let err = s.check(3, tracked).expect_err("a worker without a socket");
    assert!(err.starts_with("HTTP/3 ownership rule"), "{err}");
    s.release(b);
    s.release(a);
    assert_eq!(
        s.check(0, |_| false),
        Ok(()),
        "socket 0 alone, read by nobody"
    );
}
