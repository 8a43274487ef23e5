//! A reload that moves the listeners: the set is bound before any candidate exists, every
//! candidate starts on it, and the parent's copy of a set closes exactly when no
//! generation will start a worker on it again (decision 0035).

use super::*;
use crate::config::Listen;

const MOVED: Listen = Listen { port: Some(9001) };

fn reload_to(h: &mut Harness, id: u64, listen: Listen) -> Vec<Action> {
    let mut next = RawConfig {
        workers: 2,
        listen,
        ..RawConfig::default()
    };
    next.recovery.drain_timeout = 3.0;
    h.on(Event::Command(Command::Reload {
        id: ReloadId(id),
        config: Box::new(next),
    }))
}

fn bound(h: &mut Harness, id: u64, listen: Listen, result: Result<(), String>) -> Vec<Action> {
    h.on(Event::ListenersBound {
        reload: ReloadId(id),
        listen,
        result,
    })
}

fn releases(acts: &[Action]) -> Vec<Listen> {
    acts.iter()
        .filter_map(|a| match a {
            Action::ReleaseListeners { listen } => Some(*listen),
            _ => None,
        })
        .collect()
}

fn rejection(acts: &[Action]) -> Option<&str> {
    acts.iter().find_map(|a| match a {
        Action::ReloadRejected { message, .. } => Some(message.as_str()),
        _ => None,
    })
}

#[test]
fn a_new_port_is_bound_before_any_candidate_and_the_old_set_is_released_at_the_commit() {
    let mut h = harness(Platform::Posix, |_| {});
    h.start();
    let acts = reload_to(&mut h, 1, MOVED);
    assert_eq!(
        acts,
        vec![Action::BindListeners {
            reload: ReloadId(1),
            listen: MOVED
        }],
        "nothing starts before the new set is bound"
    );
    assert!(h.sup.status(h.now).reload_in_flight);
    assert!(
        rejection(&reload_to(&mut h, 2, Listen { port: Some(9002) }))
            .is_some_and(|m| m.contains("already in progress")),
        "one reload at a time, binding included"
    );
    let acts = bound(&mut h, 1, MOVED, Ok(()));
    let listens: Vec<Listen> = acts
        .iter()
        .filter_map(|a| match a {
            Action::Spawn { config, .. } => Some(config.listen()),
            _ => None,
        })
        .collect();
    assert_eq!(
        listens,
        vec![MOVED; 2],
        "every candidate starts on the new set"
    );
    assert!(
        releases(&acts).is_empty(),
        "the old set serves until the commit"
    );
    let acts = h.boot(&acts);
    assert_eq!(
        releases(&acts),
        vec![Listen::default()],
        "released once, at the commit"
    );
    assert_eq!(h.sup.config().listen(), MOVED);
    assert_eq!(h.sup.tally().reloads_committed, 1);
    // A reload that keeps the port binds nothing and releases nothing.
    let acts = reload_to(&mut h, 3, MOVED);
    assert_eq!(spawns(&acts), 2);
    let acts = h.boot(&acts);
    assert!(releases(&acts).is_empty(), "{acts:?}");
    assert!(
        !acts
            .iter()
            .any(|a| matches!(a, Action::BindListeners { .. }))
    );
    assert_eq!(h.sup.tally().reloads_committed, 2);
}

#[test]
fn a_second_reload_is_refused_while_the_first_rolls_out() {
    let mut h = harness(Platform::Posix, |_| {});
    h.start();
    // Rolling out: candidates spawned, not yet ready.
    assert_eq!(spawns(&reload_to(&mut h, 1, Listen::default())), 2);
    let second = reload_to(&mut h, 2, Listen::default());
    assert!(
        rejection(&second).is_some_and(|m| m.contains("already in progress")),
        "{second:?}"
    );
    assert_eq!(spawns(&second), 0);
}

#[test]
fn a_late_answer_never_releases_a_set_a_generation_may_still_start_on() {
    let mut h = harness(Platform::Posix, |_| {});
    h.start();
    let late = |h: &mut Harness, listen| releases(&bound(h, 99, listen, Ok(())));
    // The committed generation's set.
    assert!(late(&mut h, Listen::default()).is_empty());
    // The set a reload is being bound for.
    reload_to(&mut h, 1, MOVED);
    assert!(late(&mut h, MOVED).is_empty());
    // The set a reload's candidates are starting on.
    let acts = bound(&mut h, 1, MOVED, Ok(()));
    assert_eq!(spawns(&acts), 2);
    assert!(late(&mut h, MOVED).is_empty());
    h.boot(&acts);
    assert_eq!(h.sup.config().listen(), MOVED);
    // The set of a reload waiting for a recycle.
    let third = Listen { port: Some(9003) };
    h.on(Event::Command(Command::Recycle));
    reload_to(&mut h, 2, third);
    let acts = bound(&mut h, 2, third, Ok(()));
    assert_eq!(
        spawns(&acts),
        0,
        "the reload waits for the recycle: {acts:?}"
    );
    assert!(h.sup.status(h.now).reload_in_flight);
    assert!(late(&mut h, third).is_empty());
    // A set nobody uses is given back.
    assert_eq!(late(&mut h, Listen::default()), vec![Listen::default()]);
}

#[test]
fn a_port_that_cannot_be_bound_rejects_the_reload_with_nothing_started() {
    let mut h = harness(Platform::Posix, |_| {});
    let before = h.start();
    reload_to(&mut h, 1, MOVED);
    let acts = bound(&mut h, 1, MOVED, Err("address in use".into()));
    assert_eq!(spawns(&acts), 0);
    assert!(releases(&acts).is_empty(), "nothing was bound");
    let message = rejection(&acts).expect("rejected");
    assert!(
        message.contains("port 9001") && message.contains("address in use"),
        "{message}"
    );
    assert_eq!(h.members(), before, "the committed generation serves on");
    assert!(!h.sup.status(h.now).reload_in_flight);
    // The next attempt binds again.
    assert_eq!(
        reload_to(&mut h, 2, MOVED),
        vec![Action::BindListeners {
            reload: ReloadId(2),
            listen: MOVED
        }]
    );
}

