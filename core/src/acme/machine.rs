//! [`CertManager`]: one attempt at a time, one renewal schedule for the whole service.

use std::collections::VecDeque;

use super::schedule::{judge, renewal_due};
use super::{
    AcmeAction, AcmeError, AcmeEvent, CertFacts, CertHealth, Certificate, MAX_CHALLENGES,
    ManagerConfig, Stage, UnixTime,
};
use crate::rng::CoreRng;
use crate::time::Instant;

/// Where the manager is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for what the state directory held.
    Loading,
    /// Waiting until `due` to order: the certificate in service is due for renewal then
    /// (`retry` false), or the last attempt failed (`retry` true).
    Waiting { due: Instant, retry: bool },
    /// An order is with the CA; its challenges are not published yet.
    Ordering { order: u64, deadline: Instant },
    /// The challenges are published; the CA validates and issues.
    Validating { order: u64, deadline: Instant },
    /// An accepted certificate is being written to the state directory.
    Storing {
        order: u64,
        deadline: Instant,
        certificate: Box<Certificate>,
    },
}

impl Phase {
    pub fn name(&self) -> &'static str {
        match self {
            Phase::Loading => "loading",
            Phase::Waiting { retry: false, .. } => "valid",
            Phase::Waiting { retry: true, .. } => "retrying",
            Phase::Ordering { .. } => "ordering",
            Phase::Validating { .. } => "validating",
            Phase::Storing { .. } => "storing",
        }
    }

    pub fn in_flight(&self) -> Option<(u64, Instant)> {
        match self {
            Phase::Ordering { order, deadline }
            | Phase::Validating { order, deadline }
            | Phase::Storing {
                order, deadline, ..
            } => Some((*order, *deadline)),
            Phase::Loading | Phase::Waiting { .. } => None,
        }
    }
}

/// What `ctl status` shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagerStatus {
    pub phase: &'static str,
    pub domains: Vec<String>,
    /// The certificate in service (issued by the CA), if any.
    pub serial: Option<String>,
    pub not_after: Option<UnixTime>,
    /// When the next order starts (a renewal or a retry), as wall time.
    pub next_attempt: Option<UnixTime>,
    pub last_error: Option<String>,
    /// Failures since the last success.
    pub failures: u32,
    /// Orders started since the parent started.
    pub orders: u64,
    /// Failed attempts since the parent started, by [`Stage::ALL`] index.
    pub failures_by_stage: [u64; 3],
    /// When an order last put a certificate in service, as wall time.
    pub last_success: Option<UnixTime>,
}

#[derive(Debug, Clone)]
pub struct CertManager {
    config: ManagerConfig,
    rng: CoreRng,
    phase: Phase,
    /// The certificate in service, put there by this machine (loaded or issued).
    current: Option<CertFacts>,
    /// The CA's renewal window for `current`, when it gave one.
    window: Option<(UnixTime, UnixTime)>,
    /// Wall time minus monotonic time, in nanoseconds, as of the latest event.
    wall_offset: i128,
    next_order: u64,
    orders: u64,
    failures: u32,
    last_error: Option<String>,
    failures_by_stage: [u64; 3],
    last_success: Option<UnixTime>,
    published: bool,
    actions: VecDeque<AcmeAction>,
}

impl CertManager {
    pub fn new(config: ManagerConfig, rng: CoreRng) -> Self {
        CertManager {
            config,
            rng,
            phase: Phase::Loading,
            current: None,
            window: None,
            wall_offset: 0,
            next_order: 1,
            orders: 0,
            failures: 0,
            last_error: None,
            failures_by_stage: [0; 3],
            last_success: None,
            published: false,
            actions: VecDeque::new(),
        }
    }

    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    /// The facts of the certificate in service.
    pub fn current(&self) -> Option<&CertFacts> {
        self.current.as_ref()
    }

    pub fn poll_action(&mut self) -> Option<AcmeAction> {
        self.actions.pop_front()
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        match &self.phase {
            Phase::Loading => None,
            Phase::Waiting { due, .. } => Some(*due),
            phase => phase.in_flight().map(|(_, deadline)| deadline),
        }
    }

    pub fn status(&self) -> ManagerStatus {
        ManagerStatus {
            phase: self.phase.name(),
            domains: self.config.domains.clone(),
            serial: self.current.as_ref().map(|c| c.serial.clone()),
            not_after: self.current.as_ref().map(|c| c.not_after),
            next_attempt: match self.phase {
                Phase::Waiting { due, .. } => Some(self.wall_of(due)),
                _ => None,
            },
            last_error: self.last_error.clone(),
            failures: self.failures,
            orders: self.orders,
            failures_by_stage: self.failures_by_stage,
            last_success: self.last_success,
        }
    }

