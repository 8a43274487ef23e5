//! The reverse proxy's upstream health as the real parent carries it out: the core
//! judges ([`servery_core::upstream_health`]) and names the upstreams (the routes of the
//! live generations, decision 0108), picks the policy (the committed configuration's,
//! decision 0118) and says what the probes' clients are built from and when to build
//! them again (the committed CA, connect timeout and `Host` choice, decision 0118's
//! addendum); this starts it and sends the probes it asks for from the host runtime, to
//! the URL, on the path and within the bound each probe names.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use servery_core::config::ProbeClients;
use servery_core::parent::Parent;
use servery_core::supervisor::Event;
use tokio::runtime::Handle;

use super::io::{Inbound, InboundTx};
use crate::proxy::{Proxy, ProxyArgs};

/// What sends the probes.
#[derive(Debug)]
pub(super) struct Prober {
    clients: Mutex<Clients>,
}

/// The probes' clients and the settings they are built from.
#[derive(Debug)]
struct Clients {
    /// The settings each upstream's client is built from: the started ones, with the
    /// CA, connect timeout and `Host` choice the core last gave.
    args: ProxyArgs,
    /// One client per URL probed, kept so its pooled connection serves the next probe
    /// (as many as the URLs the routes ever named: a handful); emptied when the core
    /// asks for the clients to be built again.
    by_url: HashMap<String, Arc<Proxy>>,
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
        clients: Mutex::new(Clients {
            args: args.clone(),
            by_url: HashMap::new(),
        }),
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
    /// The core's [`servery_core::parent::ParentAction::BuildProbeClients`]: the clients
    /// built so far are dropped, the next probe of each URL builds its client from
    /// `settings` (reading the CA file then).
    pub(super) fn build_clients(&self, settings: ProbeClients) {
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        let args = &mut clients.args;
        args.proxy_ca = settings.ca;
        args.proxy_connect_timeout = settings.connect_timeout.as_secs_f64();
        args.proxy_upstream_host = settings.upstream_host;
        clients.by_url.clear();
    }

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
            match clients.by_url.get(url) {
                Some(c) => Some(Arc::clone(c)),
                None => match probe_client(&clients.args, url) {
                    Ok(c) => {
                        let c = Arc::new(c);
                        clients.by_url.insert(url.to_owned(), Arc::clone(&c));
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
