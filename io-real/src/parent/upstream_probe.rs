//! The reverse proxy's upstream health as the real parent carries it out: the core
//! judges ([`servery_core::upstream_health`]); this starts it with the routes' upstreams
//! and sends the probes it asks for (`--proxy-health`) from the host runtime.

use std::sync::Arc;
use std::time::Duration;

use servery_core::Instant;
use servery_core::parent::Parent;
use servery_core::supervisor::Event;
use servery_core::upstream_health::UpstreamHealth;
use tokio::runtime::Handle;

use super::io::{Inbound, InboundTx};
use crate::proxy::{Proxy, ProxyArgs};

/// The longest a probe may take, whatever the interval (a probe answered later failed).
const PROBE_BOUND: Duration = Duration::from_secs(5);

/// What sends the probes.
#[derive(Debug)]
pub(super) struct Prober {
    proxy: Arc<Proxy>,
    path: String,
    within: Duration,
}

/// Hand the core the upstreams to judge, before the first event; the prober when the
/// settings ask for probes.
pub(super) fn start(
    parent: &mut Parent,
    args: &ProxyArgs,
    now: Instant,
) -> Result<Option<Prober>, String> {
    let Some((count, policy)) = args.health_policy() else {
        return Ok(None);
    };
    parent.watch_upstreams(UpstreamHealth::new(count, policy, now));
    let (Some(path), Some(interval)) = (&args.proxy_health, policy.probe_interval) else {
        return Ok(None);
    };
    let Some(proxy) = Proxy::from_settings(args, None, None)? else {
        return Ok(None);
    };
    Ok(Some(Prober {
        proxy: Arc::new(proxy),
        path: path.clone(),
        within: interval.min(PROBE_BOUND),
    }))
}

impl Prober {
    /// Probe `upstream` on the host runtime; the result comes back as an event.
    pub(super) fn probe(&self, rt: &Handle, tx: InboundTx, upstream: u16) {
        let proxy = Arc::clone(&self.proxy);
        let path = self.path.clone();
        let within = self.within;
        rt.spawn(async move {
            let ok = proxy.probe(usize::from(upstream), &path, within).await;
            if !ok {
                tracing::info!(upstream, path = %path, "an upstream failed its probe");
            }
            let _ = tx.send(Inbound::Event(Event::UpstreamProbed { upstream, ok }));
        });
    }
}
