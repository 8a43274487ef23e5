//! The parent's singleton services: the owners of what the core's singleton machine starts
//! once after the first commit, moves to each new generation and stops once (decision
//! 0020).
//!
//! The driver hands each [`SingletonAction`] to [`ServiceHost::perform`], which only
//! queues it: every enabled kind has one [`Service`] object running as its own task on the
//! host runtime, carrying out its actions in order. The driver thread never waits for a
//! service, and a service that stalls holds up only its own queue: heartbeats are read and
//! judged on the driver thread, and children are reaped and restarted by other tasks.
//! A service must not block the host runtime's thread: blocking work (a write to a
//! terminal, waiting for a daemon thread) goes through `spawn_blocking`.
//!
//! Adding a service: a type implementing [`Service`], and one arm in [`service_for`]; the
//! fixed settings it is built from (as TFTP's address, port and root would be) join
//! [`Site`].

mod access_log;
pub mod acme;
pub mod args;
pub mod context;
mod mdns;
mod qr;
mod stall;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use servery_core::Generation;
use servery_core::config::Listen;
use servery_core::singletons::{SingletonAction, SingletonKind};
use tokio::runtime::Handle;
use tokio::sync::mpsc;

pub use context::{ServiceContext, Site};

/// What a service's action returns, boxed so that services can be chosen at run time.
pub type Pending<'a> = Pin<Box<dyn Future<Output = Result<(), ServiceError>> + Send + 'a>>;

