//! Step 2 and step 5: broker grants held as guards. A [`Grant`] gives itself back from
//! `Drop` (synchronously, never refused), so a lease or reservation cannot outlive the
//! request that holds it, whichever way the request ends.

use std::time::Duration;

use servery_core::LeaseId;
use servery_core::proto::{
    BrokerReply, BrokerRequest, DavReach, DavWriteCheck, Rejection, TargetKey,
};

use servery_core::upload_budget::{UploadBudget, growth_ladder};

use super::WriteError;
use crate::worker::broker::BrokerHandle;

/// Renew a grant once this fraction of its lifetime has passed: with a third, two renewals
/// can fail or be slow before it lapses.
const RENEW_DIVISOR: u32 = 3;

/// Pauses between attempts on a busy target while waiting up to the write-lock timeout.
/// The broker has no wait queue, so a waiting writer asks again; the pause doubles to
/// keep a long wait from costing the parent more than a few requests a second.
const FIRST_PAUSE: Duration = Duration::from_millis(5);
const MAX_PAUSE: Duration = Duration::from_millis(100);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Lease,
    Reservation,
    Partial,
}

/// What a growing upload reservation holds, and the most it may grow to.
#[derive(Debug, Clone, Copy)]
struct Growth {
    bytes: u64,
    limit: u64,
}

/// A lease, an upload reservation or a partial-upload reservation, released on drop.
#[derive(Debug)]
pub struct Grant {
    broker: BrokerHandle,
    id: LeaseId,
    kind: Kind,
    ttl: Duration,
    renewed: tokio::time::Instant,
    held: bool,
    /// Set for an upload reservation that grows as its bytes arrive (decision 0064).
    growth: Option<Growth>,
}

fn unexpected(reply: &BrokerReply) -> WriteError {
    tracing::error!(?reply, "unexpected broker reply");
    WriteError::Io(std::io::Error::other("unexpected broker reply"))
}

fn rejected(rejection: Rejection, limit: u64) -> WriteError {
    match rejection {
        Rejection::Busy => WriteError::Busy,
        Rejection::Saturated => WriteError::Saturated,
        Rejection::TooLarge => WriteError::TooLarge { limit },
        Rejection::NotFound | Rejection::NotOwner | Rejection::Revoked => WriteError::LeaseLost,
        Rejection::Locked => WriteError::Locked,
    }
}

/// The WebDAV lock check a write's lease comes with: the broker grants the lease only if
/// the write breaks no lock whose token was submitted, in the same round trip.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockCheck {
    /// The canonical resource path the write changes.
    pub resource: String,
    pub reach: DavReach,
    /// The tokens the client submitted (at most `MAX_SUBMITTED_TOKENS`).
    pub submitted: Vec<LeaseId>,
}

impl Grant {
    fn new(broker: &BrokerHandle, kind: Kind, id: LeaseId, expires_in_ms: u64) -> Grant {
        Grant {
            broker: broker.clone(),
            id,
            kind,
            ttl: Duration::from_millis(expires_in_ms),
            renewed: tokio::time::Instant::now(),
            held: true,
            growth: None,
        }
    }

    /// The broker's ID of this grant.
    pub fn id(&self) -> LeaseId {
        self.id
    }

    /// Reserve one active upload of at most `bytes` against the global budgets.
    pub async fn reserve_upload(broker: &BrokerHandle, bytes: u64) -> Result<Grant, WriteError> {
        match broker
            .call(BrokerRequest::ReserveUpload { bytes })
            .await
            .map_err(WriteError::Broker)?
        {
            BrokerReply::Granted { id, expires_in_ms } => {
                Ok(Grant::new(broker, Kind::Reservation, id, expires_in_ms))
            }
            BrokerReply::Rejected(r) => Err(rejected(r, bytes)),
            other => Err(unexpected(&other)),
        }
    }

    /// Reserve one active upload as `budget` says (core's `upload_budget`): a fixed size,
    /// or a first step that [`Grant::cover`] grows, up to `limit` bytes.
    pub async fn reserve_budget(
        broker: &BrokerHandle,
        budget: UploadBudget,
        limit: u64,
    ) -> Result<Grant, WriteError> {
        let mut grant = Grant::reserve_upload(broker, budget.bytes).await?;
        if budget.grows {
            grant.growth = Some(Growth {
                bytes: budget.bytes,
                limit,
            });
        }
        Ok(grant)
    }

    /// Make sure a growing reservation covers `total` bytes of content before they are
    /// written: the broker grows it (within the service's byte budget) or the write ends
    /// with [`WriteError::Saturated`] (503). Nothing for any other grant.
    pub async fn cover(&mut self, total: u64) -> Result<(), WriteError> {
        let Some(growth) = self.growth else {
            return Ok(());
        };
        if total <= growth.bytes {
            return Ok(());
        }
        let limit = growth.limit;
        let ladder = growth_ladder(growth.bytes, total, limit);
        if ladder.is_empty() {
            return Err(WriteError::TooLarge { limit });
        }
        for bytes in ladder {
            match self
                .broker
                .call(BrokerRequest::GrowReservation { id: self.id, bytes })
                .await
                .map_err(WriteError::Broker)?
            {
                BrokerReply::Granted { expires_in_ms, .. } => {
                    self.growth = Some(Growth { bytes, limit });
                    self.ttl = Duration::from_millis(expires_in_ms);
                    self.renewed = tokio::time::Instant::now();
                    return Ok(());
                }
                // A full budget: a smaller step may still fit.
                BrokerReply::Rejected(Rejection::Saturated) => {}
                BrokerReply::Rejected(r) => return Err(rejected(r, limit)),
                other => return Err(unexpected(&other)),
            }
        }
        tracing::info!(
            held = growth.bytes,
            needed = total,
            "an upload outgrew the byte budget (--max-upload-bytes)"
        );
        Err(WriteError::Saturated)
    }

