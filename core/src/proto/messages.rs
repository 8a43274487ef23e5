//! What the parent and a worker say to each other.

use crate::ids::{Generation, LeaseId, WorkerId};
pub use crate::request_stats::RequestStats;
use std::sync::Arc;

/// Parent → worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParentMessage {
    /// First message on every channel: who the worker is and the timings it must keep.
    Hello {
        worker: WorkerId,
        generation: Generation,
        heartbeat_interval_ms: u64,
        drain_timeout_ms: u64,
    },
    /// The whole quorum is prepared: start accepting.
    Commit,
    /// Stop admission, finish in-flight work, exit within `deadline_ms`.
    Drain { deadline_ms: u64 },
    /// The answer to the worker's broker request `id`.
    Broker { id: u64, reply: BrokerReply },
    /// What the worker serves TLS with from now on, whole: the first message to a worker
    /// of a TLS parent (before HELLO), and again whenever the identity or the ticket keys
    /// change. Handshakes begun before it keep what they started with.
    TlsMaterial(Box<crate::tls_material::TlsMaterial>),
    /// The reverse proxy's upstreams marked down (numbered in the routes' order), sent to
    /// every worker whenever the set changes and to a new worker with its first messages.
    UpstreamHealth { down: Vec<u16> },
}

/// Worker → parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerMessage {
    /// Everything is built; not accepting yet.
    Prepared,
    /// The worker cannot start; `error` is its own explanation.
    StartupFailed { error: String },
    /// Accepting after COMMIT.
    Ready,
    /// Sent from the serving runtime, so a wedged runtime stops beating. `stats` are the
    /// worker's request counters since it started (behind a pointer: most messages are
    /// small; shared, so a beat carries the worker's counters without copying them).
    Heartbeat {
        requests: u64,
        connections: u32,
        /// Requests between their head and the end of their response.
        requests_in_progress: u32,
        /// The worker's resident memory in bytes as it last measured it (0: unknown), for
        /// recycling by memory (`worker_max_rss`).
        memory: u64,
        stats: Arc<RequestStats>,
    },
    /// A request to the parent-owned state broker.
    Broker { id: u64, request: BrokerRequest },
    /// A CGI script started, leading process group `pgid` (decision 0092): the parent
    /// kills the group if the worker goes before saying it ended.
    ScriptStarted { pgid: u32 },
    /// The CGI script leading `pgid` ended and its group was killed.
    ScriptEnded { pgid: u32 },
}

/// A write target with a stable key even before it exists: the parent directory's
/// identity plus the basename.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TargetKey {
    pub dir_device: u64,
    pub dir_inode: u64,
    pub name: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DavDepth {
    Zero,
    Infinity,
}

/// Requests a worker may make of the broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BrokerRequest {
    /// Reserve one active upload of at most `bytes` against the global budgets.
    ReserveUpload {
        bytes: u64,
    },
    /// Grow upload reservation `id` to `bytes` in all, as an upload of unknown length
    /// reaches what it holds (decision 0064). Granted within the byte budget (and renewed);
    /// otherwise the reservation keeps its size and the answer says why (`Saturated`:
    /// the budget is full; `TooLarge`: more than the budget itself).
    GrowReservation {
        id: LeaseId,
        bytes: u64,
    },
    /// Return an upload reservation (idempotent).
    ReleaseReservation {
        id: LeaseId,
    },
    /// Exclusive right to publish `key`.
    AcquireLease {
        key: TargetKey,
    },
    /// Push the lease's expiry forward during a long write.
    RenewLease {
        id: LeaseId,
    },
    /// Give the lease back (idempotent).
    ReleaseLease {
        id: LeaseId,
    },
    /// Count one outstanding resumable upload of `bytes` for `key`.
    ReservePartial {
        key: TargetKey,
        bytes: u64,
    },
    /// Take over an existing partial reservation (after a client reconnect or a restart).
    AdoptPartial {
        key: TargetKey,
    },
    ReleasePartial {
        id: LeaseId,
    },
    DavLock {
        resource: String,
        depth: DavDepth,
        owner: String,
        exclusive: bool,
        timeout_ms: u64,
    },
    DavRefresh {
        token: LeaseId,
        timeout_ms: u64,
    },
    DavUnlock {
        token: LeaseId,
    },
    /// Live locks on `resource`, covering it from an ancestor with infinite depth, or on
    /// any resource below it (which a write to a collection would disturb).
    DavQuery {
        resource: String,
    },
    /// The target lease of a WebDAV write, granted only when the write breaks no lock
    /// whose token the client did not submit: the lock check and the lease answered
    /// together, in one round trip. A missing token is [`Rejection::Locked`] (the worker
    /// then asks [`BrokerRequest::DavQuery`] to name the locks in its 423).
    DavWriteLease {
        key: TargetKey,
        /// Boxed: it would make every message the channels carry larger.
        check: Box<DavWriteCheck>,
    },
    /// One access-log record for the parent's sole log handle.
    AppendLog {
        record: String,
    },
    /// Access-log lines the worker dropped itself (its buffer was full under the drop
    /// policy), so the parent's count of dropped lines is the whole count.
    LogDroppedLocally {
        lines: u64,
    },
    /// The key authorization published for an ACME HTTP-01 `token`, if any.
    AcmeChallenge {
        token: String,
    },
    /// Up to `want` more proxy admission grants (`--proxy-max-inflight`), each the right
    /// to one upstream request in flight (decision 0076). Answered
    /// [`BrokerReply::ProxyGrants`] with at least one, or `Saturated`.
    AcquireProxyGrants {
        want: u32,
    },
    /// Gives `count` proxy grants back (more than the worker holds gives back what it holds).
    ReturnProxyGrants {
        count: u32,
    },
    /// Up to `want` more CGI grants (`--cgi-max-concurrent`), each the right to one
    /// script running (decision 0092): the proxy's table and rule, for another budget.
    /// Answered [`BrokerReply::CgiGrants`] with at least one, or `Saturated`.
    AcquireCgiGrants {
        want: u32,
    },
    /// Gives `count` CGI grants back (more than the worker holds gives back what it holds).
    ReturnCgiGrants {
        count: u32,
    },
    /// A request could not be completed with the reverse proxy's `upstream` (numbered in
    /// the routes' order), or (`ok`) one succeeded after this worker reported a failure:
    /// for the parent's upstream health ([`crate::upstream_health`]). Answered `Released`.
    UpstreamOutcome {
        upstream: u16,
        ok: bool,
    },
}

