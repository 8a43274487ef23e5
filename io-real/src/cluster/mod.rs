//! `--cluster`: the driver that carries the cluster machine's store calls to etcd and
//! its answers back (decisions 0096, 0130). It decides nothing: which call to make, when
//! an operation has waited too long and what an answer means for a grant are the core's
//! (`servery_core::cluster`, the parent's cluster gate). A call that gets no answer is
//! not reported at all; the core's own deadline ends it.

pub mod args;
mod gateway;
/// The store calls as etcd's JSON gateway spells them; public for the conformance test
/// (`tests/tests/etcd_conformance.rs`), which checks the simulator's model against a real
/// etcd through this very mapping.
pub mod json;

use std::sync::Arc;
use std::time::Duration;

use servery_core::cluster::{OpId, StoreCall, StoreReply};
use tokio::runtime::Handle;

pub use args::{ClusterArgs, ClusterSettings};

/// Where an answer goes: the parent's event channel.
pub type Answered = Arc<dyn Fn(OpId, StoreReply) + Send + Sync>;

/// Carries store calls out on the host runtime, each on its own task.
pub struct StoreDriver {
    gateway: Arc<gateway::Gateway>,
    rt: Handle,
    answered: Answered,
    /// A call still unanswered after this is abandoned: the core has already answered
    /// for it (its operation time-out), and a late answer would be ignored anyway.
    abandon_after: Duration,
}

impl std::fmt::Debug for StoreDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreDriver")
            .field("gateway", &self.gateway)
            .field("abandon_after", &self.abandon_after)
            .finish_non_exhaustive()
    }
}

impl StoreDriver {
    pub fn new(
        settings: &ClusterSettings,
        rt: Handle,
        abandon_after: Duration,
        answered: Answered,
    ) -> Result<Self, String> {
        Ok(StoreDriver {
            gateway: Arc::new(gateway::Gateway::new(settings)?),
            rt,
            answered,
            abandon_after,
        })
    }

    /// Sends `call`; its answer, if any comes in time, is handed to `answered`.
    pub fn perform(&self, op: OpId, call: StoreCall) {
        let gateway = Arc::clone(&self.gateway);
        let answered = Arc::clone(&self.answered);
        let within = self.abandon_after;
        self.rt.spawn(async move {
            if let Ok(Some(reply)) = tokio::time::timeout(within, gateway.call(&call)).await {
                answered(op, reply);
            }
        });
    }
}
