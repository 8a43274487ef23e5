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
use crate::proto::{BrokerRequest, ParentMessage, WorkerMessage};
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
    /// SIGKILL to each of these process groups: the CGI scripts `worker` was running
    /// when it went (decision 0092). Emitted right after that worker's `WorkerGone`.
    KillScriptGroups {
        worker: WorkerId,
        pgids: Vec<u32>,
    },
    /// Probe the reverse proxy's upstream at `url` and report [`Event::UpstreamProbed`]
    /// with `upstream`, the health table's id for it (decision 0108: the table follows
    /// the generations' routes, so the driver is told what to probe, not an index).
    ProbeUpstream {
        upstream: u32,
        url: String,
        /// `GET` this path (the committed configuration's `proxy.health`).
        path: String,
        /// A probe not answered 2xx or 3xx within this failed.
        within: core::time::Duration,
    },
    /// Read the certificate files again for `reload` and answer with
    /// [`Event::TlsFilesRead`] (decision 0093).
    ReadTlsFiles {
        reload: ReloadId,
    },
    /// Build the clients that send [`ParentAction::ProbeUpstream`]s anew under these
    /// settings, dropping the ones built before (and their pooled connections): asked
    /// for when the upstreams are first watched, and at the commit of a generation whose
    /// CA, connect timeout or `Host` choice differs from the clients', or that names a
    /// CA file at all (its contents may have been replaced; the generation's workers read
    /// it again too). Decision 0118, addendum.
    BuildProbeClients(crate::config::ProbeClients),
    /// Carry this call to the cluster's store and hand its answer back with
    /// [`Parent::store_replied`] (only with [`Parent::start_cluster`]). A call that gets
    /// no answer is not reported: the cluster machine's own deadline ends it.
    Store {
        op: crate::cluster::OpId,
        call: crate::cluster::StoreCall,
    },
}

/// The broker client the parent itself runs (its TFTP service's writes), under an id no
/// worker ever has (worker ids start at 1). Its requests arrive as
/// [`Event::Message`]s from this id and its answers leave as [`Action::Send`]s to it,
/// which the driver hands to the parent's own client instead of a channel: the same
/// broker tables answer it, so a TFTP write and an HTTP upload to one file serialize.
/// Its grants are given back by the client when the service ends, and expire by their
/// TTL otherwise, as a worker's do.
pub const PARENT_CLIENT: WorkerId = WorkerId(0);

/// The order in which [`Parent::intake`] takes in what one look found (a stable sort by
/// this rank): for a host's observers, which judge the parent on what it read in the
/// order it read it.
pub fn intake_rank(event: &Event) -> u8 {
    intake::rank(event)
}

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
    /// The reverse proxy's upstream health, when the driver has upstreams
    /// ([`Parent::watch_upstreams`]).
    upstreams: Option<crate::upstream_health::UpstreamHealth>,
    /// Each live generation's upstreams, in its workers' numbering (decision 0108).
    generation_routes: upstreams::GenerationRoutes,
    /// What the driver's probe clients were last built from
    /// ([`ParentAction::BuildProbeClients`]).
    probe_clients: Option<crate::config::ProbeClients>,
    /// Which locks the WebDAV journal on disk holds ([`Parent::dav_journal_written`]).
    journal: dav_journal::JournalState,
    /// The CGI scripts' process groups each worker reported running.
    scripts: scripts::ScriptGroups,
    /// Reloads waiting for the certificate files to be read again.
    tls_files: tls_files::TlsFiles,
    /// The shared tables in etcd, with `--cluster` ([`Parent::start_cluster`]).
    cluster: Option<cluster::ClusterGate>,
}

