//! SPEC §5's write flow as a pure machine: the order of the steps and what every way out
//! gives back. A driver (io-real against the file system, io-sim against its simulated
//! one) performs each [`WriteAction`] and reports what happened as a [`WriteEvent`]; the
//! machine decides what comes next. So the rules the gates check — nothing is streamed
//! before the reservation and the lease are held, nothing is published without the lease
//! confirmed, every grant goes back and the temporary file goes on every path out —
//! hold in the code both drivers run.
//!
//! 1. resolve the target (the driver, before the flow starts: it needs the key);
//! 2. reserve upload budget (unless the caller holds a reservation for several files),
//!    then take the target lease;
//! 3. look at the target, create a private temporary file, stream into it, make its bytes
//!    durable (fsync);
//! 4. confirm the lease, revalidate and publish atomically (rename), then make the rename
//!    durable (fsync of the directory);
//! 5. release the lease and the reservation; on failure, remove the temporary file too.
//!
//! Storage faults end the write the same way in both drivers (decision 0131): ENOSPC while
//! streaming or syncing is `NoSpace` (507), EIO is `Io` (500), and the temporary file goes.
//! A directory fsync that fails after the rename answers 500 too: the whole file is under
//! its name (its bytes were made durable before the rename, so a crash shows the old file
//! or the whole new one, never part of it), but the rename itself may not survive a crash,
//! and the client must not be told it did. Nothing is undone then: the rename replaced
//! what was there, and an undo would need the same directory fsync that just failed.

use std::collections::VecDeque;

use crate::ids::LeaseId;
use crate::proto::Rejection;

/// What the target's name holds now (never following a symlink).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    Nothing,
    File,
    Directory,
}

/// Why a write did not happen, as far as the flow is concerned; the driver keeps the
/// detail (an errno, a body error) for its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WriteFailure {
    /// A budget or table is full.
    Saturated,
    /// The write can never fit the budget.
    TooLarge,
    /// Another writer holds the target.
    Busy,
    /// The broker did not answer (timeout, parent gone): fail closed.
    BrokerUnavailable,
    /// A grant expired or was revoked under the write.
    LeaseLost,
    /// The target exists and replacing is not allowed.
    Exists,
    /// The client asked for creation only and the target exists.
    PreconditionFailed,
    /// The target is a directory.
    IsDirectory,
    /// What the operation works on does not exist (a tree operation's source).
    NotFound,
    /// The write would break a WebDAV lock whose token was not submitted.
    Locked,
    /// The content could not be had (client gone, body too large or stalled).
    Source,
    /// The file system is full (or the quota is).
    NoSpace,
    /// The file system refused otherwise (an I/O error, the directory moved).
    Io,
    /// The worker is going away: stop where the write is.
    Abandoned,
}

impl WriteFailure {
    /// The failure a broker refusal means.
    pub fn of_rejection(r: Rejection) -> WriteFailure {
        match r {
            Rejection::Busy => WriteFailure::Busy,
            Rejection::Saturated => WriteFailure::Saturated,
            Rejection::TooLarge => WriteFailure::TooLarge,
            Rejection::NotFound | Rejection::NotOwner | Rejection::Revoked => {
                WriteFailure::LeaseLost
            }
            Rejection::Locked => WriteFailure::Locked,
        }
    }
}

/// What a published write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    Created,
    Replaced,
}

/// The next thing the driver does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteAction {
    /// Ask the broker for `bytes` of upload budget: [`WriteEvent::Reserved`] or a refusal.
    Reserve { bytes: u64 },
    /// Ask for the target lease: [`WriteEvent::Leased`] or a refusal.
    Lease,
    /// Look at the target: [`WriteEvent::Target`].
    Inspect,
    /// Create the private temporary file: [`WriteEvent::TempCreated`].
    CreateTemp,
    /// Copy the content into it, bounded by the reservation: [`WriteEvent::Streamed`].
    Stream,
    /// Make the temporary file's bytes durable (fsync), so that the name it is renamed to
    /// never shows part of them after a crash: [`WriteEvent::Synced`].
    SyncTemp,
    /// Make sure the lease is still ours (renew it if its time is running out):
    /// [`WriteEvent::Leased`] again, or a refusal.
    ConfirmLease,
    /// Revalidate containment and rename into place: [`WriteEvent::Published`].
    Publish { overwrite: bool },
    /// Make the rename durable (fsync of the target's directory): [`WriteEvent::Synced`].
    SyncDirectory,
    /// Remove the temporary file. Nothing to report.
    RemoveTemp,
    /// Give the target lease back. Nothing to report.
    ReleaseLease(LeaseId),
    /// Give the upload reservation back. Nothing to report.
    ReleaseReservation(LeaseId),
    /// The write is over; answer the client. The last action.
    Finish(Result<Published, WriteFailure>),
}

/// What happened to the last action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteEvent {
    Reserved(LeaseId),
    Leased(LeaseId),
    Refused(Rejection),
    /// The broker did not answer.
    NoAnswer,
    Target(Existing),
    TempCreated,
    Streamed,
    /// The fsync asked for (of the temporary file, or of the directory) succeeded.
    Synced,
    Published {
        replaced: bool,
    },
    Failed(WriteFailure),
}

