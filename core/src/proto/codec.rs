//! Framing and message encoding.
//!
//! Every encoder is bound to a frame limit, and it is the limit the decoder enforces: a
//! message that fits is one frame; one that does not is made to fit — a free text is cut
//! at a character boundary and marked, a DAV lock list is split over several frames that
//! the decoder joins again — or it is refused with an [`EncodeError`] and nothing is
//! written. No encoder can put a frame on the wire that the decoder at the same limit
//! would refuse and judge its sender faulty for.

use core::ops::Range;

use super::messages::*;
use super::wire::{Reader, Writer};
use super::{EncodeError, ProtoError};
use crate::ids::{Generation, LeaseId, WorkerId};

/// Frames above this are refused unless a channel configures otherwise. Control and
/// broker messages are small; the largest legitimate one is a DAV query answer, which is
/// split over frames when it does not fit one.
pub const MAX_FRAME_DEFAULT: usize = 256 * 1024;

/// The most frames one message may take (a split DAV lock list). The decoder refuses a
/// message that goes on longer, so what it holds for one message is bounded too.
pub const MAX_FRAMES_PER_MESSAGE: usize = 64;

/// What ends a free text (a startup failure, an access-log record) cut to fit a frame.
pub const TRUNCATION_MARKER: &str = "...[truncated]";

// Message tags.
const HELLO: u8 = 0x01;
const COMMIT: u8 = 0x02;
const DRAIN: u8 = 0x03;
const BROKER_REPLY: u8 = 0x04;
/// A DAV lock list continued in the next frame: the first parts of a split `Locks` reply,
/// whose last part is an ordinary `BROKER_REPLY` frame to the same request.
const LOCKS_PART: u8 = 0x05;
/// The TLS material every worker serves with (`proto::tls_wire`).
const TLS_MATERIAL: u8 = 0x06;
const UPSTREAM_HEALTH: u8 = 0x07;
const PREPARED: u8 = 0x41;
const STARTUP_FAILED: u8 = 0x42;
const READY: u8 = 0x43;
const HEARTBEAT: u8 = 0x44;
const BROKER_REQUEST: u8 = 0x45;
const SCRIPT_STARTED: u8 = 0x46;
const SCRIPT_ENDED: u8 = 0x47;
/// The reply tag of a lock list.
const REPLY_LOCKS: u8 = 3;

/// Append `msg`, framed within [`MAX_FRAME_DEFAULT`], to `out`.
pub fn encode_parent(msg: &ParentMessage, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    encode_parent_within(msg, MAX_FRAME_DEFAULT, out)
}

/// Append `msg` to `out` in frames of at most `max_frame` payload bytes: one frame, or a
/// DAV lock list split over up to [`MAX_FRAMES_PER_MESSAGE`]. On error nothing is
/// appended.
pub fn encode_parent_within(
    msg: &ParentMessage,
    max_frame: usize,
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    let max = frame_limit(max_frame);
    let start = out.len();
    let needed = match frame(out, max, |w| put_parent(w, msg)) {
        Ok(()) => return Ok(()),
        Err(needed) => needed,
    };
    let ParentMessage::Broker {
        id,
        reply: BrokerReply::Locks(locks),
    } = msg
    else {
        return Err(too_large(parent_what(msg), needed, max));
    };
    let chunks = split_locks(locks, needed, max)?;
    let last = chunks.len() - 1;
    for (i, chunk) in chunks.into_iter().enumerate() {
        let locks = &locks[chunk];
        let written = if i < last {
            frame(out, max, |w| put_locks_part(w, *id, locks))
        } else {
            frame(out, max, |w| put_locks_reply(w, *id, locks))
        };
        if let Err(len) = written {
            // Unreachable: `split_locks` sized every chunk for its frame. Should the two
            // ever disagree, refuse rather than send a frame the decoder would refuse.
            out.truncate(start);
            return Err(too_large("a DAV lock list part", len, max));
        }
    }
    Ok(())
}

/// Append `msg`, framed within [`MAX_FRAME_DEFAULT`], to `out`.
pub fn encode_worker(msg: &WorkerMessage, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    encode_worker_within(msg, MAX_FRAME_DEFAULT, out)
}

