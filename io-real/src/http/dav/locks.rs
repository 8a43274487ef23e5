//! Locks as the worker sees them: every lock lives in the parent's broker table (so it
//! survives this worker), and the worker asks the broker which locks apply before it
//! writes, and what to report in `lockdiscovery`.
//!
//! Which locks protect a write, which lock a refresh or an UNLOCK names, and what each
//! broker refusal means are the core's decisions (`servery_core::dav_lock`, which the
//! simulator drives too); this module performs the broker calls they ask for.

use servery_core::LeaseId;
use servery_core::dav_lock::{self, BrokerCall, DavRefusal, LockViews, Needs, Write};
use servery_core::proto::{BrokerReply, BrokerRequest, DavDepth, DavLockInfo, DavReach};

use super::super::error::HttpError;
use super::resource::{DavPath, covers};
use super::xml::ActiveLock;
use crate::worker::broker::BrokerHandle;
use crate::write::WriteError;

pub use servery_core::dav_lock::{applies, timeout_ms, token_uri};

/// The broker's lock table, through this worker's client.
#[derive(Debug, Clone)]
pub struct Locks {
    broker: BrokerHandle,
}

fn broker_error(e: servery_core::broker::ClientError) -> HttpError {
    HttpError::Write(WriteError::Broker(e))
}

fn unexpected(reply: &BrokerReply) -> HttpError {
    tracing::error!(?reply, "unexpected broker reply");
    HttpError::Internal(std::io::Error::other("unexpected broker reply"))
}

fn rejected(call: BrokerCall<'_>, r: servery_core::proto::Rejection) -> HttpError {
    HttpError::from(dav_lock::refusal_of(call, r))
}

impl Locks {
    pub fn new(broker: BrokerHandle) -> Self {
        Locks { broker }
    }

    /// A view of the table for one request; see [`Seen`].
    pub fn seen(&self) -> Seen<'_> {
        Seen {
            locks: self,
            views: LockViews::default(),
        }
    }

    /// Every live lock on `resource`, on an ancestor with depth infinity, or below it.
    pub async fn around(&self, resource: &str) -> Result<Vec<DavLockInfo>, HttpError> {
        let reply = self
            .broker
            .call(BrokerRequest::DavQuery {
                resource: resource.to_owned(),
            })
            .await
            .map_err(broker_error)?;
        match reply {
            BrokerReply::Locks(locks) => Ok(locks),
            BrokerReply::Rejected(r) => Err(rejected(BrokerCall::Query, r)),
            other => Err(unexpected(&other)),
        }
    }

    /// A new lock; its token and the timeout granted.
    pub async fn lock(
        &self,
        path: &DavPath,
        depth: DavDepth,
        exclusive: bool,
        owner: String,
        timeout_ms: u64,
    ) -> Result<(LeaseId, u64), HttpError> {
        let reply = self
            .broker
            .call(BrokerRequest::DavLock {
                resource: path.resource(),
                depth,
                owner,
                exclusive,
                timeout_ms,
            })
            .await
            .map_err(broker_error)?;
        match reply {
            BrokerReply::Granted { id, expires_in_ms } => Ok((id, expires_in_ms)),
            BrokerReply::Rejected(r) => Err(rejected(BrokerCall::Lock(&path.resource()), r)),
            other => Err(unexpected(&other)),
        }
    }

    /// Pushes a lock's expiry out; the timeout granted.
    pub async fn refresh(&self, token: LeaseId, timeout_ms: u64) -> Result<u64, HttpError> {
        let reply = self
            .broker
            .call(BrokerRequest::DavRefresh { token, timeout_ms })
            .await
            .map_err(broker_error)?;
        match reply {
            BrokerReply::Granted { expires_in_ms, .. } => Ok(expires_in_ms),
            BrokerReply::Rejected(r) => Err(rejected(BrokerCall::Refresh, r)),
            other => Err(unexpected(&other)),
        }
    }

    pub async fn unlock(&self, token: LeaseId) -> Result<(), HttpError> {
        let reply = self
            .broker
            .call(BrokerRequest::DavUnlock { token })
            .await
            .map_err(broker_error)?;
        match reply {
            BrokerReply::Released => Ok(()),
            BrokerReply::Rejected(r) => Err(rejected(BrokerCall::Unlock, r)),
            other => Err(unexpected(&other)),
        }
    }

    /// After a DELETE or MOVE: the locks rooted at or below `path` end with it (RFC 4918
    /// §9.6.1, §9.9.1). A failure is logged; such a lock still expires.
    pub async fn end_within(&self, path: &DavPath) {
        self.end_within_keeping(path, &[]).await;
    }

    /// After a COPY or MOVE replaced `path`: the locks rooted below it end, and so does
    /// one rooted at `path` itself unless the request submitted its token. The holder
    /// replaced the file under its own lock, and keeps it, as Apache mod_dav does:
    /// clients that save by writing a temporary file and moving it over the locked
    /// original (davfs2 for `sed -i`, rsync and editors) refresh and unlock that lock
    /// next, and upload through it (decision 0088).
    pub async fn end_replaced(&self, path: &DavPath, submitted: &[LeaseId]) {
        self.end_within_keeping(path, submitted).await;
    }

    async fn end_within_keeping(&self, path: &DavPath, submitted: &[LeaseId]) {
        let resource = path.resource();
        let Ok(locks) = self.around(&resource).await else {
            tracing::warn!(%resource, "cannot end the locks of a removed resource");
            return;
        };
        let kept = |l: &DavLockInfo| l.resource == resource && submitted.contains(&l.token);
        for lock in locks
            .iter()
            .filter(|l| covers(&resource, &l.resource) && !kept(l))
        {
            if let Err(e) = self.unlock(lock.token).await {
                tracing::debug!(%resource, error = %e, "lock already gone");
            }
        }
    }
}

