//! The control channels between the simulated parent and its workers: latency, FIFO
//! order, short writes in pieces, and a write that fails.

use super::*;

impl SimWorld {
    pub(super) fn send_down(&mut self, worker: WorkerId, message: &ParentMessage) {
        let lat = self.latency();
        let Some(p) = self.procs.get_mut(&worker) else {
            return;
        };
        if !p.alive || p.parent_closed || p.channel_broken {
            return;
        }
        if p.write_fails {
            // EPIPE: the channel is broken both ways. The driver reports it as the
            // channel's end, as the real one does, and the worker reads EOF.
            p.write_fails = false;
            p.channel_broken = true;
            p.misbehaved(FaultKind::ControlWriteFails);
            let at = (self.now + lat).max(p.down_clock);
            p.down_clock = at;
            self.write_failed.insert(worker);
            self.injected(FaultKind::ControlWriteFails, Some(worker));
            self.out
                .write_failures
                .push((worker.0, self.now.as_nanos() / 1_000_000));
            if matches!(message, ParentMessage::Broker { .. }) {
                self.out
                    .coverage
                    .insert(labels::WRITE_FAILED_ON_BROKER_REPLY);
            }
            self.trace
                .record(&[self.now.as_nanos(), 101, worker.0], || {
                    format!("{} write to {worker} failed: EPIPE", self.now)
                });
            self.inbox.push_back(Event::ChannelClosed { worker });
            self.schedule_at(at, SimEvent::ToWorkerEof { worker });
            return;
        }
        let mut bytes = Vec::with_capacity(FRAME_CAPACITY);
        if let Err(e) = encode_parent(message, &mut bytes) {
            // The core promises every message it sends fits the channel's frames.
            return self.violation(format!(
                "the parent cannot frame a message to {worker}: {e}"
            ));
        }
        let after = p.down_clock;
        let at = self.down_arrival(lat, after);
        if let Some(p) = self.procs.get_mut(&worker) {
            p.down_clock = at;
        }
        if self.short_write_now(&bytes) {
            let last = self.write_in_pieces(at, bytes, |bytes, piece| SimEvent::ToWorker {
                worker,
                bytes,
                piece,
            });
            if let Some(p) = self.procs.get_mut(&worker) {
                p.down_clock = last;
            }
            return;
        }
        self.schedule_at(
            at,
            SimEvent::ToWorker {
                worker,
                bytes,
                piece: false,
            },
        );
    }

    /// Whether this write is short (BUGGIFY: half the writes while the fault lasts).
    pub(super) fn short_write_now(&mut self, bytes: &[u8]) -> bool {
        self.now < self.short_writes_until && bytes.len() > 1 && self.rng.chance(0.5)
    }

    /// A write the kernel takes in two or three parts: each piece arrives on its own, up
    /// to 5 ms after the one before. Returns when the last piece arrives.
    pub(super) fn write_in_pieces(
        &mut self,
        at: Instant,
        bytes: Vec<u8>,
        event: impl Fn(Vec<u8>, bool) -> SimEvent,
    ) -> Instant {
        let len = bytes.len() as u64;
        let mut cuts: Vec<u64> = (0..self.rng.range(1, 2))
            .map(|_| self.rng.range(1, len - 1))
            .collect();
        cuts.sort_unstable();
        cuts.dedup();
        cuts.push(len);
        self.out.short_writes += 1;
        let mut t = at;
        let mut start = 0;
        for cut in cuts {
            let last = cut == len;
            self.schedule_at(
                t,
                event(bytes[start as usize..cut as usize].to_vec(), !last),
            );
            if !last {
                t = t + Duration::from_micros(self.rng.range(0, 5000));
            }
            start = cut;
        }
        t
    }

