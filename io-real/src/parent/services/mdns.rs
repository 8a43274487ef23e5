//! `--discoverable`: DNS-SD over multicast DNS (mdns-sd, which runs its own daemon thread;
//! every call here only queues a command for it). One instance per service type, named
//! `DIR on HOST`: `_http._tcp` (`_https._tcp` with TLS: the port speaks nothing else), and
//! `_webdav._tcp` (`_webdavs._tcp`) with `--dav`. TXT: `path=/` and `gen=N`, the generation
//! the advertisement describes.
//!
//! A new generation re-registers each instance under the same name: mdns-sd replaces its
//! records in place and announces the new SRV/TXT with the cache-flush bit, so a browser
//! sees the one instance update, never a gap (no goodbye is sent) and never two (the name
//! is the same). Stop sends the goodbyes (TTL 0) once, then ends the daemon.
//!
//! The daemon reports what happens on its own thread only through its monitor channel (its
//! socket errors otherwise go to a log nobody reads): a thread of ours follows it for the
//! daemon's life and turns errors and name conflicts into warnings and the service's
//! `ctl status` failures, and announcements into the interfaces the status lists.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use mdns_sd::{DaemonEvent, Receiver, ServiceDaemon, ServiceInfo};
use servery_core::Generation;

use super::{Pending, Service, ServiceContext, ServiceError, ServiceReport};

/// How long a stop waits for the daemon to confirm each step.
const REPLY: Duration = Duration::from_secs(1);

pub(super) struct MdnsService {
    daemon: Option<ServiceDaemon>,
    /// The instances registered, by full name.
    registered: Vec<String>,
    report: Arc<ServiceReport>,
}

impl std::fmt::Debug for MdnsService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MdnsService")
            .field("running", &self.daemon.is_some())
            .field("registered", &self.registered)
            .finish()
    }
}

/// The service types advertised for `ctx`'s site.
fn types(ctx: &ServiceContext) -> Vec<&'static str> {
    let site = &ctx.site;
    let mut types = vec![if site.tls {
        "_https._tcp.local."
    } else {
        "_http._tcp.local."
    }];
    if site.dav {
        types.push(if site.tls {
            "_webdavs._tcp.local."
        } else {
            "_webdav._tcp.local."
        });
    }
    types
}

/// Each instance as `ctx` describes it: the bound addresses (every interface's own for a
/// wildcard listener), the port, and the generation in TXT.
fn instances(ctx: &ServiceContext) -> Result<Vec<ServiceInfo>, ServiceError> {
    let site = &ctx.site;
    let specific: Vec<String> = site
        .addrs
        .iter()
        .map(|a| a.ip())
        .filter(|ip| !ip.is_unspecified())
        .map(|ip| ip.to_string())
        .collect();
    let wildcard = specific.len() < site.addrs.len();
    let generation = ctx.generation.0.to_string();
    let txt = [("path", "/"), ("gen", generation.as_str())];
    types(ctx)
        .into_iter()
        .map(|ty| {
            let info = ServiceInfo::new(
                ty,
                &site.instance_name(),
                &site.mdns_host(),
                specific.join(","),
                site.port(),
                &txt[..],
            )?;
            Ok(if wildcard {
                info.enable_addr_auto()
            } else {
                info
            })
        })
        .collect()
}

/// Wait for the daemon's answer off the runtime's thread.
async fn reply<T: Send + 'static>(rx: Receiver<T>) -> Result<T, ServiceError> {
    tokio::task::spawn_blocking(move || rx.recv_timeout(REPLY))
        .await?
        .map_err(|_| ServiceError::MdnsTimeout(REPLY))
}

/// What the daemon told us so far, shown as the service's detail in `ctl status`.
#[derive(Debug, Default)]
struct Heard {
    /// `instance@host:interface` for every announcement sent.
    announced_on: BTreeSet<String>,
    /// Instances the daemon renamed after a conflict: (asked for, now advertised as).
    renamed: Vec<(String, String)>,
}

