//! The CA, the state directory and the workers' identities as the simulated host plays
//! them: the certificate manager's actions in, its events out, and the record of what
//! the parent and the workers did with the identities.

use core::time::Duration;
use std::collections::{BTreeMap, BTreeSet};

use servery_core::acme::{AcmeAction, AcmeError, AcmeEvent, CertFacts, Certificate, Challenge};
use servery_core::acme::{ManagerConfig, UnixTime};
use servery_core::parent::Parent;
use servery_core::proto::ParentMessage;
use servery_core::supervisor::Event;
use servery_core::tls_material::{
    CertSummary, STATELESS_RESET_KEY_LEN, TICKET_ENTROPY_LEN, TicketPolicy, TlsInput, TlsState,
};
use servery_core::{Instant, WorkerId};

use super::{
    CaFailure, CertPlan, FailureRecord, Install, Misissue, OrderRecord, StartMessage,
    parse_sim_pem, sim_pem, wall_at,
};
use crate::labels;
use crate::world::{SimEvent, SimWorld};

/// What the placeholder identity reads as: not a certificate of the CA's.
const PLACEHOLDER: &str = "SIM PLACEHOLDER\n";

/// A certificate-side happening at a point of virtual time.
#[derive(Debug, Clone)]
pub(crate) enum CertStep {
    /// The parent has read its state directory.
    Load,
    /// An answer of the CA (or of the state directory) reaches the parent.
    Deliver(Box<AcmeEvent>),
    /// The CA validates an order's challenges.
    Validate { order: u64 },
    /// `ctl acme-renew`.
    RenewNow,
}

impl CertStep {
    pub(crate) fn code(&self) -> u64 {
        match self {
            CertStep::Load => 0,
            CertStep::Deliver(_) => 1,
            CertStep::Validate { order } => 2 | order << 8,
            CertStep::RenewNow => 3,
        }
    }

    /// Whether it is input to the parent (held while the parent is stalled).
    pub(crate) fn for_the_parent(&self) -> bool {
        !matches!(self, CertStep::Validate { .. })
    }
}

/// The CA's books and what the workers hold.
#[derive(Debug)]
pub(crate) struct CertSim {
    plan: CertPlan,
    /// Orders whose challenges the CA has yet to validate.
    pending: BTreeMap<u64, Vec<Challenge>>,
    /// Every certificate the CA issued (the stored one first, when there is one).
    issued: Vec<CertFacts>,
    /// How many certificates this run's orders got.
    issued_by_orders: u64,
    /// Tokens of pending orders the broker answered with the right key authorization,
    /// as of the parent's last step.
    answerable: BTreeSet<String>,
    /// Each worker's identity: the generation it was handed last, with its certificate.
    held: BTreeMap<WorkerId, (u64, Option<CertFacts>)>,
    /// The parent's identity generation when each worker was spawned.
    spawned_at: BTreeMap<WorkerId, u64>,
    /// Live accepting workers holding an older identity than the parent's, since when.
    stale_since: BTreeMap<WorkerId, Instant>,
    /// The parent's identity generation as of its last step.
    current: u64,
    failures_seen: u32,
}

impl CertSim {
    fn stored(&self) -> Option<Certificate> {
        let facts = self.plan.stored_age.and(self.issued.first())?.clone();
        let (cert_pem, key_pem) = sim_pem(&facts);
        Some(Certificate {
            facts,
            cert_pem,
            key_pem,
        })
    }
}

fn summary(facts: Option<&CertFacts>) -> CertSummary {
    facts.map_or_else(CertSummary::default, |f| CertSummary {
        subject: f.names.first().cloned().unwrap_or_default(),
        not_after_unix: f.not_after.0,
        not_before_unix: f.not_before.0,
    })
}

fn dur(at: Instant) -> Duration {
    Duration::from_nanos(at.as_nanos())
}

