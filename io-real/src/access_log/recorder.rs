//! A worker's side of the access log: each request's line goes into a buffer, and one
//! task sends the buffer to the parent's queue as one record (whole lines) when it holds
//! [`FLUSH_AT`] bytes or every [`FLUSH_EVERY`], and once more when the worker drains. One
//! batch is in flight at a time. A batch lost with its worker (`kill -9`) is lost whole:
//! the parent never sees half of one.
//!
//! Bounded: past [`MAX_BUFFERED`] unsent bytes, `--access-log-overflow block` makes the
//! request wait for room (back-pressure), and `drop` drops the line and counts it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use servery_core::config::LogPolicy;
use servery_core::proto::{BrokerReply, BrokerRequest};
use tokio::sync::Notify;

use super::format::{Format, Record};
use crate::http::meter::RequestMeter;
use crate::worker::broker::BrokerHandle;

/// A batch goes when it holds this much (what nginx buffers too): under load every batch
/// is full, so the parent is woken once per ~400 lines rather than per request.
pub const FLUSH_AT: usize = 64 * 1024;
/// ... or this long after its first line.
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);
/// Unsent lines a worker holds at most.
pub const MAX_BUFFERED: usize = 1024 * 1024;

/// The access-log side of one worker.
#[derive(Debug)]
pub struct Recorder {
    format: Format,
    policy: LogPolicy,
    pub worker: u64,
    pub generation: u64,
    buffer: Mutex<String>,
    /// Rung when a batch is due, and when room frees up.
    due: Notify,
    room: Notify,
    broker: BrokerHandle,
    dropped: AtomicU64,
    /// The worker's scoreboard, where each line produced or dropped is counted too: the
    /// parent compares those counts with what reached it when the worker is gone, so the
    /// lines that died with it are counted (decision 0083).
    meter: Arc<RequestMeter>,
}

impl Recorder {
    pub fn new(
        format: Format,
        policy: LogPolicy,
        worker: u64,
        generation: u64,
        broker: BrokerHandle,
        meter: Arc<RequestMeter>,
    ) -> Recorder {
        Recorder {
            format,
            policy,
            worker,
            generation,
            buffer: Mutex::new(String::new()),
            due: Notify::new(),
            room: Notify::new(),
            broker,
            dropped: AtomicU64::new(0),
            meter,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, String> {
        self.buffer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds one request's line if there is room (the usual case, and no waiting);
    /// `false` when the buffer is full and the caller must [`Recorder::record`].
    pub fn try_record(&self, record: &Record<'_>) -> bool {
        let mut buffer = self.lock();
        if buffer.len() >= MAX_BUFFERED {
            return false;
        }
        record.write(self.format, &mut buffer);
        // Under the lock: no batch can take the line before it is counted.
        self.meter.log_line_produced();
        if buffer.len() >= FLUSH_AT {
            self.due.notify_one();
        }
        true
    }

    /// Adds one request's line, waiting for room (`block`) or dropping it (`drop`).
    pub async fn record(&self, record: &Record<'_>) {
        loop {
            // Registered before the check, so a drain between the two is not missed.
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            {
                let mut buffer = self.lock();
                if buffer.len() < MAX_BUFFERED {
                    record.write(self.format, &mut buffer);
                    self.meter.log_line_produced();
                    if buffer.len() >= FLUSH_AT {
                        self.due.notify_one();
                    }
                    return;
                }
            }
            self.due.notify_one();
            match self.policy {
                LogPolicy::Drop => {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                    self.meter.log_line_dropped();
                    return;
                }
                LogPolicy::Block => room.await,
            }
        }
    }

    /// Sends batches until `stop` resolves, then sends what is left.
    pub async fn run(&self, stop: impl std::future::Future<Output = ()>) {
        tokio::pin!(stop);
        loop {
            let (stopping, full_only) = tokio::select! {
                () = &mut stop => (true, false),
                () = self.due.notified() => (false, true),
                () = tokio::time::sleep(FLUSH_EVERY) => (false, false),
            };
            self.send(full_only).await;
            if stopping {
                self.flush().await;
                return;
            }
        }
    }

    /// Sends everything buffered, as whole-line batches of about [`FLUSH_AT`].
    pub async fn flush(&self) {
        self.send(false).await;
    }

    /// Sends whole-line batches: only full ones when `full_only` (more lines keep coming
    /// while one is in flight; the tick and the stop take the rest).
    async fn send(&self, full_only: bool) {
        let dropped = self.dropped.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            // So the parent's count of dropped lines is the whole count.
            let told = self
                .broker
                .call(BrokerRequest::LogDroppedLocally { lines: dropped })
                .await;
            if told.is_err() {
                self.dropped.fetch_add(dropped, Ordering::Relaxed);
            }
        }
        loop {
            let batch = {
                let mut buffer = self.lock();
                if buffer.is_empty() || (full_only && buffer.len() < FLUSH_AT) {
                    return;
                }
                take_batch(&mut buffer)
            };
            self.room.notify_waiters();
            match self
                .broker
                .call(BrokerRequest::AppendLog { record: batch })
                .await
            {
                Ok(BrokerReply::Logged | BrokerReply::LogDropped) => {}
                Ok(other) => tracing::warn!(?other, "unexpected answer to an access-log batch"),
                // The parent is gone or slow: the batch may be lost; nothing to retry into.
                Err(e) => tracing::warn!(error = %e, "access-log batch not confirmed"),
            }
        }
    }
}

/// Up to [`FLUSH_AT`] bytes of whole lines from the front of `buffer` (one line when a
/// single line is longer).
fn take_batch(buffer: &mut String) -> String {
    if buffer.len() <= FLUSH_AT {
        return std::mem::take(buffer);
    }
    let cut = buffer[..FLUSH_AT]
        .rfind('\n')
        .or_else(|| buffer.find('\n'))
        .map_or(buffer.len(), |i| i + 1);
    let rest = buffer.split_off(cut);
    std::mem::replace(buffer, rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_are_whole_lines() {
        let line = "x".repeat(99) + "\n";
        let mut buffer = line.repeat(400);
        let mut seen = 0;
        while !buffer.is_empty() {
            let batch = take_batch(&mut buffer);
            assert!(batch.len() <= FLUSH_AT && batch.ends_with('\n'));
            seen += batch.matches('\n').count();
        }
        assert_eq!(seen, 400);
        let mut long = "y".repeat(FLUSH_AT * 2) + "\nz\n";
        assert_eq!(take_batch(&mut long).len(), FLUSH_AT * 2 + 1);
        assert_eq!(long, "z\n");
    }
}
