//! One chunk of a resumable upload (`PUT` with `Content-Range`) as a pure machine: SPEC
//! §5's steps with a partial file in place of the temporary one. The driver (io-real
//! against the file system) performs each [`ChunkAction`] and reports what happened as a
//! [`ChunkEvent`]; the machine decides the order and what every way out gives back, so
//! a worker killed between any two steps leaves what the tests in `chunk_flow_tests.rs`
//! check: held bytes that are a prefix of the upload, a partial that can be resumed, a
//! published file that is whole, and nothing held in the broker once the parent has
//! reaped the worker.
//!
//! 1. reserve the chunk's bytes, then take the target lease;
//! 2. look at the target, then at what is held for it, discarding a stale partial;
//! 3. take the broker's partial reservation for the target (adopt it, take it over from
//!    an idle live owner, or reserve it again) and record it in the meta file;
//! 4. append the new bytes at the held length, make them durable;
//! 5. with the last byte: confirm the lease, publish the partial file, make the rename
//!    durable (fsync of the directory), remove the partial's files; otherwise keep the
//!    partial reservation for the next chunk;
//! 6. release the lease and the reservation, then answer.
//!
//! Storage faults (decision 0131): ENOSPC part-way through the append keeps the bytes
//! that reached the file, made durable, and resumable (507); an fsync of the appended
//! bytes that fails discards the partial's files, since bytes the disk may not hold are
//! nothing to resume from (507 or 500, and the client starts again from byte 0); an fsync
//! of the directory that fails after the publishing rename answers 500 with the whole file
//! under its name, as a whole-file write does.

use std::collections::VecDeque;

use crate::ids::LeaseId;
use crate::proto::Rejection;
use crate::write_flow::{Existing, Published, WriteFailure};

/// The chunk and how it may be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkOptions {
    /// First byte of this chunk (inclusive).
    pub start: u64,
    /// Last byte of this chunk (inclusive), below `total`.
    pub end: u64,
    /// The whole upload's length.
    pub total: u64,
    /// Replacing an existing file is allowed (`--allow-overwrite`).
    pub overwrite: bool,
    /// Create only (`If-None-Match: *`).
    pub create_only: bool,
}

/// What the meta file next to the partial file records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded {
    /// The total length the upload was started with.
    pub total: u64,
    /// The broker's partial reservation last recorded (`None`: unreadable).
    pub grant: Option<LeaseId>,
}

/// What is held for the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Held {
    pub meta: Option<Recorded>,
    /// The partial file exists (a regular file).
    pub data: bool,
    /// Bytes in the partial file.
    pub have: u64,
    /// Untouched for longer than `partial_ttl`, or not a file we can trust.
    pub expired: bool,
}

/// What one chunk achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkDone {
    /// More is needed; `have` bytes are held.
    Incomplete { have: u64 },
    /// The last byte arrived and the file is published.
    Complete(Published),
}

/// Why a chunk was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkFailure {
    /// The upload held for the target has another total.
    RangeMismatch {
        total: u64,
        held: u64,
    },
    /// The chunk starts past the bytes held.
    RangeGap {
        start: u64,
        have: u64,
    },
    Write(WriteFailure),
}

pub type ChunkAnswer = Result<ChunkDone, ChunkFailure>;

/// The next thing the driver does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkAction {
    /// Reserve the chunk's bytes: [`ChunkEvent::Granted`] or a refusal.
    Reserve { bytes: u64 },
    /// Take the target lease: [`ChunkEvent::Granted`] or a refusal.
    Lease,
    /// Look at the target: [`ChunkEvent::Target`].
    InspectTarget,
    /// Look at the partial and meta files: [`ChunkEvent::Held`].
    InspectPartial,
    /// Remove an abandoned partial's files: [`ChunkEvent::Discarded`].
    DiscardStale,
    /// Ask for the target's partial reservation: adopt the existing one, or reserve
    /// `total` bytes anew. [`ChunkEvent::Granted`], or `Refused(Busy)` (a live worker owns
    /// it), or `Refused(NotFound)` (the broker has forgotten it).
    TakePartial { adopt: bool },
    /// Release the partial reservation recorded in the meta file, owned by a live worker
    /// idle on it (we hold the lease): any worker may. Nothing to report.
    TakeOver(LeaseId),
    /// Write the meta file naming this reservation: [`ChunkEvent::Recorded`].
    Record(LeaseId),
    /// Open the partial file (creating it) with exactly `at` bytes: [`ChunkEvent::Opened`].
    OpenAt { at: u64 },
    /// Append the chunk past the held bytes, dropping its first `skip` bytes (already
    /// held): [`ChunkEvent::Copied`].
    Copy { skip: u64 },
    /// Make the appended bytes durable: [`ChunkEvent::Synced`].
    Sync,
    /// Make sure the lease is still ours: [`ChunkEvent::Granted`] with it, or a refusal.
    ConfirmLease,
    /// Revalidate and rename the partial file into place: [`ChunkEvent::Published`].
    Publish { overwrite: bool },
    /// Make the rename durable (fsync of the target's directory): [`ChunkEvent::Synced`].
    SyncDirectory,
    /// Remove the partial's files: [`ChunkEvent::Removed`].
    RemovePartial,
    /// Leave the partial reservation in the broker for the next chunk. Nothing to report.
    KeepPartial(LeaseId),
    /// Give the partial reservation back. Nothing to report.
    ReleasePartial(LeaseId),
    /// Give the target lease back. Nothing to report.
    ReleaseLease(LeaseId),
    /// Give the chunk's reservation back. Nothing to report.
    ReleaseReservation(LeaseId),
    /// Answer the client. The last action.
    Finish(ChunkAnswer),
}

