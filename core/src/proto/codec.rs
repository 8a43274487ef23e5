//! Framing and message encoding.

use super::ProtoError;
use super::messages::*;
use super::wire::{Reader, Writer};
use crate::ids::{Generation, LeaseId, WorkerId};

/// Frames above this are refused unless a channel configures otherwise. Control and
/// broker messages are small; the largest legitimate one is a DAV query answer.
pub const MAX_FRAME_DEFAULT: usize = 256 * 1024;

/// Append one framed parent message to `out`.
pub fn encode_parent(msg: &ParentMessage, out: &mut Vec<u8>) {
    frame(out, |w| match msg {
        ParentMessage::Hello {
            worker,
            generation,
            heartbeat_interval_ms,
            drain_timeout_ms,
        } => {
            w.u8(0x01);
            w.u64(worker.0);
            w.u64(generation.0);
            w.u64(*heartbeat_interval_ms);
            w.u64(*drain_timeout_ms);
        }
        ParentMessage::Commit => w.u8(0x02),
        ParentMessage::Drain { deadline_ms } => {
            w.u8(0x03);
            w.u64(*deadline_ms);
        }
        ParentMessage::Broker { id, reply } => {
            w.u8(0x04);
            w.u64(*id);
            put_reply(w, reply);
        }
    });
}

/// Append one framed worker message to `out`.
pub fn encode_worker(msg: &WorkerMessage, out: &mut Vec<u8>) {
    frame(out, |w| match msg {
        WorkerMessage::Prepared => w.u8(0x41),
        WorkerMessage::StartupFailed { error } => {
            w.u8(0x42);
            w.str(error);
        }
        WorkerMessage::Ready => w.u8(0x43),
        WorkerMessage::Heartbeat {
            requests,
            connections,
        } => {
            w.u8(0x44);
            w.u64(*requests);
            w.u32(*connections);
        }
        WorkerMessage::Broker { id, request } => {
            w.u8(0x45);
            w.u64(*id);
            put_request(w, request);
        }
    });
}

fn frame(out: &mut Vec<u8>, body: impl FnOnce(&mut Writer<'_>)) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    body(&mut Writer { buf: out });
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_be_bytes());
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
    }
}