impl SimWorld {
    /// With a certificate plan: the CA's book starts with the stored certificate, the
    /// parent reads its state directory at once, and the operator's renewals are due.
    pub(crate) fn certs_start(&mut self) {
        let Some(plan) = self.spec.workload.certs.clone() else {
            return;
        };
        let mut issued = Vec::new();
        if let Some(age) = plan.stored_age {
            let not_before = UnixTime(super::WALL_BASE - age.as_secs() as i64);
            issued.push(CertFacts {
                not_before,
                not_after: not_before.plus(plan.lifetime),
                names: plan.domains.clone(),
                serial: "0100".into(),
            });
        }
        for at in &plan.renew_now {
            self.schedule_at(crate::world::ms(*at), SimEvent::Cert(CertStep::RenewNow));
        }
        self.schedule_at(Instant::ZERO, SimEvent::Cert(CertStep::Load));
        self.out.certs.domains = plan.domains.clone();
        self.out.certs.retry = Some(plan.retry);
        self.certs = Some(CertSim {
            plan,
            pending: BTreeMap::new(),
            issued,
            issued_by_orders: 0,
            answerable: BTreeSet::new(),
            held: BTreeMap::new(),
            spawned_at: BTreeMap::new(),
            stale_since: BTreeMap::new(),
            current: 0,
            failures_seen: 0,
        });
    }

    /// The manager's configuration and the TLS material the parent starts with: the
    /// stored certificate, or a placeholder until the first issuance (as `io-real`'s
    /// `acme_site` does).
    pub fn certs_parent(&mut self) -> Option<(ManagerConfig, TlsState)> {
        let c = self.certs.as_ref()?;
        let mut config = ManagerConfig::new(c.plan.domains.clone());
        config.retry = c.plan.retry;
        config.attempt_timeout = c.plan.attempt_timeout;
        let stored = c.stored();
        let (cert_pem, key_pem) = stored
            .as_ref()
            .map_or((PLACEHOLDER.into(), PLACEHOLDER.into()), |s| {
                (s.cert_pem.clone(), s.key_pem.clone())
            });
        let mut entropy = [0u8; TICKET_ENTROPY_LEN];
        for chunk in entropy.chunks_mut(8) {
            let draw = self.rng.next_u64().to_be_bytes();
            chunk.copy_from_slice(&draw[..chunk.len()]);
        }
        let facts = stored.map(|s| s.facts);
        // The simulated workers serve no QUIC: the reset key only has to exist, and taking it
        // from the ticket entropy keeps every seed's draws (and so its trace) as they were.
        let mut reset_key = [0u8; STATELESS_RESET_KEY_LEN];
        for (byte, from) in reset_key.iter_mut().zip(entropy.iter().cycle()) {
            *byte = *from;
        }
        let tls = TlsState::new(
            Instant::ZERO,
            TicketPolicy::default(),
            cert_pem,
            key_pem,
            summary(facts.as_ref()),
            entropy,
            reset_key,
        )
        .ok()?;
        Some((config, tls))
    }

    pub(crate) fn cert_step(&mut self, step: CertStep) {
        let now = self.now;
        let wall = wall_at(now.as_nanos());
        let Some(c) = self.certs.as_mut() else {
            return;
        };
        let event = match step {
            CertStep::Load => AcmeEvent::Loaded(c.stored()),
            CertStep::Deliver(event) => *event,
            CertStep::RenewNow => {
                self.out
                    .certs
                    .renew_commands
                    .push(now.as_nanos() / 1_000_000);
                AcmeEvent::RenewNow
            }
            CertStep::Validate { order } => return self.ca_validate(order),
        };
        self.inbox.push_back(Event::Acme {
            wall,
            event: Box::new(event),
        });
    }

    /// An answer from the CA, after its seeded delay.
    fn ca_answer(&mut self, event: AcmeEvent) {
        let Some((lo, hi)) = self.certs.as_ref().map(|c| c.plan.ca_ms) else {
            return;
        };
        let d = Duration::from_millis(self.rng.range(lo, hi));
        self.schedule_in(d, SimEvent::Cert(CertStep::Deliver(Box::new(event))));
    }

