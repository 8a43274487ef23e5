//! The two halves of a TFTP transfer as pure machines: [`Sender`] (a read: we send the
//! file) and [`Receiver`] (a write: we take one). Time comes in with every call and
//! actions come out; the driver moves bytes and holds the socket.
//!
//! Blocks are counted from 1 with a `u64` index; the wire carries its low 16 bits, so a
//! transfer longer than 65,535 blocks rolls the block number over to 0, as the common
//! clients (tftp-hpa, atftp, curl) expect. With RFC 7440 windows the sender sends up to
//! `windowsize` blocks before waiting; an ACK names the last block received in order and
//! the window restarts after it. An ACK that acknowledges nothing new (a duplicate) is
//! ignored rather than answered, which is what keeps a delayed duplicate from doubling
//! the traffic for the rest of the transfer (the "Sorcerer's Apprentice" bug of RFC 1350).

use core::time::Duration;

use super::options::Negotiated;
use super::window::{PACE_GAP, Pacing};
use crate::time::Instant;

/// What the driver sends next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Out {
    /// The OACK negotiation produced (the driver holds its bytes).
    Oack,
    /// DATA `block` with the file's bytes `[offset, offset + len)`.
    Data {
        block: u16,
        offset: u64,
        len: usize,
    },
    Ack {
        block: u16,
    },
}

/// Where a transfer stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Running,
    /// Every byte is acknowledged (read) or received (write).
    Complete,
    /// The peer stayed silent through every retransmission.
    TimedOut,
    /// The peer broke the protocol or a limit; the transfer ended with an ERROR.
    Aborted,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Retry {
    timeout: Duration,
    max_retries: u32,
    retries: u32,
    deadline: Instant,
}

impl Retry {
    fn new(now: Instant, timeout: Duration, max_retries: u32) -> Self {
        Retry {
            timeout,
            max_retries,
            retries: 0,
            deadline: now + timeout,
        }
    }

    /// Progress: the peer answered.
    fn progressed(&mut self, now: Instant) {
        self.retries = 0;
        self.deadline = now + self.timeout;
    }

    /// The deadline passed: `true` to retransmit, `false` to give up.
    fn expired(&mut self, now: Instant) -> bool {
        self.retries += 1;
        self.deadline = now + self.timeout;
        self.retries <= self.max_retries
    }
}

/// A read: the file goes out in blocks of `blksize`, a window at a time, each window in
/// bursts that back off on timeouts (see [`super::window`]).
#[derive(Debug, Clone)]
pub struct Sender {
    blksize: u64,
    pacing: Pacing,
    /// The highest block sent so far: an ACK up to it is progress.
    sent: u64,
    /// The last block of the window being sent.
    window_end: u64,
    /// When the window's next burst goes out (`None`: the window is all out), and its
    /// first block.
    next_burst_at: Option<Instant>,
    next_block: u64,
    size: u64,
    /// The index of the final block: the first one shorter than `blksize` (possibly empty).
    last: u64,
    /// An OACK is out and its ACK (block 0) has not come.
    oack_pending: bool,
    /// The highest block the client acknowledged in order (0: none).
    acked: u64,
    retry: Retry,
    status: Status,
}

impl Sender {
    /// Starts a read of `size` bytes; with `oack`, negotiation is answered first.
    pub fn start(
        now: Instant,
        params: Negotiated,
        size: u64,
        oack: bool,
        max_retries: u32,
    ) -> (Self, Vec<Out>) {
        let blksize = u64::from(params.blksize.max(1));
        let mut sender = Sender {
            blksize,
            pacing: Pacing::new(u64::from(params.windowsize)),
            sent: 0,
            window_end: 0,
            next_burst_at: None,
            next_block: 1,
            size,
            last: size / blksize + 1,
            oack_pending: oack,
            acked: 0,
            retry: Retry::new(now, params.timeout, max_retries),
            status: Status::Running,
        };
        let out = sender.window_out(now);
        (sender, out)
    }

    pub fn status(&self) -> Status {
        self.status
    }

    /// The retransmission deadline, or the next burst's time when that comes first.
    pub fn deadline(&self) -> Option<Instant> {
        (self.status == Status::Running).then(|| match self.next_burst_at {
            Some(at) => at.min(self.retry.deadline),
            None => self.retry.deadline,
        })
    }

    /// Blocks sent back to back now (see [`super::window`]).
    pub fn burst(&self) -> u64 {
        self.pacing.burst()
    }

    /// Blocks acknowledged so far.
    pub fn acked(&self) -> u64 {
        self.acked
    }

    /// Starts the window after what was acknowledged: its first burst.
    fn window_out(&mut self, now: Instant) -> Vec<Out> {
        if self.oack_pending {
            return vec![Out::Oack];
        }
        self.window_end = (self.acked + self.pacing.window()).min(self.last);
        self.burst_out(now, self.acked + 1)
    }

    /// Blocks `first..` of the window, one burst of them; the next burst is due after a
    /// pause if the window is not all out.
    fn burst_out(&mut self, now: Instant, first: u64) -> Vec<Out> {
        let end = (first + self.pacing.burst() - 1).min(self.window_end);
        self.sent = self.sent.max(end);
        self.next_block = end + 1;
        self.next_burst_at = (end < self.window_end).then(|| now + PACE_GAP);
        (first..=end)
            .map(|index| {
                let offset = (index - 1) * self.blksize;
                let len = self.size.saturating_sub(offset).min(self.blksize) as usize;
                Out::Data {
                    block: index as u16,
                    offset,
                    len,
                }
            })
            .collect()
    }