/// What happened to the last action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkEvent {
    /// What was asked of the broker is granted.
    Granted(LeaseId),
    Refused(Rejection),
    /// The broker did not answer.
    NoAnswer,
    Target(Existing),
    Held(Held),
    Discarded,
    Recorded,
    Opened,
    /// `written` bytes reached the file (also when the copy stopped early); `file`: the
    /// file is still usable (no write to it failed).
    Copied {
        written: u64,
        file: bool,
        result: Result<(), WriteFailure>,
    },
    Synced,
    Published {
        replaced: bool,
    },
    Removed,
    Failed(WriteFailure),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Reserving,
    Leasing,
    InspectingTarget,
    InspectingPartial,
    Discarding,
    Adopting,
    ReservingPartial,
    Recording,
    Opening,
    Copying,
    Syncing,
    Confirming,
    Reopening,
    /// Syncing the whole file before its publishing rename (its bytes may come from a
    /// chunk whose worker died before its own sync).
    SyncingWhole,
    Publishing,
    SyncingDirectory,
    Removing,
    Done,
}

impl Stage {
    /// Whether a failure here leaves the partial reservation in the broker: the bytes
    /// that reached the file stay resumable. Elsewhere (the meta file or the data file
    /// could not be written or opened) it is given back; the next chunk reserves anew.
    fn keeps_partial(self) -> bool {
        matches!(self, Stage::Copying | Stage::Confirming | Stage::Publishing)
    }
}

/// One chunk.
#[derive(Debug, Clone)]
pub struct ChunkFlow {
    options: ChunkOptions,
    stage: Stage,
    reservation: Option<LeaseId>,
    lease: Option<LeaseId>,
    partial: Option<LeaseId>,
    held: Held,
    /// Bytes held, as far as this chunk knows.
    have: u64,
    /// The copy's own failure, answered once its bytes are synced.
    copy_failure: Option<WriteFailure>,
    /// What publishing answered, for after the partial's files are removed.
    outcome: Option<ChunkAnswer>,
    /// What the publishing rename did, answered once it is durable.
    published: Option<Published>,
    actions: VecDeque<ChunkAction>,
}

impl ChunkFlow {
    pub fn new(options: ChunkOptions) -> ChunkFlow {
        let bytes = options.end.saturating_sub(options.start).saturating_add(1);
        ChunkFlow {
            options,
            stage: Stage::Reserving,
            reservation: None,
            lease: None,
            partial: None,
            held: Held::default(),
            have: 0,
            copy_failure: None,
            outcome: None,
            published: None,
            actions: VecDeque::from([ChunkAction::Reserve { bytes }]),
        }
    }

    /// The next action; `None` while one that reports back is outstanding, and after
    /// [`ChunkAction::Finish`].
    pub fn next_action(&mut self) -> Option<ChunkAction> {
        self.actions.pop_front()
    }

    /// Whether the chunk is over (its `Finish` has been queued).
    pub fn is_done(&self) -> bool {
        self.stage == Stage::Done
    }