mod cluster;
mod dav_journal;
mod intake;
mod requests;
mod scripts;
mod tls_files;
mod upstreams;

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
            upstreams: None,
            generation_routes: upstreams::GenerationRoutes::default(),
            probe_clients: None,
            journal: dav_journal::JournalState::default(),
            scripts: scripts::ScriptGroups::default(),
            tls_files: tls_files::TlsFiles::default(),
            cluster: None,
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

    /// The driver's report, before the first event: the CPUs the parent may run on, which
    /// `worker_cpu_affinity = auto` shares out among the application workers' slots
    /// (decision 0122). Without it nobody is pinned.
    pub fn with_host_cpus(mut self, cpus: crate::cpu_affinity::CpuSet) -> Self {
        self.supervisor.set_host_cpus(cpus);
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

    /// Back the broker's DAV locks and upload budget with the cluster's shared tables
    /// (decision 0130): `host` is granted its etcd lease from `now` on, and its store
    /// calls leave as [`ParentAction::Store`].
    pub fn start_cluster(&mut self, now: Instant, host: crate::cluster::ClusterHost) {
        self.cluster = Some(cluster::ClusterGate::start(now, host));
        self.pump();
        self.settle();
    }

    /// This host's cluster machine, with `--cluster`.
    pub fn cluster(&self) -> Option<&crate::cluster::ClusterHost> {
        self.cluster.as_ref().map(cluster::ClusterGate::host)
    }

    /// The store's answer to [`ParentAction::Store`] `op`.
    pub fn store_replied(
        &mut self,
        now: Instant,
        op: crate::cluster::OpId,
        reply: crate::cluster::StoreReply,
    ) {
        self.handle(now, Event::StoreReplied { op, reply });
    }

    /// A broker request from `owner`: through the cluster first when it needs the shared
    /// tables, to the broker alone otherwise.
    fn broker_request(&mut self, now: Instant, owner: Owner, id: u64, request: BrokerRequest) {
        let request = match &mut self.cluster {
            Some(gate) => match gate.gate(now, &self.broker, owner, id, request) {
                cluster::Gated::ToBroker(request) => request,
                cluster::Gated::Held => return,
                cluster::Gated::Refused(rejection) => {
                    self.broker
                        .answer(owner, id, crate::proto::BrokerReply::Rejected(rejection));
                    return;
                }
            },
            None => request,
        };
        self.broker.handle_request(now, owner, id, request);
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

    /// Take in everything one look at the host found, in the order the parent decides
    /// ([`intake`]): each source's own order kept, and across sources messages before
    /// channel ends, ends before a dead worker's final counts, exits last. A driver hands
    /// over what it found without ordering it.
    pub fn intake(&mut self, now: Instant, found: Vec<Event>) {
        for event in intake::ordered(found) {
            self.handle(now, event);
        }
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
                    self.broker_request(now, Owner { worker, generation }, id, request);
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
                    self.upstream_reported(now, worker, &request);
                    self.broker_request(now, Owner { worker, generation }, id, request);
                }
            }
            // A script's group is recorded only from a worker whose channel is trusted.
            Event::Message {
                worker,
                message: WorkerMessage::ScriptStarted { pgid },
            } => {
                if self.supervisor.is_connected(worker) {
                    self.scripts.started(worker, pgid);
                }
            }
            Event::Message {
                worker,
                message: WorkerMessage::ScriptEnded { pgid },
            } => self.scripts.ended(worker, pgid),
            Event::UpstreamProbed { upstream, ok } => self.upstream_probed(now, upstream, ok),
            Event::StoreReplied { op, reply } => {
                if let Some(gate) = &mut self.cluster {
                    gate.store_replied(now, op, reply);
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
            Event::Command(Command::Reload { id, config }) => self.reload_or_read(now, id, config),
            Event::TlsFilesRead { reload, read } => self.tls_files_read(now, reload, read),
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
        if let Some(gate) = &mut self.cluster {
            gate.handle_timeout(now);
        }
        if let Some(upstreams) = &mut self.upstreams {
            upstreams.handle_timeout(now);
        }
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
        let upstreams = self
            .upstreams
            .as_ref()
            .and_then(crate::upstream_health::UpstreamHealth::poll_timeout);
        let cluster = self
            .cluster
            .as_ref()
            .and_then(cluster::ClusterGate::poll_timeout);
        earliest(
            earliest(earliest(self.broker.poll_timeout(), watch), upstreams),
            earliest(
                earliest(acme, tls),
                earliest(self.journal.poll_timeout(), cluster),
            ),
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
        self.pump_upstreams();
        let mut generations_changed = false;
        while let Some(action) = self.supervisor.poll_action() {
            let spawned = match &action {
                Action::Spawn { worker, .. } => Some(*worker),
                _ => None,
            };
            match &action {
                // The generation's numbering of its upstreams is its configuration's.
                Action::Spawn {
                    generation, config, ..
                } => {
                    self.generation_spawned(*generation, config);
                    generations_changed = true;
                }
                Action::WorkerGone { .. } | Action::GenerationCommitted { .. } => {
                    generations_changed = true;
                }
                _ => {}
            }
            match &action {
                Action::WorkerGone { worker } => {
                    self.broker.revoke_worker(*worker);
                }
                // The supervisor has just taken the generation's configuration as its own
                // (one commit per step), so its listener set is the generation's.
                Action::GenerationCommitted { generation, .. } if self.pending_exit.is_none() => {
                    self.singletons
                        .committed(*generation, self.supervisor.config().listen());
                    self.proxy_settings_committed();
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
            let gone = match &action {
                Action::WorkerGone { worker } => Some(*worker),
                _ => None,
            };
            self.answer_reload(&action);
            let hello_to = match &action {
                Action::Send {
                    worker,
                    message: ParentMessage::Hello { .. },
                } => Some(*worker),
                _ => None,
            };
            self.actions.push_back(ParentAction::Supervisor(action));
            // What its scripts left running dies with the worker (decision 0092).
            if let Some(worker) = gone {
                let pgids = self.scripts.gone(worker);
                if !pgids.is_empty() {
                    self.actions
                        .push_back(ParentAction::KillScriptGroups { worker, pgids });
                }
            }
            // A new worker's first message is the TLS material: it serves the current
            // identity and keys from its first handshake, whenever it was started.
            if let (Some(worker), Some(tls)) = (spawned, &self.tls) {
                self.actions
                    .push_back(ParentAction::Supervisor(Action::Send {
                        worker,
                        message: ParentMessage::TlsMaterial(Box::new(tls.material())),
                    }));
            }
            // Which upstreams are down, right after its HELLO (it starts believing every
            // one up).
            if let Some(worker) = hello_to {
                self.upstreams_to_new_worker(worker);
            }
            if let Some(config) = self.reloaded_limits() {
                if let Some(gate) = &mut self.cluster {
                    gate.set_limits(&config);
                }
                self.broker.set_limits(config);
            }
        }
        // The health table follows the generations with a live worker (decision 0108).
        if self.generation_routes.live_changed(&self.supervisor) || generations_changed {
            self.follow_generations();
            self.pump_upstreams();
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
        // In a cluster etcd is the locks' durable copy: no journal (decision 0096).
        if (changed || retry)
            && self.supervisor.config().features().dav_persistent_locks
            && self.cluster.is_none()
        {
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
        if let Some(gate) = &mut self.cluster {
            let now = self.last_step.unwrap_or(Instant::ZERO);
            let supervisor = &self.supervisor;
            gate.pump(now, &mut self.broker, |o: Owner| {
                o.worker == PARENT_CLIENT
                    || (supervisor.is_connected(o.worker)
                        && supervisor.worker_generation(o.worker) == Some(o.generation))
            });
            for (op, call) in gate.take_calls() {
                self.actions.push_back(ParentAction::Store { op, call });
            }
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
        if let Some(gate) = &self.cluster {
            gate.check_invariants()?;
        }
        // A gone worker's groups were handed to the driver to kill, not kept.
        for worker in self.scripts.workers() {
            if !self.supervisor.is_connected(worker) {
                return Err(format!(
                    "script groups kept for disconnected worker {worker}"
                ));
            }
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
mod tests;