    pub fn on_ack(&mut self, now: Instant, block: u16) -> Vec<Out> {
        if self.status != Status::Running {
            return Vec::new();
        }
        if self.oack_pending {
            if block != 0 {
                return Vec::new();
            }
            self.oack_pending = false;
        } else {
            // Which outstanding block this names: the one whose low 16 bits match, at most
            // as far ahead of what was acknowledged as what was sent.
            let ahead = u64::from(block.wrapping_sub(self.acked as u16));
            if ahead == 0 || ahead > self.sent - self.acked {
                return Vec::new();
            }
            self.acked += ahead;
            if self.acked == self.window_end {
                self.pacing.acknowledged_whole();
            }
        }
        self.retry.progressed(now);
        if self.acked == self.last {
            self.status = Status::Complete;
            self.next_burst_at = None;
            return Vec::new();
        }
        self.window_out(now)
    }

    /// A deadline passed: the window's next burst is due, or, with no progress by the
    /// retransmission deadline, the window goes out again in smaller bursts (or the
    /// transfer gives up).
    pub fn on_timeout(&mut self, now: Instant) -> Vec<Out> {
        if self.status != Status::Running {
            return Vec::new();
        }
        if now < self.retry.deadline {
            return match self.next_burst_at {
                Some(at) if now >= at => self.burst_out(now, self.next_block),
                _ => Vec::new(),
            };
        }
        if !self.retry.expired(now) {
            self.status = Status::TimedOut;
            self.next_burst_at = None;
            return Vec::new();
        }
        if !self.oack_pending {
            self.pacing.timed_out();
        }
        self.window_out(now)
    }
}

/// What the driver does with a DATA packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// Write `len` bytes at `offset`, then send `ack` (if any).
    Write {
        offset: u64,
        len: usize,
        ack: Option<u16>,
    },
    /// Nothing to write; send `ack` (if any): a duplicate or a block out of order.
    Skip { ack: Option<u16> },
    /// The transfer would exceed the size limit: refuse it.
    TooLarge,
    /// A DATA larger than the negotiated block size.
    Illegal,
}

/// A write: the file comes in.
#[derive(Debug, Clone)]
pub struct Receiver {
    blksize: u64,
    window: u64,
    max_size: u64,
    /// The last block received in order (0: none).
    received: u64,
    bytes: u64,
    since_ack: u64,
    /// Nothing received yet and the OACK is what the client waits on.
    oack_pending: bool,
    retry: Retry,
    status: Status,
}

impl Receiver {
    pub fn start(
        now: Instant,
        params: Negotiated,
        oack: bool,
        max_retries: u32,
        max_size: u64,
    ) -> (Self, Out) {
        let receiver = Receiver {
            blksize: u64::from(params.blksize.max(1)),
            window: u64::from(params.windowsize.max(1)),
            max_size,
            received: 0,
            bytes: 0,
            since_ack: 0,
            oack_pending: oack,
            retry: Retry::new(now, params.timeout, max_retries),
            status: Status::Running,
        };
        let first = if oack {
            Out::Oack
        } else {
            Out::Ack { block: 0 }
        };
        (receiver, first)
    }

    pub fn status(&self) -> Status {
        self.status
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The negotiated retransmission timeout.
    pub fn timeout(&self) -> Duration {
        self.retry.timeout
    }

    /// While running: the retransmission deadline. Once complete: none (the driver
    /// lingers one timeout to re-acknowledge a repeated final block, on its own clock).
    pub fn deadline(&self) -> Option<Instant> {
        (self.status == Status::Running).then_some(self.retry.deadline)
    }

    pub fn on_data(&mut self, now: Instant, block: u16, len: usize) -> Received {
        let len64 = len as u64;
        if len64 > self.blksize {
            self.status = Status::Aborted;
            return Received::Illegal;
        }
        let expected = (self.received + 1) as u16;
        if self.status != Status::Running || block != expected {
            // A repeat or a gap: say where we are, so the sender resumes from there.
            return Received::Skip {
                ack: Some(self.received as u16),
            };
        }
        if self.bytes + len64 > self.max_size {
            self.status = Status::Aborted;
            return Received::TooLarge;
        }
        let offset = self.bytes;
        self.oack_pending = false;
        self.received += 1;
        self.bytes += len64;
        self.since_ack += 1;
        self.retry.progressed(now);
        let last = len64 < self.blksize;
        if last {
            self.status = Status::Complete;
        }
        let ack = (last || self.since_ack >= self.window).then(|| {
            self.since_ack = 0;
            block
        });
        Received::Write { offset, len, ack }
    }

    pub fn on_timeout(&mut self, now: Instant) -> Option<Out> {
        if self.status != Status::Running || now < self.retry.deadline {
            return None;
        }
        if !self.retry.expired(now) {
            self.status = Status::TimedOut;
            return None;
        }
        self.since_ack = 0;
        Some(if self.oack_pending {
            Out::Oack
        } else {
            Out::Ack {
                block: self.received as u16,
            }
        })
    }
}

#[cfg(test)]
#[path = "transfer_tests.rs"]
mod tests;