    /// What the last reporting action did.
    pub fn handle(&mut self, event: ChunkEvent) {
        use ChunkEvent as E;
        if self.stage == Stage::Done {
            return;
        }
        let o = self.options;
        match (self.stage, event) {
            (Stage::Reserving, E::Granted(id)) => {
                self.reservation = Some(id);
                self.go(Stage::Leasing, ChunkAction::Lease);
            }
            (Stage::Leasing, E::Granted(id)) => {
                self.lease = Some(id);
                self.go(Stage::InspectingTarget, ChunkAction::InspectTarget);
            }
            (Stage::InspectingTarget, E::Target(existing)) => match existing {
                Existing::Directory => self.fail(WriteFailure::IsDirectory),
                Existing::File if o.create_only => self.fail(WriteFailure::PreconditionFailed),
                Existing::File if !o.overwrite => self.fail(WriteFailure::Exists),
                _ => self.go(Stage::InspectingPartial, ChunkAction::InspectPartial),
            },
            (Stage::InspectingPartial, E::Held(held)) => {
                // Bytes without a meta file have no total to check them against. A meta
                // file without bytes holds nothing anyone could resume (a writer killed
                // after recording it and before the first byte, or after publishing and
                // before removing it), so its total binds no one: an upload of another
                // length replaces it rather than waiting out its lifetime.
                let orphan_data = held.data && held.meta.is_none();
                let orphan_meta =
                    !held.data && held.meta.is_some_and(|m| m.total != self.options.total);
                if orphan_data || orphan_meta || held.expired {
                    self.go(Stage::Discarding, ChunkAction::DiscardStale);
                } else {
                    self.held = held;
                    self.check_range();
                }
            }
            (Stage::Discarding, E::Discarded) => {
                self.held = Held::default();
                self.check_range();
            }
            (Stage::Adopting, E::Granted(id)) | (Stage::ReservingPartial, E::Granted(id)) => {
                self.partial = Some(id);
                let recorded = self.held.meta.and_then(|m| m.grant);
                if recorded == Some(id) {
                    self.take_chunk();
                } else {
                    self.go(Stage::Recording, ChunkAction::Record(id));
                }
            }
            (Stage::Adopting, E::Refused(Rejection::Busy)) => {
                // Another live worker owns it and is idle on it: we hold the lease.
                if let Some(id) = self.held.meta.and_then(|m| m.grant) {
                    self.actions.push_back(ChunkAction::TakeOver(id));
                }
                self.go(
                    Stage::ReservingPartial,
                    ChunkAction::TakePartial { adopt: false },
                );
            }
            (
                Stage::Adopting,
                E::Refused(Rejection::NotFound | Rejection::NotOwner | Rejection::Revoked),
            ) => {
                // Forgotten (its TTL passed, or the parent restarted) while the files
                // are fresh: reserve it again.
                self.go(
                    Stage::ReservingPartial,
                    ChunkAction::TakePartial { adopt: false },
                );
            }
            (Stage::Recording, E::Recorded) => self.take_chunk(),
            (Stage::Opening, E::Opened) => self.go(
                Stage::Copying,
                ChunkAction::Copy {
                    skip: self.have - o.start,
                },
            ),
            (
                Stage::Copying,
                E::Copied {
                    written,
                    file,
                    result,
                },
            ) => {
                self.have = self.have.saturating_add(written);
                self.copy_failure = result.err();
                if file {
                    // What is reported as held is on disk first.
                    self.go(Stage::Syncing, ChunkAction::Sync);
                } else {
                    self.copied();
                }
            }
            (Stage::Syncing, E::Synced) => self.copied(),
            (Stage::Syncing | Stage::SyncingWhole, E::Failed(f)) => {
                // The appended bytes may not be on the disk: nothing to resume from.
                self.copy_failure = None;
                self.remove(Err(ChunkFailure::Write(f)));
            }
            (Stage::Confirming, E::Granted(id)) if Some(id) == self.lease => {
                self.go(Stage::Reopening, ChunkAction::OpenAt { at: o.total });
            }
            (Stage::Reopening, E::Opened) => self.go(Stage::SyncingWhole, ChunkAction::Sync),
            (Stage::SyncingWhole, E::Synced) => {
                let overwrite = o.overwrite && !o.create_only;
                self.go(Stage::Publishing, ChunkAction::Publish { overwrite });
            }
            (Stage::Publishing, E::Published { replaced }) => {
                self.published = Some(if replaced {
                    Published::Replaced
                } else {
                    Published::Created
                });
                self.go(Stage::SyncingDirectory, ChunkAction::SyncDirectory);
            }
            (Stage::SyncingDirectory, E::Synced) => match self.published.take() {
                Some(published) => self.remove(Ok(ChunkDone::Complete(published))),
                None => self.remove(Err(ChunkFailure::Write(WriteFailure::Io))),
            },
            (Stage::SyncingDirectory, E::Failed(f)) => {
                // The whole file is under its name, but the rename may not survive a
                // crash: not answered as complete. The meta file goes all the same.
                self.remove(Err(ChunkFailure::Write(f)));
            }
            (
                Stage::Publishing,
                E::Failed(f @ (WriteFailure::Exists | WriteFailure::IsDirectory)),
            ) => {
                // Never publishable: nothing is left to resume.
                self.remove(Err(ChunkFailure::Write(f)));
            }
            (Stage::Removing, E::Removed) => {
                let answer = self
                    .outcome
                    .take()
                    .unwrap_or(Err(ChunkFailure::Write(WriteFailure::Io)));
                self.finish(answer, false);
            }
            (_, E::Refused(r)) => self.fail(WriteFailure::of_rejection(r)),
            (_, E::NoAnswer) => self.fail(WriteFailure::BrokerUnavailable),
            (_, E::Failed(f)) => self.fail(f),
            // An answer to a question not asked is a driver bug: stop safely.
            (_, _) => self.fail(WriteFailure::Io),
        }
    }