/// Append `msg` to `out` as one frame of at most `max_frame` payload bytes, its free text
/// cut (and ended with [`TRUNCATION_MARKER`]) if that is what it takes. On error nothing
/// is appended.
pub fn encode_worker_within(
    msg: &WorkerMessage,
    max_frame: usize,
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    let max = frame_limit(max_frame);
    let needed = match frame(out, max, |w| put_worker(w, msg)) {
        Ok(()) => return Ok(()),
        Err(needed) => needed,
    };
    let cut = cut_worker(msg, needed, max)?;
    frame(out, max, |w| put_worker(w, &cut)).map_err(|len| too_large(worker_what(msg), len, max))
}

/// Whether [`encode_worker`] frames `msg` (cut if need be) rather than refusing it; it
/// measures without copying the message.
pub fn check_worker(msg: &WorkerMessage) -> Result<(), EncodeError> {
    let needed = measure(|w| put_worker(w, msg));
    fits_or_cuts(needed, worker_text(msg), MAX_FRAME_DEFAULT)
        .ok_or_else(|| too_large(worker_what(msg), needed, MAX_FRAME_DEFAULT))
}

/// Whether [`encode_worker`] frames a broker request (cut if need be) rather than
/// refusing it; it measures without copying the request.
pub fn check_request(request: &BrokerRequest) -> Result<(), EncodeError> {
    let needed = measure(|w| put_broker_request(w, 0, request));
    fits_or_cuts(needed, request_text(request), MAX_FRAME_DEFAULT)
        .ok_or_else(|| too_large(request_what(request), needed, MAX_FRAME_DEFAULT))
}

/// Whether [`encode_parent`] frames `reply` to a broker request (split if need be) rather
/// than refusing it; it measures without copying the reply.
pub fn check_reply(reply: &BrokerReply) -> Result<(), EncodeError> {
    let needed = measure(|w| put_broker_reply(w, 0, reply));
    if needed <= MAX_FRAME_DEFAULT {
        return Ok(());
    }
    match reply {
        BrokerReply::Locks(locks) => split_locks(locks, needed, MAX_FRAME_DEFAULT).map(drop),
        _ => Err(too_large("a broker reply", needed, MAX_FRAME_DEFAULT)),
    }
}

/// Whether a lock on `resource` held by `owner` fits a lock-list reply by itself, so that
/// a DAV query can always report it.
pub fn check_lock_reportable(resource: &str, owner: &str) -> Result<(), EncodeError> {
    let needed = measure(|w| {
        put_locks_header(w, 0, 1);
        put_lock_fields(w, 0, resource, DavDepth::Zero, owner, false, 0, 0);
    });
    if needed <= MAX_FRAME_DEFAULT {
        Ok(())
    } else {
        Err(too_large("a DAV lock", needed, MAX_FRAME_DEFAULT))
    }
}

/// A frame's length prefix is a u32.
fn frame_limit(max_frame: usize) -> usize {
    max_frame.min(u32::MAX as usize)
}

fn too_large(what: &'static str, len: usize, max: usize) -> EncodeError {
    EncodeError::TooLarge { what, len, max }
}