/// A parent-owned singleton service. Each method runs on the host runtime and must not
/// block its thread.
pub trait Service: Send + 'static {
    /// Begin serving `ctx.generation`, the first committed one.
    fn start<'a>(&'a mut self, ctx: &'a ServiceContext) -> Pending<'a>;
    /// Describe `ctx.generation` instead of `from`, in one step.
    fn switch<'a>(&'a mut self, from: Generation, ctx: &'a ServiceContext) -> Pending<'a>;
    /// Stop for good (called at most once, after a start).
    fn stop(&mut self) -> Pending<'_>;
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceError {
    #[error("mDNS: {0}")]
    Mdns(#[from] mdns_sd::Error),
    #[error("mDNS daemon did not answer within {0:?}")]
    MdnsTimeout(Duration),
    #[error("cannot make the QR code: {0}")]
    Qr(#[from] qrcode::types::QrError),
    #[error("cannot write to standard output: {0}")]
    Output(#[source] std::io::Error),
    #[error("cannot start a thread: {0}")]
    Thread(#[source] std::io::Error),
    #[error("a blocking task failed: {0}")]
    Blocking(#[from] tokio::task::JoinError),
    #[error("TFTP: {0}")]
    Tftp(Box<crate::tftp::TftpError>),
}

/// The service that owns `kind`, built from the parent's fixed settings, or `None` for a
/// kind whose I/O is not a service here: TFTP's socket-holding service comes in
/// ready-made, and ACME is the certificate manager's (driven by its own actions).
fn service_for(
    kind: SingletonKind,
    _site: &Site,
    report: &Arc<ServiceReport>,
) -> Option<Box<dyn Service>> {
    match kind {
        SingletonKind::AccessLog => Some(Box::new(access_log::AccessLogService)),
        SingletonKind::Mdns => Some(Box::new(mdns::MdnsService::new(Arc::clone(report)))),
        SingletonKind::Qr => Some(Box::new(qr::QrService)),
        SingletonKind::Tftp | SingletonKind::Acme => None,
    }
}

/// How one service is doing, for `ctl status`: outcomes of I/O, not lifecycle (the core's
/// singleton machine is the lifecycle).
#[derive(Debug, Default)]
pub struct ServiceReport {
    /// Actions queued or running, not yet finished.
    pub pending: AtomicU64,
    pub failures: AtomicU64,
    pub last_error: Mutex<Option<String>>,
    /// What the service itself says it is doing, beyond its actions' outcomes (mDNS: the
    /// interfaces it announced on, the name it won), as it last reported it.
    pub detail: Mutex<Option<serde_json::Value>>,
}

impl ServiceReport {
    /// A failure the service found between actions (a daemon's error event), counted and
    /// shown like a failed action.
    pub fn record_failure(&self, message: String) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut last) = self.last_error.lock() {
            *last = Some(message);
        }
    }
}

/// Every enabled service's report, by kind.
pub type Reports = Arc<BTreeMap<SingletonKind, Arc<ServiceReport>>>;

enum Op {
    Start(ServiceContext),
    Switch(Generation, ServiceContext),
    Stop,
}

impl Op {
    fn name(&self) -> &'static str {
        match self {
            Op::Start(_) => "start",
            Op::Switch(..) => "switch",
            Op::Stop => "stop",
        }
    }
}

#[derive(Debug)]
struct Lane {
    tx: mpsc::UnboundedSender<Op>,
    report: Arc<ServiceReport>,
}

impl std::fmt::Debug for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One task per enabled service on the host runtime, and the queues to them.
#[derive(Debug)]
pub struct ServiceHost {
    site: Arc<Site>,
    lanes: BTreeMap<SingletonKind, Lane>,
    reports: Reports,
    /// Disconnected once every service task has ended.
    done: std::sync::mpsc::Receiver<()>,
}

impl ServiceHost {
    /// Spawn a task for each of `kinds` that has a service: one of `ready` (built from
    /// resources taken before serving, as TFTP's bound socket) or else one built from
    /// `site`.
    pub fn start(
        rt: &Handle,
        site: Site,
        kinds: &[SingletonKind],
        mut ready: BTreeMap<SingletonKind, Box<dyn Service>>,
    ) -> ServiceHost {
        let (done_tx, done) = std::sync::mpsc::channel();
        let stalls = stall::Stalls::from_env();
        let mut lanes = BTreeMap::new();
        for &kind in kinds {
            let report = Arc::new(ServiceReport::default());
            let Some(service) = ready
                .remove(&kind)
                .or_else(|| service_for(kind, &site, &report))
            else {
                tracing::warn!(
                    kind = kind.name(),
                    "no service for this singleton in this binary"
                );
                continue;
            };
            let (tx, rx) = mpsc::unbounded_channel();
            rt.spawn(run(
                kind,
                service,
                rx,
                Arc::clone(&report),
                stalls.for_kind(kind),
                done_tx.clone(),
            ));
            lanes.insert(kind, Lane { tx, report });
        }
        let reports = Arc::new(
            lanes
                .iter()
                .map(|(kind, lane)| (*kind, Arc::clone(&lane.report)))
                .collect(),
        );
        ServiceHost {
            site: Arc::new(site),
            lanes,
            reports,
            done,
        }
    }

    pub fn reports(&self) -> Reports {
        Arc::clone(&self.reports)
    }

    /// Queue the core's action for its service; never waits. The log line is the record
    /// of the core's decision, written as it is made. `addrs`: the addresses of the
    /// listener set the action's generation serves on (what a service describes).
    pub fn perform(&self, action: SingletonAction, addrs: impl FnOnce(Listen) -> Vec<SocketAddr>) {
        let context = |generation, listen| ServiceContext {
            generation,
            site: Arc::new(Site {
                addrs: addrs(listen),
                ..Site::clone(&self.site)
            }),
        };
        let (kind, op) = match action {
            SingletonAction::Start {
                kind,
                generation,
                listen,
            } => {
                tracing::info!(kind = kind.name(), %generation, "singleton started");
                (kind, Op::Start(context(generation, listen)))
            }
            SingletonAction::Switch {
                kind,
                from,
                to,
                listen,
            } => {
                tracing::info!(kind = kind.name(), %from, %to, "singleton switched");
                (kind, Op::Switch(from, context(to, listen)))
            }
            SingletonAction::Stop { kind } => {
                tracing::info!(kind = kind.name(), "singleton stopped");
                (kind, Op::Stop)
            }
        };
        if let Some(lane) = self.lanes.get(&kind) {
            lane.report.pending.fetch_add(1, Ordering::Relaxed);
            if lane.tx.send(op).is_err() {
                lane.report.pending.fetch_sub(1, Ordering::Relaxed);
                tracing::warn!(kind = kind.name(), "the service's task has ended");
            }
        }
    }

    /// After the driver's exit: let every service finish what it was given (its stop) for
    /// at most `bound`, so an advertisement is withdrawn before the process goes; a service
    /// still busy then is abandoned with a warning.
    pub fn finish(self, bound: Duration) {
        let ServiceHost { lanes, done, .. } = self;
        drop(lanes);
        let deadline = Instant::now() + bound;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match done.recv_timeout(left) {
                Ok(()) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    tracing::warn!(
                        ?bound,
                        "a singleton service did not finish in time; abandoned"
                    );
                    return;
                }
            }
        }
    }
}

/// One service's task: its actions, in order, until its stop or the end of its queue.
async fn run(
    kind: SingletonKind,
    mut service: Box<dyn Service>,
    mut rx: mpsc::UnboundedReceiver<Op>,
    report: Arc<ServiceReport>,
    stall: Option<Duration>,
    _done: std::sync::mpsc::Sender<()>,
) {
    while let Some(op) = rx.recv().await {
        if let Some(stall) = stall {
            stall::stall(kind, stall).await;
        }
        let result = match &op {
            Op::Start(ctx) => service.start(ctx).await,
            Op::Switch(from, ctx) => service.switch(*from, ctx).await,
            Op::Stop => service.stop().await,
        };
        report.pending.fetch_sub(1, Ordering::Relaxed);
        match result {
            Ok(()) => tracing::debug!(kind = kind.name(), op = op.name(), "singleton service done"),
            Err(e) => {
                tracing::warn!(kind = kind.name(), op = op.name(), error = %e, "singleton service failed");
                report.record_failure(format!("{}: {e}", op.name()));
            }
        }
        if matches!(op, Op::Stop) {
            return;
        }
    }
}
