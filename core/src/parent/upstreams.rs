//! The parent's side of the reverse proxy's upstream health ([`crate::upstream_health`]):
//! workers' reports in, probes out, the down set to every worker.

use super::*;
use crate::proto::BrokerRequest;
use crate::upstream_health::UpstreamHealth;

impl Parent {
    /// Judge the reverse proxy's upstreams, before the first event: the driver's routes
    /// list `health`'s upstreams in order.
    pub fn watch_upstreams(&mut self, health: UpstreamHealth) {
        self.upstreams = Some(health);
        self.settle();
    }

    pub fn upstream_health(&self) -> Option<&UpstreamHealth> {
        self.upstreams.as_ref()
    }

    /// A connected worker's report of an upstream request (the broker answers it).
    pub(super) fn upstream_reported(&mut self, now: Instant, request: &BrokerRequest) {
        if let (Some(health), BrokerRequest::UpstreamOutcome { upstream, ok }) =
            (&mut self.upstreams, request)
        {
            health.reported(now, *upstream, *ok);
        }
    }

    pub(super) fn upstream_probed(&mut self, now: Instant, upstream: u16, ok: bool) {
        if let Some(health) = &mut self.upstreams {
            health.probed(now, upstream, ok);
        }
    }

    /// Probes due, and the down set to every connected worker when it changed.
    pub(super) fn pump_upstreams(&mut self) {
        let Some(health) = &mut self.upstreams else {
            return;
        };
        for upstream in health.take_probes() {
            self.actions
                .push_back(ParentAction::ProbeUpstream { upstream });
        }
        if health.take_changed() {
            let down = health.down();
            for worker in self.supervisor.connected_workers() {
                self.actions
                    .push_back(ParentAction::Supervisor(Action::Send {
                        worker,
                        message: ParentMessage::UpstreamHealth { down: down.clone() },
                    }));
            }
        }
    }

    /// A new worker learns which upstreams are down with its first messages (it starts
    /// believing every one up).
    pub(super) fn upstreams_to_new_worker(&mut self, worker: WorkerId) {
        let Some(down) = self
            .upstreams
            .as_ref()
            .map(UpstreamHealth::down)
            .filter(|d| !d.is_empty())
        else {
            return;
        };
        self.actions
            .push_back(ParentAction::Supervisor(Action::Send {
                worker,
                message: ParentMessage::UpstreamHealth { down },
            }));
    }
}