/// Append one frame of what `body` writes, if its payload is at most `max` bytes;
/// otherwise append nothing and say how many bytes it needed. Every message writes a
/// tag, so a frame is never empty.
fn frame(out: &mut Vec<u8>, max: usize, body: impl FnOnce(&mut Writer<'_>)) -> Result<(), usize> {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    let mut w = Writer::new(out, max);
    body(&mut w);
    let len = w.len();
    match u32::try_from(len) {
        Ok(prefix) if len <= max => {
            out[start..start + 4].copy_from_slice(&prefix.to_be_bytes());
            Ok(())
        }
        _ => {
            out.truncate(start);
            Err(len)
        }
    }
}

/// The payload bytes `body` needs, without writing any.
fn measure(body: impl FnOnce(&mut Writer<'_>)) -> usize {
    let mut nothing = Vec::new();
    let mut w = Writer::new(&mut nothing, 0);
    body(&mut w);
    w.len()
}

/// What is left of `max` for the free text of a message that needs `needed` bytes with
/// a text of `text_len`: at least the marker, or nothing.
fn text_budget(needed: usize, text_len: usize, max: usize) -> Option<usize> {
    max.checked_sub(needed - text_len)
        .filter(|budget| *budget >= TRUNCATION_MARKER.len())
}

/// `Some` when a message needing `needed` bytes fits `max`, whole or with `text` cut.
fn fits_or_cuts(needed: usize, text: Option<&str>, max: usize) -> Option<()> {
    if needed <= max {
        return Some(());
    }
    text_budget(needed, text?.len(), max).map(drop)
}

/// `text` cut at a character boundary so that, with the marker after it, it takes at
/// most `budget` bytes (at least the marker's length).
fn cut_text(text: &str, budget: usize) -> String {
    let mut end = (budget - TRUNCATION_MARKER.len()).min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{TRUNCATION_MARKER}", &text[..end])
}

/// The form of an oversized worker message that fits `max`: its free text cut. A message
/// with no free text (names, paths and numbers cannot be cut) is refused.
fn cut_worker(
    msg: &WorkerMessage,
    needed: usize,
    max: usize,
) -> Result<WorkerMessage, EncodeError> {
    let cut = |text: &str| {
        text_budget(needed, text.len(), max)
            .map(|budget| cut_text(text, budget))
            .ok_or_else(|| too_large(worker_what(msg), needed, max))
    };
    match msg {
        WorkerMessage::StartupFailed { error } => {
            Ok(WorkerMessage::StartupFailed { error: cut(error)? })
        }
        WorkerMessage::Broker {
            id,
            request: BrokerRequest::AppendLog { record },
        } => Ok(WorkerMessage::Broker {
            id: *id,
            request: BrokerRequest::AppendLog {
                record: cut(record)?,
            },
        }),
        _ => Err(too_large(worker_what(msg), needed, max)),
    }
}

/// A worker message's free text: what may be cut to make it fit.
fn worker_text(msg: &WorkerMessage) -> Option<&str> {
    match msg {
        WorkerMessage::StartupFailed { error } => Some(error),
        WorkerMessage::Broker { request, .. } => request_text(request),
        _ => None,
    }
}

fn request_text(request: &BrokerRequest) -> Option<&str> {
    match request {
        BrokerRequest::AppendLog { record } => Some(record),
        _ => None,
    }
}

/// The DAV lock list in chunks, each of which fits a frame of `max` bytes with the
/// larger (last-part) header; refused when one lock alone does not fit or the chunks
/// would be more than [`MAX_FRAMES_PER_MESSAGE`].
fn split_locks(
    locks: &[DavLockInfo],
    needed: usize,
    max: usize,
) -> Result<Vec<Range<usize>>, EncodeError> {
    let header = measure(|w| put_locks_header(w, 0, 0));
    let Some(room) = max.checked_sub(header) else {
        return Err(too_large("a DAV lock list", needed, max));
    };
    let mut chunks = Vec::new();
    let (mut start, mut used) = (0, 0);
    for (i, lock) in locks.iter().enumerate() {
        let size = measure(|w| put_lock(w, lock));
        if size > room {
            return Err(too_large("a DAV lock in a lock list", header + size, max));
        }
        if used + size > room {
            chunks.push(start..i);
            (start, used) = (i, 0);
        }
        used += size;
    }
    chunks.push(start..locks.len());
    if chunks.len() > MAX_FRAMES_PER_MESSAGE {
        return Err(too_large("a DAV lock list", needed, max));
    }
    Ok(chunks)
}

fn worker_what(msg: &WorkerMessage) -> &'static str {
    match msg {
        WorkerMessage::Prepared => "PREPARED",
        WorkerMessage::StartupFailed { .. } => "a startup failure",
        WorkerMessage::Ready => "READY",
        WorkerMessage::Heartbeat { .. } => "a heartbeat",
        WorkerMessage::Broker { request, .. } => request_what(request),
        WorkerMessage::ScriptStarted { .. } => "a script's start",
        WorkerMessage::ScriptEnded { .. } => "a script's end",
    }
}

fn request_what(request: &BrokerRequest) -> &'static str {
    match request {
        BrokerRequest::AcquireLease { .. } => "a lease request",
        BrokerRequest::ReservePartial { .. } | BrokerRequest::AdoptPartial { .. } => {
            "a partial-upload request"
        }
        BrokerRequest::DavLock { .. } => "a DAV lock request",
        BrokerRequest::DavQuery { .. } => "a DAV query",
        BrokerRequest::DavWriteLease { .. } => "a DAV write lease",
        BrokerRequest::AppendLog { .. } => "an access-log record",
        _ => "a broker request",
    }
}

