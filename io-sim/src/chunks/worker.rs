//! The worker's side of a resumable upload: one chunk is the core's chunk flow driven
//! against the simulated file system and the broker, as `io-real/src/write/chunk_run.rs`
//! drives it against the real ones — each action carried out, what happened reported
//! back — with the plan's kill before a chosen step. A query (`bytes */total`) is
//! answered from the files alone, as `write::partial::held` answers it.
//!
//! Differences from the real driver, and why they do not matter here: a lease the broker
//! refuses (`Busy`) is answered at once instead of retried for the write-lock timeout
//! (there is one client, which sends its next request); a lease is confirmed without a
//! renewal, as the simulated upload does (chunks take milliseconds, leases seconds); a
//! chunk's bytes arrive in one piece after the copy time, or half of them before a kill
//! the plan puts inside the copy; the meta file's temp is written and renamed in one step
//! unless the plan kills the worker between the two.

use core::time::Duration;

use servery_core::chunk_flow::{ChunkAction, ChunkEvent, ChunkFlow, ChunkOptions, Held, Recorded};
use servery_core::proto::{BrokerReply, BrokerRequest, Rejection};
use servery_core::write_flow::{Existing, WriteFailure};
use servery_core::{LeaseId, WorkerId};

use super::{ChunkEnd, ChunkRequest, ChunkStep, TARGET, target_key};
use crate::fs::PartialFiles;
use crate::plan::FaultKind;
use crate::process::Waiting;
use crate::world::{SimEvent, SimWorld};

/// A chunk a worker is carrying out.
#[derive(Debug)]
pub(crate) struct ChunkRun {
    rec: usize,
    flow: ChunkFlow,
    /// Actions taken so far, by step.
    taken: [u32; ChunkStep::ALL.len()],
    /// The broker request the flow waits on (its step), if any.
    awaiting: Option<ChunkStep>,
    adopting: bool,
    lease: Option<LeaseId>,
    /// The chunk's bytes on their way to the partial file.
    arriving: Option<Vec<u8>>,
    /// The storage fault this chunk met (ENOSPC in the append, a failed fsync of the
    /// appended bytes or of the directory), judged at its answer.
    storage_fault: Option<StorageFault>,
}

/// A storage fault a chunk met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StorageFault {
    NoSpace,
    Sync,
    DirectorySync,
}

impl SimWorld {
    /// `worker` took the connection of chunk request `rec`.
    pub(crate) fn chunk_accept(&mut self, worker: WorkerId, conn: u64, rec: usize) {
        let Some(r) = self.out.chunks.requests.get_mut(rec) else {
            return;
        };
        r.worker = Some(worker.0);
        let request = r.request;
        let Some(c) = self.chunks.as_mut() else {
            return;
        };
        let total = c.content.len() as u64;
        let (start, end) = match request {
            ChunkRequest::Query => {
                let have = self.chunk_held(total);
                return self.chunk_answer(worker, conn, rec, ChunkEnd::Held(have));
            }
            ChunkRequest::Chunk { start, end } => (start, end),
        };
        let flow = ChunkFlow::new(ChunkOptions {
            start,
            end,
            total,
            overwrite: true,
            create_only: false,
        });
        c.serving.insert(
            (worker, conn),
            ChunkRun {
                rec,
                flow,
                taken: [0; ChunkStep::ALL.len()],
                awaiting: None,
                adopting: false,
                lease: None,
                arriving: None,
                storage_fault: None,
            },
        );
        self.chunk_drive(worker, conn);
    }

    /// `bytes */total`: what is held, if it is fresh and for this total (else 0).
    fn chunk_held(&self, total: u64) -> u64 {
        let Some(c) = self.chunks.as_ref() else {
            return 0;
        };
        match self.fs.partials.get(&TARGET) {
            Some(p) if p.age_at(self.now) <= c.ttl && p.meta.is_some_and(|m| m.total == total) => {
                p.data.as_ref().map_or(0, |d| d.len() as u64)
            }
            _ => 0,
        }
    }

