//! Frames in: the size-bounded decoder a parent and a worker read each other with, which
//! rejoins split lock lists and stays failed after a malformed frame.

use std::sync::Arc;

use super::*;
use crate::request_stats::RequestStats;

/// One frame from the parent: a whole message, or a part of a split lock list.
enum ParentFrame {
    Whole(ParentMessage),
    LocksPart { id: u64, locks: Vec<DavLockInfo> },
}

fn decode_parent(payload: &[u8]) -> Result<ParentFrame, ProtoError> {
    let mut r = Reader { buf: payload };
    let msg = match r.u8()? {
        HELLO => ParentMessage::Hello {
            worker: WorkerId(r.u64()?),
            generation: Generation(r.u64()?),
            heartbeat_interval_ms: r.u64()?,
            drain_timeout_ms: r.u64()?,
        },
        COMMIT => ParentMessage::Commit,
        DRAIN => ParentMessage::Drain {
            deadline_ms: r.u64()?,
        },
        BROKER_REPLY => ParentMessage::Broker {
            id: r.u64()?,
            reply: get_reply(&mut r)?,
        },
        TLS_MATERIAL => {
            ParentMessage::TlsMaterial(Box::new(crate::proto::tls_wire::get_tls_material(&mut r)?))
        }
        UPSTREAM_HEALTH => {
            let n = r.u32()?;
            // Every upstream index fits a u16: more than that many entries is not a set.
            if n > u32::from(u16::MAX) + 1 {
                return Err(ProtoError::InvalidValue {
                    field: "down upstreams",
                    value: n.into(),
                });
            }
            let down = (0..n).map(|_| r.u16()).collect::<Result<Vec<u16>, _>>()?;
            ParentMessage::UpstreamHealth { down }
        }
        LOCKS_PART => {
            let id = r.u64()?;
            let locks = get_locks(&mut r)?;
            r.finish()?;
            return Ok(ParentFrame::LocksPart { id, locks });
        }
        t => return Err(ProtoError::UnknownTag(t)),
    };
    r.finish()?;
    Ok(ParentFrame::Whole(msg))
}

/// The counters of the last heartbeat decoded, with the bytes they were decoded from.
#[derive(Debug)]
struct LastStats {
    bytes: Vec<u8>,
    stats: Arc<RequestStats>,
}

fn decode_worker(
    payload: &[u8],
    last: &mut Option<LastStats>,
) -> Result<WorkerMessage, ProtoError> {
    let mut r = Reader { buf: payload };
    let msg = match r.u8()? {
        PREPARED => WorkerMessage::Prepared,
        STARTUP_FAILED => WorkerMessage::StartupFailed { error: r.string()? },
        READY => WorkerMessage::Ready,
        HEARTBEAT => {
            let requests = r.u64()?;
            let connections = r.u32()?;
            let requests_in_progress = r.u32()?;
            let memory = r.u64()?;
            WorkerMessage::Heartbeat {
                requests,
                connections,
                requests_in_progress,
                memory,
                stats: get_stats_shared(&mut r, last)?,
            }
        }
        BROKER_REQUEST => WorkerMessage::Broker {
            id: r.u64()?,
            request: get_request(&mut r)?,
        },
        SCRIPT_STARTED => WorkerMessage::ScriptStarted { pgid: r.u32()? },
        SCRIPT_ENDED => WorkerMessage::ScriptEnded { pgid: r.u32()? },
        t => return Err(ProtoError::UnknownTag(t)),
    };
    r.finish()?;
    Ok(msg)
}