fn parent_what(msg: &ParentMessage) -> &'static str {
    match msg {
        ParentMessage::Hello { .. } => "HELLO",
        ParentMessage::Commit => "COMMIT",
        ParentMessage::Drain { .. } => "DRAIN",
        ParentMessage::Broker { .. } => "a broker reply",
        ParentMessage::TlsMaterial(_) => "the TLS material",
        ParentMessage::UpstreamHealth { .. } => "the upstream health",
    }
}

fn put_parent(w: &mut Writer<'_>, msg: &ParentMessage) {
    match msg {
        ParentMessage::Hello {
            worker,
            generation,
            heartbeat_interval_ms,
            drain_timeout_ms,
        } => {
            w.u8(HELLO);
            w.u64(worker.0);
            w.u64(generation.0);
            w.u64(*heartbeat_interval_ms);
            w.u64(*drain_timeout_ms);
        }
        ParentMessage::Commit => w.u8(COMMIT),
        ParentMessage::Drain { deadline_ms } => {
            w.u8(DRAIN);
            w.u64(*deadline_ms);
        }
        ParentMessage::Broker { id, reply } => put_broker_reply(w, *id, reply),
        ParentMessage::TlsMaterial(material) => {
            w.u8(TLS_MATERIAL);
            super::tls_wire::put_tls_material(w, material);
        }
        ParentMessage::UpstreamHealth { down } => {
            w.u8(UPSTREAM_HEALTH);
            w.u32(down.len() as u32);
            for upstream in down {
                w.u16(*upstream);
            }
        }
    }
}

/// The payload bytes a TLS material message needs.
pub fn tls_material_len(material: &crate::tls_material::TlsMaterial) -> usize {
    measure(|w| {
        w.u8(TLS_MATERIAL);
        super::tls_wire::put_tls_material(w, material);
    })
}

fn put_broker_reply(w: &mut Writer<'_>, id: u64, reply: &BrokerReply) {
    w.u8(BROKER_REPLY);
    w.u64(id);
    put_reply(w, reply);
}

fn put_worker(w: &mut Writer<'_>, msg: &WorkerMessage) {
    match msg {
        WorkerMessage::Prepared => w.u8(PREPARED),
        WorkerMessage::StartupFailed { error } => {
            w.u8(STARTUP_FAILED);
            w.str(error);
        }
        WorkerMessage::Ready => w.u8(READY),
        WorkerMessage::Heartbeat {
            requests,
            connections,
            requests_in_progress,
            memory,
            stats,
        } => {
            w.u8(HEARTBEAT);
            w.u64(*requests);
            w.u32(*connections);
            w.u32(*requests_in_progress);
            w.u64(*memory);
            crate::proto::stats_wire::put_stats(w, stats);
        }
        WorkerMessage::Broker { id, request } => put_broker_request(w, *id, request),
        WorkerMessage::ScriptStarted { pgid } => {
            w.u8(SCRIPT_STARTED);
            w.u32(*pgid);
        }
        WorkerMessage::ScriptEnded { pgid } => {
            w.u8(SCRIPT_ENDED);
            w.u32(*pgid);
        }
    }
}

fn put_broker_request(w: &mut Writer<'_>, id: u64, request: &BrokerRequest) {
    w.u8(BROKER_REQUEST);
    w.u64(id);
    put_request(w, request);
}

fn put_key(w: &mut Writer<'_>, key: &TargetKey) {
    w.u64(key.dir_device);
    w.u64(key.dir_inode);
    w.str(&key.name);
}

fn get_key(r: &mut Reader<'_>) -> Result<TargetKey, ProtoError> {
    Ok(TargetKey {
        dir_device: r.u64()?,
        dir_inode: r.u64()?,
        name: r.string()?,
    })
}

fn put_depth(w: &mut Writer<'_>, d: DavDepth) {
    w.u8(match d {
        DavDepth::Zero => 0,
        DavDepth::Infinity => 1,
    });
}

