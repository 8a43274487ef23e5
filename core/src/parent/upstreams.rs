//! The parent's side of the reverse proxy's upstream health ([`crate::upstream_health`]):
//! workers' reports in, probes out, the down set to every worker.
//!
//! Routes are reloadable (decision 0108), so two generations may number their upstreams
//! differently. A worker speaks in its own generation's numbering (the order of the routes
//! it was spawned with); the parent keeps each live generation's upstreams, translates a
//! report to the upstream's URL, and tells each worker the down set in its generation's
//! numbering. The table's members are the upstreams some live generation (or the
//! committed configuration) names: a removed upstream is judged for as long as a draining
//! worker may still send to it, and forgotten after.

use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::Generation;
use crate::proto::BrokerRequest;
use crate::supervisor::Supervisor;
use crate::upstream_health::UpstreamHealth;

/// Each live generation's upstreams, in its workers' numbering.
#[derive(Debug, Clone, Default)]
pub(super) struct GenerationRoutes {
    by_generation: BTreeMap<Generation, Vec<String>>,
    /// The generations with a live worker when the table last followed them.
    live: BTreeSet<Generation>,
}

impl GenerationRoutes {
    /// Whether the generations with a live worker changed since the table followed them.
    pub(super) fn live_changed(&self, sup: &Supervisor) -> bool {
        !sup.live_generations().eq(self.live.iter().copied())
    }

    fn of(&self, generation: Generation) -> &[String] {
        self.by_generation
            .get(&generation)
            .map_or(&[][..], Vec::as_slice)
    }
}

impl Parent {
    /// Judge the reverse proxy's upstreams, before the first event, under the
    /// configuration's health policy: the members are the upstreams the generations'
    /// routes name, from now on.
    pub fn watch_upstreams(&mut self) {
        let settings = self.supervisor.config().proxy().settings();
        self.upstreams = Some(UpstreamHealth::new(settings.health));
        let clients = settings.probe_clients();
        self.build_probe_clients(clients);
        self.follow_generations();
        self.settle();
    }

    /// A reload committed: the judge takes the committed configuration's policy
    /// (decision 0118), keeping its verdicts, and the probes' clients are built again
    /// when the committed CA, connect timeout or `Host` choice is not theirs, or a CA
    /// file is named (the file may hold other certificates now).
    pub(super) fn proxy_settings_committed(&mut self) {
        let now = self.last_step.unwrap_or(Instant::ZERO);
        let settings = self.supervisor.config().proxy().settings();
        let policy = settings.health;
        let clients = settings.probe_clients();
        let Some(health) = &mut self.upstreams else {
            return;
        };
        if health.policy() != policy {
            health.set_policy(now, policy);
        }
        if clients.ca.is_some() || self.probe_clients.as_ref() != Some(&clients) {
            self.build_probe_clients(clients);
        }
    }

    /// What the probes' clients are built from, from now on.
    pub fn probe_clients(&self) -> Option<&crate::config::ProbeClients> {
        self.probe_clients.as_ref()
    }

    fn build_probe_clients(&mut self, clients: crate::config::ProbeClients) {
        self.probe_clients = Some(clients.clone());
        self.actions
            .push_back(ParentAction::BuildProbeClients(clients));
    }

    pub fn upstream_health(&self) -> Option<&UpstreamHealth> {
        self.upstreams.as_ref()
    }

    /// The upstreams the workers of `generation` number, in their order (empty for a
    /// generation with no live worker that is not the committed one).
    pub fn generation_upstreams(&self, generation: Generation) -> &[String] {
        self.generation_routes.of(generation)
    }

    /// A worker is started for `generation` under `config`: its numbering is the
    /// configuration's.
    pub(super) fn generation_spawned(&mut self, generation: Generation, config: &ValidConfig) {
        self.generation_routes
            .by_generation
            .entry(generation)
            .or_insert_with(|| config.proxy().upstreams().map(str::to_owned).collect());
    }

    /// The generations with a live worker keep their numbering; the table's members become
    /// the upstreams they and the committed configuration name.
    pub(super) fn follow_generations(&mut self) {
        let sup = &self.supervisor;
        let live: BTreeSet<Generation> = sup.live_generations().collect();
        let committed = sup.generation();
        self.generation_routes.live = live.clone();
        self.generation_routes
            .by_generation
            .retain(|g, _| live.contains(g) || *g == committed);
        let Some(health) = &mut self.upstreams else {
            return;
        };
        let now = self.last_step.unwrap_or(Instant::ZERO);
        let named = sup.config().proxy().upstreams().chain(
            self.generation_routes
                .by_generation
                .values()
                .flat_map(|urls| urls.iter().map(String::as_str)),
        );
        health.follow(now, named);
    }

    /// The member `worker` names by its `upstream` index.
    fn member_of(&self, worker: WorkerId, upstream: u16) -> Option<u32> {
        let generation = self.supervisor.worker_generation(worker)?;
        let url = self
            .generation_routes
            .of(generation)
            .get(usize::from(upstream))?;
        self.upstreams.as_ref()?.id(url)
    }

    /// The down set as `worker` numbers its upstreams.
    fn down_for(&self, worker: WorkerId) -> Vec<u16> {
        let (Some(health), Some(generation)) = (
            self.upstreams.as_ref(),
            self.supervisor.worker_generation(worker),
        ) else {
            return Vec::new();
        };
        self.generation_routes
            .of(generation)
            .iter()
            .enumerate()
            .filter(|(_, url)| health.is_down_url(url))
            .filter_map(|(i, _)| u16::try_from(i).ok())
            .collect()
    }

    /// A connected worker's report of an upstream request (the broker answers it).
    pub(super) fn upstream_reported(
        &mut self,
        now: Instant,
        worker: WorkerId,
        request: &BrokerRequest,
    ) {
        let BrokerRequest::UpstreamOutcome { upstream, ok } = request else {
            return;
        };
        let member = self.member_of(worker, *upstream);
        if let (Some(health), Some(id)) = (&mut self.upstreams, member) {
            health.reported(now, id, *ok);
        }
    }

    pub(super) fn upstream_probed(&mut self, now: Instant, upstream: u32, ok: bool) {
        if let Some(health) = &mut self.upstreams {
            health.probed(now, upstream, ok);
        }
    }

    /// Probes due, and the down set to every connected worker when it changed.
    pub(super) fn pump_upstreams(&mut self) {
        let Some(health) = &mut self.upstreams else {
            return;
        };
        let settings = self.supervisor.config().proxy().settings();
        let path = settings
            .probe_path
            .clone()
            .unwrap_or_else(|| "/".to_owned());
        let within = settings.probe_within();
        for (upstream, url) in health.take_probes() {
            self.actions.push_back(ParentAction::ProbeUpstream {
                upstream,
                url,
                path: path.clone(),
                within,
            });
        }
        if health.take_changed() {
            let workers: Vec<WorkerId> = self.supervisor.connected_workers().collect();
            for worker in workers {
                let down = self.down_for(worker);
                self.actions
                    .push_back(ParentAction::Supervisor(Action::Send {
                        worker,
                        message: ParentMessage::UpstreamHealth { down },
                    }));
            }
        }
    }

    /// A new worker learns which of its upstreams are down with its first messages (it
    /// starts believing every one up).
    pub(super) fn upstreams_to_new_worker(&mut self, worker: WorkerId) {
        let down = self.down_for(worker);
        if down.is_empty() {
            return;
        }
        self.actions
            .push_back(ParentAction::Supervisor(Action::Send {
                worker,
                message: ParentMessage::UpstreamHealth { down },
            }));
    }
}
