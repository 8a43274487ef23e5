//! Parent-owned singleton services (access log, mDNS, QR, TFTP, ACME, HTTP/3): each
//! starts once after the first commit, moves to a new generation in one step, and stops
//! once.

use std::collections::VecDeque;

use crate::config::Features;
use crate::ids::Generation;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SingletonKind {
    AccessLog,
    Mdns,
    Qr,
    Tftp,
    Acme,
    Http3,
}

impl SingletonKind {
    pub fn name(self) -> &'static str {
        match self {
            SingletonKind::AccessLog => "access_log",
            SingletonKind::Mdns => "mdns",
            SingletonKind::Qr => "qr",
            SingletonKind::Tftp => "tftp",
            SingletonKind::Acme => "acme",
            SingletonKind::Http3 => "http3",
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
            (features.http3, SingletonKind::Http3),
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
    Start {
        kind: SingletonKind,
        generation: Generation,
    },
    /// Move to `to` in one step: the service never describes two generations at once.
    Switch {
        kind: SingletonKind,
        from: Generation,
        to: Generation,
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

#[derive(Debug, Clone)]
pub struct Singletons {
    entries: Vec<(SingletonKind, SingletonState, u32, u32)>,
    actions: VecDeque<SingletonAction>,
}

impl Singletons {
    pub fn new(kinds: &[SingletonKind]) -> Self {
        Singletons {
            entries: kinds
                .iter()
                .map(|&k| (k, SingletonState::NotStarted, 0, 0))
                .collect(),
            actions: VecDeque::new(),
        }
    }

    pub fn states(&self) -> impl Iterator<Item = (SingletonKind, SingletonState)> + '_ {
        self.entries.iter().map(|(k, s, _, _)| (*k, *s))
    }

    /// (starts, stops) per kind, for predicates.
    pub fn counts(&self) -> impl Iterator<Item = (SingletonKind, u32, u32)> + '_ {
        self.entries.iter().map(|(k, _, a, b)| (*k, *a, *b))
    }

    pub fn poll_action(&mut self) -> Option<SingletonAction> {
        self.actions.pop_front()
    }

    pub fn committed(&mut self, generation: Generation) {
        for (kind, state, starts, _) in &mut self.entries {
            match *state {
                SingletonState::NotStarted => {
                    *state = SingletonState::Running(generation);
                    *starts += 1;
                    self.actions.push_back(SingletonAction::Start {
                        kind: *kind,
                        generation,
                    });
                }
                SingletonState::Running(from) if from < generation => {
                    *state = SingletonState::Running(generation);
                    self.actions.push_back(SingletonAction::Switch {
                        kind: *kind,
                        from,
                        to: generation,
                    });
                }
                _ => {}
            }
        }
    }

    /// Stop everything that runs. Idempotent; a singleton never started is never stopped.
    pub fn stop(&mut self) {
        for (kind, state, _, stops) in &mut self.entries {
            match *state {
                SingletonState::Running(_) => {
                    *state = SingletonState::Stopped;
                    *stops += 1;
                    self.actions
                        .push_back(SingletonAction::Stop { kind: *kind });
                }
                SingletonState::NotStarted => *state = SingletonState::Stopped,
                SingletonState::Stopped => {}
            }
        }
    }

    pub fn check_invariants(&self) -> Result<(), String> {
        for (kind, state, starts, stops) in &self.entries {
            if *starts > 1 || *stops > 1 || stops > starts {
                return Err(format!(
                    "{} started {starts} and stopped {stops} times",
                    kind.name()
                ));
            }
            if matches!(state, SingletonState::Running(_)) && *stops > 0 {
                return Err(format!("{} runs after its stop", kind.name()));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_once_switch_atomically_stop_once() {
        let mut s = Singletons::new(&[SingletonKind::Mdns, SingletonKind::AccessLog]);
        s.committed(Generation(1));
        s.committed(Generation(1));
        s.committed(Generation(2));
        s.stop();
        s.stop();
        s.committed(Generation(3));
        let got: Vec<_> = std::iter::from_fn(|| s.poll_action()).collect();
        assert_eq!(got.len(), 6);
        assert_eq!(
            got[2],
            SingletonAction::Switch {
                kind: SingletonKind::Mdns,
                from: Generation(1),
                to: Generation(2)
            }
        );
        assert_eq!(s.counts().count(), 2);
        assert!(s.counts().all(|(_, a, b)| a == 1 && b == 1));
        s.check_invariants().expect("invariants");
    }
}