fn get_depth(r: &mut Reader<'_>) -> Result<DavDepth, ProtoError> {
    match r.u8()? {
        0 => Ok(DavDepth::Zero),
        1 => Ok(DavDepth::Infinity),
        v => Err(ProtoError::InvalidValue {
            field: "depth",
            value: u64::from(v),
        }),
    }
}

fn put_request(w: &mut Writer<'_>, req: &BrokerRequest) {
    match req {
        BrokerRequest::ReserveUpload { bytes } => {
            w.u8(1);
            w.u64(*bytes);
        }
        BrokerRequest::ReleaseReservation { id } => {
            w.u8(2);
            w.u128(id.0);
        }
        BrokerRequest::AcquireLease { key } => {
            w.u8(3);
            put_key(w, key);
        }
        BrokerRequest::RenewLease { id } => {
            w.u8(4);
            w.u128(id.0);
        }
        BrokerRequest::ReleaseLease { id } => {
            w.u8(5);
            w.u128(id.0);
        }
        BrokerRequest::ReservePartial { key, bytes } => {
            w.u8(6);
            put_key(w, key);
            w.u64(*bytes);
        }
        BrokerRequest::AdoptPartial { key } => {
            w.u8(7);
            put_key(w, key);
        }
        BrokerRequest::ReleasePartial { id } => {
            w.u8(8);
            w.u128(id.0);
        }
        BrokerRequest::DavLock {
            resource,
            depth,
            owner,
            exclusive,
            timeout_ms,
        } => {
            w.u8(9);
            w.str(resource);
            put_depth(w, *depth);
            w.str(owner);
            w.bool(*exclusive);
            w.u64(*timeout_ms);
        }
        BrokerRequest::DavRefresh { token, timeout_ms } => {
            w.u8(10);
            w.u128(token.0);
            w.u64(*timeout_ms);
        }
        BrokerRequest::DavUnlock { token } => {
            w.u8(11);
            w.u128(token.0);
        }
        BrokerRequest::DavQuery { resource } => {
            w.u8(12);
            w.str(resource);
        }
        BrokerRequest::AppendLog { record } => {
            w.u8(13);
            w.str(record);
        }
        BrokerRequest::LogDroppedLocally { lines } => {
            w.u8(14);
            w.u64(*lines);
        }
        BrokerRequest::AcmeChallenge { token } => {
            w.u8(15);
            w.str(token);
        }
        BrokerRequest::AcquireProxyGrants { want } => {
            w.u8(18);
            w.u32(*want);
        }
        BrokerRequest::ReturnProxyGrants { count } => {
            w.u8(19);
            w.u32(*count);
        }
        BrokerRequest::AcquireCgiGrants { want } => {
            w.u8(20);
            w.u32(*want);
        }
        BrokerRequest::ReturnCgiGrants { count } => {
            w.u8(21);
            w.u32(*count);
        }
        BrokerRequest::UpstreamOutcome { upstream, ok } => {
            w.u8(22);
            w.u16(*upstream);
            w.bool(*ok);
        }
        BrokerRequest::GrowReservation { id, bytes } => {
            w.u8(17);
            w.u128(id.0);
            w.u64(*bytes);
        }
        BrokerRequest::DavWriteLease { key, check } => {
            w.u8(16);
            put_key(w, key);
            w.str(&check.resource);
            w.bool(check.reach.membership);
            w.bool(check.reach.tree);
            let submitted = &check.submitted[..check.submitted.len().min(MAX_SUBMITTED_TOKENS)];
            w.u8(submitted.len() as u8);
            for token in submitted {
                w.u128(token.0);
            }
        }
    }
}