    /// The broker's answer to a request of `worker`'s chunk on `conn`.
    pub(crate) fn chunk_reply(&mut self, worker: WorkerId, conn: u64, reply: Option<BrokerReply>) {
        let Some(run) = self
            .chunks
            .as_mut()
            .and_then(|c| c.serving.get_mut(&(worker, conn)))
        else {
            return;
        };
        let step = run.awaiting.take();
        if step == Some(ChunkStep::ReleaseLease) {
            // The release is confirmed: the flow goes on to its next give-back.
            return self.chunk_drive(worker, conn);
        }
        let take_partial = step == Some(ChunkStep::TakePartial);
        let event = match reply {
            None => ChunkEvent::NoAnswer,
            Some(BrokerReply::Granted { id, .. }) => {
                if step == Some(ChunkStep::Lease) {
                    run.lease = Some(id);
                }
                ChunkEvent::Granted(id)
            }
            // As `Grant::partial`: busy is the flow's to handle, a forgotten reservation
            // is one to reserve again, anything else fails the chunk.
            Some(BrokerReply::Rejected(Rejection::Busy)) if take_partial => {
                ChunkEvent::Refused(Rejection::Busy)
            }
            Some(BrokerReply::Rejected(Rejection::NotFound)) if take_partial && run.adopting => {
                ChunkEvent::Refused(Rejection::NotFound)
            }
            Some(BrokerReply::Rejected(r)) if take_partial => {
                ChunkEvent::Failed(WriteFailure::of_rejection(r))
            }
            Some(BrokerReply::Rejected(r)) => ChunkEvent::Refused(r),
            Some(_) => ChunkEvent::Refused(Rejection::Saturated),
        };
        run.flow.handle(event);
        self.chunk_drive(worker, conn);
    }

    /// Sends `request` for the chunk on `conn` and waits for its answer; `false` when
    /// the client refused it (the flow hears `Saturated`).
    fn chunk_ask(
        &mut self,
        worker: WorkerId,
        conn: u64,
        step: ChunkStep,
        request: BrokerRequest,
    ) -> bool {
        let now = self.now;
        let Some(p) = self.procs.get_mut(&worker) else {
            return false;
        };
        let Ok(id) = p.client.request(p.clock.own(now), request) else {
            return false;
        };
        p.waiting.insert(id, Waiting::Chunk(conn));
        if let Some(run) = self
            .chunks
            .as_mut()
            .and_then(|c| c.serving.get_mut(&(worker, conn)))
        {
            run.awaiting = Some(step);
        }
        self.pump(worker);
        true
    }

    fn chunk_release(&mut self, worker: WorkerId, request: BrokerRequest) {
        let now = self.now;
        if let Some(p) = self.procs.get_mut(&worker) {
            p.client.release(p.clock.own(now), request);
        }
    }