impl Heard {
    /// Takes one daemon event: errors and conflicts are failures (an operator must learn
    /// that nobody can find the share under its name); returns whether the detail changed.
    fn take(&mut self, event: DaemonEvent, report: &ServiceReport) -> bool {
        match event {
            DaemonEvent::Error(e) => {
                tracing::warn!(error = %e, "mDNS: the daemon failed");
                report.record_failure(format!("daemon: {e}"));
                false
            }
            DaemonEvent::NameChange(change) => {
                tracing::warn!(asked = %change.original, now = %change.new_name,
                    "mDNS: name conflict on the network; advertised under a new name");
                report.record_failure(format!(
                    "name conflict: {} is advertised as {}",
                    change.original, change.new_name
                ));
                self.renamed.push((change.original, change.new_name));
                true
            }
            DaemonEvent::Announce(instance, on) => {
                tracing::debug!(%instance, %on, "mDNS: announced");
                self.announced_on.insert(format!("{instance}@{on}"))
            }
            _ => false,
        }
    }

    fn detail(&self) -> serde_json::Value {
        serde_json::json!({
            "announced_on": self.announced_on,
            "renamed": self.renamed.iter()
                .map(|(asked, now)| serde_json::json!({"asked": asked, "now": now}))
                .collect::<Vec<_>>(),
        })
    }
}

/// Follows the daemon's events until it shuts down (its end of the channel goes).
fn follow(events: Receiver<DaemonEvent>, report: Arc<ServiceReport>) {
    let mut heard = Heard::default();
    while let Ok(event) = events.recv() {
        if heard.take(event, &report)
            && let Ok(mut detail) = report.detail.lock()
        {
            *detail = Some(heard.detail());
        }
    }
}

/// The daemon in `slot`, started (with a thread following its events) if it is not yet.
fn running<'a>(
    slot: &'a mut Option<ServiceDaemon>,
    report: &Arc<ServiceReport>,
) -> Result<&'a ServiceDaemon, ServiceError> {
    let daemon = match slot.take() {
        Some(daemon) => daemon,
        None => {
            let daemon = ServiceDaemon::new()?;
            let events = daemon.monitor()?;
            let report = Arc::clone(report);
            std::thread::Builder::new()
                .name("mdns-events".into())
                .spawn(move || follow(events, report))
                .map_err(ServiceError::Thread)?;
            daemon
        }
    };
    Ok(slot.insert(daemon))
}

impl MdnsService {
    pub(super) fn new(report: Arc<ServiceReport>) -> Self {
        Self {
            daemon: None,
            registered: Vec::new(),
            report,
        }
    }

    fn announce(&mut self, ctx: &ServiceContext) -> Result<(), ServiceError> {
        let daemon = running(&mut self.daemon, &self.report)?;
        for info in instances(ctx)? {
            let name = info.get_fullname().to_owned();
            daemon.register(info)?;
            if !self.registered.contains(&name) {
                self.registered.push(name);
            }
        }
        Ok(())
    }
}

impl Service for MdnsService {
    fn start<'a>(&'a mut self, ctx: &'a ServiceContext) -> Pending<'a> {
        if ctx.site.loopback_only() {
            tracing::warn!(
                "--discoverable: every listener is on loopback, so only this machine can connect to what is advertised (--bind 0.0.0.0 serves the LAN)"
            );
        }
        Box::pin(async move {
            self.announce(ctx)?;
            tracing::info!(instances = ?self.registered, generation = %ctx.generation, "mDNS: advertised");
            Ok(())
        })
    }

    fn switch<'a>(&'a mut self, _from: Generation, ctx: &'a ServiceContext) -> Pending<'a> {
        Box::pin(async move {
            self.announce(ctx)?;
            tracing::info!(generation = %ctx.generation, "mDNS: re-announced");
            Ok(())
        })
    }