fn get_request(r: &mut Reader<'_>) -> Result<BrokerRequest, ProtoError> {
    Ok(match r.u8()? {
        1 => BrokerRequest::ReserveUpload { bytes: r.u64()? },
        2 => BrokerRequest::ReleaseReservation {
            id: LeaseId(r.u128()?),
        },
        17 => BrokerRequest::GrowReservation {
            id: LeaseId(r.u128()?),
            bytes: r.u64()?,
        },
        3 => BrokerRequest::AcquireLease { key: get_key(r)? },
        4 => BrokerRequest::RenewLease {
            id: LeaseId(r.u128()?),
        },
        5 => BrokerRequest::ReleaseLease {
            id: LeaseId(r.u128()?),
        },
        6 => BrokerRequest::ReservePartial {
            key: get_key(r)?,
            bytes: r.u64()?,
        },
        7 => BrokerRequest::AdoptPartial { key: get_key(r)? },
        8 => BrokerRequest::ReleasePartial {
            id: LeaseId(r.u128()?),
        },
        9 => BrokerRequest::DavLock {
            resource: r.string()?,
            depth: get_depth(r)?,
            owner: r.string()?,
            exclusive: r.bool()?,
            timeout_ms: r.u64()?,
        },
        10 => BrokerRequest::DavRefresh {
            token: LeaseId(r.u128()?),
            timeout_ms: r.u64()?,
        },
        11 => BrokerRequest::DavUnlock {
            token: LeaseId(r.u128()?),
        },
        12 => BrokerRequest::DavQuery {
            resource: r.string()?,
        },
        13 => BrokerRequest::AppendLog {
            record: r.string()?,
        },
        14 => BrokerRequest::LogDroppedLocally { lines: r.u64()? },
        18 => BrokerRequest::AcquireProxyGrants { want: r.u32()? },
        19 => BrokerRequest::ReturnProxyGrants { count: r.u32()? },
        20 => BrokerRequest::AcquireCgiGrants { want: r.u32()? },
        21 => BrokerRequest::ReturnCgiGrants { count: r.u32()? },
        22 => BrokerRequest::UpstreamOutcome {
            upstream: r.u16()?,
            ok: r.bool()?,
        },
        15 => BrokerRequest::AcmeChallenge { token: r.string()? },
        16 => {
            let key = get_key(r)?;
            let resource = r.string()?;
            let reach = DavReach {
                membership: r.bool()?,
                tree: r.bool()?,
            };
            let n = r.u8()?;
            if n as usize > MAX_SUBMITTED_TOKENS {
                return Err(ProtoError::InvalidValue {
                    field: "submitted tokens",
                    value: n.into(),
                });
            }
            let submitted = (0..n)
                .map(|_| r.u128().map(LeaseId))
                .collect::<Result<_, _>>()?;
            BrokerRequest::DavWriteLease {
                key,
                check: Box::new(DavWriteCheck {
                    resource,
                    reach,
                    submitted,
                }),
            }
        }
        t => return Err(ProtoError::UnknownTag(t)),
    })
}

fn put_rejection(w: &mut Writer<'_>, rej: Rejection) {
    w.u8(match rej {
        Rejection::Busy => 1,
        Rejection::Saturated => 2,
        Rejection::TooLarge => 3,
        Rejection::NotFound => 4,
        Rejection::NotOwner => 5,
        Rejection::Revoked => 6,
        Rejection::Locked => 7,
    });
}

fn get_rejection(r: &mut Reader<'_>) -> Result<Rejection, ProtoError> {
    Ok(match r.u8()? {
        1 => Rejection::Busy,
        2 => Rejection::Saturated,
        3 => Rejection::TooLarge,
        4 => Rejection::NotFound,
        5 => Rejection::NotOwner,
        6 => Rejection::Revoked,
        7 => Rejection::Locked,
        v => {
            return Err(ProtoError::InvalidValue {
                field: "rejection",
                value: u64::from(v),
            });
        }
    })
}

fn put_reply(w: &mut Writer<'_>, reply: &BrokerReply) {
    match reply {
        BrokerReply::Granted { id, expires_in_ms } => {
            w.u8(1);
            w.u128(id.0);
            w.u64(*expires_in_ms);
        }
        BrokerReply::Released => w.u8(2),
        BrokerReply::Locks(locks) => {
            w.u8(REPLY_LOCKS);
            put_locks(w, locks);
        }
        BrokerReply::Logged => w.u8(4),
        BrokerReply::LogDropped => w.u8(5),
        BrokerReply::Rejected(rej) => {
            w.u8(6);
            put_rejection(w, *rej);
        }
        BrokerReply::KeyAuthorization(answer) => {
            w.u8(7);
            w.bool(answer.is_some());
            w.str(answer.as_deref().unwrap_or(""));
        }
        BrokerReply::ProxyGrants { granted } => {
            w.u8(8);
            w.u32(*granted);
        }
        BrokerReply::CgiGrants { granted } => {
            w.u8(9);
            w.u32(*granted);
        }
    }
}

