//! WebDAV lock decisions (RFC 4918 §6, §7, §9.10, §9.11, §10.4), as pure machines that
//! both drivers run: the real worker against the parent's broker and its file system, the
//! simulator against the same broker and its modelled files.
//!
//! The locks themselves live in the parent's broker table ([`crate::broker`]); what is
//! decided here is what a *worker* decides about one request:
//!
//! - the `If` header: its parse ([`parse_if`], peer input, never a panic) and its
//!   evaluation against the resources it names, which [`IfCheck`] asks the driver about
//!   (an inspection for the ETag, a broker query for the locks) and which yields the lock
//!   tokens the client submitted, or a refusal (400, 412);
//! - which locks a write would break ([`LockViews::require`]): every lock that applies to
//!   the resource, for writes that add or remove a member the locks rooted at its parent
//!   collection too, for writes that change a whole tree every lock below it; one
//!   submitted token per lock root satisfies it (423 otherwise);
//! - what each method's lock check covers, in the order it is asked ([`lock_checks`]: a
//!   MOVE its source's tree before its destination's, a COPY only its destination's);
//! - which lock a refresh extends and an UNLOCK removes ([`refresh_target`],
//!   [`unlock_target`]): one that applies to the request's resource, whose token the
//!   request names (412 for a refresh, 409 for an UNLOCK otherwise);
//! - a LOCK's depth and timeout ([`lock_depth`], [`timeout_ms`]), and whether a LOCK of an
//!   unmapped URL may create a resource ([`new_resource_lock`]);
//! - what each broker refusal means for the client ([`refusal_of`]).
//!
//! A driver keeps nothing of its own between these steps: the answers it collected for one
//! request stay in its [`LockViews`], so a resource asked about twice (by the `If` header's
//! evaluation and by the lock check) costs one broker round trip and both judge the same
//! answer.

mod flow;
mod if_header;

#[cfg(test)]
mod flow_tests;

pub use flow::{IfCheck, IfStep, LockViews, Needs, Subject};
pub use if_header::{
    Condition, ConditionKind, IfError, IfHeader, ResourceState, TaggedList, parse as parse_if,
    parse_lock_token_header,
};

use crate::ids::LeaseId;
use crate::proto::{DavDepth, DavLockInfo, DavReach, Rejection};

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

/// Whether the lock-table key `ancestor` is `path` or one of its ancestors (canonical
/// keys, root `/`).
pub fn covers(ancestor: &str, path: &str) -> bool {
    ancestor == path
        || ancestor == "/"
        || (path.starts_with(ancestor) && path.as_bytes().get(ancestor.len()) == Some(&b'/'))
}

/// The collection the key `path` is a member of; `None` for the root.
pub fn parent_of(path: &str) -> Option<&str> {
    match path.rfind('/') {
        _ if path == "/" => None,
        Some(0) => Some("/"),
        Some(i) => Some(&path[..i]),
        None => None,
    }
}

/// Whether `lock` applies to `resource`: it is rooted there, or above with depth infinity.
pub fn applies(lock: &DavLockInfo, resource: &str) -> bool {
    lock.resource == resource
        || (lock.depth == DavDepth::Infinity && covers(&lock.resource, resource))
}

/// What a write changes, for [`LockViews::require`].
pub mod reach {
    use crate::proto::DavReach;

    /// Only the resource's content or properties (PROPPATCH).
    pub const CONTENT: DavReach = DavReach {
        membership: false,
        tree: false,
    };
    /// It may add or remove the resource as a member of its collection (PUT, MKCOL, a
    /// LOCK that creates the resource).
    pub const MEMBER: DavReach = DavReach {
        membership: true,
        tree: false,
    };
    /// Membership and everything below (DELETE, MOVE's source, COPY's or MOVE's
    /// destination).
    pub const TREE: DavReach = DavReach {
        membership: true,
        tree: true,
    };
    /// Writes somewhere inside a collection, members not known in advance (a multipart
    /// POST names its files in its body): every lock on the collection or below it.
    pub const INSIDE: DavReach = DavReach {
        membership: false,
        tree: true,
    };
}

/// Why a worker refuses a WebDAV request on lock grounds; the driver maps each to its
/// status in one place.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DavRefusal {
    /// The `If` header does not parse: 400.
    #[error("bad If header: {0}")]
    BadIf(#[from] IfError),
    /// The `If` header evaluated false, or a refresh submitted no lock of the resource:
    /// 412.
    #[error("the If header's condition is false")]
    IfFailed,
    /// The write would break locks whose tokens were not submitted: 423, naming their
    /// roots (none when the broker refused without naming them).
    #[error("locked")]
    Locked(Vec<String>),
    /// A new lock conflicts with one already held: 423, naming the resource asked for.
    #[error("a conflicting lock is held")]
    ConflictingLock(Vec<String>),
    /// UNLOCK or a refresh named a token that is no lock on this resource: 409.
    #[error("no such lock on this resource")]
    NoSuchLock,
    /// UNLOCK without a well-formed `Lock-Token`: 400.
    #[error("UNLOCK needs a Lock-Token")]
    NoLockToken,
    /// The owner text of a LOCK is too large to keep: 400.
    #[error("the lock owner is too large")]
    OwnerTooLarge,
    /// A LOCK `Depth` other than 0 or infinity: 400.
    #[error("unsupported Depth")]
    Depth,
    /// A LOCK of an unmapped URL on a read-only share (it would create a resource): 403.
    #[error("this share is read-only")]
    ReadOnly,
    /// The broker's lock table is full, or the worker's broker client saturated: 503.
    #[error("the lock table is full")]
    Saturated,
    /// A lock list the channel cannot carry: 503 (fail closed).
    #[error("the lock list is too large to answer")]
    TooLarge,
}