    /// What the manager asked of its driver.
    pub(crate) fn acme_action(&mut self, now: Instant, action: AcmeAction) {
        let wall = wall_at(now.as_nanos());
        let Some(c) = self.certs.as_mut() else {
            return;
        };
        let outage = c.plan.outage_at(dur(now));
        match action {
            AcmeAction::Order { order, domains } => {
                self.out.certs.orders.push(OrderRecord {
                    at_ms: now.as_nanos() / 1_000_000,
                    wall,
                });
                let failed = |error| AcmeEvent::Failed { order, error };
                match outage {
                    Some(CaFailure::Silent) => {}
                    Some(CaFailure::Unreachable) => self.ca_answer(failed(AcmeError::Unreachable(
                        "connection refused (simulated)".into(),
                    ))),
                    Some(CaFailure::Refused) => self.ca_answer(failed(AcmeError::Refused(
                        "urn:ietf:params:acme:error:rateLimited (simulated)".into(),
                    ))),
                    Some(CaFailure::ValidationFailed) | None => {
                        let challenges: Vec<Challenge> = (0..domains.len())
                            .map(|i| {
                                let token = format!("t{order}-{i}-{:x}", self.rng.next_u64());
                                Challenge {
                                    key_authorization: format!("{token}.thumbprint"),
                                    token,
                                }
                            })
                            .collect();
                        if let Some(c) = self.certs.as_mut() {
                            c.pending.insert(order, challenges.clone());
                        }
                        self.ca_answer(AcmeEvent::Challenges { order, challenges });
                    }
                }
            }
            AcmeAction::Answer { order } => {
                if outage != Some(CaFailure::Silent) {
                    let (lo, hi) = c.plan.ca_ms;
                    let d = Duration::from_millis(self.rng.range(lo, hi));
                    self.schedule_in(d, SimEvent::Cert(CertStep::Validate { order }));
                }
            }
            // The state directory: a small atomic write.
            AcmeAction::Store { order, .. } => {
                let d = Duration::from_millis(self.rng.range(1, 5));
                let stored = AcmeEvent::Stored { order };
                self.schedule_in(d, SimEvent::Cert(CertStep::Deliver(Box::new(stored))));
            }
            // As `io-real` does: read the certificate, offer it to the TLS material.
            AcmeAction::InstallIdentity { cert_pem, key_pem } => {
                let facts = parse_sim_pem(&cert_pem);
                self.inbox.push_back(Event::Tls(TlsInput::Identity {
                    summary: summary(facts.as_ref()),
                    cert_pem,
                    key_pem,
                }));
            }
            AcmeAction::AskRenewalInfo { serial } => {
                let window = c.plan.ari.filter(|_| outage.is_none()).and_then(|(a, b)| {
                    let f = c.issued.iter().find(|f| f.serial == serial)?;
                    let life = f.not_before.until(f.not_after).as_secs_f64();
                    let at = |x: f64| f.not_before.plus(Duration::from_secs_f64(life * x));
                    Some((at(a), at(b)))
                });
                if let Some((start, end)) = window {
                    self.out.certs.windows.insert(serial.clone(), (start, end));
                    self.ca_answer(AcmeEvent::RenewalWindow { serial, start, end });
                }
            }
            // The parent's own (the broker's challenge table): never a driver's.
            AcmeAction::Publish(_) | AcmeAction::Withdraw | AcmeAction::AttemptFailed { .. } => {}
        }
    }

    /// The CA fetches each challenge of `order` through the service; it issues if every
    /// one was answered.
    fn ca_validate(&mut self, order: u64) {
        let now = self.now;
        let Some(c) = self.certs.as_mut() else {
            return;
        };
        let Some(challenges) = c.pending.remove(&order) else {
            return;
        };
        let failed = |why: &str| AcmeEvent::Failed {
            order,
            error: AcmeError::ValidationFailed(why.into()),
        };
        match c.plan.outage_at(dur(now)) {
            Some(CaFailure::Silent) => return,
            Some(_) => return self.ca_answer(failed("urn:ietf:params:acme:error:connection")),
            None => {}
        }
        if !challenges.iter().all(|ch| c.answerable.contains(&ch.token)) {
            self.out.certs.challenges_unanswered += 1;
            return self.ca_answer(failed("the challenge was not answered"));
        }
        let certificate = self.ca_issue();
        self.ca_answer(AcmeEvent::Issued { order, certificate });
    }

    fn ca_issue(&mut self) -> Certificate {
        let wall = wall_at(self.now.as_nanos());
        let Some(c) = self.certs.as_mut() else {
            unreachable!("issued only with a certificate plan");
        };
        c.issued_by_orders += 1;
        let n = c.issued_by_orders;
        let life = c.plan.lifetime;
        let mut facts = CertFacts {
            not_before: wall,
            not_after: wall.plus(life),
            names: c.plan.domains.clone(),
            serial: format!("{:04x}", 0x100 + n),
        };
        let misissue = c.plan.misissue.iter().find(|(k, _)| *k == n).map(|m| m.1);
        match misissue {
            Some(Misissue::Older) => {
                let newest = c.issued.iter().map(|f| f.not_after).max();
                let end = newest.map_or(facts.not_after, |e| UnixTime(e.0 - 1));
                facts.not_after = end.min(facts.not_after);
                facts.not_before = UnixTime(wall.0.min(end.0 - 1));
            }
            Some(Misissue::Expired) => {
                facts.not_after = UnixTime(wall.0 - 10);
                facts.not_before = UnixTime(facts.not_after.0 - life.as_secs() as i64);
            }
            Some(Misissue::MissingName) => {
                facts.names.pop();
            }
            None => {}
        }
        if misissue.is_some() {
            self.out.coverage.insert(labels::CA_MISISSUED);
        }
        c.issued.push(facts.clone());
        let (cert_pem, key_pem) = sim_pem(&facts);
        Certificate {
            facts,
            cert_pem,
            key_pem,
        }
    }