fn put_locks(w: &mut Writer<'_>, locks: &[DavLockInfo]) {
    w.count(locks.len());
    for lock in locks {
        put_lock(w, lock);
    }
}

fn put_lock(w: &mut Writer<'_>, l: &DavLockInfo) {
    put_lock_fields(
        w,
        l.token.0,
        &l.resource,
        l.depth,
        &l.owner,
        l.exclusive,
        l.expires_in_ms,
        l.generation.0,
    );
}

#[allow(clippy::too_many_arguments)]
fn put_lock_fields(
    w: &mut Writer<'_>,
    token: u128,
    resource: &str,
    depth: DavDepth,
    owner: &str,
    exclusive: bool,
    expires_in_ms: u64,
    generation: u64,
) {
    w.u128(token);
    w.str(resource);
    put_depth(w, depth);
    w.str(owner);
    w.bool(exclusive);
    w.u64(expires_in_ms);
    w.u64(generation);
}

fn get_lock(r: &mut Reader<'_>) -> Result<DavLockInfo, ProtoError> {
    Ok(DavLockInfo {
        token: LeaseId(r.u128()?),
        resource: r.string()?,
        depth: get_depth(r)?,
        owner: r.string()?,
        exclusive: r.bool()?,
        expires_in_ms: r.u64()?,
        generation: Generation(r.u64()?),
    })
}

fn get_locks(r: &mut Reader<'_>) -> Result<Vec<DavLockInfo>, ProtoError> {
    let n = r.u32()? as usize;
    // Each lock needs at least 42 bytes (token 16, two empty strings 8, depth 1,
    // exclusive 1, expiry 8, generation 8); refuse counts the frame cannot hold before
    // allocating for them.
    if n > r.buf.len() / 42 {
        return Err(ProtoError::Truncated);
    }
    let mut locks = Vec::with_capacity(n);
    for _ in 0..n {
        locks.push(get_lock(r)?);
    }
    Ok(locks)
}

/// The header of the last (or only) frame of a lock list: what a `Locks` reply to request
/// `id` writes before its locks. The largest header a lock-list frame has.
fn put_locks_header(w: &mut Writer<'_>, id: u64, count: usize) {
    w.u8(BROKER_REPLY);
    w.u64(id);
    w.u8(REPLY_LOCKS);
    w.count(count);
}

/// The last (or only) frame of a split lock list: an ordinary `Locks` reply.
fn put_locks_reply(w: &mut Writer<'_>, id: u64, locks: &[DavLockInfo]) {
    put_locks_header(w, id, locks.len());
    for lock in locks {
        put_lock(w, lock);
    }
}

/// Any frame of a split lock list but the last.
fn put_locks_part(w: &mut Writer<'_>, id: u64, locks: &[DavLockInfo]) {
    w.u8(LOCKS_PART);
    w.u64(id);
    put_locks(w, locks);
}

fn get_reply(r: &mut Reader<'_>) -> Result<BrokerReply, ProtoError> {
    Ok(match r.u8()? {
        1 => BrokerReply::Granted {
            id: LeaseId(r.u128()?),
            expires_in_ms: r.u64()?,
        },
        2 => BrokerReply::Released,
        REPLY_LOCKS => BrokerReply::Locks(get_locks(r)?),
        4 => BrokerReply::Logged,
        5 => BrokerReply::LogDropped,
        6 => BrokerReply::Rejected(get_rejection(r)?),
        7 => {
            let some = r.bool()?;
            let answer = r.string()?;
            BrokerReply::KeyAuthorization(some.then_some(answer))
        }
        8 => BrokerReply::ProxyGrants { granted: r.u32()? },
        9 => BrokerReply::CgiGrants { granted: r.u32()? },
        t => return Err(ProtoError::UnknownTag(t)),
    })
}

#[path = "decoder.rs"]
mod decoder;
pub use decoder::FrameDecoder;

#[cfg(test)]
#[path = "frame_limit_tests.rs"]
mod frame_limit_tests;

#[cfg(test)]
#[path = "codec_tests.rs"]
mod tests;
