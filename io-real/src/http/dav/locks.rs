//! Locks as the worker sees them: every lock lives in the parent's broker table (so it
//! survives this worker), and the worker asks the broker which locks apply before it
//! writes, and what to report in `lockdiscovery`.
//!
//! A write is allowed when, for every lock that protects what it changes, the client
//! submitted that lock's token in its `If` header (RFC 4918 §6.3, §7.4): one token per
//! lock root is enough, so one holder of a shared lock may write. What a write changes:
//! the resource itself, and for writes that create or remove a member, the membership of
//! its parent collection (a depth-0 lock on the parent protects that too); for a
//! collection deleted or moved, every lock below it.

use servery_core::LeaseId;
use servery_core::proto::{BrokerReply, BrokerRequest, DavDepth, DavLockInfo, Rejection};

use super::super::error::HttpError;
use super::DavError;
use super::resource::{DavPath, covers};
use super::xml::ActiveLock;
use crate::worker::broker::BrokerHandle;
use crate::write::WriteError;

/// The URI scheme of servery's lock tokens (RFC 4918 Appendix C).
const TOKEN_SCHEME: &str = "opaquelocktoken:";

/// A lock token as clients see it: `opaquelocktoken:` and the broker's 128 random bits
/// in UUID form.
pub fn token_uri(id: LeaseId) -> String {
    let h = format!("{:032x}", id.0);
    format!(
        "{TOKEN_SCHEME}{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// The broker's ID in a token URI; `None` for anything servery did not issue.
pub fn parse_token(uri: &str) -> Option<LeaseId> {
    let uuid = uri.strip_prefix(TOKEN_SCHEME)?;
    let hex: String = uuid.chars().filter(|c| *c != '-').collect();
    if hex.len() != 32 || uuid.len() != 36 {
        return None;
    }
    u128::from_str_radix(&hex, 16).ok().map(LeaseId)
}

/// Whether `lock` applies to `resource`: it is rooted there, or above with depth infinity.
pub fn applies(lock: &DavLockInfo, resource: &str) -> bool {
    lock.resource == resource
        || (lock.depth == DavDepth::Infinity && covers(&lock.resource, resource))
}

/// What a write changes, for [`Locks::require`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reach {
    /// It adds or removes `path` as a member of its parent collection.
    pub membership: bool,
    /// It changes everything below `path` (DELETE or MOVE of a collection, an overwrite).
    pub tree: bool,
}

impl Reach {
    pub const CONTENT: Reach = Reach {
        membership: false,
        tree: false,
    };
    pub const MEMBER: Reach = Reach {
        membership: true,
        tree: false,
    };
    pub const TREE: Reach = Reach {
        membership: true,
        tree: true,
    };
    /// Writes somewhere inside a collection, members not known in advance (a multipart
    /// POST names its files in its body): every lock on the collection or below it.
    pub const INSIDE: Reach = Reach {
        membership: false,
        tree: true,
    };
}

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

fn rejected(r: Rejection) -> HttpError {
    match r {
        Rejection::Saturated => HttpError::Write(WriteError::Saturated),
        // A query whose answer would not fit one message: fail closed.
        Rejection::TooLarge => HttpError::Unavailable,
        Rejection::Busy => HttpError::Dav(DavError::ConflictingLock(Vec::new())),
        Rejection::NotFound | Rejection::NotOwner | Rejection::Revoked => {
            HttpError::Dav(DavError::NoSuchLock)
        }
        Rejection::Locked => HttpError::Dav(DavError::Locked(Vec::new())),
    }
}

impl Locks {
    pub fn new(broker: BrokerHandle) -> Self {
        Locks { broker }
    }

    /// A view of the table for one request; see [`Seen`].
    pub fn seen(&self) -> Seen<'_> {
        Seen {
            locks: self,
            answers: Vec::new(),
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
            BrokerReply::Rejected(r) => Err(rejected(r)),
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
            BrokerReply::Rejected(Rejection::Busy) => {
                Err(HttpError::Dav(DavError::ConflictingLock(vec![
                    path.resource(),
                ])))
            }
            BrokerReply::Rejected(Rejection::TooLarge) => {
                Err(HttpError::Dav(DavError::OwnerTooLarge))
            }
            BrokerReply::Rejected(r) => Err(rejected(r)),
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
            BrokerReply::Rejected(r) => Err(rejected(r)),
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
            BrokerReply::Rejected(r) => Err(rejected(r)),
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

/// The lock table as one request sees it: a resource asked about twice (by the `If`
/// header's evaluation and by the lock check of the write) costs one broker round trip,
/// and both judge the same answer.
#[derive(Debug)]
pub struct Seen<'a> {
    locks: &'a Locks,
    answers: Vec<(String, Vec<DavLockInfo>)>,
}

impl Seen<'_> {
    /// [`Locks::around`], asked once per resource and request.
    pub async fn around(&mut self, resource: &str) -> Result<Vec<DavLockInfo>, HttpError> {
        if let Some((_, locks)) = self.answers.iter().find(|(r, _)| r == resource) {
            return Ok(locks.clone());
        }
        let locks = self.locks.around(resource).await?;
        self.answers.push((resource.to_owned(), locks.clone()));
        Ok(locks)
    }

    /// Fails with 423 unless every lock protecting what the write reaches had its token
    /// submitted.
    pub async fn require(
        &mut self,
        path: &DavPath,
        reach: Reach,
        submitted: &[LeaseId],
    ) -> Result<(), HttpError> {
        let resource = path.resource();
        let mut protecting: Vec<DavLockInfo> = self
            .around(&resource)
            .await?
            .into_iter()
            .filter(|l| applies(l, &resource) || (reach.tree && covers(&resource, &l.resource)))
            .collect();
        if reach.membership
            && let Some(parent) = path.parent()
        {
            let parent = parent.resource();
            protecting.extend(
                self.around(&parent)
                    .await?
                    .into_iter()
                    .filter(|l| l.resource == parent),
            );
        }
        let mut unsatisfied: Vec<String> = Vec::new();
        for lock in &protecting {
            let satisfied = protecting
                .iter()
                .any(|l| l.resource == lock.resource && submitted.contains(&l.token));
            if !satisfied && !unsatisfied.contains(&lock.resource) {
                unsatisfied.push(lock.resource.clone());
            }
        }
        if unsatisfied.is_empty() {
            Ok(())
        } else {
            Err(HttpError::Dav(DavError::Locked(unsatisfied)))
        }
    }
}

/// `Timeout: Second-N, Infinite` (RFC 4918 §10.7): the first value servery understands,
/// in milliseconds; 0 (the broker's maximum) for `Infinite`, none, or nothing usable. The
/// broker caps every value at `--dav-lock-timeout-max`.
pub fn timeout_ms(value: Option<&str>) -> u64 {
    let Some(value) = value else { return 0 };
    for item in value.split(',').map(str::trim) {
        if item.eq_ignore_ascii_case("Infinite") {
            return 0;
        }
        if let Some(secs) = item
            .get(..7)
            .filter(|p| p.eq_ignore_ascii_case("Second-"))
            .and_then(|_| item[7..].parse::<u64>().ok())
        {
            return secs.saturating_mul(1000).max(1000);
        }
    }
    0
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
    use servery_core::Generation;

    #[test]
    fn tokens_round_trip_and_foreign_ones_are_refused() {
        for id in [0, 1, u128::MAX, 0x0123_4567_89ab_cdef_0011_2233_4455_6677] {
            let uri = token_uri(LeaseId(id));
            assert_eq!(uri.len(), TOKEN_SCHEME.len() + 36);
            assert_eq!(parse_token(&uri), Some(LeaseId(id)), "{uri}");
        }
        assert_eq!(parse_token("opaquelocktoken:not-a-uuid"), None);
        assert_eq!(
            parse_token("urn:uuid:00000000-0000-0000-0000-000000000000"),
            None
        );
        assert_eq!(
            parse_token("opaquelocktoken:0000000000000000000000000000000000-0"),
            None
        );
    }

    #[test]
    fn timeouts() {
        assert_eq!(timeout_ms(None), 0);
        assert_eq!(timeout_ms(Some("Infinite")), 0);
        assert_eq!(timeout_ms(Some("Second-3600")), 3_600_000);
        assert_eq!(timeout_ms(Some("second-0")), 1000, "at least a second");
        assert_eq!(timeout_ms(Some("Extended, Second-5")), 5000);
        assert_eq!(timeout_ms(Some("Second-x")), 0);
        assert_eq!(timeout_ms(Some("Second-99999999999999999999")), 0);
    }

    #[test]
    fn which_locks_apply() {
        let lock = |resource: &str, depth| DavLockInfo {
            token: LeaseId(1),
            resource: resource.into(),
            depth,
            owner: String::new(),
            exclusive: true,
            expires_in_ms: 1,
            generation: Generation(1),
        };
        assert!(applies(&lock("/a", DavDepth::Zero), "/a"));
        assert!(!applies(&lock("/a", DavDepth::Zero), "/a/b"));
        assert!(applies(&lock("/a", DavDepth::Infinity), "/a/b"));
        assert!(applies(&lock("/", DavDepth::Infinity), "/x"));
        assert!(!applies(&lock("/a/b", DavDepth::Infinity), "/a"));
        assert_eq!(key_href("/a/b c"), "/a/b%20c");
        assert_eq!(key_href("/"), "/");
    }
}