/// How this write goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOptions {
    /// Reserve this much first; `None` when the caller already holds a reservation (the
    /// files of one multipart form share one).
    pub reserve: Option<u64>,
    /// Replacing an existing file is allowed (`--allow-overwrite`).
    pub overwrite: bool,
    /// Create only (`If-None-Match: *`, a LOCK of an unmapped URL).
    pub create_only: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Reserving,
    Leasing,
    Inspecting,
    Creating,
    Streaming,
    SyncingTemp,
    Confirming,
    Publishing,
    SyncingDirectory,
    Done,
}

/// One write.
#[derive(Debug, Clone)]
pub struct WriteFlow {
    options: WriteOptions,
    stage: Stage,
    reservation: Option<LeaseId>,
    lease: Option<LeaseId>,
    temp: bool,
    /// What the rename did, answered once it is durable.
    published: Option<Published>,
    actions: VecDeque<WriteAction>,
}

impl WriteFlow {
    pub fn new(options: WriteOptions) -> WriteFlow {
        let (stage, first) = match options.reserve {
            Some(bytes) => (Stage::Reserving, WriteAction::Reserve { bytes }),
            None => (Stage::Leasing, WriteAction::Lease),
        };
        WriteFlow {
            options,
            stage,
            reservation: None,
            lease: None,
            temp: false,
            published: None,
            actions: VecDeque::from([first]),
        }
    }

    /// The next action; `None` while one that reports back is outstanding, and after
    /// [`WriteAction::Finish`].
    pub fn next_action(&mut self) -> Option<WriteAction> {
        self.actions.pop_front()
    }

    /// The broker's grant of what the flow asked for last, as the event it means: the
    /// reservation while reserving, the lease otherwise. Drivers need not remember which.
    pub fn granted(&self, id: LeaseId) -> WriteEvent {
        match self.stage {
            Stage::Reserving => WriteEvent::Reserved(id),
            _ => WriteEvent::Leased(id),
        }
    }

    /// The target lease the flow holds, if any.
    pub fn lease(&self) -> Option<LeaseId> {
        self.lease
    }

    /// Whether the write is over (its `Finish` has been queued).
    pub fn is_done(&self) -> bool {
        self.stage == Stage::Done
    }

    /// What the last reporting action did.
    pub fn handle(&mut self, event: WriteEvent) {
        use WriteEvent as E;
        if self.stage == Stage::Done {
            return;
        }
        match (self.stage, event) {
            (Stage::Reserving, E::Reserved(id)) => {
                self.reservation = Some(id);
                self.go(Stage::Leasing, WriteAction::Lease);
            }
            (Stage::Leasing, E::Leased(id)) => {
                self.lease = Some(id);
                self.go(Stage::Inspecting, WriteAction::Inspect);
            }
            (Stage::Inspecting, E::Target(existing)) => match existing {
                Existing::Directory => self.fail(WriteFailure::IsDirectory),
                Existing::File if self.options.create_only => {
                    self.fail(WriteFailure::PreconditionFailed)
                }
                Existing::File if !self.options.overwrite => self.fail(WriteFailure::Exists),
                _ => self.go(Stage::Creating, WriteAction::CreateTemp),
            },
            (Stage::Creating, E::TempCreated) => {
                self.temp = true;
                self.go(Stage::Streaming, WriteAction::Stream);
            }
            (Stage::Streaming, E::Streamed) => self.go(Stage::SyncingTemp, WriteAction::SyncTemp),
            (Stage::SyncingTemp, E::Synced) => {
                self.go(Stage::Confirming, WriteAction::ConfirmLease)
            }
            (Stage::Confirming, E::Leased(id)) if Some(id) == self.lease => {
                let overwrite = self.options.overwrite && !self.options.create_only;
                self.go(Stage::Publishing, WriteAction::Publish { overwrite });
            }
            (Stage::Publishing, E::Published { replaced }) => {
                // Renamed into place: the temporary name is gone.
                self.temp = false;
                self.published = Some(if replaced {
                    Published::Replaced
                } else {
                    Published::Created
                });
                self.go(Stage::SyncingDirectory, WriteAction::SyncDirectory);
            }
            (Stage::SyncingDirectory, E::Synced) => match self.published.take() {
                Some(published) => self.finish(Ok(published)),
                None => self.fail(WriteFailure::Io),
            },
            // A failed directory fsync (below, through `fail`) finds no temporary file to
            // remove: the whole file stays under its name, and the answer says the write
            // is not known to be durable.
            (_, E::Refused(r)) => self.fail(WriteFailure::of_rejection(r)),
            (_, E::NoAnswer) => self.fail(WriteFailure::BrokerUnavailable),
            (_, E::Failed(f)) => self.fail(f),
            // An answer to a question not asked is a driver bug: stop safely.
            (_, _) => self.fail(WriteFailure::Io),
        }
    }

    fn go(&mut self, stage: Stage, action: WriteAction) {
        self.stage = stage;
        self.actions.push_back(action);
    }

    fn fail(&mut self, failure: WriteFailure) {
        if self.temp {
            self.temp = false;
            self.actions.push_back(WriteAction::RemoveTemp);
        }
        self.finish(Err(failure));
    }

    /// Step 5: every grant back, then the answer.
    fn finish(&mut self, result: Result<Published, WriteFailure>) {
        if let Some(id) = self.lease.take() {
            self.actions.push_back(WriteAction::ReleaseLease(id));
        }
        if let Some(id) = self.reservation.take() {
            self.actions.push_back(WriteAction::ReleaseReservation(id));
        }
        self.stage = Stage::Done;
        self.actions.push_back(WriteAction::Finish(result));
    }
}

#[cfg(test)]
#[path = "write_flow_tests.rs"]
mod tests;