    /// Carries out what the flow asks until it waits for the broker or for the chunk's
    /// bytes, or ends, or the plan kills the worker.
    fn chunk_drive(&mut self, worker: WorkerId, conn: u64) {
        loop {
            let now = self.now;
            let Some(c) = self.chunks.as_mut() else {
                return;
            };
            let total = c.content.len() as u64;
            let Some(run) = c.serving.get_mut(&(worker, conn)) else {
                return;
            };
            let Some(action) = run.flow.next_action() else {
                return;
            };
            let rec = run.rec;
            let step = ChunkStep::of(&action);
            let nth = run.taken[step as usize];
            run.taken[step as usize] += 1;
            let Some(r) = self.out.chunks.requests.get(rec) else {
                return;
            };
            let kill = r.kill_before;
            if kill == Some((step, nth)) {
                return self.chunk_kill(worker, rec, step);
            }
            let ChunkRequest::Chunk { start, end } = r.request else {
                return;
            };
            let key = target_key();
            let event = match action {
                ChunkAction::Reserve { bytes } => {
                    let request = BrokerRequest::ReserveUpload { bytes };
                    if self.chunk_ask(worker, conn, step, request) {
                        return;
                    }
                    ChunkEvent::Refused(Rejection::Saturated)
                }
                ChunkAction::Lease => {
                    if self.chunk_ask(worker, conn, step, BrokerRequest::AcquireLease { key }) {
                        return;
                    }
                    ChunkEvent::Refused(Rejection::Saturated)
                }
                ChunkAction::InspectTarget => {
                    ChunkEvent::Target(if self.fs.files.contains_key(&TARGET) {
                        Existing::File
                    } else {
                        Existing::Nothing
                    })
                }
                ChunkAction::InspectPartial => {
                    let ttl = c.ttl;
                    ChunkEvent::Held(match self.fs.partials.get(&TARGET) {
                        None => Held::default(),
                        Some(p) => Held {
                            meta: p.meta,
                            data: p.data.is_some(),
                            have: p.data.as_ref().map_or(0, |d| d.len() as u64),
                            expired: p.age_at(now) > ttl,
                        },
                    })
                }
                ChunkAction::DiscardStale => {
                    self.fs.partials.remove(&TARGET);
                    self.out
                        .coverage
                        .insert(crate::labels::CHUNK_STALE_DISCARDED);
                    self.chunk_check_files(step, true);
                    ChunkEvent::Discarded
                }
                ChunkAction::TakePartial { adopt } => {
                    run.adopting = adopt;
                    let request = if adopt {
                        BrokerRequest::AdoptPartial { key }
                    } else {
                        BrokerRequest::ReservePartial { key, bytes: total }
                    };
                    if self.chunk_ask(worker, conn, step, request) {
                        return;
                    }
                    ChunkEvent::Refused(Rejection::Saturated)
                }
                ChunkAction::TakeOver(id) => {
                    self.out.coverage.insert(crate::labels::CHUNK_TAKEN_OVER);
                    self.chunk_release(worker, BrokerRequest::ReleasePartial { id });
                    continue;
                }
                ChunkAction::Record(id) => {
                    // Written whole to a private temp file, then renamed over the meta.
                    let temp = self.fs.create_temp(worker, TARGET, 0);
                    if kill == Some((ChunkStep::MidRecord, nth)) {
                        return self.chunk_kill(worker, rec, ChunkStep::MidRecord);
                    }
                    let meta = Recorded {
                        total,
                        grant: Some(id),
                    };
                    if self.fs.rename_meta(temp, TARGET, meta, now) {
                        ChunkEvent::Recorded
                    } else {
                        ChunkEvent::Failed(WriteFailure::Io)
                    }
                }
                ChunkAction::OpenAt { at } => {
                    let p = self.fs.partials.entry(TARGET).or_insert(PartialFiles {
                        meta: None,
                        meta_touched: now,
                        data: None,
                        data_touched: now,
                        data_synced: false,
                    });
                    // As `open_data`: created if missing, cut (or zero-filled) to `at`.
                    let data = p.data.get_or_insert_with(Vec::new);
                    if data.len() != at as usize {
                        data.resize(at as usize, 0);
                        p.data_synced = false;
                    }
                    p.data_touched = now;
                    self.chunk_check_files(step, false);
                    ChunkEvent::Opened
                }
                ChunkAction::Copy { skip } => {
                    let from = (start + skip) as usize;
                    let bytes = c
                        .content
                        .get(from..=end as usize)
                        .map(<[u8]>::to_vec)
                        .unwrap_or_default();
                    let nth = run.taken[ChunkStep::Copy as usize] - 1;
                    if kill == Some((ChunkStep::MidCopy, nth)) {
                        // The worker dies with part of the chunk appended.
                        let part = bytes.len().div_ceil(2);
                        self.chunk_append(&bytes[..part]);
                        self.chunk_check_files(ChunkStep::MidCopy, false);
                        return self.chunk_kill(worker, rec, ChunkStep::MidCopy);
                    }
                    run.arriving = Some(bytes);
                    let (lo, hi) = c.plan.copy_ms;
                    let d = Duration::from_micros(self.rng.range(lo * 1000, hi * 1000));
                    self.schedule_in(d, SimEvent::ChunkCopied { worker, conn });
                    return;
                }
                ChunkAction::Sync if now < self.fsync_fails_until => {
                    // fsync(2) of the partial file: EIO.
                    run.storage_fault = Some(StorageFault::Sync);
                    ChunkEvent::Failed(WriteFailure::Io)
                }
                ChunkAction::Sync => {
                    if let Some(p) = self.fs.partials.get_mut(&TARGET) {
                        p.data_synced = true;
                    }
                    ChunkEvent::Synced
                }
                // The simulated lease has no renewal to make: it is the one granted.
                ChunkAction::ConfirmLease => match run.lease {
                    Some(id) => ChunkEvent::Granted(id),
                    None => ChunkEvent::Refused(Rejection::NotFound),
                },
                ChunkAction::Publish { overwrite } => {
                    let exists = self.fs.files.contains_key(&TARGET);
                    let data = self
                        .fs
                        .partials
                        .get_mut(&TARGET)
                        .and_then(|p| p.data.take());
                    match data {
                        _ if exists && !overwrite => ChunkEvent::Failed(WriteFailure::Exists),
                        None => ChunkEvent::Failed(WriteFailure::Io),
                        Some(data) => {
                            // One rename: the target shows the old file or the new one.
                            let durable =
                                self.fs.partials.get(&TARGET).is_some_and(|p| p.data_synced);
                            if !durable {
                                self.violation(format!(
                                    "torn-rename rule: {worker} renamed the partial file into \
                                     place before its bytes were made durable (a crash before \
                                     the directory's fsync could show part of it)"
                                ));
                            }
                            self.fs.publish(TARGET, 0, data, durable);
                            self.chunk_check_files(step, true);
                            ChunkEvent::Published { replaced: exists }
                        }
                    }
                }
                ChunkAction::SyncDirectory => {
                    let published = self.fs.files.get(&TARGET).map(|(_, b)| b.clone());
                    match self.power_lost(worker, TARGET) {
                        Some(crate::fs::AfterPowerLoss::Undone) => {
                            // The rename is undone: the partial file holds the upload again.
                            let p = self.fs.partials.entry(TARGET).or_insert(PartialFiles {
                                meta: None,
                                meta_touched: now,
                                data: None,
                                data_touched: now,
                                data_synced: true,
                            });
                            p.data = published;
                            // The target went back to what it showed before the rename:
                            // the client sees it there again (no breach: nothing torn).
                            let shown = self.fs.files.get(&TARGET).map(|(_, b)| b.clone());
                            if let Some(c) = self.chunks.as_mut() {
                                c.visible = shown;
                            }
                            self.chunk_check_files(step, false);
                            return;
                        }
                        Some(_) => {
                            self.chunk_check_files(step, false);
                            return;
                        }
                        None => {}
                    }
                    if now < self.dir_sync_fails_until {
                        // fsync(2) of the directory after the rename: EIO.
                        self.out.unsynced_renames += 1;
                        if let Some(run) = self
                            .chunks
                            .as_mut()
                            .and_then(|c| c.serving.get_mut(&(worker, conn)))
                        {
                            run.storage_fault = Some(StorageFault::DirectorySync);
                        }
                        ChunkEvent::Failed(WriteFailure::Io)
                    } else {
                        self.fs.sync_dir(TARGET);
                        ChunkEvent::Synced
                    }
                }
                ChunkAction::RemovePartial => {
                    self.fs.partials.remove(&TARGET);
                    self.chunk_check_files(step, true);
                    ChunkEvent::Removed
                }
                // Stays in the broker, owned by this worker, for the next chunk.
                ChunkAction::KeepPartial(_) => continue,
                ChunkAction::ReleasePartial(id) => {
                    self.chunk_release(worker, BrokerRequest::ReleasePartial { id });
                    continue;
                }
                ChunkAction::ReleaseLease(id) => {
                    // Given back and confirmed before the answer (as the real driver), so
                    // the client's next chunk, through any worker, finds the target free.
                    let request = BrokerRequest::ReleaseLease { id };
                    if self.chunk_ask(worker, conn, step, request.clone()) {
                        return;
                    }
                    self.chunk_release(worker, request);
                    continue;
                }
                ChunkAction::ReleaseReservation(id) => {
                    self.chunk_release(worker, BrokerRequest::ReleaseReservation { id });
                    continue;
                }
                ChunkAction::Finish(answer) => {
                    let fault = run.storage_fault;
                    self.chunk_storage_fault_answered(worker, fault, &answer);
                    let end = match answer {
                        Ok(done) => ChunkEnd::Done(done),
                        Err(f) => ChunkEnd::Failed(f),
                    };
                    return self.chunk_answer(worker, conn, rec, end);
                }
            };
            if let Some(run) = self
                .chunks
                .as_mut()
                .and_then(|c| c.serving.get_mut(&(worker, conn)))
            {
                run.flow.handle(event);
            }
        }
    }

