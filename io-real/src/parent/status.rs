//! The status snapshot `servery ctl status` shows, as JSON and as text. Built on the main
//! thread from the core's own [`Status`], only when someone asked for it.

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{Value, json};
use servery_core::parent::Parent;
use servery_core::supervisor::Status;
use servery_core::{Instant, ValidConfig};

/// What the parent knows about itself besides the core's status.
#[derive(Debug, Clone)]
pub struct ServiceInfo {
    pub pid: u32,
    pub control_socket: String,
    pub root: String,
    /// The access-log writer's counters, when the log is on.
    pub access_log: Option<std::sync::Arc<crate::access_log::writer::WriterStats>>,
    /// The singleton services' own reports (I/O outcomes).
    pub services: super::services::Reports,
    /// The settings as the parent was started (`config.settings`).
    pub settings: std::sync::Arc<Vec<crate::settings::Effective>>,
    /// What the operator must know about how servery runs (TFTP without authentication
    /// beside `--auth`), said at start and kept here.
    pub warnings: Vec<String>,
}

/// The committed generation's routes, each with the parent's verdict on its upstream
/// (decisions 0095, 0108).
pub(super) fn upstream_verdicts(parent: &Parent) -> Vec<(String, bool)> {
    let health = parent.upstream_health();
    parent
        .supervisor()
        .config()
        .proxy()
        .routes()
        .iter()
        .map(|r| {
            let down = health.is_some_and(|h| h.is_down_url(&r.url));
            (r.given.clone(), !down)
        })
        .collect()
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn at_ms(t: Instant) -> u64 {
    t.as_nanos() / 1_000_000
}

/// `listen`: the URLs of the committed generation's listeners.
pub(super) fn status_json(
    parent: &Parent,
    now: Instant,
    info: &ServiceInfo,
    listen: &[String],
) -> Value {
    let status = parent.supervisor().status(now);
    let mut value = core_status_json(&status);
    let extra = json!({
        "pid": info.pid,
        "uptime_ms": at_ms(now),
        // Time the parent noticed it did not run (a frozen host, a stopped parent): not
        // counted as any worker's silence (decision 0017).
        "not_running_ms": ms(parent.supervisor().time_not_running()),
        "listen": listen,
        "root": info.root,
        "control_socket": info.control_socket,
        "config": config_with_settings(parent.supervisor().config(), info),
        "access_log": info.access_log.as_ref().map(|w| {
            use std::sync::atomic::Ordering::Relaxed;
            let log = parent.broker().log();
            json!({
                "written": w.lines_written.load(Relaxed),
                "dropped": log.dropped(),
                "lost_with_workers": log.discarded(),
                "queue": log.len(),
                "write_errors": w.write_errors.load(Relaxed),
                "write_failed": w.lines_failed.load(Relaxed),
                "reopens": w.reopens.load(Relaxed),
            })
        }),
        "broker": broker_json(parent, now),
        "cluster": cluster_json(parent, now),
        "singletons": singletons_json(parent, &info.services),
        "acme": parent.acme().map(|m| {
            let wall = super::services::acme::facts::wall_now();
            super::services::acme::status_json(&m.status(), m.health(wall))
        }),
        "tls": super::tls_material::status_json(parent, now),
        // The parent's verdict on each upstream (decision 0095).
        "proxy_upstreams": upstream_verdicts(parent).into_iter().map(|(given, up)| json!({
            "upstream": given,
            "up": up,
        })).collect::<Vec<_>>(),
        "warnings": info.warnings,
    });
    if let (Value::Object(map), Value::Object(more)) = (&mut value, extra) {
        map.extend(more);
    }
    value
}

/// Each enabled singleton as the core's machine has it (state, generation, counters), with
/// its service's report: actions not yet carried out and failures.
fn singletons_json(parent: &Parent, services: &super::services::Reports) -> Value {
    use servery_core::singletons::SingletonState;
    use std::sync::atomic::Ordering::Relaxed;
    parent
        .singletons()
        .entries()
        .map(|e| {
            let (state, generation) = match e.state {
                SingletonState::NotStarted => ("not_started", None),
                SingletonState::Running(g) => ("running", Some(g.0)),
                SingletonState::Stopped => ("stopped", None),
            };
            let service = services.get(&e.kind).map(|r| {
                json!({
                    "pending": r.pending.load(Relaxed),
                    "failures": r.failures.load(Relaxed),
                    "last_error": r.last_error.lock().ok().and_then(|l| l.clone()),
                    "detail": r.detail.lock().ok().and_then(|d| d.clone()),
                })
            });
            let value = json!({
                "state": state,
                "generation": generation,
                "starts": e.starts,
                "switches": e.switches,
                "stops": e.stops,
                "service": service,
            });
            (e.kind.name().to_owned(), value)
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// The broker's tables: every lease with its holder and age (what an operator looks at
/// when a write is refused as busy), and the sizes of the rest.
/// This host's side of the cluster (`--cluster`): whether it may grant now and until
/// when, what it holds in etcd, and its counters. `null` without a cluster.
fn cluster_json(parent: &Parent, now: Instant) -> Value {
    let Some(host) = parent.cluster() else {
        return Value::Null;
    };
    let stats = host.stats();
    let (uploads, upload_bytes) = host.budget_share(servery_core::cluster::Budget::Uploads);
    json!({
        "host_id": host.layout().host(),
        "prefix": host.layout().prefix(),
        "may_grant": host.may_grant(now),
        "grant_deadline_in_ms": host.grant_deadline().map(|d| ms(d.saturating_since(now))),
        "names_held": host.held().count(),
        "upload_share": { "count": uploads, "bytes": upload_bytes },
        "granted": stats.granted,
        "busy": stats.busy,
        "unavailable": stats.unavailable,
        "reserved": stats.reserved,
        "saturated": stats.saturated,
        "leases_lost": stats.leases_lost,
        "ops_timed_out": stats.ops_timed_out,
    })
}

fn broker_json(parent: &Parent, now: Instant) -> Value {
    let broker = parent.broker();
    json!({
        "leases": broker.leases().map(|(_, lease)| json!({
            "key": {
                "dir_device": lease.key.dir_device,
                "dir_inode": lease.key.dir_inode,
                "name": lease.key.name,
            },
            "worker": lease.owner.worker.0,
            "generation": lease.owner.generation.0,
            "age_ms": ms(now.saturating_since(lease.granted_at)),
        })).collect::<Vec<_>>(),
        "reservations": {
            "count": broker.reservation_count(),
            "bytes": broker.reserved_bytes(),
        },
        "partials": broker.partial_count(),
        "dav_locks": broker.dav().len(),
        // Whether the lock table outlives this parent (`--state-dir`; never in a cluster,
        // where etcd holds the locks' names and they live as long as this host's lease).
        "dav_locks_persistent": parent.supervisor().config().features().dav_persistent_locks
            && parent.cluster().is_none(),
        "log_queue": broker.log().len(),
        // Grants of --proxy-max-inflight held by workers (in use or spare).
        "proxy_grants": broker.proxy_grants().total(),
        // Grants of --cgi-max-concurrent held by workers (in use or spare).
        "cgi_grants": broker.cgi_grants().total(),
    })
}

fn core_status_json(s: &Status) -> Value {
    json!({
        "state": s.state.name(),
        "readiness": s.readiness.name(),
        "capacity": {
            "ready_workers": s.capacity.ready,
            "workers": s.capacity.wanted,
            "min_ready_workers": s.capacity.minimum,
        },
        "generation": s.generation.0,
        "workers": s.workers.iter().map(|w| json!({
            "id": w.id.0,
            "slot": w.slot.0,
            "pid": w.pid,
            // The CPUs it runs on, in the kernel's list form; null: not pinned.
            "cpus": w.cpus.as_ref().map(ToString::to_string),
            "generation": w.generation.0,
            "state": w.state.name(),
            "role": w.role.name(),
            "requests": w.requests,
            "rss_bytes": w.memory,
            "connections": w.connections,
            "requests_in_progress": w.requests_in_progress,
            "age_ms": ms(w.age),
        })).collect::<Vec<_>>(),
        "restarts": s.restarts,
        "recent_restarts": s.recent_restarts,
        "last_failure": s.last_failure.as_ref().map(|f| json!({
            "worker": f.worker.0,
            "slot": f.slot.0,
            "generation": f.generation.0,
            "reason": f.reason.code(),
            "message": f.message,
            "at_ms": at_ms(f.at),
        })),
        "failure": s.failure.as_ref().map(|(reason, message)| json!({
            "reason": reason.code(),
            "message": message,
        })),
        "recycling_suspended": s.recycling_suspended,
        "recycle_in_flight": s.recycle_in_flight,
        "reload_in_flight": s.reload_in_flight,
        "last_reload_error": s.last_reload_error,
        "http3": s.http3.as_ref().map(|q| json!({
            "sockets": q.sockets(),
            "readers": q.readers.iter().map(|r| r.map(|w| w.0)).collect::<Vec<_>>(),
            "accepting": q.accepting,
        })),
    })
}

/// [`config_json`] with every setting by its file key (`settings/status.rs`).
fn config_with_settings(c: &ValidConfig, info: &ServiceInfo) -> Value {
    let mut config = config_json(c);
    let settings = crate::settings::settings_json(&info.settings, &config);
    if let Value::Object(map) = &mut config {
        map.insert("settings".into(), settings);
    }
    config
}

/// The validated configuration and its exact aggregates: the core's own fields, each
/// under its [`RawConfig`](servery_core::RawConfig) path (the path `core_fields!` maps a
/// setting to, and validation names), as serde renders the configuration as written
/// ([`ValidConfig::as_written`]); no field is named here.
pub fn config_json(c: &ValidConfig) -> Value {
    // Numbers, booleans and unit enums: serializing cannot fail, but would show as such.
    let mut config = serde_json::to_value(c.as_written())
        .unwrap_or_else(|e| json!({ "error": format!("cannot render the configuration: {e}") }));
    if let Value::Object(map) = &mut config {
        for (name, value) in c.aggregates() {
            map.insert(name.into(), value.into());
        }
        // Shown since before the features had a section of their own; kept for readers
        // of `uploads.enabled`.
        if let Some(Value::Object(uploads)) = map.get_mut("uploads") {
            uploads.insert("enabled".into(), c.features().uploads.into());
        }
    }
    config
}

/// The validated configuration as `key = value` lines (for `--check-config`).
pub fn config_text(c: &ValidConfig) -> String {
    let mut out = String::new();
    flatten(&mut out, "", &config_json(c));
    out
}

fn flatten(out: &mut String, prefix: &str, v: &Value) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(out, &key, v);
            }
        }
        other => {
            let _ = writeln!(out, "{prefix} = {other}");
        }
    }
}

