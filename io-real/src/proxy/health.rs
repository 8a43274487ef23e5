//! A worker's side of the upstream health the parent owns (decision 0095): the parent's
//! down set as last received, the choice among a prefix's upstreams, and the reports of
//! what this worker saw.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use servery_core::proto::BrokerRequest;

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
    /// Upstreams this worker reported failing and has not seen succeed since.
    failing: Box<[AtomicBool]>,
    /// Round-robin position per upstream group, by the group's first index.
    next: Box<[AtomicUsize]>,
}

impl Health {
    pub(super) fn new(link: Option<HealthLink>, upstreams: usize) -> Self {
        Health {
            link,
            failing: (0..upstreams).map(|_| AtomicBool::new(false)).collect(),
            next: (0..upstreams).map(|_| AtomicUsize::new(0)).collect(),
        }
    }

    /// The upstream of `group` to send to: the next in turn that is not down; `None` when
    /// every one of them is down. A route with one upstream has nowhere else to send, so
    /// the verdict does not stop it (nginx ignores `max_fails` for a group of one).
    pub(super) fn choose(&self, group: std::ops::Range<usize>) -> Option<usize> {
        let len = group.len();
        if len == 1 {
            return Some(group.start);
        }
        let turn = self
            .next
            .get(group.start)
            .map_or(0, |n| n.fetch_add(1, Ordering::Relaxed));
        let down = self.link.as_ref().map(|l| l.down.current());
        (0..len).map(|k| group.start + (turn + k) % len).find(|&i| {
            down.as_ref()
                .is_none_or(|d| !d.iter().any(|&u| usize::from(u) == i))
        })
    }

    /// A request with `upstream` could not be completed: the parent hears of it.
    pub(super) fn failed(&self, upstream: usize) {
        if let Some(flag) = self.failing.get(upstream) {
            flag.store(true, Ordering::Relaxed);
        }
        self.report(upstream, false);
    }

    /// A response head came from `upstream`: the parent hears of it only when this worker
    /// had reported it failing (one message per recovery, not per request).
    pub(super) fn answered(&self, upstream: usize) {
        if self
            .failing
            .get(upstream)
            .is_some_and(|f| f.swap(false, Ordering::Relaxed))
        {
            self.report(upstream, true);
        }
    }

    fn report(&self, upstream: usize, ok: bool) {
        if let (Some(link), Ok(upstream)) = (&self.link, u16::try_from(upstream)) {
            link.broker
                .release(BrokerRequest::UpstreamOutcome { upstream, ok });
        }
    }
}