/// Which broker call a refusal answered, for [`refusal_of`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerCall<'a> {
    /// `DavQuery`: which locks are around a resource.
    Query,
    /// `DavLock` of the resource named.
    Lock(&'a str),
    /// `DavRefresh`.
    Refresh,
    /// `DavUnlock`.
    Unlock,
}

/// What the broker's refusal of `call` means for the client.
pub fn refusal_of(call: BrokerCall<'_>, rejection: Rejection) -> DavRefusal {
    match (call, rejection) {
        (BrokerCall::Lock(resource), Rejection::Busy) => {
            DavRefusal::ConflictingLock(vec![resource.to_owned()])
        }
        (BrokerCall::Lock(_), Rejection::TooLarge) => DavRefusal::OwnerTooLarge,
        (_, Rejection::Saturated) => DavRefusal::Saturated,
        (_, Rejection::TooLarge) => DavRefusal::TooLarge,
        (_, Rejection::Busy) => DavRefusal::ConflictingLock(Vec::new()),
        (_, Rejection::NotFound | Rejection::NotOwner | Rejection::Revoked) => {
            DavRefusal::NoSuchLock
        }
        (_, Rejection::Locked) => DavRefusal::Locked(Vec::new()),
    }
}

/// A refresh (LOCK without a body) extends the lock that applies to `resource` and whose
/// token the `If` header submitted (RFC 4918 §9.10.2); none such is a 412.
pub fn refresh_target<'a>(
    resource: &str,
    around: &'a [DavLockInfo],
    submitted: &[LeaseId],
) -> Result<&'a DavLockInfo, DavRefusal> {
    around
        .iter()
        .find(|l| applies(l, resource) && submitted.contains(&l.token))
        .ok_or(DavRefusal::IfFailed)
}

/// The token an UNLOCK's `Lock-Token` header names (`<Coded-URL>`); 400 without one.
pub fn unlock_token(header: Option<&str>) -> Result<&str, DavRefusal> {
    header
        .and_then(parse_lock_token_header)
        .ok_or(DavRefusal::NoLockToken)
}

/// UNLOCK removes the lock `token` names if it applies to `resource` (RFC 4918 §9.11);
/// anything else is a 409.
pub fn unlock_target(
    resource: &str,
    token: &str,
    around: &[DavLockInfo],
) -> Result<LeaseId, DavRefusal> {
    let id = parse_token(token).ok_or(DavRefusal::NoSuchLock)?;
    around
        .iter()
        .find(|l| l.token == id && applies(l, resource))
        .map(|l| l.token)
        .ok_or(DavRefusal::NoSuchLock)
}

/// A LOCK's `Depth`: infinity when absent (RFC 4918 §9.10.3), else `0` or `infinity`.
pub fn lock_depth(value: Option<&str>) -> Result<DavDepth, DavRefusal> {
    match value {
        None => Ok(DavDepth::Infinity),
        Some(v) if v.eq_ignore_ascii_case("infinity") => Ok(DavDepth::Infinity),
        Some("0") => Ok(DavDepth::Zero),
        Some(_) => Err(DavRefusal::Depth),
    }
}

/// A LOCK of an unmapped URL creates an empty resource (RFC 4918 §7.3): a write, refused
/// on a read-only share; on a writable one it needs the tokens of the locks on the
/// collection it joins (the reach to [`LockViews::require`]).
pub fn new_resource_lock(writable: bool) -> Result<DavReach, DavRefusal> {
    if writable {
        Ok(reach::MEMBER)
    } else {
        Err(DavRefusal::ReadOnly)
    }
}

/// A write, as its lock check sees it: the method and the resources it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Write<'a> {
    /// PUT of a whole resource.
    Put(&'a str),
    /// A multipart POST into a collection (its files named only in its body).
    Post(&'a str),
    Mkcol(&'a str),
    Delete(&'a str),
    /// COPY changes only the destination.
    Copy {
        from: &'a str,
        to: &'a str,
    },
    /// MOVE removes the source and changes the destination.
    Move {
        from: &'a str,
        to: &'a str,
    },
    Proppatch(&'a str),
    /// A LOCK of an unmapped URL, which creates the resource ([`new_resource_lock`]).
    CreatingLock {
        resource: &'a str,
        writable: bool,
    },
}

/// What a write's lock check covers, in the order the worker asks (RFC 4918 §7.4, §9):
/// each resource with its reach, for [`LockViews::require`] — a MOVE its source's tree
/// before its destination's, a COPY only its destination's. A LOCK of an unmapped URL on
/// a read-only share is refused (403).
pub fn lock_checks(write: Write<'_>) -> Result<Vec<(&str, DavReach)>, DavRefusal> {
    Ok(match write {
        Write::Put(r) | Write::Mkcol(r) => vec![(r, reach::MEMBER)],
        Write::Post(r) => vec![(r, reach::INSIDE)],
        Write::Delete(r) => vec![(r, reach::TREE)],
        Write::Copy { to, .. } => vec![(to, reach::TREE)],
        Write::Move { from, to } => vec![(from, reach::TREE), (to, reach::TREE)],
        Write::Proppatch(r) => vec![(r, reach::CONTENT)],
        Write::CreatingLock { resource, writable } => {
            vec![(resource, new_resource_lock(writable)?)]
        }
    })
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