    fn chunk_append(&mut self, bytes: &[u8]) {
        let now = self.now;
        if let Some(p) = self.fs.partials.get_mut(&TARGET)
            && let Some(d) = p.data.as_mut()
        {
            d.extend_from_slice(bytes);
            p.data_touched = now;
            p.data_synced = false;
        }
    }

    /// A chunk that met a storage fault ends the way the core decides: 507 or 500, never
    /// Complete; after a failed fsync of its bytes nothing is left to resume from.
    fn chunk_storage_fault_answered(
        &mut self,
        worker: WorkerId,
        fault: Option<StorageFault>,
        answer: &servery_core::chunk_flow::ChunkAnswer,
    ) {
        use servery_core::chunk_flow::ChunkFailure;
        let Some(fault) = fault else {
            return;
        };
        let want = match fault {
            StorageFault::NoSpace => WriteFailure::NoSpace,
            StorageFault::Sync | StorageFault::DirectorySync => WriteFailure::Io,
        };
        if *answer != Err(ChunkFailure::Write(want)) {
            let rule = match fault {
                StorageFault::NoSpace => "no-space rule: a chunk that met ENOSPC is answered 507",
                StorageFault::Sync => "fsync rule: a chunk whose fsync failed is answered 500",
                StorageFault::DirectorySync => {
                    "directory-fsync rule: a last chunk whose directory fsync failed after the \
                     rename is answered 500, not Complete"
                }
            };
            return self.violation(format!("{rule}; {worker}'s chunk was answered {answer:?}"));
        }
        let held = self
            .fs
            .partials
            .get(&TARGET)
            .is_some_and(|p| p.data.is_some());
        match fault {
            StorageFault::Sync if held => self.violation(format!(
                "chunk-fsync rule: {worker}'s chunk failed its fsync and the partial file \
                 is still held (bytes the disk may not hold would be resumed from)"
            )),
            StorageFault::Sync => {
                self.out
                    .coverage
                    .insert(crate::labels::CHUNK_FSYNC_DISCARDED);
            }
            StorageFault::NoSpace => {
                self.out.coverage.insert(crate::labels::CHUNK_ENOSPC_KEPT);
            }
            StorageFault::DirectorySync => {
                self.out
                    .coverage
                    .insert(crate::labels::DIR_SYNC_FAILED_ANSWERED);
            }
        }
    }