    /// Whether a valid certificate is served at wall time `wall`, and whether renewing it
    /// fails: what `/readyz` makes of the certificate (decision 0057).
    pub fn health(&self, wall: UnixTime) -> CertHealth {
        match &self.current {
            Some(c) if c.not_before <= wall && wall < c.not_after => {
                if self.failures == 0 {
                    CertHealth::Good
                } else {
                    CertHealth::Renewing
                }
            }
            Some(_) => CertHealth::Expired,
            None => CertHealth::Issuing,
        }
    }

    /// `event`, observed at monotonic `now` and wall time `wall`.
    pub fn handle(&mut self, now: Instant, wall: UnixTime, event: AcmeEvent) {
        self.wall_offset = i128::from(wall.0) * 1_000_000_000 - i128::from(now.as_nanos());
        match event {
            AcmeEvent::Loaded(stored) => self.loaded(now, stored),
            AcmeEvent::Challenges { order, challenges } => {
                if !matches!(self.phase, Phase::Ordering { order: o, .. } if o == order) {
                    return;
                }
                if challenges.len() > MAX_CHALLENGES {
                    return self.fail(
                        now,
                        AcmeError::Refused(format!(
                            "{} challenges for one order (at most {MAX_CHALLENGES})",
                            challenges.len()
                        )),
                    );
                }
                if let Some(e) = challenges.iter().find_map(|c| c.check().err()) {
                    return self.fail(now, e);
                }
                let Some((_, deadline)) = self.phase.in_flight() else {
                    return;
                };
                if !challenges.is_empty() {
                    self.published = true;
                    self.actions.push_back(AcmeAction::Publish(challenges));
                }
                self.actions.push_back(AcmeAction::Answer { order });
                self.phase = Phase::Validating { order, deadline };
            }
            AcmeEvent::Issued { order, certificate } => {
                let Phase::Validating { order: o, deadline } = self.phase else {
                    return;
                };
                if o != order {
                    return;
                }
                self.withdraw();
                match judge(
                    &certificate.facts,
                    self.current.as_ref(),
                    &self.config.domains,
                    wall,
                ) {
                    Ok(()) => {
                        self.actions.push_back(AcmeAction::Store {
                            order,
                            certificate: certificate.clone(),
                        });
                        self.phase = Phase::Storing {
                            order,
                            deadline,
                            certificate: Box::new(certificate),
                        };
                    }
                    Err(j) => self.fail(now, AcmeError::Unacceptable(j)),
                }
            }
            AcmeEvent::Stored { order } => {
                let Phase::Storing {
                    order: o,
                    certificate,
                    ..
                } = &self.phase
                else {
                    return;
                };
                if *o != order {
                    return;
                }
                // Judged again: it was judged at issue, and a certificate issued near the
                // end of its validity can run out while it is written to disk.
                if let Err(j) = judge(
                    &certificate.facts,
                    self.current.as_ref(),
                    &self.config.domains,
                    wall,
                ) {
                    return self.fail(now, AcmeError::Unacceptable(j));
                }
                let Phase::Storing { certificate, .. } =
                    std::mem::replace(&mut self.phase, Phase::Loading)
                else {
                    return;
                };
                self.failures = 0;
                self.last_error = None;
                self.last_success = Some(wall);
                self.put_in_service(now, wall, *certificate);
            }
            AcmeEvent::Failed { order, error } => {
                if self.phase.in_flight().is_some_and(|(o, _)| o == order) {
                    self.fail(now, error);
                }
            }
            AcmeEvent::RenewalWindow { serial, start, end } => {
                if self.current.as_ref().is_some_and(|c| c.serial == serial) && start <= end {
                    self.window = Some((start, end));
                    if let Phase::Waiting { retry: false, .. } = self.phase {
                        self.schedule(now, wall);
                    }
                }
            }
            AcmeEvent::RenewNow => {
                if let Phase::Waiting { .. } = self.phase {
                    self.start_order(now);
                }
            }
        }
    }

    /// Deadlines: an order that is due, or an attempt that took too long.
    pub fn handle_timeout(&mut self, now: Instant) {
        match self.phase {
            Phase::Waiting { due, .. } if due <= now => self.start_order(now),
            ref phase => {
                if let Some((_, deadline)) = phase.in_flight()
                    && deadline <= now
                {
                    self.fail(now, AcmeError::TimedOut(self.config.attempt_timeout));
                }
            }
        }
    }

    /// Rules that hold after every step.
    pub fn check_invariants(&self) -> Result<(), String> {
        if let Phase::Storing { certificate, .. } = &self.phase
            && let Some(current) = &self.current
            && certificate.facts.not_after <= current.not_after
        {
            return Err("a certificate no newer than the one in service is being stored".into());
        }
        if self.published && !matches!(self.phase, Phase::Validating { .. }) {
            return Err(format!(
                "challenges left published in phase {}",
                self.phase.name()
            ));
        }
        Ok(())
    }

