//! TLS and the ACME certificate manager on the simulated host: a seeded CA answering the
//! manager's actions, a state directory, and workers that serve with the identity they
//! were handed over the control channel.
//!
//! The parent runs the core's own [`servery_core::acme::CertManager`] and
//! [`servery_core::tls_material::TlsState`]; this module only plays their surroundings,
//! as `io-real` does (its ACME task, its state directory, `tls_material::offer`). It keeps
//! no lifecycle state of its own: what the CA issued is the CA's book, what a worker
//! holds is the worker's, and everything else is read from the parent after each step.
//! Certificates are text in a format of the simulator's own ([`sim_pem`]), which the
//! simulated driver "parses" as the real one parses X.509.

mod host;

use core::time::Duration;
use std::collections::BTreeMap;

use servery_core::acme::{CertFacts, RetryPolicy, UnixTime};

pub(crate) use host::{CertSim, CertStep};

/// The simulated wall clock at virtual time zero (certificates are dated in it).
pub const WALL_BASE: i64 = 1_800_000_000;

/// What the CA does to requests during an outage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaFailure {
    /// The directory cannot be reached: orders fail.
    Unreachable,
    /// The CA answers orders with a problem document (a rate limit).
    Refused,
    /// Orders go through, but validation fails.
    ValidationFailed,
    /// The CA never answers: the manager's attempt timeout must end the attempt.
    Silent,
}

/// A certificate the CA gets wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Misissue {
    /// Valid now, but it expires before the one the CA issued last.
    Older,
    /// Its validity ended before it was issued.
    Expired,
    /// It leaves out the last configured domain.
    MissingName,
}

/// The CA, the state directory and the operator's ACME commands for one run.
#[derive(Debug, Clone, PartialEq)]
pub struct CertPlan {
    pub domains: Vec<String>,
    /// The lifetime of every certificate the CA issues.
    pub lifetime: Duration,
    /// The state directory holds a certificate the CA issued this long before the run
    /// began; `None`: nothing, and the parent starts with a self-signed placeholder.
    pub stored_age: Option<Duration>,
    /// How long the CA takes for each step (order, validation, issuance), uniform (ms).
    pub ca_ms: (u64, u64),
    /// From, until, what the CA does meanwhile.
    pub outages: Vec<(Duration, Duration, CaFailure)>,
    /// The CA's renewal window (ACME ARI) as fractions of a certificate's lifetime;
    /// `None`: the directory offers no `renewalInfo`.
    pub ari: Option<(f64, f64)>,
    /// The n-th certificate this run's orders get (from 1) is wrong so.
    pub misissue: Vec<(u64, Misissue)>,
    /// `ctl acme-renew` at these moments.
    pub renew_now: Vec<Duration>,
    pub retry: RetryPolicy,
    pub attempt_timeout: Duration,
}

impl Default for CertPlan {
    fn default() -> Self {
        CertPlan {
            domains: vec!["example.test".into(), "www.example.test".into()],
            lifetime: Duration::from_secs(30),
            stored_age: Some(Duration::ZERO),
            ca_ms: (5, 60),
            outages: Vec::new(),
            ari: None,
            misissue: Vec::new(),
            renew_now: Vec::new(),
            retry: RetryPolicy {
                first: Duration::from_secs(1),
                cap: Duration::from_secs(4),
            },
            attempt_timeout: Duration::from_secs(3),
        }
    }
}

impl CertPlan {
    /// What the CA does at `at`, if it is in an outage.
    pub fn outage_at(&self, at: Duration) -> Option<CaFailure> {
        self.outages
            .iter()
            .find(|(from, until, _)| *from <= at && at < *until)
            .map(|o| o.2)
    }
}

/// An identity the parent's TLS material took, as the simulated driver handed it over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Install {
    pub at_ms: u64,
    pub wall: UnixTime,
    /// `None`: the placeholder the parent starts with when nothing is stored.
    pub facts: Option<CertFacts>,
}

