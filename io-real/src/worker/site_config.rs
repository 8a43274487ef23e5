//! What a worker makes of its settings: the [`SiteConfig`] it serves with, read from the
//! setup preamble's [`ServeArgs`](crate::cli::ServeArgs). This is the one place a
//! per-worker setting is read after its `#[arg]` declares it. The core validated every
//! value before the parent started anyone, so the conversions below only change types.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::broker::BrokerHandle;
use super::setup::Setup;
use crate::access_log::recorder::Recorder;
use crate::http::host::{AllowedHosts, Pattern};
use crate::http::meter::RequestMeter;
use crate::http::{Deadlines, SiteConfig};

/// Seconds as written (validated: finite, not negative) as a duration.
pub fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or(Duration::ZERO)
}

/// A validated count or size as the type its user wants.
fn count<T: TryFrom<i64> + Default>(n: i64) -> T {
    T::try_from(n).unwrap_or_default()
}

pub fn site_config(
    worker_id: u64,
    setup: &Setup,
    broker: &BrokerHandle,
    access_log: Option<Arc<Recorder>>,
    meter: &Arc<RequestMeter>,
    alt_svc: Option<http::HeaderValue>,
    listening: &[SocketAddr],
) -> SiteConfig {
    let s = &setup.settings;
    let c = &s.connections;
    crate::http::long_work::configure(max_blocking_threads(setup));
    let deadlines = Deadlines {
        request_head: secs(c.request_head_timeout),
        keep_alive: secs(c.keep_alive_timeout),
        tls_handshake: secs(c.tls_handshake_timeout),
        send: secs(c.send_timeout),
        min_send_rate: count(c.min_send_rate),
        body: secs(c.body_timeout),
    };
    SiteConfig {
        root: setup.root.clone(),
        show_hidden: crate::http::path::dot_files_shown(s.show_hidden, s.dav.dav, s.upload.upload),
        compression_cache_size: count(s.budgets.compression_cache_size),
        file_cache_size: count(s.budgets.file_cache_size),
        max_compress_size: s.site.max_compress_size,
        cors: s.site.cors,
        spa: s.site.spa,
        cache_max_age: s.site.cache,
        security_headers: !s.site.no_security_headers,
        hsts: s.site.hsts,
        uploads: s
            .upload
            .worker_config(worker_id, broker, deadlines.body, setup.partial_ttl),
        access_log,
        meter: Some(Arc::clone(meter)),
        dav: s.dav.dav.then(|| crate::http::dav::DavConfig {
            broker: broker.clone(),
            max_propfind_entries: usize::try_from(s.dav.dav_propfind_max_entries)
                .unwrap_or(usize::MAX),
            worker_id,
            tree_kill: None,
            kill_after_lock_grant: false,
        }),
        archive: s.page.limits(),
        qr_url: setup.facts.qr_url.clone(),
        deadlines,
        acme: setup
            .facts
            .acme_http_listeners
            .map(|_| crate::http::acme_challenge::AcmeResponder {
                broker: broker.clone(),
                https_port: setup.facts.https_port.unwrap_or(443),
            }),
        alt_svc,
        allowed_hosts: allowed_hosts(setup, listening).map(Arc::new),
        // Whoever may write may plant a page (`--dav` and `--tftp-write` write only with
        // `--upload`).
        sandbox_active_files: s.upload.upload,
        ..Default::default()
    }
}

/// The host names requests must give (decision 0046), or `None` when any passes: a
/// listener off the loopback (a wildcard, a LAN address, a socket from the service
/// manager bound so) is reached by names servery cannot know, so there the check waits
/// for the operator to list them; `*` among them turns it off everywhere.
fn allowed_hosts(setup: &Setup, listening: &[SocketAddr]) -> Option<AllowedHosts> {
    let s = &setup.settings;
    let mut names: Vec<Pattern> = s
        .site
        .allowed_host
        .iter()
        .filter_map(|written| Pattern::parse(written).ok())
        .collect();
    let loopback_only = !listening.is_empty() && listening.iter().all(|a| a.ip().is_loopback());
    if names.contains(&Pattern::Any) || (names.is_empty() && !loopback_only) {
        return None;
    }
    names.extend(s.acme.acme.iter().filter_map(|d| Pattern::parse(d).ok()));
    if s.discovery.discoverable {
        let advertised = crate::parent::services::context::mdns_host_of(
            &crate::parent::services::context::host_name(),
        );
        names.extend(Pattern::parse(&advertised).ok());
    }
    // `--qr`'s address is an IP address, which always passes.
    Some(AllowedHosts::new(names))
}

/// The blocking threads the worker's runtime may use (at least one).
pub fn max_blocking_threads(setup: &Setup) -> usize {
    count::<usize>(setup.settings.budgets.max_blocking_threads).max(1)
}

/// Connections the worker admits at once (at least one): `--max-connections`, lowered
/// to what the worker's open-file limit allows (the parent said so at start).
pub fn max_connections(setup: &Setup) -> u32 {
    let configured = count::<u32>(setup.settings.budgets.max_connections).max(1);
    crate::open_files::bounded_connections(configured, crate::open_files::soft_limit())
}
