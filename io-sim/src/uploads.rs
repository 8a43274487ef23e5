//! Uploads in a simulated worker: the core's write flow (reservation, target lease, temp
//! file, rename) carried out against the simulated file system and the broker, with the
//! write-flow oracle (who holds each target) checked at every step.

use core::time::Duration;

use servery_core::WorkerId;
use servery_core::proto::{BrokerReply, BrokerRequest, DavWriteCheck, Rejection};
use servery_core::write_flow::{
    Existing, WriteAction, WriteEvent, WriteFailure, WriteFlow, WriteOptions,
};

use crate::labels;
use crate::outcome::{UploadEnd, UploadRecord};
use crate::process::{Waiting, key};
use crate::world::{SimEvent, SimWorld};

/// An upload in a simulated worker: the core's write flow, driven against the simulated
/// file system and the broker (the same machine io-real drives), and what this driver
/// needs to carry its actions out.
#[derive(Debug, Clone)]
pub(crate) struct Upload {
    target: u8,
    writer: u64,
    arrived_ms: u64,
    flow: WriteFlow,
    temp: Option<u64>,
    chunks_left: u64,
    /// A WebDAV PUT's write: its record in the DAV log, and the lock check its lease
    /// request carries (`DavWriteLease`, as the real worker's).
    dav: Option<(usize, DavWriteCheck)>,
    /// The lease request is the one awaiting an answer.
    leasing: bool,
    /// The fsync of the directory after the publishing rename failed: the answer must
    /// say so.
    dir_sync_failed: bool,
}

impl SimWorld {
    /// The write flow on `conn`: reservation, target lease, temp file, rename. `dav`: a
    /// WebDAV PUT (its record in the DAV log), whose lock check goes with its lease
    /// request.
    pub(crate) fn start_upload(
        &mut self,
        worker: WorkerId,
        conn: u64,
        target: u8,
        writer: u64,
        arrived_ms: u64,
        dav: Option<(usize, DavWriteCheck)>,
    ) {
        let bytes = self.spec.workload.upload_chunks * 4;
        let Some(p) = self.procs.get_mut(&worker) else {
            return;
        };
        p.uploads.insert(
            conn,
            Upload {
                target,
                writer,
                arrived_ms,
                flow: WriteFlow::new(WriteOptions {
                    reserve: Some(bytes),
                    overwrite: true,
                    create_only: false,
                }),
                temp: None,
                chunks_left: 0,
                dav,
                leasing: false,
                dir_sync_failed: false,
            },
        );
        self.drive_upload(worker, conn);
    }

    pub(crate) fn upload_reply(&mut self, worker: WorkerId, conn: u64, reply: Option<BrokerReply>) {
        let Some(u) = self.upload_mut(worker, conn) else {
            return;
        };
        if core::mem::take(&mut u.leasing)
            && let Some((rec, _)) = u.dav
        {
            self.dav_lease_answered(rec, reply.as_ref());
        }
        let Some(u) = self.upload_mut(worker, conn) else {
            return;
        };
        let event = match reply {
            None => WriteEvent::NoAnswer,
            Some(BrokerReply::Granted { id, .. }) => u.flow.granted(id),
            Some(BrokerReply::Rejected(r)) => WriteEvent::Refused(r),
            Some(_) => WriteEvent::Refused(Rejection::Saturated),
        };
        u.flow.handle(event);
        self.drive_upload(worker, conn);
    }

    fn upload_mut(&mut self, worker: WorkerId, conn: u64) -> Option<&mut Upload> {
        self.procs
            .get_mut(&worker)
            .and_then(|p| p.uploads.get_mut(&conn))
    }