    /// The process ends (crash, kill, or its own exit).
    pub(crate) fn process_died(&mut self, worker: WorkerId, status: ExitStatus) {
        let lat = self.latency();
        self.paused_worker_died(worker);
        let Some(p) = self.procs.get_mut(&worker) else {
            return;
        };
        if !p.alive {
            return;
        }
        p.alive = false;
        p.accepting = false;
        self.takers.changed();
        self.quic_sockets.died(worker);
        if p.prepared_arrives > self.now {
            self.out
                .coverage
                .insert(labels::DIED_WITH_PREPARED_IN_FLIGHT);
        }
        if p.ready_arrives > self.now {
            self.out.coverage.insert(labels::DIED_WITH_READY_IN_FLIGHT);
        }
        let cause = p.cause;
        let conns = p.serving.take_all();
        p.uploads.clear();
        let lost_logs = p.log_backlog.len() as u64;
        p.log_backlog.clear();
        let after = p.up_clock;
        let eof_at = self.up_arrival(worker, lat, after);
        if let Some(p) = self.procs.get_mut(&worker) {
            p.up_clock = eof_at;
        }
        self.out.log.lost_with_worker += lost_logs;
        let mut dav_lost = Vec::new();
        let mut tree_lost = Vec::new();
        let mut chunks_lost = Vec::new();
        for (_, kind) in conns {
            match (kind, cause) {
                (ConnKind::Get { .. } | ConnKind::Proxy { .. }, Some(_)) => {
                    self.out.requests.failed_fault += 1
                }
                (ConnKind::Get { .. } | ConnKind::Proxy { .. }, None) => {
                    self.out.requests.failed_forced += 1
                }
                (ConnKind::Upload { .. }, Some(_)) => self.out.uploads.failed_fault += 1,
                (ConnKind::Upload { .. }, None) => self.out.uploads.failed_forced += 1,
                (ConnKind::DavTree { rec }, cause) => {
                    tree_lost.push(rec);
                    match cause {
                        Some(_) => self.out.requests.failed_fault += 1,
                        None => self.out.requests.failed_forced += 1,
                    }
                }
                (ConnKind::Chunk { rec }, cause) => {
                    chunks_lost.push(rec);
                    match cause {
                        Some(_) => self.out.requests.failed_fault += 1,
                        None => self.out.requests.failed_forced += 1,
                    }
                }
                (ConnKind::Dav { rec }, cause) => {
                    dav_lost.push(rec);
                    match cause {
                        Some(_) => self.out.requests.failed_fault += 1,
                        None => self.out.requests.failed_forced += 1,
                    }
                }
            }
            if let Some(cause) = cause {
                *self.out.failed_by_cause.entry(cause).or_default() += 1;
            }
            if let ConnKind::Upload {
                target, arrived_ms, ..
            } = kind
            {
                self.out.upload_log.push(UploadRecord {
                    target,
                    started_ms: arrived_ms,
                    ended_ms: self.now.as_nanos() / 1_000_000,
                    end: UploadEnd::Lost,
                });
            }
        }
        for (&target, _) in self.holders.iter().filter(|(_, (w, _))| *w == worker) {
            self.dead_holders.push((worker, target, false));
        }
        self.holders.retain(|_, (w, _)| *w != worker);
        if self.dav.is_some() {
            self.dav_lost(worker, dav_lost);
        }
        if self.dav_tree.is_some() {
            self.dav_tree_lost(worker, tree_lost);
        }
        if self.chunks.is_some() {
            self.chunks_lost(worker, chunks_lost);
        }
        if self.proxy.is_some() {
            self.proxy_worker_died(worker);
        }
        self.out.last_process_exit_ms = self.now.as_nanos() / 1_000_000;
        let code = match status {
            ExitStatus::Code(c) => c as u64,
            ExitStatus::Signal(s) => 1000 + s as u64,
        };
        self.trace
            .record(&[self.now.as_nanos(), 100, worker.0, code], || {
                format!("{} {worker} died: {status}", self.now)
            });
        if self.parent_alive {
            self.schedule_at(eof_at, SimEvent::ToParentEof { worker });
            let gap = Duration::from_micros(self.rng.range(50, 2000));
            let reap = self.reap_arrival(worker, eof_at, gap);
            self.schedule_at(reap, SimEvent::Reaped { worker, status });
        }
        self.dispatch();
    }
}