fn get_request(r: &mut Reader<'_>) -> Result<BrokerRequest, ProtoError> {
    Ok(match r.u8()? {
        1 => BrokerRequest::ReserveUpload { bytes: r.u64()? },
        2 => BrokerRequest::ReleaseReservation {
            id: LeaseId(r.u128()?),
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
            w.u8(3);
            w.u32(locks.len() as u32);
            for l in locks {
                w.u128(l.token.0);
                w.str(&l.resource);
                put_depth(w, l.depth);
                w.str(&l.owner);
                w.bool(l.exclusive);
                w.u64(l.expires_in_ms);
                w.u64(l.generation.0);
            }
        }
        BrokerReply::Logged => w.u8(4),
        BrokerReply::LogDropped => w.u8(5),
        BrokerReply::Rejected(rej) => {
            w.u8(6);
            put_rejection(w, *rej);
        }
    }
}

fn get_reply(r: &mut Reader<'_>) -> Result<BrokerReply, ProtoError> {
    Ok(match r.u8()? {
        1 => BrokerReply::Granted {
            id: LeaseId(r.u128()?),
            expires_in_ms: r.u64()?,
        },
        2 => BrokerReply::Released,
        3 => {
            let n = r.u32()? as usize;
            // Each lock needs at least 42 bytes (token 16, two empty strings 8, depth 1,
            // exclusive 1, expiry 8, generation 8); refuse counts the frame cannot hold
            // before allocating for them.
            if n > r.buf.len() / 42 {
                return Err(ProtoError::Truncated);
            }
            let mut locks = Vec::with_capacity(n);
            for _ in 0..n {
                locks.push(DavLockInfo {
                    token: LeaseId(r.u128()?),
                    resource: r.string()?,
                    depth: get_depth(r)?,
                    owner: r.string()?,
                    exclusive: r.bool()?,
                    expires_in_ms: r.u64()?,
                    generation: Generation(r.u64()?),
                });
            }
            BrokerReply::Locks(locks)
        }
        4 => BrokerReply::Logged,
        5 => BrokerReply::LogDropped,
        6 => BrokerReply::Rejected(get_rejection(r)?),
        t => return Err(ProtoError::UnknownTag(t)),
    })
}

fn decode_parent(payload: &[u8]) -> Result<ParentMessage, ProtoError> {
    let mut r = Reader { buf: payload };
    let msg = match r.u8()? {
        0x01 => ParentMessage::Hello {
            worker: WorkerId(r.u64()?),
            generation: Generation(r.u64()?),
            heartbeat_interval_ms: r.u64()?,
            drain_timeout_ms: r.u64()?,
        },
        0x02 => ParentMessage::Commit,
        0x03 => ParentMessage::Drain {
            deadline_ms: r.u64()?,
        },
        0x04 => ParentMessage::Broker {
            id: r.u64()?,
            reply: get_reply(&mut r)?,
        },
        t => return Err(ProtoError::UnknownTag(t)),
    };
    r.finish()?;
    Ok(msg)
}

fn decode_worker(payload: &[u8]) -> Result<WorkerMessage, ProtoError> {
    let mut r = Reader { buf: payload };
    let msg = match r.u8()? {
        0x41 => WorkerMessage::Prepared,
        0x42 => WorkerMessage::StartupFailed { error: r.string()? },
        0x43 => WorkerMessage::Ready,
        0x44 => WorkerMessage::Heartbeat {
            requests: r.u64()?,
            connections: r.u32()?,
        },
        0x45 => WorkerMessage::Broker {
            id: r.u64()?,
            request: get_request(&mut r)?,
        },
        t => return Err(ProtoError::UnknownTag(t)),
    };
    r.finish()?;
    Ok(msg)
}

/// Incremental frame decoder: push bytes as they arrive, pull whole messages out.
///
/// After the first error the decoder stays failed: a stream that lost framing cannot be
/// trusted again, and the worker is replaced.
#[derive(Debug)]
pub struct FrameDecoder {
    buf: Vec<u8>,
    start: usize,
    max_frame: usize,
    failed: Option<ProtoError>,
}

impl FrameDecoder {
    pub fn new(max_frame: usize) -> Self {
        FrameDecoder {
            buf: Vec::new(),
            start: 0,
            max_frame,
            failed: None,
        }
    }

    pub fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes received but not yet consumed by a whole frame.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    fn next_payload(&mut self) -> Result<Option<(usize, usize)>, ProtoError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        // Drop consumed bytes once they dominate, before locating the next frame, so a
        // long-lived channel's buffer stays proportional to what is unread. (A fully
        // consumed buffer is cleared by the next push.)
        if self.start > 64 * 1024 && self.start * 2 > self.buf.len() {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        let avail = &self.buf[self.start..];
        if avail.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([avail[0], avail[1], avail[2], avail[3]]) as usize;
        let err = if len > self.max_frame {
            Some(ProtoError::FrameTooLarge {
                len,
                max: self.max_frame,
            })
        } else if len == 0 {
            Some(ProtoError::EmptyFrame)
        } else {
            None
        };
        if let Some(e) = err {
            self.failed = Some(e.clone());
            return Err(e);
        }
        if avail.len() < 4 + len {
            return Ok(None);
        }
        let begin = self.start + 4;
        self.start = begin + len;
        Ok(Some((begin, begin + len)))
    }

    fn decode_with<T>(
        &mut self,
        decode: fn(&[u8]) -> Result<T, ProtoError>,
    ) -> Result<Option<T>, ProtoError> {
        match self.next_payload()? {
            None => Ok(None),
            Some((a, b)) => match decode(&self.buf[a..b]) {
                Ok(m) => Ok(Some(m)),
                Err(e) => {
                    self.failed = Some(e.clone());
                    Err(e)
                }
            },
        }
    }

    /// The next whole message a worker sent, if one has fully arrived.
    pub fn next_worker_message(&mut self) -> Result<Option<WorkerMessage>, ProtoError> {
        self.decode_with(decode_worker)
    }

    /// The next whole message the parent sent, if one has fully arrived.
    pub fn next_parent_message(&mut self) -> Result<Option<ParentMessage>, ProtoError> {
        self.decode_with(decode_parent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key() -> impl Strategy<Value = TargetKey> {
        (any::<u64>(), any::<u64>(), ".{0,12}").prop_map(|(d, i, n)| TargetKey {
            dir_device: d,
            dir_inode: i,
            name: n,
        })
    }

    fn request() -> impl Strategy<Value = BrokerRequest> {
        prop_oneof![
            any::<u64>().prop_map(|bytes| BrokerRequest::ReserveUpload { bytes }),
            any::<u128>().prop_map(|i| BrokerRequest::ReleaseLease { id: LeaseId(i) }),
            key().prop_map(|key| BrokerRequest::AcquireLease { key }),
            (key(), any::<u64>())
                .prop_map(|(key, bytes)| BrokerRequest::ReservePartial { key, bytes }),
            (
                ".{0,20}",
                any::<bool>(),
                ".{0,8}",
                any::<bool>(),
                any::<u64>()
            )
                .prop_map(|(resource, inf, owner, exclusive, timeout_ms)| {
                    BrokerRequest::DavLock {
                        resource,
                        depth: if inf {
                            DavDepth::Infinity
                        } else {
                            DavDepth::Zero
                        },
                        owner,
                        exclusive,
                        timeout_ms,
                    }
                }),
            ".{0,40}".prop_map(|record| BrokerRequest::AppendLog { record }),
        ]
    }

    fn worker_message() -> impl Strategy<Value = WorkerMessage> {
        prop_oneof![
            Just(WorkerMessage::Prepared),
            Just(WorkerMessage::Ready),
            ".{0,30}".prop_map(|error| WorkerMessage::StartupFailed { error }),
            (any::<u64>(), any::<u32>()).prop_map(|(requests, connections)| {
                WorkerMessage::Heartbeat {
                    requests,
                    connections,
                }
            }),
            (any::<u64>(), request())
                .prop_map(|(id, request)| WorkerMessage::Broker { id, request }),
        ]
    }

    fn reply() -> impl Strategy<Value = BrokerReply> {
        prop_oneof![
            (any::<u128>(), any::<u64>()).prop_map(|(i, e)| BrokerReply::Granted {
                id: LeaseId(i),
                expires_in_ms: e
            }),
            Just(BrokerReply::Released),
            Just(BrokerReply::Rejected(Rejection::Saturated)),
            prop::collection::vec((any::<u128>(), ".{0,10}"), 0..4).prop_map(|v| {
                BrokerReply::Locks(
                    v.into_iter()
                        .map(|(t, r)| DavLockInfo {
                            token: LeaseId(t),
                            resource: r,
                            depth: DavDepth::Zero,
                            owner: String::new(),
                            exclusive: true,
                            expires_in_ms: 5,
                            generation: Generation(2),
                        })
                        .collect(),
                )
            }),
        ]
    }

    proptest! {
        #[test]
        fn worker_messages_round_trip_across_any_split(msgs in prop::collection::vec(worker_message(), 1..8), split in any::<prop::sample::Index>()) {
            let mut bytes = Vec::new();
            for m in &msgs { encode_worker(m, &mut bytes); }
            let cut = split.index(bytes.len() + 1);
            let mut dec = FrameDecoder::new(MAX_FRAME_DEFAULT);
            let mut got = Vec::new();
            dec.push(&bytes[..cut]);
            while let Some(m) = dec.next_worker_message().expect("valid") { got.push(m); }
            dec.push(&bytes[cut..]);
            while let Some(m) = dec.next_worker_message().expect("valid") { got.push(m); }
            prop_assert_eq!(got, msgs);
            prop_assert_eq!(dec.buffered(), 0);
        }

        #[test]
        fn parent_replies_round_trip(id in any::<u64>(), reply in reply()) {
            let msg = ParentMessage::Broker { id, reply };
            let mut bytes = Vec::new();
            encode_parent(&msg, &mut bytes);
            let mut dec = FrameDecoder::new(MAX_FRAME_DEFAULT);
            dec.push(&bytes);
            prop_assert_eq!(dec.next_parent_message().expect("valid"), Some(msg));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            let mut dec = FrameDecoder::new(1024);
            dec.push(&bytes);
            for _ in 0..10 {
                match dec.next_worker_message() {
                    Ok(Some(_)) => continue,
                    Ok(None) | Err(_) => break,
                }
            }
        }
    }

    #[test]
    fn the_default_limit_admits_large_replies_and_refuses_larger() {
        let record = "x".repeat(200 * 1024);
        let msg = WorkerMessage::Broker {
            id: 1,
            request: BrokerRequest::AppendLog { record },
        };
        let mut bytes = Vec::new();
        encode_worker(&msg, &mut bytes);
        let mut dec = FrameDecoder::new(MAX_FRAME_DEFAULT);
        dec.push(&bytes);
        assert_eq!(dec.next_worker_message().expect("fits"), Some(msg));
        let mut dec = FrameDecoder::new(MAX_FRAME_DEFAULT);
        dec.push(&(MAX_FRAME_DEFAULT as u32 + 1).to_be_bytes());
        assert!(dec.next_worker_message().is_err());
    }

    #[test]
    fn long_streams_compact_without_losing_a_frame() {
        let beat = |n| WorkerMessage::Heartbeat {
            requests: n,
            connections: 1,
        };
        let mut bytes = Vec::new();
        for n in 0..6000 {
            encode_worker(&beat(n), &mut bytes);
        }
        // Everything but the last 5 bytes in one push: compaction happens with a
        // partial frame left in the buffer.
        let cut = bytes.len() - 5;
        let mut dec = FrameDecoder::new(MAX_FRAME_DEFAULT);
        dec.push(&bytes[..cut]);
        let mut got = 0u64;
        while let Some(m) = dec.next_worker_message().expect("valid") {
            assert_eq!(m, beat(got));
            got += 1;
        }
        assert_eq!(got, 5999);
        assert!(
            dec.buf.len() < 64 * 1024,
            "consumed bytes were compacted away ({})",
            dec.buf.len()
        );
        dec.push(&bytes[cut..]);
        assert_eq!(dec.next_worker_message().expect("valid"), Some(beat(5999)));
        assert_eq!(dec.buffered(), 0);
        dec.push(&bytes[..17]);
        assert_eq!(
            dec.buf.len(),
            17,
            "a fully consumed buffer is cleared by the next push"
        );
    }

    #[test]
    fn oversized_and_malformed_frames_are_typed_errors_and_sticky() {
        let mut dec = FrameDecoder::new(16);
        dec.push(&100u32.to_be_bytes());
        assert_eq!(
            dec.next_worker_message(),
            Err(ProtoError::FrameTooLarge { len: 100, max: 16 })
        );
        assert!(
            dec.next_worker_message().is_err(),
            "a failed stream stays failed"
        );

        let mut dec = FrameDecoder::new(16);
        dec.push(&[0, 0, 0, 1, 0x99]);
        assert_eq!(dec.next_worker_message(), Err(ProtoError::UnknownTag(0x99)));

        let mut dec = FrameDecoder::new(16);
        dec.push(&[0, 0, 0, 2, 0x41, 0]);
        assert_eq!(dec.next_worker_message(), Err(ProtoError::TrailingBytes(1)));

        let mut dec = FrameDecoder::new(64);
        dec.push(&[0, 0, 0, 7, 0x42, 0, 0, 0, 2, 0xff, 0xfe]);
        assert_eq!(dec.next_worker_message(), Err(ProtoError::InvalidUtf8));

        let mut dec = FrameDecoder::new(64);
        dec.push(&[0, 0, 0, 0]);
        assert_eq!(dec.next_worker_message(), Err(ProtoError::EmptyFrame));
    }
}
