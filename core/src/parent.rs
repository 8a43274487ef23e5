//! The parent: the supervisor, the broker and the singletons as one machine, with the
//! routing between them written once here rather than in each driver.
//!
//! - A worker's broker requests go to the broker only while its channel is trusted.
//! - When the supervisor reports a worker gone, the broker revokes everything it held and
//!   the driver removes its temporary files, before any replacement can be spawned (the
//!   supervisor spawns replacements only after the reap, which comes after this).
//! - A committed generation moves the singletons; closing the listeners stops those that
//!   invite clients (mDNS, QR, TFTP), and the final exit stops the rest and waits for the
//!   access-log queue to drain.
//! - The parent watches its own loop (decision 0017): it never sleeps longer than the
//!   supervisor's watch period while it has workers, and when it wakes later than the
//!   deadline it asked for, the time it did not run counts towards no worker's deadline.

use std::collections::VecDeque;

use crate::acme::{AcmeAction, CertManager, ManagerConfig};
use crate::broker::{Broker, Owner};
use crate::config::ValidConfig;
use crate::control::{Answer, RequestId};
use crate::ids::{ReloadId, WorkerId};
use crate::proto::{ParentMessage, WorkerMessage};
use crate::rng::CoreRng;
use crate::singletons::{SingletonAction, SingletonKind, Singletons};
use crate::supervisor::{Action, Command, Event, Platform, Supervisor};
use crate::time::{Instant, earliest};
use crate::tls_material::{TlsAction, TlsState};

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
    /// Keep this as the WebDAV lock journal, replacing the last one, before anything
    /// queued after it (the answer to the LOCK that changed it) is sent: every live lock
    /// with its time left. Only with `features.dav_persistent_locks`; the driver gives
    /// the journal back to [`Parent::restore_dav_locks`] when it starts again.
    PersistDavLocks(Vec<crate::proto::DavLockInfo>),
    /// The certificate manager's requests of its driver (order, answer, store, install,
    /// ask for renewal info). Its challenge publications never appear here: the parent
    /// puts them in the broker itself, before the answer goes out.
    Acme(AcmeAction),
    /// What the TLS material machine asks of the driver (decision 0025).
    Tls(TlsAction),
    /// The one answer to an operator's request ([`crate::control`]): the driver relays it
    /// to whoever asked, and decides nothing about it.
    Answer {
        request: RequestId,
        answer: Answer,
    },
    /// Close and open the access log again (an accepted `reopen-logs`).
    ReopenAccessLog,
}

/// The broker client the parent itself runs (its TFTP service's writes), under an id no
/// worker ever has (worker ids start at 1). Its requests arrive as
/// [`Event::Message`]s from this id and its answers leave as [`Action::Send`]s to it,
/// which the driver hands to the parent's own client instead of a channel: the same
/// broker tables answer it, so a TFTP write and an HTTP upload to one file serialize.
/// Its grants are given back by the client when the service ends, and expire by their
/// TTL otherwise, as a worker's do.
pub const PARENT_CLIENT: WorkerId = WorkerId(0);

#[derive(Debug, Clone)]
pub struct Parent {
    supervisor: Supervisor,
    broker: Broker,
    singletons: Singletons,
    /// The ACME certificate manager, when the driver enabled it ([`Parent::with_acme`]).
    acme: Option<CertManager>,
    /// The manager's random stream, drawn after the others' so theirs do not move.
    acme_rng: Option<CoreRng>,
    pending_exit: Option<i32>,
    /// When the parent last took a step (handled an event or its deadlines).
    last_step: Option<Instant>,
    actions: VecDeque<ParentAction>,
    /// The identity and session-ticket keys, when serving TLS ([`Parent::start_tls`]).
    tls: Option<TlsState>,
    /// What [`Parent::poll_timeout`] answers: worked out once whenever the machine
    /// changes ([`Parent::settle`]) rather than on every call. The driver asks for it
    /// before each wait and after each wake-up, and each step begins by judging lateness
    /// against it, so a step used to walk every worker's deadlines several times.
    deadline: Option<Instant>,
    /// Reloads asked for over the control socket, answered when their outcome comes.
    awaiting: Vec<(ReloadId, RequestId)>,
    /// Answers decided in this step, given out after what the step carries out.
    answers: VecDeque<(RequestId, Answer)>,
    /// Which locks the WebDAV journal on disk holds ([`Parent::dav_journal_written`]).
    journal: dav_journal::JournalState,
}

mod dav_journal;
mod requests;