    /// What is held decides whether this chunk fits, before the broker is asked for
    /// the partial reservation.
    fn check_range(&mut self) {
        let o = self.options;
        if let Some(meta) = self.held.meta
            && meta.total != o.total
        {
            return self.refuse(ChunkFailure::RangeMismatch {
                total: o.total,
                held: meta.total,
            });
        }
        self.have = self.held.have;
        if o.start > self.have {
            return self.refuse(ChunkFailure::RangeGap {
                start: o.start,
                have: self.have,
            });
        }
        let adopt = self.held.meta.is_some();
        let stage = if adopt {
            Stage::Adopting
        } else {
            Stage::ReservingPartial
        };
        self.go(stage, ChunkAction::TakePartial { adopt });
    }

    /// The partial reservation is ours and recorded: append, unless all of the chunk
    /// is held already (a retransmission), or all of the upload is.
    fn take_chunk(&mut self) {
        if self.have >= self.options.total {
            // Every byte is held already: a worker killed after the last chunk was synced
            // but before it was published, or a publication that failed, left the whole
            // upload. Answering "incomplete" would leave the client nothing it could
            // send (a chunk ends below the total), so it is published now.
            self.go(Stage::Confirming, ChunkAction::ConfirmLease);
        } else if self.options.end < self.have {
            self.finish(Ok(ChunkDone::Incomplete { have: self.have }), true);
        } else {
            self.go(Stage::Opening, ChunkAction::OpenAt { at: self.have });
        }
    }

    /// The copy is over and what it wrote is durable.
    fn copied(&mut self) {
        if let Some(f) = self.copy_failure.take() {
            self.finish(Err(ChunkFailure::Write(f)), true);
        } else if self.have < self.options.total {
            self.finish(Ok(ChunkDone::Incomplete { have: self.have }), true);
        } else {
            // As for a whole file: never publish under a lease that may have lapsed.
            self.go(Stage::Confirming, ChunkAction::ConfirmLease);
        }
    }

    fn remove(&mut self, answer: ChunkAnswer) {
        self.outcome = Some(answer);
        self.go(Stage::Removing, ChunkAction::RemovePartial);
    }

    fn go(&mut self, stage: Stage, action: ChunkAction) {
        self.stage = stage;
        self.actions.push_back(action);
    }

    fn refuse(&mut self, failure: ChunkFailure) {
        self.finish(Err(failure), false);
    }

    fn fail(&mut self, failure: WriteFailure) {
        let keep = self.stage.keeps_partial();
        self.finish(Err(ChunkFailure::Write(failure)), keep);
    }

    /// Every grant back (the partial reservation kept when `keep_partial`), then the
    /// answer.
    fn finish(&mut self, answer: ChunkAnswer, keep_partial: bool) {
        if let Some(id) = self.partial.take() {
            self.actions.push_back(if keep_partial {
                ChunkAction::KeepPartial(id)
            } else {
                ChunkAction::ReleasePartial(id)
            });
        }
        if let Some(id) = self.lease.take() {
            self.actions.push_back(ChunkAction::ReleaseLease(id));
        }
        if let Some(id) = self.reservation.take() {
            self.actions.push_back(ChunkAction::ReleaseReservation(id));
        }
        self.stage = Stage::Done;
        self.actions.push_back(ChunkAction::Finish(answer));
    }
}

#[cfg(test)]
#[path = "chunk_flow_tests.rs"]
mod tests;
