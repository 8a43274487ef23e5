//! The parent: the supervisor, the broker and the singletons as one machine, with the
//! routing between them written once here rather than in each driver.
//!
//! - A worker's broker requests go to the broker only while its channel is trusted.
//! - When the supervisor reports a worker gone, the broker revokes everything it held and
//!   the driver removes its temporary files, before any replacement can be spawned (the
//!   supervisor spawns replacements only after the reap, which comes after this).
//! - A committed generation moves the singletons; the final exit stops them and waits
//!   for the access-log queue to drain.

use std::collections::VecDeque;

use crate::broker::{Broker, Owner};
use crate::config::ValidConfig;
use crate::proto::{ParentMessage, WorkerMessage};
use crate::rng::CoreRng;
use crate::singletons::{SingletonAction, SingletonKind, Singletons};
use crate::supervisor::{Action, Command, Event, Platform, Supervisor};
use crate::time::{Instant, earliest};

/// What the parent asks its driver to do: the supervisor's actions as they are (wrapped,
/// not copied, so a new action needs no second definition), and the singletons'.
///
/// Two supervisor actions carry more than their name here: `WorkerGone` also means "close
/// the worker's channel and delete its private temporary files" (the broker has already
/// revoked its grants when the driver sees it), and `Exit` is held back until the
/// access-log queue has drained.
#[derive(Debug, Clone, PartialEq)]
pub enum ParentAction {
    Supervisor(Action),
    Singleton(SingletonAction),
}

#[derive(Debug, Clone)]
pub struct Parent {
    supervisor: Supervisor,
    broker: Broker,
    singletons: Singletons,
    pending_exit: Option<i32>,
    actions: VecDeque<ParentAction>,
}

impl Parent {
    /// `seed` comes from OS entropy in production and from the scenario in simulation.
    pub fn new(config: ValidConfig, platform: Platform, seed: [u8; 32]) -> Self {
        let mut rng = CoreRng::from_seed(seed);
        let singletons = Singletons::new(&SingletonKind::enabled_by(config.features()));
        let broker = Broker::new(config.broker().clone(), rng.fork());
        Parent {
            supervisor: Supervisor::new(config, platform, rng.fork()),
            broker,
            singletons,
            pending_exit: None,
            actions: VecDeque::new(),
        }
    }

    pub fn supervisor(&self) -> &Supervisor {
        &self.supervisor
    }

    pub fn broker(&self) -> &Broker {
        &self.broker
    }

    pub fn singletons(&self) -> &Singletons {
        &self.singletons
    }

    pub fn poll_action(&mut self) -> Option<ParentAction> {
        self.actions.pop_front()
    }

    pub fn handle(&mut self, now: Instant, event: Event) {
        match event {
            Event::Message {
                worker,
                message: WorkerMessage::Broker { id, request },
            } => {
                if let (true, Some(generation)) = (
                    self.supervisor.is_connected(worker),
                    self.supervisor.worker_generation(worker),
                ) {
                    self.broker
                        .handle_request(now, Owner { worker, generation }, id, request);
                }
            }
            Event::Command(Command::Reload { id, config })
                if config.features != *self.supervisor.config().features() =>
            {
                self.actions
                    .push_back(ParentAction::Supervisor(Action::ReloadRejected {
                        reload: id,
                        message: "features cannot change on reload (their owners are started once); restart servery to change them".into(),
                    }));
            }
            event => self.supervisor.handle(now, event),
        }
        self.pump();
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        self.broker.handle_timeout(now);
        self.supervisor.handle_timeout(now);
        self.pump();
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        earliest(self.supervisor.poll_timeout(), self.broker.poll_timeout())
    }

    /// Up to `max` access-log records for the sole log writer.
    pub fn take_log_batch(&mut self, max: usize) -> Vec<String> {
        let batch = self.broker.take_log_batch(max);
        self.pump();
        batch
    }

    fn pump(&mut self) {
        while let Some(action) = self.supervisor.poll_action() {
            match &action {
                Action::WorkerGone { worker } => {
                    self.broker.revoke_worker(*worker);
                }
                Action::GenerationCommitted { generation, .. } if self.pending_exit.is_none() => {
                    self.singletons.committed(*generation);
                }
                Action::Exit { code } => {
                    self.pending_exit = Some(*code);
                    self.singletons.stop();
                    continue;
                }
                _ => {}
            }
            self.actions.push_back(ParentAction::Supervisor(action));
            if let Some(config) = self.reloaded_limits() {
                self.broker.set_limits(config);
            }
        }
        while let Some(action) = self.singletons.poll_action() {
            self.actions.push_back(ParentAction::Singleton(action));
        }
        while let Some((worker, id, reply)) = self.broker.poll_reply() {
            self.actions
                .push_back(ParentAction::Supervisor(Action::Send {
                    worker,
                    message: ParentMessage::Broker { id, reply },
                }));
        }
        if let Some(code) = self.pending_exit
            && self.broker.log().is_empty()
        {
            self.pending_exit = None;
            self.actions
                .push_back(ParentAction::Supervisor(Action::Exit { code }));
        }
    }

    fn reloaded_limits(&self) -> Option<crate::config::BrokerLimits> {
        let limits = self.supervisor.config().broker();
        (limits != self.broker_limits()).then(|| limits.clone())
    }

    fn broker_limits(&self) -> &crate::config::BrokerLimits {
        self.broker.limits()
    }