/// A heartbeat's counters, the frame's last field. A worker whose counters have not
/// moved since its last beat sends the very bytes it sent then, which decode to the very
/// table: that one is shared again rather than decoded into a new allocation (an idle
/// worker's beats, and a simulated run's, whose workers keep no counters).
fn get_stats_shared(
    r: &mut Reader<'_>,
    last: &mut Option<LastStats>,
) -> Result<Arc<RequestStats>, ProtoError> {
    if let Some(last) = last.as_ref()
        && r.buf == last.bytes.as_slice()
    {
        r.buf = &[];
        return Ok(Arc::clone(&last.stats));
    }
    let from = r.buf;
    let mut stats = Arc::new(RequestStats::default());
    // A fresh pointer is never shared, so this borrows without copying.
    crate::proto::stats_wire::get_stats_into(r, Arc::make_mut(&mut stats))?;
    let read = &from[..from.len() - r.buf.len()];
    match last {
        Some(last) => {
            last.bytes.clear();
            last.bytes.extend_from_slice(read);
            last.stats = Arc::clone(&stats);
        }
        None => {
            *last = Some(LastStats {
                bytes: read.to_vec(),
                stats: Arc::clone(&stats),
            })
        }
    }
    Ok(stats)
}

/// The first parts of a split lock list, waiting for the last.
#[derive(Debug)]
struct PartialLocks {
    id: u64,
    locks: Vec<DavLockInfo>,
    frames: usize,
}

/// Incremental frame decoder: push bytes as they arrive, pull whole messages out.
///
/// After the first error the decoder stays failed: a stream that lost framing cannot be
/// trusted again, and the worker is replaced.
#[derive(Debug)]
pub struct FrameDecoder {
    // Visible to the codec tests, which look at how much is buffered.
    pub(super) buf: Vec<u8>,
    start: usize,
    max_frame: usize,
    failed: Option<ProtoError>,
    /// A lock list being joined from its frames (parent → worker only).
    partial: Option<PartialLocks>,
    /// The last heartbeat's counters (worker → parent only).
    last_stats: Option<LastStats>,
}

impl FrameDecoder {
    pub fn new(max_frame: usize) -> Self {
        FrameDecoder {
            buf: Vec::new(),
            start: 0,
            max_frame,
            failed: None,
            partial: None,
            last_stats: None,
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
        let Some((a, b)) = self.next_payload()? else {
            return Ok(None);
        };
        match decode_worker(&self.buf[a..b], &mut self.last_stats) {
            Ok(m) => Ok(Some(m)),
            Err(e) => {
                self.failed = Some(e.clone());
                Err(e)
            }
        }
    }

    /// The next whole message the parent sent, if one has fully arrived. A lock list the
    /// parent split over frames comes out as the one reply it is, once its last frame is
    /// in.
    pub fn next_parent_message(&mut self) -> Result<Option<ParentMessage>, ProtoError> {
        while let Some(frame) = self.decode_with(decode_parent)? {
            match self.join(frame) {
                Ok(Some(msg)) => return Ok(Some(msg)),
                Ok(None) => {}
                Err(e) => {
                    self.partial = None;
                    self.failed = Some(e.clone());
                    return Err(e);
                }
            }
        }
        Ok(None)
    }

    /// Fold one parent frame into the message being joined: the parts of a lock list
    /// follow each other, for one request, and end with its `Locks` reply.
    fn join(&mut self, frame: ParentFrame) -> Result<Option<ParentMessage>, ProtoError> {
        match (self.partial.take(), frame) {
            (None, ParentFrame::Whole(msg)) => Ok(Some(msg)),
            (None, ParentFrame::LocksPart { id, locks }) => {
                self.partial = Some(PartialLocks {
                    id,
                    locks,
                    frames: 1,
                });
                Ok(None)
            }
            (Some(mut partial), ParentFrame::LocksPart { id, locks }) if partial.id == id => {
                partial.frames += 1;
                // The last part is one more frame.
                if partial.frames >= MAX_FRAMES_PER_MESSAGE {
                    return Err(ProtoError::TooManyFrames(MAX_FRAMES_PER_MESSAGE));
                }
                partial.locks.extend(locks);
                self.partial = Some(partial);
                Ok(None)
            }
            (
                Some(mut partial),
                ParentFrame::Whole(ParentMessage::Broker {
                    id,
                    reply: BrokerReply::Locks(last),
                }),
            ) if partial.id == id => {
                partial.locks.extend(last);
                Ok(Some(ParentMessage::Broker {
                    id,
                    reply: BrokerReply::Locks(partial.locks),
                }))
            }
            (Some(_), _) => Err(ProtoError::UnfinishedMessage),
        }
    }
}
