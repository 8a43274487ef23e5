//! `--acme`: the parent's ACME client, the I/O half of the core's certificate manager
//! (`servery_core::acme`). The manager lives in the core's `Parent` and decides; this
//! module carries out its requests on the host runtime — never on the driver thread — and
//! reports back as events:
//!
//! - [`AcmeService`] is the ACME singleton: its start (after the first commit) reads the
//!   state directory and reports what it holds;
//! - [`AcmeLink`] is the driver's way to hand the manager's requests to the task
//!   ([`client::run`]), which talks to the CA with instant-acme and writes the state
//!   directory ([`store`]).
//!
//! Challenges are not published here: the core puts them in the broker, where every
//! worker's `/.well-known/acme-challenge/` handler asks for them.

pub mod args;
mod client;
pub mod facts;
pub mod store;

use servery_core::Generation;
use servery_core::acme::AcmeAction;
use tokio::runtime::Handle;
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};

use super::{Pending, Service, ServiceContext};
use crate::parent::io::InboundTx;
use args::AcmeSettings;
use client::AcmeOp;

/// The driver's handle on the ACME task.
#[derive(Debug, Clone)]
pub struct AcmeLink {
    tx: UnboundedSender<AcmeOp>,
}

impl AcmeLink {
    /// Start the task on the host runtime.
    pub fn start(rt: &Handle, settings: AcmeSettings, events: InboundTx) -> AcmeLink {
        let (tx, rx) = unbounded_channel();
        rt.spawn(client::run(settings, rx, events));
        AcmeLink { tx }
    }

    /// Queue one of the manager's requests; never waits.
    pub fn perform(&self, action: AcmeAction) {
        if self.tx.send(AcmeOp::Action(action)).is_err() {
            tracing::warn!("the ACME task has ended");
        }
    }

    /// The singleton service that starts and stops the task's work.
    pub fn service(&self) -> Box<dyn Service> {
        Box::new(AcmeService { link: self.clone() })
    }
}

/// The ACME singleton: started once after the first commit, stopped at the exit.
#[derive(Debug)]
struct AcmeService {
    link: AcmeLink,
}

impl Service for AcmeService {
    fn start<'a>(&'a mut self, _ctx: &'a ServiceContext) -> Pending<'a> {
        let _ = self.link.tx.send(AcmeOp::Load);
        Box::pin(async { Ok(()) })
    }

    fn switch<'a>(&'a mut self, _from: Generation, _ctx: &'a ServiceContext) -> Pending<'a> {
        // A certificate does not depend on the generation.
        Box::pin(async { Ok(()) })
    }

    fn stop(&mut self) -> Pending<'_> {
        let _ = self.link.tx.send(AcmeOp::Stop);
        Box::pin(async { Ok(()) })
    }
}

/// The certificate manager's state for `ctl status`: subject (the first domain), the
/// certificate in service, the next attempt, and the last error.
pub fn status_json(
    s: &servery_core::acme::ManagerStatus,
    health: servery_core::acme::CertHealth,
) -> serde_json::Value {
    use servery_core::acme::{CertHealth, Stage};
    let by_stage: serde_json::Map<String, serde_json::Value> = Stage::ALL
        .iter()
        .zip(s.failures_by_stage)
        .map(|(stage, n)| (stage.name().to_owned(), n.into()))
        .collect();
    serde_json::json!({
        "certificate": match health {
            CertHealth::Good => "valid",
            CertHealth::Renewing => "valid, renewal failing",
            CertHealth::Issuing => "none issued yet",
            CertHealth::Expired => "expired",
        },
        "failures_by_stage": by_stage,
        "last_success": s.last_success.map(|t| t.0),
        "state": s.phase,
        "subject": s.domains.first(),
        "domains": s.domains,
        "serial": s.serial,
        "not_after": s.not_after.map(|t| t.0),
        "next_attempt": s.next_attempt.map(|t| t.0),
        "last_error": s.last_error,
        "failures": s.failures,
        "orders": s.orders,
    })
}

/// `ctl status`'s line for the manager, from [`status_json`].
pub fn status_line(a: &serde_json::Value) -> String {
    let text = |k: &str| match &a[k] {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => "-".into(),
        other => other.to_string(),
    };
    format!(
        "acme: {} ({}) subject {} serial {} not_after {} next_attempt {} orders {} failures {} last_success {} last_error {}",
        text("state"),
        text("certificate"),
        text("subject"),
        text("serial"),
        text("not_after"),
        text("next_attempt"),
        text("orders"),
        text("failures"),
        text("last_success"),
        text("last_error"),
    )
}
