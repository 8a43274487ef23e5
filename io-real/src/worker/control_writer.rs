//! The worker's side of writing to the control channel. A frame is written by whoever sends
//! it, at once, when nothing is queued ahead of it and the socket takes it; only what the
//! socket cannot take now is queued, for a flusher task that waits for the socket.
//!
//! Why not a writer task fed by a channel: a frame sent that way reaches the socket only
//! when the runtime next runs that task — after, say, the HTTP response that the frame's
//! sender returned next. A lease or reservation released when an upload finishes must be
//! on its way to the parent before the client can read "201 Created" and start the next
//! upload through another worker; and a broker request should not wait a scheduler turn
//! (`docs/benchmarks.md`, "Broker").

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::Notify;

#[derive(Debug)]
pub(super) struct ControlWriter {
    half: OwnedWriteHalf,
    backlog: Mutex<Backlog>,
    /// Something was queued: the flusher has work.
    queued: Notify,
    /// The backlog emptied (or the channel closed): [`ControlWriter::flushed`] may return.
    drained: Notify,
}

#[derive(Debug, Default)]
struct Backlog {
    frames: VecDeque<Vec<u8>>,
    /// Bytes of the front frame already written.
    written: usize,
    closed: bool,
}

impl ControlWriter {
    /// The writer, and the flusher task's future (spawn it on the worker's runtime).
    pub(super) fn new(
        half: OwnedWriteHalf,
    ) -> (Arc<Self>, impl Future<Output = ()> + Send + 'static) {
        let writer = Arc::new(ControlWriter {
            half,
            backlog: Mutex::new(Backlog::default()),
            queued: Notify::new(),
            drained: Notify::new(),
        });
        let flusher = Arc::clone(&writer).flush_queued();
        (writer, flusher)
    }

    fn lock(&self) -> MutexGuard<'_, Backlog> {
        // The backlog is consistent at every point a panic could leave it.
        self.backlog
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Writes `frame` now if nothing is ahead of it, else queues it behind the rest.
    /// Never blocks; after the channel has failed, frames are dropped (the parent is gone
    /// or will read EOF).
    pub(super) fn send(&self, frame: Vec<u8>) {
        let mut backlog = self.lock();
        if backlog.closed {
            return;
        }
        if backlog.frames.is_empty() {
            match write_now(&self.half, &frame) {
                Ok(n) if n == frame.len() => return,
                Ok(n) => backlog.written = n,
                Err(_) => {
                    drop(backlog);
                    return self.close();
                }
            }
        }
        backlog.frames.push_back(frame);
        drop(backlog);
        self.queued.notify_one();
    }

    /// Resolves once every frame sent before the call is in the socket (or the channel
    /// has failed).
    pub(super) async fn flushed(&self) {
        loop {
            let drained = self.drained.notified();
            {
                let backlog = self.lock();
                if backlog.frames.is_empty() || backlog.closed {
                    return;
                }
            }
            drained.await;
        }
    }

    async fn flush_queued(self: Arc<Self>) {
        loop {
            self.queued.notified().await;
            loop {
                if self.half.writable().await.is_err() {
                    self.close();
                    return;
                }
                let mut backlog = self.lock();
                match write_backlog(&self.half, &mut backlog) {
                    Ok(true) => {
                        drop(backlog);
                        self.drained.notify_waiters();
                        break;
                    }
                    Ok(false) => {}
                    Err(_) => {
                        drop(backlog);
                        return self.close();
                    }
                }
            }
        }
    }

    /// The channel failed: drop what is queued and every later frame, release waiters.
    fn close(&self) {
        let mut backlog = self.lock();
        backlog.closed = true;
        backlog.frames.clear();
        drop(backlog);
        self.drained.notify_waiters();
    }
}

/// Bytes of `frame` the socket took now (0 if it would block).
fn write_now(half: &OwnedWriteHalf, frame: &[u8]) -> io::Result<usize> {
    let mut written = 0;
    while written < frame.len() {
        match half.try_write(&frame[written..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => written += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(written)
}

/// Writes queued frames until the socket would block; `Ok(true)` when none are left.
fn write_backlog(half: &OwnedWriteHalf, backlog: &mut Backlog) -> io::Result<bool> {
    while let Some(front) = backlog.frames.front() {
        let n = write_now(half, &front[backlog.written..])?;
        backlog.written += n;
        if backlog.written < front.len() {
            return Ok(false);
        }
        backlog.frames.pop_front();
        backlog.written = 0;
    }
    Ok(true)
}
