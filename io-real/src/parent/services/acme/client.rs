//! The ACME task on the host runtime: it carries out the manager's requests with
//! instant-acme and reports what happened as [`AcmeEvent`]s. It decides nothing: which
//! order is current, whether a certificate is acceptable, when to retry, all come from the
//! core. What it keeps between requests are handles — the account, and the order in
//! flight (an instant-acme `Order` holds its URLs and nonce).

use std::time::Duration;

use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, CertificateIdentifier, ChallengeType,
    ExternalAccountKey, Identifier, NewAccount, NewOrder, Order, OrderStatus, RetryPolicy,
};
use servery_core::acme::{AcmeAction, AcmeError, AcmeEvent, Challenge, UnixTime};
use servery_core::supervisor::Event;
use tokio::sync::mpsc::UnboundedReceiver;

use super::args::AcmeSettings;
use super::facts;
use super::store::StateDir;
use crate::parent::io::{Inbound, InboundTx};

/// What the task is asked to do.
#[derive(Debug)]
pub(super) enum AcmeOp {
    /// Report what the state directory holds (the singleton's start).
    Load,
    Action(AcmeAction),
    Stop,
}

/// How long the CA may take to validate, and then to issue, before the attempt is given
/// up (the manager's own attempt timeout bounds the whole).
const POLL: RetryPolicy = RetryPolicy::new()
    .initial_delay(Duration::from_millis(250))
    .backoff(1.5)
    .timeout(Duration::from_secs(90));

pub(super) async fn run(
    settings: AcmeSettings,
    mut ops: UnboundedReceiver<AcmeOp>,
    events: InboundTx,
) {
    let mut task = Task {
        settings,
        account: None,
        order: None,
        events,
    };
    while let Some(op) = ops.recv().await {
        match op {
            AcmeOp::Load => {
                let loaded = task.load();
                task.report(AcmeEvent::Loaded(loaded));
            }
            AcmeOp::Action(action) => task.perform(action).await,
            AcmeOp::Stop => return,
        }
    }
}

struct Task {
    settings: AcmeSettings,
    account: Option<Account>,
    /// The order in flight, with the manager's number for it.
    order: Option<(u64, Order)>,
    events: InboundTx,
}

impl Task {
    fn report(&self, event: AcmeEvent) {
        let _ = self.events.send(Inbound::Event(Event::Acme {
            wall: facts::wall_now(),
            event: Box::new(event),
        }));
    }

    fn state(&self) -> Result<StateDir, AcmeError> {
        StateDir::open(&self.settings.dir)
            .map_err(|e| AcmeError::Storage(format!("{}: {e}", self.settings.dir.display())))
    }