    fn stop(&mut self) -> Pending<'_> {
        Box::pin(async move {
            let Some(daemon) = self.daemon.take() else {
                return Ok(());
            };
            let mut outcome = Ok(());
            for name in self.registered.drain(..) {
                match daemon.unregister(&name) {
                    Ok(rx) => {
                        if let Err(e) = reply(rx).await {
                            outcome = Err(e);
                        }
                    }
                    Err(e) => outcome = Err(e.into()),
                }
            }
            tracing::info!("mDNS: withdrawn");
            let _ = reply(daemon.shutdown()?).await;
            outcome
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::parent::services::Site;

    fn ctx(tls: bool, dav: bool, addrs: &[&str], generation: u64) -> ServiceContext {
        ServiceContext {
            generation: Generation(generation),
            site: Arc::new(Site {
                addrs: addrs.iter().map(|a| a.parse().expect("addr")).collect(),
                tls,
                dav,
                root_name: "share".into(),
                host_name: "box".into(),
            }),
        }
    }

    #[test]
    fn daemon_errors_and_conflicts_are_failures_and_announcements_are_listed() {
        let report = ServiceReport::default();
        let mut heard = Heard::default();
        let announce =
            |on: &str| DaemonEvent::Announce("share on box._http._tcp.local.".into(), on.into());
        assert!(heard.take(announce("box.local.:eth0"), &report));
        assert!(
            !heard.take(announce("box.local.:eth0"), &report),
            "a repeat changes nothing"
        );
        assert!(!heard.take(DaemonEvent::IpAdd("10.0.0.1".parse().expect("ip")), &report));
        assert_eq!(
            report.failures.load(std::sync::atomic::Ordering::Relaxed),
            0
        );

        assert!(!heard.take(
            DaemonEvent::Error(mdns_sd::Error::Msg("send failed".into())),
            &report
        ));
        assert_eq!(
            report.failures.load(std::sync::atomic::Ordering::Relaxed),
            1
        );
        let last = report
            .last_error
            .lock()
            .expect("lock")
            .clone()
            .expect("an error");
        assert!(last.contains("send failed"), "{last}");

        let change = mdns_sd::DnsNameChange {
            original: "share on box._http._tcp.local.".into(),
            new_name: "share on box (2)._http._tcp.local.".into(),
            rr_type: mdns_sd::RRType::SRV,
            intf_name: "eth0".into(),
        };
        assert!(heard.take(DaemonEvent::NameChange(change), &report));
        assert_eq!(
            report.failures.load(std::sync::atomic::Ordering::Relaxed),
            2
        );
        let detail = heard.detail();
        assert_eq!(
            detail["announced_on"][0],
            "share on box._http._tcp.local.@box.local.:eth0"
        );
        assert_eq!(
            detail["renamed"][0]["now"],
            "share on box (2)._http._tcp.local."
        );
    }

    #[test]
    fn the_types_follow_tls_and_dav_and_the_txt_names_the_generation() {
        assert_eq!(
            types(&ctx(false, false, &["0.0.0.0:1"], 1)),
            ["_http._tcp.local."]
        );
        assert_eq!(
            types(&ctx(true, true, &["0.0.0.0:1"], 1)),
            ["_https._tcp.local.", "_webdavs._tcp.local."]
        );
        let infos = instances(&ctx(false, true, &["127.0.0.1:8000"], 7)).expect("valid");
        assert_eq!(infos.len(), 2);
        let http = &infos[0];
        assert_eq!(http.get_fullname(), "share on box._http._tcp.local.");
        assert_eq!(http.get_port(), 8000);
        assert_eq!(http.get_property_val_str("gen"), Some("7"));
        assert_eq!(http.get_property_val_str("path"), Some("/"));
        assert!(!http.is_addr_auto());
        assert!(
            instances(&ctx(false, false, &["0.0.0.0:8000"], 1)).expect("valid")[0].is_addr_auto()
        );
        // The next generation is the same instance: a re-registration replaces it.
        let next = instances(&ctx(false, true, &["127.0.0.1:8000"], 8)).expect("valid");
        assert_eq!(next[0].get_fullname(), http.get_fullname());
    }
}
