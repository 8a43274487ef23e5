//! The reverse proxy's upstream health as the real parent carries it out: the core
//! judges ([`servery_core::upstream_health`]) and names the upstreams (the routes of the
//! live generations, decision 0108) and picks the policy (the committed configuration's,
//! decision 0118); this starts it and sends the probes it asks for from the host runtime,
//! to the URL, on the path and within the bound each probe names.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use servery_core::parent::Parent;
use servery_core::supervisor::Event;
use tokio::runtime::Handle;

use super::io::{Inbound, InboundTx};
use crate::proxy::{Proxy, ProxyArgs};

/// What sends the probes.
#[derive(Debug)]
pub(super) struct Prober {
    /// The settings each upstream's client is built from (the CA, the timeouts).
    args: ProxyArgs,
    /// One client per URL probed, kept so its pooled connection serves the next probe
    /// (as many as the URLs the routes ever named: a handful).
    clients: Mutex<HashMap<String, Arc<Proxy>>>,
}

/// Hand the core the upstreams to judge, before the first event, and the prober that
/// sends the probes it asks for (a reload may turn probes on).
pub(super) fn start(parent: &mut Parent, args: &ProxyArgs) -> Result<Prober, String> {
    parent.watch_upstreams();
    if args.proxy_health.is_some() {
        // The settings build a client (the CA is read here, so a bad one fails at start).
        probe_client(args, "http://localhost")?;
    }
    Ok(Prober {
        args: args.clone(),
        clients: Mutex::new(HashMap::new()),
    })
}

/// One probe the core asked for: the table's id, the URL, the path, the bound.
pub(super) struct Probe<'a> {
    pub upstream: u32,
    pub url: &'a str,
    pub path: &'a str,
    pub within: Duration,
}

/// A client of one route to `url` under the proxy's settings.
fn probe_client(args: &ProxyArgs, url: &str) -> Result<Proxy, String> {
    let one = ProxyArgs {
        proxy: vec![format!("/={url}")],
        ..args.clone()
    };
    Proxy::from_settings(&one, None, None)?.ok_or_else(|| format!("no route to {url}"))
}

impl Prober {
    /// Probe the upstream at `url` (the health table's `upstream`) on the host runtime;
    /// the result comes back as an event.
    pub(super) fn probe(&self, rt: &Handle, tx: InboundTx, probe: Probe<'_>) {
        let Probe {
            upstream,
            url,
            path,
            within,
        } = probe;
        let client = {
            let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
            match clients.get(url) {
                Some(c) => Some(Arc::clone(c)),
                None => match probe_client(&self.args, url) {
                    Ok(c) => {
                        let c = Arc::new(c);
                        clients.insert(url.to_owned(), Arc::clone(&c));
                        Some(c)
                    }
                    Err(e) => {
                        tracing::warn!(url, error = %e, "no client to probe an upstream with");
                        None
                    }
                },
            }
        };
        let path = path.to_owned();
        let url = url.to_owned();
        rt.spawn(async move {
            let ok = match client {
                Some(c) => c.probe(0, &path, within).await,
                None => false,
            };
            if !ok {
                tracing::info!(upstream = %url, path = %path, "an upstream failed its probe");
            }
            let _ = tx.send(Inbound::Event(Event::UpstreamProbed { upstream, ok }));
        });
    }
}