    /// Carries out what the upload's write flow asks, until it waits for the broker or
    /// for the next chunk, or ends.
    fn drive_upload(&mut self, worker: WorkerId, conn: u64) {
        let now = self.now;
        loop {
            let Some(p) = self.procs.get_mut(&worker) else {
                return;
            };
            let Some(u) = p.uploads.get_mut(&conn) else {
                return;
            };
            let Some(action) = u.flow.next_action() else {
                return;
            };
            let event = match action {
                WriteAction::Reserve { bytes } => {
                    match p
                        .client
                        .request(now, BrokerRequest::ReserveUpload { bytes })
                    {
                        Ok(id) => {
                            p.waiting.insert(id, Waiting::Upload(conn));
                            self.pump(worker);
                            return;
                        }
                        Err(_) => WriteEvent::Refused(Rejection::Saturated),
                    }
                }
                WriteAction::Lease => {
                    let key = key(u.target);
                    let request = match &u.dav {
                        Some((_, check)) => BrokerRequest::DavWriteLease {
                            key,
                            check: Box::new(check.clone()),
                        },
                        None => BrokerRequest::AcquireLease { key },
                    };
                    match p.client.request(p.clock.own(now), request) {
                        Ok(rid) => {
                            u.leasing = true;
                            p.waiting.insert(rid, Waiting::Upload(conn));
                            if let Some((rec, _)) = u.dav {
                                self.dav_lease_asked(rec);
                            }
                            self.pump(worker);
                            return;
                        }
                        Err(_) => WriteEvent::Refused(Rejection::Saturated),
                    }
                }
                WriteAction::Inspect => {
                    WriteEvent::Target(if self.fs.files.contains_key(&u.target) {
                        Existing::File
                    } else {
                        Existing::Nothing
                    })
                }
                WriteAction::CreateTemp => {
                    u.chunks_left = self.spec.workload.upload_chunks;
                    let (target, writer) = (u.target, u.writer);
                    u.temp = Some(self.fs.create_temp(worker, target, writer));
                    if let Some(&(other, _)) = self.holders.get(&target)
                        && (other != worker || self.procs.get(&other).is_some_and(|o| o.alive))
                    {
                        self.violation(format!(
                            "{worker} leased target {target} while {other} holds it"
                        ));
                    }
                    self.holders.insert(target, (worker, conn));
                    self.last_holder = Some(worker);
                    WriteEvent::TempCreated
                }
                WriteAction::Stream => {
                    let (lo, hi) = self.spec.workload.chunk_ms;
                    let d = Duration::from_micros(self.rng.range(lo * 1000, hi * 1000));
                    self.schedule_in(d, SimEvent::UploadStep { worker, conn });
                    return;
                }
                WriteAction::SyncTemp => {
                    if self.now < self.fsync_fails_until {
                        // fsync(2) of the temp file: EIO.
                        WriteEvent::Failed(WriteFailure::Io)
                    } else {
                        if let Some(temp) = u.temp {
                            self.fs.sync_temp(temp);
                        }
                        WriteEvent::Synced
                    }
                }
                WriteAction::SyncDirectory => {
                    let target = u.target;
                    if self.power_lost(worker, target).is_some() {
                        return;
                    }
                    if self.now < self.dir_sync_fails_until {
                        // fsync(2) of the directory after the rename: EIO. The whole file
                        // is in place; its rename may not survive a crash.
                        self.out.unsynced_renames += 1;
                        if let Some(u) = self.upload_mut(worker, conn) {
                            u.dir_sync_failed = true;
                        }
                        WriteEvent::Failed(WriteFailure::Io)
                    } else {
                        self.fs.sync_dir(target);
                        WriteEvent::Synced
                    }
                }
                // The simulated lease has no renewal to make: it is the one granted.
                WriteAction::ConfirmLease => match u.flow.lease() {
                    Some(id) => WriteEvent::Leased(id),
                    None => WriteEvent::Refused(Rejection::NotFound),
                },
                WriteAction::Publish { .. } => {
                    let (target, temp) = (u.target, u.temp);
                    // Publish under the lease: the oracle must agree that we hold it.
                    if self.holders.get(&target).map(|h| h.0) != Some(worker) {
                        self.violation(format!(
                            "{worker} publishes target {target} without holding it"
                        ));
                    }
                    if self.now < self.rename_fails_until {
                        // rename(2) fails (EIO): the target keeps what it had, the temp file
                        // is still ours to remove (500).
                        WriteEvent::Failed(WriteFailure::Io)
                    } else {
                        let replaced = self.fs.files.contains_key(&target);
                        if let Some(temp) = temp
                            && !self.fs.temp_synced(temp)
                        {
                            self.violation(format!(
                                "torn-rename rule: {worker} renamed its upload into target \
                                 {target} before its bytes were made durable (a crash before \
                                 the directory's fsync could show part of it)"
                            ));
                        }
                        if let Some(temp) = temp {
                            self.fs.rename(temp);
                        }
                        if let Some(u) = self
                            .procs
                            .get_mut(&worker)
                            .and_then(|p| p.uploads.get_mut(&conn))
                        {
                            u.temp = None;
                        }
                        WriteEvent::Published { replaced }
                    }
                }
                WriteAction::RemoveTemp => {
                    if let Some(temp) = u.temp.take() {
                        self.fs.remove_temp(temp);
                    }
                    continue;
                }
                WriteAction::ReleaseLease(id) => {
                    let target = u.target;
                    if self
                        .holders
                        .get(&target)
                        .is_some_and(|h| h.0 == worker && h.1 == conn)
                    {
                        self.holders.remove(&target);
                    }
                    p.client
                        .release(p.clock.own(now), BrokerRequest::ReleaseLease { id });
                    continue;
                }
                WriteAction::ReleaseReservation(id) => {
                    p.client
                        .release(now, BrokerRequest::ReleaseReservation { id });
                    continue;
                }
                WriteAction::Finish(Err(WriteFailure::Locked)) if u.dav.is_some() => {
                    // A WebDAV PUT the broker refused for a lock: the worker names the
                    // locks of its 423 (`crate::dav`).
                    if let Some((rec, _)) = p.uploads.remove(&conn).and_then(|u| u.dav) {
                        self.dav_write_locked(worker, conn, rec);
                    }
                    return;
                }
                WriteAction::Finish(result) => {
                    let (dir_sync_failed, target) = (u.dir_sync_failed, u.target);
                    if dir_sync_failed {
                        if result.is_ok() {
                            self.violation(format!(
                                "directory-fsync rule: {worker}'s write to target {target} was \
                                 answered a success though the fsync of its directory after \
                                 the rename failed (the rename may not survive a crash)"
                            ));
                        } else {
                            self.out.coverage.insert(labels::DIR_SYNC_FAILED_ANSWERED);
                        }
                    }
                    let end = match result {
                        Ok(_) => UploadEnd::Ok,
                        Err(WriteFailure::Busy) => UploadEnd::Conflict,
                        Err(WriteFailure::BrokerUnavailable | WriteFailure::Abandoned) => {
                            UploadEnd::FailedClosed
                        }
                        Err(WriteFailure::NoSpace) => UploadEnd::NoSpace,
                        Err(WriteFailure::Io) => UploadEnd::IoError,
                        Err(_) => UploadEnd::Saturated,
                    };
                    self.finish_upload(worker, conn, end);
                    return;
                }
            };
            if let Some(u) = self
                .procs
                .get_mut(&worker)
                .and_then(|p| p.uploads.get_mut(&conn))
            {
                u.flow.handle(event);
            }
        }
    }