#[test]
fn a_failed_candidate_generation_releases_the_set_it_was_bound_for() {
    let mut h = harness(Platform::Posix, |_| {});
    h.start();
    reload_to(&mut h, 1, MOVED);
    let acts = bound(&mut h, 1, MOVED, Ok(()));
    let candidate = acts
        .iter()
        .find_map(|a| match a {
            Action::Spawn { worker, .. } => Some(*worker),
            _ => None,
        })
        .expect("a candidate");
    let acts = h.on(Event::Exited {
        worker: candidate,
        status: ExitStatus::Code(1),
    });
    assert!(rejection(&acts).is_some(), "{acts:?}");
    assert_eq!(releases(&acts), vec![MOVED]);
    assert_eq!(h.sup.config().listen(), Listen::default());
}

#[test]
fn a_stop_while_binding_answers_the_reload_and_releases_the_set_once_bound() {
    let mut h = harness(Platform::Posix, |_| {});
    h.start();
    reload_to(&mut h, 1, MOVED);
    let acts = h.on(Event::Command(Command::Stop));
    assert!(acts.contains(&Action::CloseListeners));
    assert!(rejection(&acts).is_some_and(|m| m.contains("stopping")));
    let acts = bound(&mut h, 1, MOVED, Ok(()));
    assert_eq!(acts, vec![Action::ReleaseListeners { listen: MOVED }]);
    assert!(bound(&mut h, 1, MOVED, Err("busy".into())).is_empty());
}

#[test]
fn an_answer_for_another_reload_or_set_is_not_taken_for_the_one_waiting() {
    let mut h = harness(Platform::Posix, |_| {});
    h.start();
    reload_to(&mut h, 1, MOVED);
    let other = Listen { port: Some(7) };
    assert_eq!(
        bound(&mut h, 1, other, Ok(())),
        vec![Action::ReleaseListeners { listen: other }]
    );
    assert!(bound(&mut h, 2, MOVED, Err("busy".into())).is_empty());
    assert!(h.sup.status(h.now).reload_in_flight, "still waiting");
    assert_eq!(spawns(&bound(&mut h, 1, MOVED, Ok(()))), 2);
}

/// A reload of the started configuration with only the port changed.
fn reload_port(h: &mut Harness, id: u64, started: &RawConfig, listen: Listen) -> Vec<Action> {
    let next = RawConfig {
        listen,
        ..started.clone()
    };
    h.on(Event::Command(Command::Reload {
        id: ReloadId(id),
        config: Box::new(next),
    }))
}

/// Decision 0072: the port is fixed while the service manager's sockets, HTTP/3 or ACME
/// are in use. The rule is the core's: the driver only reports where its listeners came
/// from, and both drivers see the same refusals.
#[test]
fn a_fixed_port_refuses_a_move_with_its_reason_and_lets_the_same_port_reload() {
    type Fix = fn(&mut Supervisor, &mut RawConfig);
    let cases: [(Fix, &str); 3] = [
        (
            |sup, _| sup.listeners_from_service_manager(),
            "port cannot change on reload with sockets from the service manager",
        ),
        (
            |_, raw| raw.features.http3 = true,
            "port cannot change on reload with --http3",
        ),
        (
            |_, raw| raw.features.acme = true,
            "port cannot change on reload with --acme",
        ),
    ];
    for (fix, refusal) in cases {
        let mut started = RawConfig {
            workers: 2,
            listen: Listen { port: Some(8443) },
            ..RawConfig::default()
        };
        started.recovery.drain_timeout = 3.0;
        let mut probe = Supervisor::new(
            started.clone().validate().expect("valid"),
            Platform::Posix,
            CoreRng::from_seed([9; 32]),
        );
        fix(&mut probe, &mut started);
        let mut h = harness(Platform::Posix, |raw| *raw = started.clone());
        if probe.port_fixed_by() == Some(crate::supervisor::PortFixedBy::ServiceManager) {
            h.sup.listeners_from_service_manager();
        }
        h.start();
        let acts = reload_port(&mut h, 1, &started, MOVED);
        let message = rejection(&acts).unwrap_or_else(|| panic!("{refusal}: {acts:?}"));
        assert!(message.starts_with(refusal), "{message}");
        assert!(message.ends_with("8443 -> 9001"), "{message}");
        assert!(
            !acts
                .iter()
                .any(|a| matches!(a, Action::BindListeners { .. } | Action::Spawn { .. })),
            "nothing bound or started: {acts:?}"
        );
        assert_eq!(
            h.sup.status(h.now).last_reload_error.as_deref(),
            Some(message)
        );
        // The same port reloads as ever.
        let same = Listen { port: Some(8443) };
        let acts = reload_port(&mut h, 2, &started, same);
        assert_eq!(rejection(&acts), None, "{refusal}: {acts:?}");
        assert!(acts.iter().any(|a| matches!(a, Action::Spawn { .. })));
    }
    // Nothing fixes it: the move is bound as decision 0035 says.
    let mut h = harness(Platform::Posix, |_| {});
    h.start();
    assert_eq!(h.sup.port_fixed_by(), None);
    let acts = reload_to(&mut h, 1, MOVED);
    assert!(
        matches!(&acts[..], [Action::BindListeners { .. }]),
        "{acts:?}"
    );
}
