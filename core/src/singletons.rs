//! Parent-owned singleton services (access log, mDNS, QR, TFTP, ACME): each starts once
//! after the first commit, moves to a new generation in one step, and stops once.
//!
//! HTTP/3 is not one of them: its sockets are one per worker, and the supervisor decides
//! who reads which and which take new connections at every lifecycle step
//! ([`crate::supervisor::QuicSteering`], decisions 0079 and 0077).
//!
//! Those that tell the network the service is there (an advertisement, a UDP listener)
//! stop when the listeners close, at the start of a stop or a failure: after that nothing
//! new is accepted, so nothing may still invite clients. The rest (the access log) stop
//! at the exit, once no worker is left to produce for them (decision 0020).

use std::collections::VecDeque;

use crate::config::{Features, Listen};
use crate::ids::Generation;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SingletonKind {
    AccessLog,
    Mdns,
    Qr,
    Tftp,
    Acme,
}

impl SingletonKind {
    pub fn name(self) -> &'static str {
        match self {
            SingletonKind::AccessLog => "access_log",
            SingletonKind::Mdns => "mdns",
            SingletonKind::Qr => "qr",
            SingletonKind::Tftp => "tftp",
            SingletonKind::Acme => "acme",
        }
    }

    /// Whether this service invites clients, and so stops when the listeners close rather
    /// than at the exit.
    pub fn stops_with_listeners(self) -> bool {
        match self {
            SingletonKind::Mdns | SingletonKind::Qr | SingletonKind::Tftp => true,
            SingletonKind::AccessLog | SingletonKind::Acme => false,
        }
    }

    pub fn enabled_by(features: &Features) -> Vec<SingletonKind> {
        let mut kinds = Vec::new();
        let flags = [
            (features.access_log, SingletonKind::AccessLog),
            (features.mdns, SingletonKind::Mdns),
            (features.qr, SingletonKind::Qr),
            (features.tftp, SingletonKind::Tftp),
            (features.acme, SingletonKind::Acme),
        ];
        for (on, kind) in flags {
            if on {
                kinds.push(kind);
            }
        }
        kinds
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SingletonAction {
    /// `listen`: the listener set the generation serves on (what a service advertises).
    Start {
        kind: SingletonKind,
        generation: Generation,
        listen: Listen,
    },
    /// Move to `to` in one step: the service never describes two generations at once.
    Switch {
        kind: SingletonKind,
        from: Generation,
        to: Generation,
        listen: Listen,
    },
    Stop {
        kind: SingletonKind,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SingletonState {
    NotStarted,
    Running(Generation),
    Stopped,
}

/// One singleton's state and how often it moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SingletonEntry {
    pub kind: SingletonKind,
    pub state: SingletonState,
    pub starts: u32,
    pub switches: u32,
    pub stops: u32,
}

#[derive(Debug, Clone)]
pub struct Singletons {
    entries: Vec<SingletonEntry>,
    actions: VecDeque<SingletonAction>,
}

impl Singletons {
    pub fn new(kinds: &[SingletonKind]) -> Self {
        Singletons {
            entries: kinds
                .iter()
                .map(|&kind| SingletonEntry {
                    kind,
                    state: SingletonState::NotStarted,
                    starts: 0,
                    switches: 0,
                    stops: 0,
                })
                .collect(),
            actions: VecDeque::new(),
        }
    }

    pub fn states(&self) -> impl Iterator<Item = (SingletonKind, SingletonState)> + '_ {
        self.entries.iter().map(|e| (e.kind, e.state))
    }

    /// Every singleton with its counters (`ctl status`).
    pub fn entries(&self) -> impl Iterator<Item = &SingletonEntry> + '_ {
        self.entries.iter()
    }

    /// (starts, stops) per kind, for predicates.
    pub fn counts(&self) -> impl Iterator<Item = (SingletonKind, u32, u32)> + '_ {
        self.entries.iter().map(|e| (e.kind, e.starts, e.stops))
    }

    pub fn poll_action(&mut self) -> Option<SingletonAction> {
        self.actions.pop_front()
    }

    /// `generation` is committed and serves on `listen`.
    pub fn committed(&mut self, generation: Generation, listen: Listen) {
        for e in &mut self.entries {
            match e.state {
                SingletonState::NotStarted => {
                    e.state = SingletonState::Running(generation);
                    e.starts += 1;
                    self.actions.push_back(SingletonAction::Start {
                        kind: e.kind,
                        generation,
                        listen,
                    });
                }
                SingletonState::Running(from) if from < generation => {
                    e.state = SingletonState::Running(generation);
                    e.switches += 1;
                    self.actions.push_back(SingletonAction::Switch {
                        kind: e.kind,
                        from,
                        to: generation,
                        listen,
                    });
                }
                _ => {}
            }
        }
    }

    /// The listeners closed (a stop or a failure began): stop those that invite clients.
    pub fn listeners_closed(&mut self) {
        self.stop_where(SingletonKind::stops_with_listeners);
    }

    /// Stop everything that runs. Idempotent; a singleton never started is never stopped.
    pub fn stop(&mut self) {
        self.stop_where(|_| true);
    }

    fn stop_where(&mut self, which: impl Fn(SingletonKind) -> bool) {
        for e in self.entries.iter_mut().filter(|e| which(e.kind)) {
            match e.state {
                SingletonState::Running(_) => {
                    e.state = SingletonState::Stopped;
                    e.stops += 1;
                    self.actions
                        .push_back(SingletonAction::Stop { kind: e.kind });
                }
                SingletonState::NotStarted => e.state = SingletonState::Stopped,
                SingletonState::Stopped => {}
            }
        }
    }

    pub fn check_invariants(&self) -> Result<(), String> {
        for e in &self.entries {
            let (starts, stops) = (e.starts, e.stops);
            if starts > 1 || stops > 1 || stops > starts {
                return Err(format!(
                    "{} started {starts} and stopped {stops} times",
                    e.kind.name()
                ));
            }
            if matches!(e.state, SingletonState::Running(_)) && stops > 0 {
                return Err(format!("{} runs after its stop", e.kind.name()));
            }
            if e.switches > 0 && starts == 0 {
                return Err(format!("{} switched before it started", e.kind.name()));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each rule of the invariant check, broken alone on an otherwise sound entry.
    #[test]
    fn each_broken_rule_is_reported_by_the_invariant_check() {
        let sound = SingletonEntry {
            kind: SingletonKind::Mdns,
            state: SingletonState::Running(Generation(1)),
            starts: 1,
            switches: 0,
            stops: 0,
        };
        let check = |e: SingletonEntry| {
            let mut s = Singletons::new(&[SingletonKind::Mdns]);
            s.entries[0] = e;
            s.check_invariants()
        };
        assert_eq!(check(sound), Ok(()));
        assert_eq!(
            Singletons::new(&[SingletonKind::Mdns]).check_invariants(),
            Ok(()),
            "nothing started, nothing broken"
        );
        let stopped = SingletonEntry {
            state: SingletonState::Stopped,
            stops: 1,
            ..sound
        };
        assert_eq!(check(stopped), Ok(()));
        for (broken, says) in [
            (SingletonEntry { starts: 2, ..sound }, "started 2"),
            (
                SingletonEntry {
                    stops: 2,
                    ..stopped
                },
                "stopped 2",
            ),
            (
                SingletonEntry {
                    state: SingletonState::Stopped,
                    starts: 0,
                    stops: 1,
                    ..sound
                },
                "started 0 and stopped 1",
            ),
            (SingletonEntry { stops: 1, ..sound }, "runs after its stop"),
            (
                SingletonEntry {
                    state: SingletonState::NotStarted,
                    starts: 0,
                    switches: 1,
                    ..sound
                },
                "switched before it started",
            ),
        ] {
            let got = check(broken);
            assert!(
                got.as_ref().is_err_and(|e| e.contains(says)),
                "{broken:?}: {got:?}"
            );
        }
    }

    #[test]
    fn start_once_switch_atomically_stop_once() {
        let mut s = Singletons::new(&[SingletonKind::Mdns, SingletonKind::AccessLog]);
        let moved = Listen { port: Some(9) };
        s.committed(Generation(1), Listen::default());
        s.committed(Generation(1), Listen::default());
        s.committed(Generation(2), moved);
        assert_eq!(
            s.states().collect::<Vec<_>>(),
            [
                (SingletonKind::Mdns, SingletonState::Running(Generation(2))),
                (
                    SingletonKind::AccessLog,
                    SingletonState::Running(Generation(2))
                ),
            ]
        );
        s.stop();
        s.stop();
        s.committed(Generation(3), moved);
        let got: Vec<_> = std::iter::from_fn(|| s.poll_action()).collect();
        assert_eq!(got.len(), 6);
        assert_eq!(
            got[2],
            SingletonAction::Switch {
                kind: SingletonKind::Mdns,
                from: Generation(1),
                to: Generation(2),
                listen: moved,
            }
        );
        assert_eq!(s.counts().count(), 2);
        assert!(s.counts().all(|(_, a, b)| a == 1 && b == 1));
        assert!(s.entries().all(|e| e.switches == 1));
        s.check_invariants().expect("invariants");
    }

    #[test]
    fn closing_the_listeners_stops_what_invites_clients_and_the_exit_stops_the_rest() {
        let mut s = Singletons::new(&[SingletonKind::AccessLog, SingletonKind::Mdns]);
        s.committed(Generation(1), Listen::default());
        let _: Vec<_> = std::iter::from_fn(|| s.poll_action()).collect();
        s.listeners_closed();
        assert_eq!(
            s.poll_action(),
            Some(SingletonAction::Stop {
                kind: SingletonKind::Mdns
            })
        );
        assert_eq!(s.poll_action(), None, "the access log runs until the exit");
        // A generation committed after that moves only what still runs.
        s.committed(Generation(2), Listen::default());
        assert_eq!(
            s.poll_action(),
            Some(SingletonAction::Switch {
                kind: SingletonKind::AccessLog,
                from: Generation(1),
                to: Generation(2),
                listen: Listen::default(),
            })
        );
        s.stop();
        assert_eq!(
            s.poll_action(),
            Some(SingletonAction::Stop {
                kind: SingletonKind::AccessLog
            })
        );
        assert_eq!(s.poll_action(), None, "each stops once");
        s.check_invariants().expect("invariants");
    }
}