    pub(crate) fn upload_step(&mut self, worker: WorkerId, conn: u64) {
        let Some(p) = self.procs.get_mut(&worker) else {
            return;
        };
        if !p.runnable() || p.wedged {
            return;
        }
        let Some(u) = p.uploads.get_mut(&conn) else {
            return;
        };
        let Some(temp) = u.temp else {
            return;
        };
        if u.chunks_left == 0 {
            let target = u.target;
            let before = self.fs.files.get(&target).cloned();
            let fsync_fails = self.now < self.fsync_fails_until;
            u.flow.handle(WriteEvent::Streamed);
            self.drive_upload(worker, conn);
            // A failed fsync or rename published nothing and left no temporary file.
            let untouched =
                !self.fs.has_temp(temp) && self.fs.files.get(&target) == before.as_ref();
            if fsync_fails {
                if untouched {
                    self.out.coverage.insert(labels::FSYNC_FAILED_CLEANED);
                } else {
                    self.violation(format!(
                        "fsync rule: {worker}'s upload to target {target} failed its fsync, yet its temp file is still there or the target changed (a write that is not on disk publishes nothing and leaves nothing)"
                    ));
                }
            } else if untouched && self.now < self.rename_fails_until {
                self.out.coverage.insert(labels::RENAME_FAILED_CLEANED);
            }
            return;
        }
        if self.now < self.disk_full_until {
            // write(2) on the temp file: ENOSPC. The upload ends (507) and its temp file
            // goes with it.
            u.flow.handle(WriteEvent::Failed(WriteFailure::NoSpace));
            self.drive_upload(worker, conn);
            if !self.fs.has_temp(temp) {
                self.out.coverage.insert(labels::UPLOAD_ENOSPC_CLEANED);
            }
            return;
        }
        u.chunks_left -= 1;
        let chunk = [(u.writer % 251) as u8; 4];
        self.fs.append(temp, &chunk);
        let (lo, hi) = self.spec.workload.chunk_ms;
        let d = Duration::from_micros(self.rng.range(lo * 1000, hi * 1000));
        self.schedule_in(d, SimEvent::UploadStep { worker, conn });
    }