    /// The exclusive right to publish `key`. A busy target is retried until `wait` has
    /// passed (zero: not at all), then answered [`WriteError::Busy`].
    pub async fn lease(
        broker: &BrokerHandle,
        key: &TargetKey,
        wait: Duration,
    ) -> Result<Grant, WriteError> {
        Grant::lease_checked(broker, key, wait, None).await
    }

    /// [`Grant::lease`], granted only if `check` (when given) passes: one request
    /// carries both, a refused check is [`WriteError::Locked`].
    pub async fn lease_checked(
        broker: &BrokerHandle,
        key: &TargetKey,
        wait: Duration,
        check: Option<&LockCheck>,
    ) -> Result<Grant, WriteError> {
        let request = match check {
            None => BrokerRequest::AcquireLease { key: key.clone() },
            Some(c) => BrokerRequest::DavWriteLease {
                key: key.clone(),
                check: Box::new(DavWriteCheck {
                    resource: c.resource.clone(),
                    reach: c.reach,
                    submitted: c.submitted.clone(),
                }),
            },
        };
        let give_up = tokio::time::Instant::now() + wait;
        let mut pause = FIRST_PAUSE;
        loop {
            let reply = broker
                .call(request.clone())
                .await
                .map_err(WriteError::Broker)?;
            match reply {
                BrokerReply::Granted { id, expires_in_ms } => {
                    return Ok(Grant::new(broker, Kind::Lease, id, expires_in_ms));
                }
                BrokerReply::Rejected(Rejection::Busy) => {
                    let now = tokio::time::Instant::now();
                    if now >= give_up {
                        return Err(WriteError::Busy);
                    }
                    tokio::time::sleep(pause.min(give_up - now)).await;
                    pause = (pause * 2).min(MAX_PAUSE);
                }
                BrokerReply::Rejected(r) => return Err(rejected(r, 0)),
                other => return Err(unexpected(&other)),
            }
        }
    }

    /// Take part in (or start) the resumable upload of `key`: adopt the broker's partial
    /// reservation for it, or make one for `total` bytes when there is none.
    /// `Ok(None)` means another live worker owns it (see [`super::partial`]).
    pub async fn partial(
        broker: &BrokerHandle,
        key: &TargetKey,
        total: u64,
        adopt: bool,
    ) -> Result<Option<Grant>, WriteError> {
        let request = if adopt {
            BrokerRequest::AdoptPartial { key: key.clone() }
        } else {
            BrokerRequest::ReservePartial {
                key: key.clone(),
                bytes: total,
            }
        };
        match broker.call(request).await.map_err(WriteError::Broker)? {
            BrokerReply::Granted { id, expires_in_ms } => {
                Ok(Some(Grant::new(broker, Kind::Partial, id, expires_in_ms)))
            }
            BrokerReply::Rejected(Rejection::Busy) => Ok(None),
            BrokerReply::Rejected(Rejection::NotFound) if adopt => Err(WriteError::LeaseLost),
            BrokerReply::Rejected(r) => Err(rejected(r, total)),
            other => Err(unexpected(&other)),
        }
    }

    /// Push the expiry of a lease or reservation forward once a third of it has passed,
    /// so a long upload keeps what it holds. A grant the broker no longer knows (expired
    /// during a stall, or revoked) ends the write. Partial reservations are refreshed by
    /// the next chunk instead (the broker renews them on adoption).
    pub async fn renew_if_due(&mut self) -> Result<(), WriteError> {
        if self.kind == Kind::Partial || self.renewed.elapsed() < self.ttl / RENEW_DIVISOR {
            return Ok(());
        }
        match self
            .broker
            .call(BrokerRequest::RenewLease { id: self.id })
            .await
            .map_err(WriteError::Broker)?
        {
            BrokerReply::Granted { expires_in_ms, .. } => {
                self.ttl = Duration::from_millis(expires_in_ms);
                self.renewed = tokio::time::Instant::now();
                Ok(())
            }
            BrokerReply::Rejected(_) => Err(WriteError::LeaseLost),
            other => Err(unexpected(&other)),
        }
    }

    /// Gives the grant back and waits until the broker has it, so that the client's next
    /// request, through any worker, finds the target free: a release that is only sent
    /// can reach the parent after that request does. Should the broker not answer, the
    /// release still goes out (as from `Drop`); it is idempotent.
    pub async fn release(mut self) {
        if !self.held {
            return;
        }
        let answered = self.broker.call(self.release_request()).await.is_ok();
        self.held = !answered;
    }

    fn release_request(&self) -> BrokerRequest {
        let id = self.id;
        match self.kind {
            Kind::Lease => BrokerRequest::ReleaseLease { id },
            Kind::Reservation => BrokerRequest::ReleaseReservation { id },
            Kind::Partial => BrokerRequest::ReleasePartial { id },
        }
    }

    /// Keep the grant past this guard: a partial reservation stays in the broker between
    /// chunks, owned by this worker until another one takes it over or it completes.
    pub fn keep(mut self) {
        self.held = false;
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        if !self.held {
            return;
        }
        self.broker.release(self.release_request());
    }
}

#[cfg(test)]
#[path = "grant_tests.rs"]
mod tests;
