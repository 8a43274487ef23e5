//! A worker's side of the upstream health the parent owns (decision 0095): the parent's
//! down set as last received, the choice among a prefix's upstreams (the core's
//! [`Balancer`], decision 0100), and the reports of what this worker saw.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use servery_core::upstream_choice::{Balance, Balancer};

use crate::worker::broker::BrokerHandle;

/// The upstreams the parent last said are down (empty until it says otherwise).
#[derive(Debug, Default)]
pub struct DownSet {
    down: RwLock<Arc<[u16]>>,
}

impl DownSet {
    /// The parent's new verdict (`ParentMessage::UpstreamHealth`).
    pub fn set(&self, down: &[u16]) {
        *self.down.write().unwrap_or_else(PoisonError::into_inner) = Arc::from(down);
    }

    fn current(&self) -> Arc<[u16]> {
        Arc::clone(&self.down.read().unwrap_or_else(PoisonError::into_inner))
    }
}

/// What a worker's proxy needs to follow the parent's verdict and feed it.
#[derive(Debug)]
pub struct HealthLink {
    pub down: Arc<DownSet>,
    pub broker: BrokerHandle,
}

/// One proxy's view and reports.
#[derive(Debug)]
pub(super) struct Health {
    link: Option<HealthLink>,
    choice: Arc<Mutex<Balancer>>,
}

/// A request counted in flight to its upstream until it is over (its response body
/// ended, its tunnel closed, or it failed).
#[derive(Debug)]
pub(super) struct InFlight {
    choice: Arc<Mutex<Balancer>>,
    upstream: usize,
    open: bool,
}

impl InFlight {
    pub(super) fn upstream(&self) -> usize {
        self.upstream
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.open {
            lock(&self.choice).done(self.upstream);
        }
    }
}

fn lock(choice: &Mutex<Balancer>) -> MutexGuard<'_, Balancer> {
    choice.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Health {
    pub(super) fn new(link: Option<HealthLink>, upstreams: usize, balance: Balance) -> Self {
        Health {
            link,
            choice: Arc::new(Mutex::new(Balancer::new(upstreams, balance))),
        }
    }

    /// The upstream of `group` to send to, by the core's rule under the parent's latest
    /// verdict; `None` when every one of them is down.
    pub(super) fn choose(&self, group: std::ops::Range<usize>) -> Option<InFlight> {
        let down = self.link.as_ref().map(|l| l.down.current());
        let mut choice = lock(&self.choice);
        if let Some(down) = down {
            choice.set_down(&down);
        }
        let upstream = choice.choose(group)?;
        Some(InFlight {
            choice: Arc::clone(&self.choice),
            upstream,
            open: true,
        })
    }

    /// The request could not be completed with its upstream: the parent hears of it.
    pub(super) fn failed(&self, mut flight: InFlight) {
        flight.open = false;
        let report = lock(&self.choice).finished(flight.upstream, Some(false));
        self.report(report);
    }

    /// A response head came from the upstream: the parent hears of it only when this
    /// worker had reported it failing (one message per recovery, not per request).
    pub(super) fn answered(&self, flight: &InFlight) {
        let report = lock(&self.choice).answered(flight.upstream);
        self.report(report);
    }

    /// Requests in flight from this worker to `upstream`.
    #[cfg(test)]
    pub(super) fn in_flight(&self, upstream: usize) -> u32 {
        lock(&self.choice).in_flight(upstream)
    }

    fn report(&self, report: Option<servery_core::proto::BrokerRequest>) {
        if let (Some(link), Some(request)) = (&self.link, report) {
            link.broker.release(request);
        }
    }
}