/// One order the CA received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrderRecord {
    pub at_ms: u64,
    pub wall: UnixTime,
}

/// A failure the manager counted: when, and its count since the last success.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureRecord {
    pub at_ms: u64,
    pub failures: u32,
    pub error: String,
}

/// A worker's first message from the parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartMessage {
    pub worker: u64,
    /// The identity generation it carried; `None`: it was not the TLS material.
    pub generation: Option<u64>,
    /// The generation the parent's material held when the worker was spawned.
    pub current_at_spawn: u64,
}

/// What the certificate side of a run did, for the scenarios' predicates.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CertOutcome {
    /// The plan's domains and retry policy, for judging what follows.
    pub domains: Vec<String>,
    pub retry: Option<RetryPolicy>,
    /// Every identity the material took, in order (the starting one first).
    pub installs: Vec<Install>,
    /// The identity generation of each install, as the parent numbered it.
    pub generations: Vec<u64>,
    pub orders: Vec<OrderRecord>,
    pub failures: Vec<FailureRecord>,
    /// The CA's renewal windows it answered, by serial.
    pub windows: BTreeMap<String, (UnixTime, UnixTime)>,
    /// When `ctl acme-renew` reached the parent (ms).
    pub renew_commands: Vec<u64>,
    pub start_messages: Vec<StartMessage>,
    /// The longest a live worker went on serving an older identity than the parent's,
    /// from when the parent's changed (ms).
    pub max_handoff_lag_ms: u64,
    /// Requests each identity generation served.
    pub served_by_generation: BTreeMap<u64, u64>,
    /// Requests served with an identity whose certificate had expired or was not yet
    /// valid then (the placeholder is counted apart).
    pub served_invalid: u64,
    pub served_placeholder: u64,
    /// Requests whose handshake failed: the worker held no identity.
    pub handshake_failures: u64,
    /// Validations the CA tried while a challenge of the order was not answerable.
    pub challenges_unanswered: u64,
    /// What the manager's status said at the end.
    pub final_serial: Option<String>,
    pub final_phase: Option<&'static str>,
}

/// The simulator's certificate text: what the simulated driver reads back.
pub fn sim_pem(facts: &CertFacts) -> (String, String) {
    let cert = format!(
        "SIM CERTIFICATE\nserial={}\nnot_before={}\nnot_after={}\nnames={}\n",
        facts.serial,
        facts.not_before.0,
        facts.not_after.0,
        facts.names.join(",")
    );
    (cert, format!("SIM KEY {}\n", facts.serial))
}

/// The facts in [`sim_pem`]'s text; `None` for anything else (the placeholder).
pub fn parse_sim_pem(cert: &str) -> Option<CertFacts> {
    let mut lines = cert.lines();
    if lines.next()? != "SIM CERTIFICATE" {
        return None;
    }
    let mut field = |name: &str| {
        lines
            .next()
            .and_then(|l| l.strip_prefix(name))
            .and_then(|l| l.strip_prefix('='))
            .map(str::to_owned)
    };
    let serial = field("serial")?;
    let not_before = UnixTime(field("not_before")?.parse().ok()?);
    let not_after = UnixTime(field("not_after")?.parse().ok()?);
    let names = field("names")?.split(',').map(str::to_owned).collect();
    Some(CertFacts {
        not_before,
        not_after,
        names,
        serial,
    })
}

/// The wall time at virtual time `nanos`.
pub fn wall_at(nanos: u64) -> UnixTime {
    UnixTime(WALL_BASE + (nanos / 1_000_000_000) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_simulated_certificate_text_reads_back() {
        let facts = CertFacts {
            not_before: UnixTime(5),
            not_after: UnixTime(9),
            names: vec!["a.test".into(), "b.test".into()],
            serial: "0a".into(),
        };
        let (cert, _) = sim_pem(&facts);
        assert_eq!(parse_sim_pem(&cert), Some(facts));
        assert_eq!(parse_sim_pem("PLACEHOLDER"), None);
    }
}