    /// Every machine's invariants, plus the one that joins them: nothing is held by a
    /// worker whose channel is closed.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.supervisor.check_invariants()?;
        self.broker.check_invariants()?;
        self.singletons.check_invariants()?;
        for holder in self.broker.holders() {
            if !self.supervisor.is_connected(holder) {
                return Err(format!(
                    "broker grants held by disconnected worker {holder}"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RawConfig;
    use crate::ids::{Generation, ReloadId, WorkerId};
    use crate::proto::{BrokerRequest, TargetKey};
    use crate::supervisor::ExitStatus;

    fn actions(p: &mut Parent) -> Vec<ParentAction> {
        std::iter::from_fn(|| p.poll_action()).collect()
    }

    fn started(features: impl FnOnce(&mut RawConfig)) -> (Parent, WorkerId) {
        let mut raw = RawConfig::default();
        features(&mut raw);
        let mut p = Parent::new(raw.validate().expect("valid"), Platform::Posix, [1; 32]);
        let t = Instant::ZERO;
        p.handle(t, Event::Start);
        let w = WorkerId(1);
        p.handle(
            t,
            Event::Message {
                worker: w,
                message: WorkerMessage::Prepared,
            },
        );
        p.handle(
            t,
            Event::Message {
                worker: w,
                message: WorkerMessage::Ready,
            },
        );
        actions(&mut p);
        (p, w)
    }

    #[test]
    fn a_reload_may_not_change_the_parent_owned_features() {
        let (mut p, _) = started(|_| {});
        let mut next = RawConfig::default();
        next.features.mdns = true;
        p.handle(
            Instant::ZERO,
            Event::Command(Command::Reload {
                id: ReloadId(1),
                config: Box::new(next),
            }),
        );
        let acts = actions(&mut p);
        assert!(
            matches!(&acts[..], [ParentAction::Supervisor(Action::ReloadRejected { message, .. })] if message.contains("features"))
        );
        assert!(!p.supervisor().rollout_in_flight());
    }

    #[test]
    fn singletons_start_on_commit_and_stop_before_exit() {
        let (mut p, w) = started(|r| r.features.mdns = true);
        assert!(
            p.singletons()
                .states()
                .all(|(_, s)| s == crate::singletons::SingletonState::Running(Generation(1)))
        );
        p.handle(Instant::ZERO, Event::Command(Command::Stop));
        p.handle(
            Instant::ZERO,
            Event::Exited {
                worker: w,
                status: ExitStatus::Code(0),
            },
        );
        let acts = actions(&mut p);
        let stop = acts
            .iter()
            .position(|a| matches!(a, ParentAction::Singleton(SingletonAction::Stop { .. })));
        let exit = acts
            .iter()
            .position(|a| matches!(a, ParentAction::Supervisor(Action::Exit { code: 0 })));
        assert!(stop.expect("stopped") < exit.expect("exits"));
    }

    #[test]
    fn exit_waits_until_the_access_log_is_written() {
        let (mut p, w) = started(|r| r.features.access_log = true);
        for id in 0..3 {
            p.handle(
                Instant::ZERO,
                Event::Message {
                    worker: w,
                    message: WorkerMessage::Broker {
                        id,
                        request: BrokerRequest::AppendLog {
                            record: format!("r{id}"),
                        },
                    },
                },
            );
        }
        actions(&mut p);
        p.handle(Instant::ZERO, Event::Command(Command::Stop));
        p.handle(
            Instant::ZERO,
            Event::Exited {
                worker: w,
                status: ExitStatus::Code(0),
            },
        );
        let acts = actions(&mut p);
        assert!(
            !acts
                .iter()
                .any(|a| matches!(a, ParentAction::Supervisor(Action::Exit { .. }))),
            "records still queued"
        );
        assert_eq!(p.take_log_batch(2).len(), 2);
        assert!(
            !actions(&mut p)
                .iter()
                .any(|a| matches!(a, ParentAction::Supervisor(Action::Exit { .. })))
        );
        assert_eq!(p.take_log_batch(2).len(), 1);
        assert!(actions(&mut p).contains(&ParentAction::Supervisor(Action::Exit { code: 0 })));
    }

    #[test]
    fn a_gone_worker_loses_its_grants_and_is_not_served() {
        let (mut p, w) = started(|_| {});
        let key = TargetKey {
            dir_device: 1,
            dir_inode: 1,
            name: "f".into(),
        };
        let req = |id| Event::Message {
            worker: w,
            message: WorkerMessage::Broker {
                id,
                request: BrokerRequest::AcquireLease { key: key.clone() },
            },
        };
        p.handle(Instant::ZERO, req(1));
        assert_eq!(p.broker().leases().count(), 1);
        let owner = p.broker().leases().next().map(|(_, l)| l.owner);
        assert_eq!(
            owner,
            Some(crate::broker::Owner {
                worker: w,
                generation: Generation(1)
            })
        );
        assert_eq!(p.broker().holders().collect::<Vec<_>>(), vec![w]);
        p.check_invariants().expect("consistent");
        let mut broken = p.clone();
        broken
            .supervisor
            .handle(Instant::ZERO, Event::ChannelClosed { worker: w });
        broken.supervisor.poll_action();
        assert!(
            broken.check_invariants().is_err(),
            "a grant held by a disconnected worker"
        );
        actions(&mut p);
        p.handle(Instant::ZERO, Event::ChannelClosed { worker: w });
        let acts = actions(&mut p);
        assert!(acts.contains(&ParentAction::Supervisor(Action::WorkerGone { worker: w })));
        assert_eq!(p.broker().leases().count(), 0, "revoked at EOF");
        p.handle(Instant::ZERO, req(2));
        assert_eq!(
            p.broker().leases().count(),
            0,
            "a gone worker is not served"
        );
        p.check_invariants().expect("invariants");
    }
}