/// A human-readable rendering of [`status_json`] for `servery ctl status`.
pub fn status_text(v: &Value) -> String {
    let s = |k: &str| v.get(k).map(plain).unwrap_or_default();
    let mut out = String::new();
    let capacity = |k: &str| {
        v.get("capacity")
            .and_then(|c| c.get(k))
            .map(plain)
            .unwrap_or_default()
    };
    let _ = writeln!(
        out,
        "state {} ({}, {} of {} workers ready)  generation {}  restarts {} ({} in window)  pid {}",
        s("state"),
        s("readiness"),
        capacity("ready_workers"),
        capacity("workers"),
        s("generation"),
        s("restarts"),
        s("recent_restarts"),
        s("pid")
    );
    if let Some(urls) = v.get("listen").and_then(Value::as_array) {
        for url in urls {
            let _ = writeln!(out, "listening on {}", plain(url));
        }
    }
    for warning in v
        .get("warnings")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let _ = writeln!(out, "warning: {}", plain(warning));
    }
    let _ = writeln!(
        out,
        "{:<6} {:<5} {:<8} {:<7} {:<4} {:<9} {:<12} {:>9} {:>5} {:>6} {:>9} {:>9}",
        "worker",
        "slot",
        "pid",
        "cpus",
        "gen",
        "state",
        "role",
        "requests",
        "conns",
        "active",
        "rss",
        "age"
    );
    for w in v
        .get("workers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let f = |k: &str| w.get(k).map(plain).unwrap_or_default();
        let age = w.get("age_ms").and_then(Value::as_u64).unwrap_or(0);
        let rss = w.get("rss_bytes").and_then(Value::as_u64).unwrap_or(0);
        let rss = if rss == 0 {
            "-".to_owned()
        } else {
            format!("{:.1}M", rss as f64 / f64::from(1 << 20))
        };
        let _ = writeln!(
            out,
            "{:<6} {:<5} {:<8} {:<7} {:<4} {:<9} {:<12} {:>9} {:>5} {:>6} {:>9} {:>8.1}s",
            format!("w{}", f("id")),
            f("slot"),
            f("pid"),
            // Not pinned: wherever the parent may run.
            w.get("cpus").and_then(Value::as_str).unwrap_or("any"),
            f("generation"),
            f("state"),
            f("role"),
            f("requests"),
            f("connections"),
            f("requests_in_progress"),
            rss,
            age as f64 / 1000.0
        );
    }
    if let Some(paused) = v
        .get("not_running_ms")
        .and_then(Value::as_u64)
        .filter(|&ms| ms > 0)
    {
        let _ = writeln!(
            out,
            "the parent did not run for {:.1}s in all (a frozen or stopped host); not counted as worker silence",
            paused as f64 / 1000.0
        );
    }
    if let Some(b) = v.get("broker").filter(|b| !b.is_null()) {
        let _ = writeln!(
            out,
            "broker: {} leases, {} upload reservations ({} bytes), {} partial uploads",
            b["leases"].as_array().map_or(0, Vec::len),
            plain(&b["reservations"]["count"]),
            plain(&b["reservations"]["bytes"]),
            plain(&b["partials"]),
        );
    }
    if let Some(l) = v.get("access_log").filter(|l| !l.is_null()) {
        let _ = writeln!(
            out,
            "access log: {} lines written, {} dropped, {} lost to failed writes, {} lost with workers; {} batches queued",
            plain(&l["written"]),
            plain(&l["dropped"]),
            plain(&l["write_failed"]),
            plain(&l["lost_with_workers"]),
            plain(&l["queue"]),
        );
    }
    if let Some(h3) = v.get("http3").filter(|h| !h.is_null()) {
        let readers = h3["readers"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(i, r)| {
                let reader = r
                    .as_u64()
                    .map_or_else(|| "-".to_owned(), |w| format!("w{w}"));
                format!("{i}:{reader}")
            })
            .collect::<Vec<_>>()
            .join(" ");
        let _ = writeln!(
            out,
            "http3: {} sockets per address ({readers}); new connections to {}",
            plain(&h3["sockets"]),
            plain(&h3["accepting"]),
        );
    }
    if let Some(singletons) = v.get("singletons").and_then(Value::as_object) {
        for (kind, s) in singletons {
            let generation = s["generation"]
                .as_u64()
                .map_or_else(String::new, |g| format!(" generation {g}"));
            let _ = writeln!(
                out,
                "{kind}: {}{generation} ({} start, {} switches, {} stop; {} pending, {} failed)",
                plain(&s["state"]),
                plain(&s["starts"]),
                plain(&s["switches"]),
                plain(&s["stops"]),
                plain(&s["service"]["pending"]),
                plain(&s["service"]["failures"]),
            );
        }
    }
    if let Some(a) = v.get("acme").filter(|a| !a.is_null()) {
        let _ = writeln!(out, "{}", super::services::acme::status_line(a));
    }
    super::tls_material::status_text(v, &mut out);
    if let Some(f) = v.get("last_failure").filter(|f| !f.is_null()) {
        let g = |k: &str| f.get(k).map(plain).unwrap_or_default();
        let _ = writeln!(
            out,
            "last failure: w{} (slot {}, generation {}) {}: {}",
            g("worker"),
            g("slot"),
            g("generation"),
            g("reason"),
            g("message")
        );
    }
    for (key, label) in [
        ("failure", "service failure"),
        ("recycling_suspended", "recycling suspended"),
        ("last_reload_error", "last reload error"),
    ] {
        if let Some(x) = v.get(key).filter(|x| !x.is_null()) {
            let _ = writeln!(out, "{label}: {}", plain(x));
        }
    }
    out
}

fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}