    fn load(&self) -> Option<servery_core::acme::Certificate> {
        let (cert, key) = match self.state().ok()?.load_certificate() {
            Ok(pair) => pair?,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the stored ACME certificate");
                return None;
            }
        };
        facts::certificate(cert, key)
            .inspect_err(|e| tracing::warn!(error = %e, "the stored ACME certificate is unusable"))
            .ok()
    }

    async fn perform(&mut self, action: AcmeAction) {
        match action {
            AcmeAction::Order { order, domains } => {
                tracing::info!(order, ?domains, "ACME order");
                let event = match self.new_order(order, &domains).await {
                    Ok(challenges) => AcmeEvent::Challenges { order, challenges },
                    Err(error) => AcmeEvent::Failed { order, error },
                };
                self.report(event);
            }
            AcmeAction::Answer { order } => {
                let event = match self.answer(order).await {
                    Ok(certificate) => AcmeEvent::Issued { order, certificate },
                    Err(error) => AcmeEvent::Failed { order, error },
                };
                self.order = None;
                self.report(event);
            }
            AcmeAction::Store { order, certificate } => {
                let stored = self.state().and_then(|dir| {
                    dir.store_certificate(&certificate.cert_pem, &certificate.key_pem)
                        .map_err(|e| AcmeError::Storage(e.to_string()))
                });
                self.report(match stored {
                    Ok(()) => AcmeEvent::Stored { order },
                    Err(error) => AcmeEvent::Failed { order, error },
                });
            }
            AcmeAction::AskRenewalInfo { serial } => match self.renewal_window(&serial).await {
                Ok(Some((start, end))) => {
                    tracing::info!(serial, start = start.0, end = end.0, "ACME renewal window");
                    self.report(AcmeEvent::RenewalWindow { serial, start, end });
                }
                // No window: the two-thirds rule applies.
                Ok(None) => {}
                Err(e) => tracing::info!(error = %e, "no ACME renewal information"),
            },
            // The parent's driver performs these itself.
            AcmeAction::InstallIdentity { .. }
            | AcmeAction::Publish(_)
            | AcmeAction::Withdraw
            | AcmeAction::AttemptFailed { .. } => {}
        }
    }

    async fn account(&mut self) -> Result<&Account, AcmeError> {
        if self.account.is_none() {
            let s = &self.settings;
            let dir = self.state()?;
            let builder = || match &s.directory_ca {
                Some(ca) => Account::builder_with_root(ca).map_err(unreachable),
                None => Account::builder().map_err(unreachable),
            };
            let stored = dir
                .load_account(&s.directory)
                .map_err(|e| AcmeError::Storage(e.to_string()))?;
            let account = match stored {
                Some(json) => {
                    let credentials: AccountCredentials = serde_json::from_str(&json)
                        .map_err(|e| AcmeError::Storage(format!("the stored account: {e}")))?;
                    builder()?
                        .from_credentials(credentials)
                        .await
                        .map_err(classify)?
                }
                None => {
                    let contact = s.email.as_ref().map(|e| format!("mailto:{e}"));
                    let contacts: Vec<&str> = contact.iter().map(String::as_str).collect();
                    let eab = s
                        .eab
                        .as_ref()
                        .map(|(kid, key)| ExternalAccountKey::new(kid.clone(), key));
                    let (account, credentials) = builder()?
                        .create(
                            &NewAccount {
                                contact: &contacts,
                                terms_of_service_agreed: true,
                                only_return_existing: false,
                            },
                            s.directory.clone(),
                            eab.as_ref(),
                        )
                        .await
                        .map_err(classify)?;
                    let json = serde_json::to_string(&credentials)
                        .map_err(|e| AcmeError::Storage(e.to_string()))?;
                    dir.store_account(&s.directory, &json)
                        .map_err(|e| AcmeError::Storage(e.to_string()))?;
                    tracing::info!(id = account.id(), "ACME account created");
                    account
                }
            };
            self.account = Some(account);
        }
        self.account
            .as_ref()
            .ok_or_else(|| AcmeError::Unreachable("no account".into()))
    }

    async fn new_order(
        &mut self,
        number: u64,
        domains: &[String],
    ) -> Result<Vec<Challenge>, AcmeError> {
        self.order = None;
        let identifiers: Vec<Identifier> =
            domains.iter().map(|d| Identifier::Dns(d.clone())).collect();
        let mut order = self
            .account()
            .await?
            .new_order(&NewOrder::new(&identifiers))
            .await
            .map_err(classify)?;
        let mut challenges = Vec::new();
        let mut authorizations = order.authorizations();
        while let Some(authz) = authorizations.next().await {
            let mut authz = authz.map_err(classify)?;
            if authz.status != AuthorizationStatus::Pending {
                continue;
            }
            let name = authz.identifier().to_string();
            let Some(challenge) = authz.challenge(ChallengeType::Http01) else {
                return Err(AcmeError::NoHttp01(name));
            };
            challenges.push(Challenge {
                token: challenge.token.clone(),
                key_authorization: challenge.key_authorization().as_str().to_owned(),
            });
        }
        self.order = Some((number, order));
        Ok(challenges)
    }

    async fn answer(&mut self, number: u64) -> Result<servery_core::acme::Certificate, AcmeError> {
        let Some((n, order)) = self.order.as_mut() else {
            return Err(AcmeError::Unreachable("no order in flight".into()));
        };
        if *n != number {
            return Err(AcmeError::Unreachable("another order is in flight".into()));
        }
        let mut authorizations = order.authorizations();
        while let Some(authz) = authorizations.next().await {
            let mut authz = authz.map_err(classify)?;
            if authz.status != AuthorizationStatus::Pending {
                continue;
            }
            if let Some(mut challenge) = authz.challenge(ChallengeType::Http01) {
                challenge.set_ready().await.map_err(classify)?;
            }
        }
        match order.poll_ready(&POLL).await {
            Ok(OrderStatus::Ready) => {}
            Ok(status) => {
                return Err(AcmeError::ValidationFailed(
                    invalid_detail(order)
                        .await
                        .unwrap_or_else(|| format!("order {status:?}")),
                ));
            }
            Err(instant_acme::Error::Api(problem)) => {
                return Err(AcmeError::ValidationFailed(problem.to_string()));
            }
            Err(e) => return Err(classify(e)),
        }
        let key_pem = order.finalize().await.map_err(classify)?;
        let cert_pem = order.poll_certificate(&POLL).await.map_err(classify)?;
        facts::certificate(cert_pem, key_pem).map_err(AcmeError::Malformed)
    }
}

impl Task {
    /// The CA's suggested renewal window (RFC 9773) for the stored certificate with
    /// `serial`, if the CA offers renewal information.
    async fn renewal_window(
        &mut self,
        serial: &str,
    ) -> Result<Option<(UnixTime, UnixTime)>, AcmeError> {
        let Some((cert_pem, _)) = self
            .state()?
            .load_certificate()
            .map_err(|e| AcmeError::Storage(e.to_string()))?
        else {
            return Ok(None);
        };
        let identity = crate::tls::Identity::from_pem(cert_pem, String::new());
        let Some(leaf) = identity
            .certificates()
            .ok()
            .and_then(|c| c.into_iter().next())
        else {
            return Ok(None);
        };
        if facts::facts_of_der(&leaf)
            .map_err(AcmeError::Malformed)?
            .serial
            != serial
        {
            return Ok(None);
        }
        let id = CertificateIdentifier::try_from(&leaf).map_err(AcmeError::Malformed)?;
        match self.account().await?.renewal_info(&id).await {
            Ok((info, _)) => {
                let w = info.suggested_window;
                Ok(Some((
                    UnixTime(w.start.unix_timestamp()),
                    UnixTime(w.end.unix_timestamp()),
                )))
            }
            Err(instant_acme::Error::Unsupported(_)) => Ok(None),
            Err(e) => Err(classify(e)),
        }
    }
}

/// Why an order went invalid: the first failed challenge's problem.
async fn invalid_detail(order: &mut Order) -> Option<String> {
    let mut authorizations = order.authorizations();
    while let Some(Ok(authz)) = authorizations.next().await {
        for c in &authz.challenges {
            if let Some(problem) = &c.error {
                return Some(problem.to_string());
            }
        }
    }
    None
}

fn unreachable(e: instant_acme::Error) -> AcmeError {
    AcmeError::Unreachable(with_causes(&e))
}

fn classify(e: instant_acme::Error) -> AcmeError {
    match e {
        instant_acme::Error::Api(problem) => AcmeError::Refused(problem.to_string()),
        other => AcmeError::Unreachable(with_causes(&other)),
    }
}

/// An error with the errors that caused it, so that "client error (Connect)" names the
/// TLS or network error beneath it (a CA certificate not trusted, a refused connection).
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let next = c.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        cause = c.source();
    }
    text
}