/// The most lock tokens one [`BrokerRequest::DavWriteLease`] carries; a request that
/// submits more is checked the slower way (queries, then a plain lease).
pub const MAX_SUBMITTED_TOKENS: usize = 64;

/// The lock check of a [`BrokerRequest::DavWriteLease`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DavWriteCheck {
    /// The canonical path the write changes.
    pub resource: String,
    pub reach: DavReach,
    /// The lock tokens the client submitted (at most [`MAX_SUBMITTED_TOKENS`]).
    pub submitted: Vec<LeaseId>,
}

/// What a WebDAV write changes, for the lock check (RFC 4918 §7.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DavReach {
    /// It adds or removes the resource as a member of its parent collection.
    pub membership: bool,
    /// It changes everything below the resource.
    pub tree: bool,
}

/// Why the broker said no. Every rejection is deterministic: the same tables and the same
/// request give the same answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// Someone else holds the lease or lock.
    Busy,
    /// A table, budget or queue is full.
    Saturated,
    /// The request can never fit the configured budget.
    TooLarge,
    /// No such grant (already released, expired or revoked).
    NotFound,
    /// The grant exists but belongs to another worker or generation.
    NotOwner,
    /// The worker has been revoked (its channel closed or it was reaped).
    Revoked,
    /// A WebDAV write would break a lock whose token was not submitted.
    Locked,
}

impl Rejection {
    pub const ALL: [Rejection; 7] = [
        Rejection::Busy,
        Rejection::Saturated,
        Rejection::TooLarge,
        Rejection::NotFound,
        Rejection::NotOwner,
        Rejection::Revoked,
        Rejection::Locked,
    ];

    /// The name metrics and logs give it.
    pub fn code(self) -> &'static str {
        match self {
            Rejection::Busy => "busy",
            Rejection::Saturated => "saturated",
            Rejection::TooLarge => "too_large",
            Rejection::NotFound => "not_found",
            Rejection::NotOwner => "not_owner",
            Rejection::Revoked => "revoked",
            Rejection::Locked => "locked",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DavLockInfo {
    pub token: LeaseId,
    pub resource: String,
    pub depth: DavDepth,
    pub owner: String,
    pub exclusive: bool,
    pub expires_in_ms: u64,
    pub generation: Generation,
}

/// The broker's answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BrokerReply {
    Granted {
        id: LeaseId,
        expires_in_ms: u64,
    },
    Released,
    Locks(Vec<DavLockInfo>),
    Logged,
    LogDropped,
    Rejected(Rejection),
    /// The answer to [`BrokerRequest::AcmeChallenge`]: `None` when nothing is published
    /// for the token.
    KeyAuthorization(Option<String>),
    /// The answer to [`BrokerRequest::AcquireProxyGrants`]: how many were granted (at
    /// least one, at most what was asked for).
    ProxyGrants {
        granted: u32,
    },
    /// The answer to [`BrokerRequest::AcquireCgiGrants`]: how many were granted (at
    /// least one, at most what was asked for).
    CgiGrants {
        granted: u32,
    },
}

#[cfg(test)]
mod tests {
    use super::Rejection;

    /// Each refusal's code is the `reason` label of the broker's rejection counter: one
    /// distinct snake_case name per kind, so no two kinds share a series and none is
    /// unlabelled.
    #[test]
    fn each_rejection_has_its_own_metric_name() {
        let codes: Vec<&str> = Rejection::ALL.iter().map(|r| r.code()).collect();
        for code in &codes {
            assert!(
                !code.is_empty() && code.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "rejection code rule: {code:?} is a snake_case label value"
            );
        }
        let mut distinct = codes.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(
            distinct.len(),
            codes.len(),
            "rejection code rule: each kind its own name: {codes:?}"
        );
        assert_eq!(Rejection::Locked.code(), "locked");
    }
}