/// The lock table as one request sees it: the core's [`LockViews`] of this request,
/// filled by asking the broker what the core's machines need.
#[derive(Debug)]
pub struct Seen<'a> {
    locks: &'a Locks,
    views: LockViews,
}

impl Seen<'_> {
    /// The broker answers the request has collected.
    pub fn views_mut(&mut self) -> &mut LockViews {
        &mut self.views
    }

    /// [`Locks::around`], asked once per resource and request.
    pub async fn around(&mut self, resource: &str) -> Result<Vec<DavLockInfo>, HttpError> {
        if let Some(locks) = self.views.around(resource) {
            return Ok(locks.to_vec());
        }
        let locks = self.locks.around(resource).await?;
        self.views.answer(resource.to_owned(), locks.clone());
        Ok(locks)
    }

    /// The core's lock check ([`LockViews::require`]): 423 unless every lock protecting
    /// what the write reaches had its token submitted.
    pub async fn require(
        &mut self,
        path: &DavPath,
        reach: DavReach,
        submitted: &[LeaseId],
    ) -> Result<(), HttpError> {
        let resource = path.resource();
        self.require_key(&resource, reach, submitted).await
    }

    /// The lock check of every resource `write` covers, in the order the core gives
    /// ([`dav_lock::lock_checks`]).
    pub async fn require_all(
        &mut self,
        write: Write<'_>,
        submitted: &[LeaseId],
    ) -> Result<(), HttpError> {
        for (key, reach) in dav_lock::lock_checks(write)? {
            self.require_key(key, reach, submitted).await?;
        }
        Ok(())
    }

    async fn require_key(
        &mut self,
        resource: &str,
        reach: DavReach,
        submitted: &[LeaseId],
    ) -> Result<(), HttpError> {
        loop {
            match self.views.require(resource, reach, submitted) {
                Needs::Query(key) => {
                    self.around(&key).await?;
                }
                Needs::Decided(result) => return result.map_err(HttpError::from),
            }
        }
    }
}

impl From<DavRefusal> for HttpError {
    fn from(refusal: DavRefusal) -> HttpError {
        use super::DavError;
        match refusal {
            DavRefusal::Saturated => HttpError::Write(WriteError::Saturated),
            DavRefusal::TooLarge => HttpError::Unavailable,
            DavRefusal::NoLockToken => HttpError::BadRequest("UNLOCK needs a Lock-Token"),
            DavRefusal::BadIf(e) => HttpError::Dav(DavError::If(e)),
            DavRefusal::IfFailed => HttpError::Dav(DavError::IfFailed),
            DavRefusal::Locked(roots) => HttpError::Dav(DavError::Locked(roots)),
            DavRefusal::ConflictingLock(roots) => HttpError::Dav(DavError::ConflictingLock(roots)),
            DavRefusal::NoSuchLock => HttpError::Dav(DavError::NoSuchLock),
            DavRefusal::OwnerTooLarge => HttpError::Dav(DavError::OwnerTooLarge),
            DavRefusal::Depth => HttpError::Dav(DavError::Depth),
            DavRefusal::ReadOnly => HttpError::Dav(DavError::ReadOnly),
            // A refusal the core adds later: fail closed.
            _ => HttpError::Unavailable,
        }
    }
}

/// The `activelock` of a broker lock, for `lockdiscovery`.
pub fn active(lock: &DavLockInfo) -> ActiveLock {
    ActiveLock {
        exclusive: lock.exclusive,
        depth_infinity: lock.depth == DavDepth::Infinity,
        owner: (!lock.owner.is_empty()).then(|| lock.owner.clone()),
        timeout_secs: Some(lock.expires_in_ms.div_ceil(1000)),
        token: token_uri(lock.token),
        root: key_href(&lock.resource),
    }
}

/// The href of a lock-table key (`/a/b c` → `/a/b%20c`).
pub fn key_href(key: &str) -> String {
    DavPath::from_key(key).href(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_roots_as_hrefs() {
        assert_eq!(key_href("/a/b c"), "/a/b%20c");
        assert_eq!(key_href("/"), "/");
    }
}