    /// The chunk's bytes have arrived: appended, and the copy reported.
    pub(crate) fn chunk_copied(&mut self, worker: WorkerId, conn: u64) {
        if !self.procs.get(&worker).is_some_and(|p| p.runnable()) {
            return;
        }
        let Some(bytes) = self
            .chunks
            .as_mut()
            .and_then(|c| c.serving.get_mut(&(worker, conn)))
            .and_then(|run| run.arriving.take())
        else {
            return;
        };
        let file = self
            .fs
            .partials
            .get(&TARGET)
            .is_some_and(|p| p.data.is_some());
        // A full file system takes part of the chunk, then refuses the rest (ENOSPC).
        let no_space = file && self.now < self.disk_full_until;
        let bytes = if no_space {
            bytes[..bytes.len() / 2].to_vec()
        } else {
            bytes
        };
        if file {
            self.chunk_append(&bytes);
            self.chunk_check_files(ChunkStep::Copy, false);
        }
        let event = ChunkEvent::Copied {
            written: if file { bytes.len() as u64 } else { 0 },
            file,
            result: if no_space {
                Err(WriteFailure::NoSpace)
            } else if file {
                Ok(())
            } else {
                Err(WriteFailure::Io)
            },
        };
        if no_space
            && let Some(run) = self
                .chunks
                .as_mut()
                .and_then(|c| c.serving.get_mut(&(worker, conn)))
        {
            run.storage_fault = Some(StorageFault::NoSpace);
        }
        if let Some(run) = self
            .chunks
            .as_mut()
            .and_then(|c| c.serving.get_mut(&(worker, conn)))
        {
            run.flow.handle(event);
        }
        self.chunk_drive(worker, conn);
    }

    /// The plan's fault: `kill -9` of the worker at `step`.
    fn chunk_kill(&mut self, worker: WorkerId, rec: usize, step: ChunkStep) {
        if let Some(r) = self.out.chunks.requests.get_mut(rec) {
            r.killed_before = Some(step);
        }
        if let Some(c) = self.chunks.as_mut() {
            c.killed.push(worker);
        }
        self.kill_before_step(worker, step.killed_label(), FaultKind::CrashChunkStep);
    }

    /// Answer the client and close the connection.
    fn chunk_answer(&mut self, worker: WorkerId, conn: u64, rec: usize, end: ChunkEnd) {
        if let Some(c) = self.chunks.as_mut() {
            c.serving.remove(&(worker, conn));
        }
        self.close_served(worker, conn);
        self.chunk_ended(rec, end);
        self.pump(worker);
        self.dispatch();
    }
}