    /// A worker got `message` from the parent: the first one must be the TLS material,
    /// and the material is what it serves with from then on.
    pub(crate) fn certs_worker_message(&mut self, worker: WorkerId, message: &ParentMessage) {
        let Some(c) = self.certs.as_mut() else {
            return;
        };
        let material = match message {
            ParentMessage::TlsMaterial(m) => Some(&m.identity),
            _ => None,
        };
        if !c.held.contains_key(&worker) {
            let current_at_spawn = c.spawned_at.get(&worker).copied().unwrap_or(0);
            self.out.certs.start_messages.push(StartMessage {
                worker: worker.0,
                generation: material.map(|m| m.generation),
                current_at_spawn,
            });
            if current_at_spawn > 1 {
                self.out
                    .coverage
                    .insert(labels::WORKER_STARTED_WITH_RENEWED_IDENTITY);
            }
        }
        match material {
            Some(id) => {
                c.held
                    .insert(worker, (id.generation, parse_sim_pem(&id.cert_pem)));
            }
            // Held as "nothing": its handshakes fail until the material comes.
            None => {
                c.held.entry(worker).or_insert((0, None));
            }
        }
    }

    /// A request `worker` served: whether its handshake could succeed, and with what.
    pub(crate) fn certs_served(&mut self, worker: WorkerId) -> bool {
        let wall = wall_at(self.now.as_nanos());
        let Some(c) = self.certs.as_ref() else {
            return true;
        };
        let out = &mut self.out.certs;
        match c.held.get(&worker) {
            Some(&(generation, ref facts)) if generation > 0 => {
                *out.served_by_generation.entry(generation).or_default() += 1;
                match facts {
                    None => out.served_placeholder += 1,
                    Some(f) if f.not_before <= wall && wall < f.not_after => {}
                    Some(_) => out.served_invalid += 1,
                }
                true
            }
            _ => {
                out.handshake_failures += 1;
                false
            }
        }
    }

    /// After each parent step: the identity it serves, which challenges its broker
    /// answers, the manager's failures, and which live workers lag behind.
    pub(crate) fn certs_observe(&mut self, now: Instant, parent: &Parent) {
        let Some(c) = self.certs.as_mut() else {
            return;
        };
        let out = &mut self.out.certs;
        if let Some(tls) = parent.tls() {
            let generation = tls.status().identity_generation;
            if generation != c.current {
                c.current = generation;
                let material = tls.material();
                out.installs.push(Install {
                    at_ms: now.as_nanos() / 1_000_000,
                    wall: wall_at(now.as_nanos()),
                    facts: parse_sim_pem(&material.identity.cert_pem),
                });
                out.generations.push(generation);
            }
        }
        c.answerable.clear();
        let table = parent.broker().challenges();
        for ch in c.pending.values().flatten() {
            if table.answer(&ch.token) == Some(ch.key_authorization.as_str()) {
                c.answerable.insert(ch.token.clone());
            }
        }
        if let Some(acme) = parent.acme() {
            let status = acme.status();
            if status.failures > c.failures_seen {
                out.failures.push(FailureRecord {
                    at_ms: now.as_nanos() / 1_000_000,
                    failures: status.failures,
                    error: status.last_error.clone().unwrap_or_default(),
                });
            }
            c.failures_seen = status.failures;
            out.final_phase = Some(status.phase);
        }
        for p in self.procs.values() {
            c.spawned_at.entry(p.id).or_insert(c.current);
            let serving = p.runnable() && p.accepting && !p.wedged && !p.eof_seen;
            let held = c.held.get(&p.id).map_or(0, |h| h.0);
            if serving && held < c.current {
                let since = *c.stale_since.entry(p.id).or_insert(now);
                let lag = now.saturating_since(since).as_millis() as u64;
                out.max_handoff_lag_ms = out.max_handoff_lag_ms.max(lag);
            } else {
                c.stale_since.remove(&p.id);
            }
        }
    }
}