    /// The worker is going away (or its parent is): the write stops where it is, and the
    /// flow gives back what it holds.
    pub(crate) fn abort_upload(&mut self, worker: WorkerId, conn: u64) {
        let Some(u) = self
            .procs
            .get_mut(&worker)
            .and_then(|p| p.uploads.get_mut(&conn))
        else {
            return;
        };
        u.flow.handle(WriteEvent::Failed(WriteFailure::Abandoned));
        self.drive_upload(worker, conn);
    }

    /// Release what the upload held (in `finally`), answer the client, close the conn.
    fn finish_upload(&mut self, worker: WorkerId, conn: u64, end: UploadEnd) {
        let now = self.now;
        let Some(p) = self.procs.get_mut(&worker) else {
            return;
        };
        let Some(u) = p.uploads.remove(&conn) else {
            return;
        };
        // The flow gave back the lease and the reservation before its Finish.
        // Replies to releases need no one waiting; the client drops them.
        let (_, had_no_room) = p.unserve(conn);
        p.life.connection_closed(p.clock.own(now));
        if had_no_room {
            self.takers.changed();
        }
        if self.waited_emfile.remove(&conn) && end == UploadEnd::Ok {
            self.out.coverage.insert(labels::BACKLOG_WAITED_OUT_EMFILE);
        }
        if let Some((rec, _)) = u.dav {
            // A WebDAV PUT: its own log, not the uploads'.
            self.dav_write_ended(rec, end);
            self.pump(worker);
            self.dispatch();
            return;
        }
        match end {
            UploadEnd::Ok => {
                self.out.uploads.ok += 1;
                self.out
                    .upload_oks
                    .push((u.target, now.as_nanos() / 1_000_000));
            }
            UploadEnd::NoSpace => self.out.uploads.no_space += 1,
            UploadEnd::IoError => self.out.uploads.io_error += 1,
            UploadEnd::Conflict => self.out.uploads.conflict += 1,
            UploadEnd::Saturated => self.out.uploads.saturated += 1,
            UploadEnd::FailedClosed => self.out.uploads.failed_closed += 1,
            UploadEnd::Lost => {}
        }
        self.out.upload_log.push(UploadRecord {
            target: u.target,
            started_ms: u.arrived_ms,
            ended_ms: now.as_nanos() / 1_000_000,
            end,
        });
        self.pump(worker);
        self.dispatch();
    }
}