pub use dav_journal::{JOURNAL_RETRY, JournalWrite};

impl Parent {
    /// `seed` comes from OS entropy in production and from the scenario in simulation.
    pub fn new(config: ValidConfig, platform: Platform, seed: [u8; 32]) -> Self {
        let mut rng = CoreRng::from_seed(seed);
        let singletons = Singletons::new(&SingletonKind::enabled_by(config.features()));
        let broker = Broker::new(config.broker().clone(), rng.fork());
        let supervisor = Supervisor::new(config, platform, rng.fork());
        Parent {
            supervisor,
            broker,
            singletons,
            acme: None,
            acme_rng: Some(rng.fork()),
            pending_exit: None,
            last_step: None,
            actions: VecDeque::new(),
            tls: None,
            deadline: None,
            awaiting: Vec::new(),
            answers: VecDeque::new(),
            journal: dav_journal::JournalState::default(),
        }
        .settled()
    }

    /// Serve TLS with this material, before the first event: every worker then gets it as
    /// its first message, and again whenever it changes.
    pub fn start_tls(&mut self, tls: TlsState) {
        self.tls = Some(tls);
        self.settle();
    }

    /// The driver's report, before the first event: the serving listeners came from the
    /// service manager, so the port is fixed for the run (decision 0072).
    pub fn with_listeners_from_service_manager(mut self) -> Self {
        self.supervisor.listeners_from_service_manager();
        self
    }