    fn loaded(&mut self, now: Instant, stored: Option<Certificate>) {
        if self.phase != Phase::Loading {
            return;
        }
        let wall = self.wall_of(now);
        if let Some(cert) = stored {
            match judge(&cert.facts, None, &self.config.domains, wall) {
                Ok(()) => return self.put_in_service(now, wall, cert),
                Err(j) => {
                    self.last_error = Some(format!("the stored certificate is not used: {j}"));
                }
            }
        }
        self.start_order(now);
    }

    fn put_in_service(&mut self, now: Instant, wall: UnixTime, cert: Certificate) {
        self.actions.push_back(AcmeAction::InstallIdentity {
            cert_pem: cert.cert_pem,
            key_pem: cert.key_pem,
        });
        self.actions.push_back(AcmeAction::AskRenewalInfo {
            serial: cert.facts.serial.clone(),
        });
        self.current = Some(cert.facts);
        self.window = None;
        self.schedule(now, wall);
    }

    /// Wait for the renewal of the certificate in service, or order now if it is due.
    fn schedule(&mut self, now: Instant, wall: UnixTime) {
        let Some(current) = &self.current else {
            return self.start_order(now);
        };
        let due_wall = renewal_due(
            current,
            self.window,
            self.config.renew_before,
            &mut self.rng,
        );
        if due_wall <= wall {
            return self.start_order(now);
        }
        self.phase = Phase::Waiting {
            due: now + wall.until(due_wall),
            retry: false,
        };
    }

    fn start_order(&mut self, now: Instant) {
        let order = self.next_order;
        self.next_order += 1;
        self.orders += 1;
        self.actions.push_back(AcmeAction::Order {
            order,
            domains: self.config.domains.clone(),
        });
        self.phase = Phase::Ordering {
            order,
            deadline: now + self.config.attempt_timeout,
        };
    }

    fn fail(&mut self, now: Instant, error: AcmeError) {
        let stage = match self.phase {
            Phase::Validating { .. } => Stage::Validate,
            Phase::Storing { .. } => Stage::Store,
            Phase::Loading | Phase::Waiting { .. } | Phase::Ordering { .. } => Stage::Order,
        };
        self.withdraw();
        self.failures = self.failures.saturating_add(1);
        self.failures_by_stage[stage as usize] += 1;
        self.last_error = Some(error.to_string());
        let wait = self.config.retry.backoff(self.failures, &mut self.rng);
        self.actions.push_back(AcmeAction::AttemptFailed {
            stage,
            error: error.to_string(),
            failures: self.failures,
            retry_in: wait,
        });
        self.phase = Phase::Waiting {
            due: now + wait,
            retry: true,
        };
    }

    fn withdraw(&mut self) {
        if std::mem::take(&mut self.published) {
            self.actions.push_back(AcmeAction::Withdraw);
        }
    }

    fn wall_of(&self, at: Instant) -> UnixTime {
        let nanos = i128::from(at.as_nanos()) + self.wall_offset;
        UnixTime(i64::try_from(nanos.div_euclid(1_000_000_000)).unwrap_or(i64::MAX))
    }
}

#[cfg(test)]
mod invariant_tests {
    use super::*;

    fn facts(not_after: i64) -> CertFacts {
        CertFacts {
            not_before: UnixTime(0),
            not_after: UnixTime(not_after),
            names: vec!["files.example".into()],
            serial: format!("{not_after:x}"),
        }
    }

    /// The two rules, each broken alone on a machine built in that state.
    #[test]
    fn each_broken_rule_is_reported_by_the_invariant_check() {
        let config = ManagerConfig::new(vec!["files.example".into()]);
        let fresh = || CertManager::new(config.clone(), CoreRng::from_seed([1; 32]));
        assert_eq!(fresh().check_invariants(), Ok(()));
        let storing = |not_after| Phase::Storing {
            order: 1,
            deadline: Instant::ZERO,
            certificate: Box::new(Certificate {
                facts: facts(not_after),
                cert_pem: String::new(),
                key_pem: String::new(),
            }),
        };
        let mut newer = fresh();
        newer.current = Some(facts(100));
        newer.phase = storing(200);
        assert_eq!(newer.check_invariants(), Ok(()));
        let mut older = fresh();
        older.current = Some(facts(100));
        older.phase = storing(100);
        assert!(
            older
                .check_invariants()
                .is_err_and(|e| e.contains("no newer"))
        );
        let mut published = fresh();
        published.published = true;
        assert!(
            published
                .check_invariants()
                .is_err_and(|e| e.contains("left published in phase loading"))
        );
        published.phase = Phase::Validating {
            order: 1,
            deadline: Instant::ZERO,
        };
        assert_eq!(published.check_invariants(), Ok(()));
    }
}