    pub fn tls(&self) -> Option<&TlsState> {
        self.tls.as_ref()
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

    /// Run an ACME certificate manager for `config` (its domains and policy). Its I/O
    /// comes in as [`Event::Acme`] and goes out as [`ParentAction::Acme`].
    pub fn with_acme(mut self, config: ManagerConfig) -> Self {
        let rng = self
            .acme_rng
            .take()
            .unwrap_or_else(|| CoreRng::from_seed([0; 32]));
        self.acme = Some(CertManager::new(config, rng));
        self.settled()
    }

    pub fn acme(&self) -> Option<&CertManager> {
        self.acme.as_ref()
    }

    /// Whether the service takes traffic, its certificate counted (decision 0057): with
    /// ACME, an expired certificate in service makes it unready whatever its workers; a
    /// first certificate not issued yet, or a valid one whose renewals fail, makes a
    /// service that takes traffic degraded — still sent traffic, but shown: before the
    /// first issuance the CA's HTTP-01 request must still be routed to it, which a load
    /// balancer that follows `/readyz` would not do for an unready one. Without ACME it is
    /// the supervisor's readiness. `wall` is the driver's Unix time.
    pub fn readiness(&self, wall: crate::acme::UnixTime) -> crate::supervisor::Readiness {
        use crate::acme::CertHealth;
        use crate::supervisor::Readiness;
        let serving = self.supervisor.readiness();
        match self.acme.as_ref().map(|m| m.health(wall)) {
            Some(CertHealth::Expired) => Readiness::Unready,
            Some(CertHealth::Issuing) if serving.takes_traffic() => Readiness::Degraded,
            Some(CertHealth::Renewing) if serving == Readiness::Ready => Readiness::Degraded,
            _ => serving,
        }
    }

    /// Locks a previous parent journalled, before the first event; returns how many were
    /// still live. Their time left counts from `now`.
    pub fn restore_dav_locks(
        &mut self,
        now: Instant,
        locks: Vec<crate::proto::DavLockInfo>,
    ) -> crate::broker::DavRestore {
        let restored = self.broker.restore_dav_locks(now, locks);
        let dav = self.broker.dav();
        let on_disk = dav
            .snapshot(now)
            .into_iter()
            .filter_map(|l| dav.expiry(l.token).map(|at| (l.token, at)));
        self.journal.restored(on_disk);
        self.settle();
        restored
    }

    pub fn poll_action(&mut self) -> Option<ParentAction> {
        self.actions.pop_front()
    }

    pub fn handle(&mut self, now: Instant, event: Event) {
        self.step_begins(now);
        self.route(now, event);
        self.pump();
        self.settle();
    }

    /// Each event to the machine that takes it.
    fn route(&mut self, now: Instant, event: Event) {
        match event {
            // The parent's own client: broker requests only, under the committed
            // generation; anything else from this id is not a worker's and is dropped.
            Event::Message { worker, message } if worker == PARENT_CLIENT => {
                if let WorkerMessage::Broker { id, request } = message {
                    let generation = self.supervisor.generation();
                    self.broker
                        .handle_request(now, Owner { worker, generation }, id, request);
                }
            }
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
            Event::Acme { wall, event } => {
                if let Some(acme) = &mut self.acme {
                    acme.handle(now, wall, *event);
                }
            }
            Event::Command(Command::Reload { id, config })
                if config.features != *self.supervisor.config().features() =>
            {
                let rejected = Action::ReloadRejected {
                    reload: id,
                    message: "features cannot change on reload (their owners are started once); restart servery to change them".into(),
                };
                self.answer_reload(&rejected);
                self.actions.push_back(ParentAction::Supervisor(rejected));
            }
            Event::Control { id, request } => self.request(now, id, request),
            // The log's share of a dead worker's final counts is the broker's (the lines it
            // never sent), the request counters the supervisor's.
            Event::FinalCounts { worker, counts } => {
                self.broker
                    .worker_log_ended(worker, counts.log_lines, counts.log_dropped);
                self.supervisor
                    .handle(now, Event::FinalCounts { worker, counts });
            }
            Event::Tls(input) => {
                if let Some(tls) = &mut self.tls {
                    tls.handle(now, input);
                }
            }
            event => self.supervisor.handle(now, event),
        }
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        self.step_begins(now);
        self.broker.handle_timeout(now);
        self.supervisor.handle_timeout(now);
        if let Some(acme) = &mut self.acme
            && acme.poll_timeout().is_some_and(|due| due <= now)
        {
            acme.handle_timeout(now);
        }
        if let Some(tls) = &mut self.tls {
            tls.handle_timeout(now);
        }
        self.journal.handle_timeout(now);
        self.pump();
        self.settle();
    }

    /// The next deadline: when [`Parent::handle_timeout`] is due, at the latest.
    pub fn poll_timeout(&self) -> Option<Instant> {
        debug_assert_eq!(
            self.deadline,
            self.next_deadline(),
            "the kept deadline is the one the machine's state gives"
        );
        self.deadline
    }

    /// Work the next deadline out from every machine's state (kept in `deadline`).
    fn next_deadline(&self) -> Option<Instant> {
        earliest(
            self.supervisor.poll_timeout(),
            self.deadlines_but_supervisor(),
        )
    }

    /// The earliest deadline of the broker, the watch period, ACME and TLS.
    fn deadlines_but_supervisor(&self) -> Option<Instant> {
        let watch = self
            .last_step
            .zip(self.supervisor.watch_period())
            .map(|(t, period)| t + period);
        let acme = self.acme.as_ref().and_then(CertManager::poll_timeout);
        let tls = self.tls.as_ref().and_then(TlsState::poll_timeout);
        earliest(
            earliest(self.broker.poll_timeout(), watch),
            earliest(earliest(acme, tls), self.journal.poll_timeout()),
        )
    }

    /// A step at `now`. The machine has not changed since the last one, so
    /// [`Parent::poll_timeout`] is still the deadline the driver was given: a parent woken
    /// later than that (or than the last step, for a deadline already due then) did not
    /// run for the difference — a frozen machine, a stopped or starved parent — and
    /// nobody could be heard meanwhile (decision 0017).
    fn step_begins(&mut self, now: Instant) {
        if let (Some(due), Some(last)) = (self.poll_timeout(), self.last_step) {
            let late = now.saturating_since(due.max(last));
            self.supervisor.not_running(now, late);
        }
        self.last_step = Some(now);
    }

    /// Up to `max` access-log records for the sole log writer.
    pub fn take_log_batch(&mut self, max: usize) -> Vec<String> {
        let batch = self.broker.take_log_batch(max);
        // Taking records moves no deadline (the broker's expiries stay, and the step's
        // own pump already took every action that could), so the kept one stands.
        self.pump();
        batch
    }

    /// The machine may have changed: keep its next deadline (what `next_deadline` gives;
    /// the supervisor skips its pass over the workers while it cannot come first).
    fn settle(&mut self) {
        let others = self.deadlines_but_supervisor();
        self.deadline = earliest(self.supervisor.poll_timeout_before(others), others);
    }

    fn settled(mut self) -> Self {
        self.settle();
        self
    }

    fn pump(&mut self) {
        self.pump_tls();
        while let Some(action) = self.supervisor.poll_action() {
            let spawned = match &action {
                Action::Spawn { worker, .. } => Some(*worker),
                _ => None,
            };
            match &action {
                Action::WorkerGone { worker } => {
                    self.broker.revoke_worker(*worker);
                }
                // The supervisor has just taken the generation's configuration as its own
                // (one commit per step), so its listener set is the generation's.
                Action::GenerationCommitted { generation, .. } if self.pending_exit.is_none() => {
                    self.singletons
                        .committed(*generation, self.supervisor.config().listen());
                }
                // Nothing is accepted from here on: what advertises the service goes now,
                // not after the drain (decision 0020).
                Action::CloseListeners => self.singletons.listeners_closed(),
                Action::Exit { code } => {
                    self.pending_exit = Some(*code);
                    self.singletons.stop();
                    continue;
                }
                _ => {}
            }
            self.answer_reload(&action);
            self.actions.push_back(ParentAction::Supervisor(action));
            // A new worker's first message is the TLS material: it serves the current
            // identity and keys from its first handshake, whenever it was started.
            if let (Some(worker), Some(tls)) = (spawned, &self.tls) {
                self.actions
                    .push_back(ParentAction::Supervisor(Action::Send {
                        worker,
                        message: ParentMessage::TlsMaterial(Box::new(tls.material())),
                    }));
            }
            if let Some(config) = self.reloaded_limits() {
                self.broker.set_limits(config);
            }
        }
        while let Some(action) = self.singletons.poll_action() {
            self.actions.push_back(ParentAction::Singleton(action));
        }
        // Challenges are in the broker before the driver is told to have them validated,
        // so any worker the CA reaches can answer.
        while let Some(action) = self.acme.as_mut().and_then(CertManager::poll_action) {
            match action {
                AcmeAction::Publish(challenges) => {
                    self.broker.challenges_mut().publish(challenges);
                }
                AcmeAction::Withdraw => self.broker.challenges_mut().withdraw(),
                action => self.actions.push_back(ParentAction::Acme(action)),
            }
        }
        // The journal goes out before the answers that depend on it: a parent killed
        // after answering a LOCK has already handed the lock to its driver.
        // After a failed write, also when its retry is due with nothing changed.
        let changed = self.broker.take_dav_changed();
        let retry = self.journal.take_retry_due();
        if (changed || retry) && self.supervisor.config().features().dav_persistent_locks {
            let now = self.last_step.unwrap_or(Instant::ZERO);
            let dav = self.broker.dav();
            let locks = dav.snapshot(now);
            self.journal.handed_out(
                locks
                    .iter()
                    .filter_map(|l| dav.expiry(l.token).map(|at| (l.token, at))),
            );
            self.actions.push_back(ParentAction::PersistDavLocks(locks));
        }
        while let Some((worker, id, reply)) = self.broker.poll_reply() {
            self.actions
                .push_back(ParentAction::Supervisor(Action::Send {
                    worker,
                    message: ParentMessage::Broker { id, reply },
                }));
        }
        // After what the step carried out (a stop's closed listeners, a reload's commit),
        // and always before the exit: nobody who asked is left without an answer.
        while let Some((request, answer)) = self.answers.pop_front() {
            self.actions
                .push_back(ParentAction::Answer { request, answer });
        }
        if let Some(code) = self.pending_exit
            && self.broker.log().is_empty()
        {
            self.pending_exit = None;
            self.actions
                .push_back(ParentAction::Supervisor(Action::Exit { code }));
        }
    }

    /// The TLS machine's requests, and its material to every connected worker when it
    /// changed.
    fn pump_tls(&mut self) {
        let Some(tls) = &mut self.tls else {
            return;
        };
        while let Some(action) = tls.poll_action() {
            self.actions.push_back(ParentAction::Tls(action));
        }
        if tls.take_changed() {
            let material = tls.material();
            for worker in self.supervisor.connected_workers() {
                self.actions
                    .push_back(ParentAction::Supervisor(Action::Send {
                        worker,
                        message: ParentMessage::TlsMaterial(Box::new(material.clone())),
                    }));
            }
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
        if let Some(acme) = &self.acme {
            acme.check_invariants()?;
        }
        let validating = self
            .acme
            .as_ref()
            .is_some_and(|a| matches!(a.phase(), crate::acme::Phase::Validating { .. }));
        if !self.broker.challenges().is_empty() && !validating {
            return Err("ACME challenges published with no order being validated".into());
        }
        if let Some(tls) = &self.tls {
            tls.check_invariants()?;
        }
        for holder in self.broker.holders() {
            if holder != PARENT_CLIENT && !self.supervisor.is_connected(holder) {
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
    mod final_counts;
    use super::*;
    use crate::config::RawConfig;
    use crate::ids::{Generation, ReloadId, WorkerId};
    use crate::proto::{BrokerRequest, TargetKey};
    use crate::supervisor::ExitStatus;
    use core::time::Duration;

    pub(super) fn actions(p: &mut Parent) -> Vec<ParentAction> {
        std::iter::from_fn(|| p.poll_action()).collect()
    }

    pub(super) fn started(features: impl FnOnce(&mut RawConfig)) -> (Parent, WorkerId) {
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

    pub(super) fn dav(p: &mut Parent, w: WorkerId, now: Instant, id: u64, request: BrokerRequest) {
        p.handle(
            now,
            Event::Message {
                worker: w,
                message: WorkerMessage::Broker { id, request },
            },
        );
    }

    pub(super) fn lock_request(resource: &str, timeout_ms: u64) -> BrokerRequest {
        BrokerRequest::DavLock {
            resource: resource.into(),
            depth: crate::proto::DavDepth::Zero,
            owner: String::new(),
            exclusive: true,
            timeout_ms,
        }
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
    fn the_advertisement_stops_with_the_listeners_and_the_access_log_at_the_exit() {
        let (mut p, w) = started(|r| {
            r.features.mdns = true;
            r.features.access_log = true;
        });
        let stop_of = |acts: &[ParentAction], kind| {
            acts.iter()
                .position(|a| *a == ParentAction::Singleton(SingletonAction::Stop { kind }))
        };
        p.handle(Instant::ZERO, Event::Command(Command::Stop));
        let draining = actions(&mut p);
        let close = draining
            .iter()
            .position(|a| *a == ParentAction::Supervisor(Action::CloseListeners));
        let mdns = stop_of(&draining, SingletonKind::Mdns);
        assert!(
            close.expect("closes") < mdns.expect("mDNS withdrawn while draining"),
            "{draining:?}"
        );
        assert_eq!(stop_of(&draining, SingletonKind::AccessLog), None);
        p.handle(
            Instant::ZERO,
            Event::Exited {
                worker: w,
                status: ExitStatus::Code(0),
            },
        );
        let exiting = actions(&mut p);
        assert!(
            stop_of(&exiting, SingletonKind::AccessLog).is_some(),
            "{exiting:?}"
        );
        assert_eq!(stop_of(&exiting, SingletonKind::Mdns), None, "stopped once");
        p.check_invariants().expect("invariants");
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

    #[test]
    fn the_parents_own_client_shares_the_lease_table_with_workers() {
        let (mut p, w) = started(|_| {});
        let key = TargetKey {
            dir_device: 1,
            dir_inode: 1,
            name: "f".into(),
        };
        let ask = |worker, id, request| Event::Message {
            worker,
            message: WorkerMessage::Broker { id, request },
        };
        let acquire = BrokerRequest::AcquireLease { key: key.clone() };
        p.handle(Instant::ZERO, ask(PARENT_CLIENT, 1, acquire.clone()));
        let acts = actions(&mut p);
        let lease = acts.iter().find_map(|a| match a {
            ParentAction::Supervisor(Action::Send {
                worker,
                message:
                    ParentMessage::Broker {
                        id: 1,
                        reply: crate::proto::BrokerReply::Granted { id, .. },
                    },
            }) if *worker == PARENT_CLIENT => Some(*id),
            _ => None,
        });
        let lease = lease.expect("the parent's client is answered like a worker");
        p.check_invariants()
            .expect("the parent's client is always connected");
        // A worker's upload to the same file waits its turn.
        p.handle(Instant::ZERO, ask(w, 7, acquire.clone()));
        assert!(
            actions(&mut p).contains(&ParentAction::Supervisor(Action::Send {
                worker: w,
                message: ParentMessage::Broker {
                    id: 7,
                    reply: crate::proto::BrokerReply::Rejected(crate::proto::Rejection::Busy),
                },
            }))
        );
        p.handle(
            Instant::ZERO,
            ask(PARENT_CLIENT, 2, BrokerRequest::ReleaseLease { id: lease }),
        );
        p.handle(Instant::ZERO, ask(w, 8, acquire));
        assert_eq!(
            p.broker().holders().collect::<Vec<_>>(),
            vec![w],
            "released, then the worker's"
        );
        // Only broker requests are taken from the parent's id.
        p.handle(
            Instant::ZERO,
            Event::Message {
                worker: PARENT_CLIENT,
                message: WorkerMessage::Ready,
            },
        );
        assert!(p.supervisor().worker_generation(PARENT_CLIENT).is_none());
        p.check_invariants().expect("invariants");
    }

    /// A parent with two ready workers (defaults: a beat a second, a hang after 5 s).
    fn two_ready() -> (Parent, [WorkerId; 2]) {
        let raw = RawConfig {
            workers: 2,
            ..RawConfig::default()
        };
        let mut p = Parent::new(raw.validate().expect("valid"), Platform::Posix, [3; 32]);
        let t = Instant::ZERO;
        p.handle(t, Event::Start);
        let ws = [WorkerId(1), WorkerId(2)];
        for message in [WorkerMessage::Prepared, WorkerMessage::Ready] {
            for w in ws {
                p.handle(
                    t,
                    Event::Message {
                        worker: w,
                        message: message.clone(),
                    },
                );
            }
        }
        actions(&mut p);
        (p, ws)
    }

    fn beat(p: &mut Parent, now: Instant, w: WorkerId) {
        p.handle(
            now,
            Event::Message {
                worker: w,
                message: WorkerMessage::Heartbeat {
                    requests: 0,
                    connections: 0,
                    requests_in_progress: 0,
                    memory: 0,
                    stats: Default::default(),
                },
            },
        );
    }

    /// What a driver does: wake at each deadline up to `until` and judge it.
    fn run_until(p: &mut Parent, until: Instant) -> Vec<ParentAction> {
        let mut acts = Vec::new();
        while let Some(due) = p.poll_timeout().filter(|d| *d <= until) {
            p.handle_timeout(due);
            acts.extend(actions(p));
        }
        acts
    }

    fn faulted(acts: &[ParentAction]) -> Vec<WorkerId> {
        acts.iter()
            .filter_map(|a| match a {
                // A hung worker gets TERM first; the KILL follows `force_timeout` later.
                ParentAction::Supervisor(Action::Terminate { worker }) => Some(*worker),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn the_parent_never_sleeps_past_its_watch_period_while_it_has_workers() {
        let (p, _) = two_ready();
        // (5 s − 1 s) / 2: a gap longer than that shows as lateness before it can pass
        // for four seconds of a worker's silence.
        assert_eq!(p.supervisor().watch_period(), Some(Duration::from_secs(2)));
        assert_eq!(
            p.poll_timeout(),
            Some(Instant::ZERO + Duration::from_secs(2))
        );
    }

    #[test]
    fn a_frozen_machine_replaces_nobody_and_a_hung_worker_is_still_caught() {
        let (mut p, [a, b]) = two_ready();
        let sec = |s: u64| Instant::ZERO + Duration::from_secs(s);
        // `a` beats until 10 s, `b` (hung) last beat at 8 s; then the whole machine stops
        // for a minute: the parent wakes at 70 s, 58 s after the deadline it had asked for
        // (its watch, at 12 s).
        for t in 1..=10 {
            beat(&mut p, sec(t), a);
            if t <= 8 {
                beat(&mut p, sec(t), b);
            }
        }
        assert!(run_until(&mut p, sec(10)).is_empty());
        assert_eq!(p.poll_timeout(), Some(sec(12)));
        p.handle_timeout(sec(70));
        assert!(faulted(&actions(&mut p)).is_empty(), "nobody could beat");
        assert_eq!(p.supervisor().time_not_running(), Duration::from_secs(58));
        // `a` beats as soon as it runs again; `b` never does. Its silence counts only the
        // time the parent ran: 8 s → 12 s before the freeze, so it is caught 1 s after.
        let mut acts = Vec::new();
        for t in 70..=80 {
            beat(&mut p, sec(t), a);
            acts.extend(run_until(&mut p, sec(t)));
        }
        assert_eq!(faulted(&acts), vec![b], "{acts:?}");
        let failure = p.supervisor().last_failure().expect("a failure");
        assert_eq!(failure.reason, crate::supervisor::ExitReason::HealthFailure);
        assert_eq!((failure.worker, failure.at), (b, sec(71)));
    }

    #[test]
    fn without_a_freeze_a_silent_worker_is_caught_at_its_deadline() {
        let (mut p, [a, b]) = two_ready();
        let sec = |s: u64| Instant::ZERO + Duration::from_secs(s);
        for t in 1..=20 {
            beat(&mut p, sec(t), a);
            if t <= 3 {
                beat(&mut p, sec(t), b);
            }
            let acts = run_until(&mut p, sec(t));
            assert_eq!(
                faulted(&acts),
                if t == 8 { vec![b] } else { vec![] },
                "at {t} s"
            );
        }
        assert_eq!(p.supervisor().time_not_running(), Duration::ZERO);
    }
}
