//! The write flow for WebDAV's tree operations — MKCOL, DELETE, COPY and MOVE of a file or
//! a whole collection — as a pure machine beside [`crate::write_flow`], with its rules:
//! leases before anything is looked at, nothing placed before it is complete and the leases
//! are confirmed, every lease back on every way out. A driver (io-real against the file
//! system, io-sim against its simulated one) performs each [`TreeAction`] and reports a
//! [`TreeEvent`]; the machine decides what comes next.
//!
//! 1. lease the resources the operation changes (source and destination, in the global
//!    order the driver gives, so two opposite MOVEs cannot deadlock);
//! 2. look at both under the leases;
//! 3. build a copy under a private staging name (COPY, and MOVE across file systems), and
//!    make it durable (fsync of every file and directory in it);
//! 4. confirm the leases, move a directory-involved destination away to a private trash
//!    name, then place the result with one rename (a file over a file is replaced by that
//!    rename alone), and make the rename durable (fsync of the destination's directory);
//!    a DELETE renames its resource away to trash;
//! 5. carry the dead properties along, remove the trash, give the leases back.
//!
//! A worker that dies between two steps leaves only private names (staging, trash) behind,
//! which nothing serves and the parent's cleanup of that worker sweeps; its leases die with
//! it in the broker. What a client sees after a crash at each step is listed in the WebDAV
//! guide: never a half-built tree, never the source lost.
//!
//! Storage faults (decision 0131): ENOSPC or EIO while filling or syncing the copy places
//! nothing (507 or 500) and the staging copy goes; a directory fsync that fails after
//! placing answers 500 with the result in place (it is whole: it was made durable before
//! the rename), because the rename may not survive a crash.

use std::collections::VecDeque;

use crate::ids::LeaseId;
use crate::proto::Rejection;
use crate::write_flow::{Existing, WriteFailure};

/// The tree operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TreeOp {
    /// A new empty collection at the destination.
    MakeCollection,
    /// Remove the source (a whole collection at once).
    Delete,
    /// The source copied to the destination; a collection's members too when `infinity`.
    Copy { infinity: bool },
    /// The source renamed to the destination (a copy and a delete across file systems).
    Move,
}

/// Which of the two resources an action is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Source,
    Destination,
}

/// What is renamed into place at the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placing {
    /// A new empty collection (MKCOL).
    NewCollection,
    /// The source itself (MOVE on one file system).
    Source,
    /// The complete staging copy (COPY; MOVE across file systems).
    Staging,
}

/// How this operation goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeOptions {
    pub op: TreeOp,
    /// An existing destination may be replaced (`Overwrite: T` and `--allow-overwrite`).
    pub overwrite: bool,
    /// The source's lease comes before the destination's in the global lease order.
    pub source_first: bool,
}

/// What a finished tree operation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TreeDone {
    Created,
    Replaced,
    Deleted,
}

/// The next thing the driver does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TreeAction {
    /// Lease one side's target key: [`TreeEvent::Leased`] or a refusal.
    Lease(Side),
    /// Look at both sides (`Nothing` for a side the operation has not):
    /// [`TreeEvent::Found`].
    Inspect,
    /// Create the private staging name: the source's kind, empty. [`TreeEvent::Staged`].
    CreateStaging,
    /// Copy the source's content (and members, when `infinity`) into the staging name:
    /// [`TreeEvent::Filled`].
    FillStaging { infinity: bool },
    /// Make the staging copy durable (fsync of each file and directory in it), so that a
    /// crash after it is placed never shows part of it: [`TreeEvent::Synced`].
    SyncStaging,
    /// Make sure every lease is still ours (renewing those whose time runs short):
    /// [`TreeEvent::Confirmed`] or a refusal.
    ConfirmLeases,
    /// Rename the destination away to a private trash name, in one step:
    /// [`TreeEvent::Trashed`].
    TrashDestination,
    /// Rename the source away to a private trash name: [`TreeEvent::Trashed`].
    TrashSource,
    /// Revalidate the destination's directory and rename into place:
    /// [`TreeEvent::Placed`] (or [`TreeEvent::CrossDevice`] for `Placing::Source`).
    Place(Placing),
    /// Make the placing rename durable (fsync of the destination's directory):
    /// [`TreeEvent::Synced`].
    SyncDirectory,
    /// The dead properties follow (copied, moved or removed): [`TreeEvent::PropertiesDone`].
    Properties,
    /// Put the trashed destination back (the operation failed before placing). Nothing to
    /// report.
    Untrash,
    /// Delete what was trashed. Nothing to report.
    RemoveTrash,
    /// Delete the staging name. Nothing to report.
    RemoveStaging,
    /// Give a lease back. Nothing to report.
    ReleaseLease(LeaseId),
    /// The operation is over; answer the client. The last action.
    Finish(Result<TreeDone, WriteFailure>),
}

/// The stable name of each kind of [`TreeAction`], in the flow's order: what logs and
/// test faults call a step.
pub const STEPS: [&str; 16] = [
    "lease",
    "inspect",
    "create-staging",
    "fill-staging",
    "sync-staging",
    "confirm-leases",
    "trash-destination",
    "trash-source",
    "place",
    "sync-directory",
    "properties",
    "untrash",
    "remove-trash",
    "remove-staging",
    "release-lease",
    "finish",
];

impl TreeAction {
    /// This action's step name (one of [`STEPS`]).
    pub fn step(&self) -> &'static str {
        let i = match self {
            TreeAction::Lease(_) => 0,
            TreeAction::Inspect => 1,
            TreeAction::CreateStaging => 2,
            TreeAction::FillStaging { .. } => 3,
            TreeAction::SyncStaging => 4,
            TreeAction::ConfirmLeases => 5,
            TreeAction::TrashDestination => 6,
            TreeAction::TrashSource => 7,
            TreeAction::Place(_) => 8,
            TreeAction::SyncDirectory => 9,
            TreeAction::Properties => 10,
            TreeAction::Untrash => 11,
            TreeAction::RemoveTrash => 12,
            TreeAction::RemoveStaging => 13,
            TreeAction::ReleaseLease(_) => 14,
            TreeAction::Finish(_) => 15,
        };
        STEPS[i]
    }
}

/// What happened to the last action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TreeEvent {
    Leased(LeaseId),
    Refused(Rejection),
    /// The broker did not answer.
    NoAnswer,
    Found {
        source: Existing,
        destination: Existing,
    },
    Staged,
    Filled,
    /// The fsync asked for (of the staging copy, or of the destination's directory)
    /// succeeded.
    Synced,
    Confirmed,
    Trashed,
    Placed,
    /// The rename crosses file systems (EXDEV): copy, then remove the source.
    CrossDevice,
    PropertiesDone,
    Failed(WriteFailure),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Leasing(Side),
    Inspecting,
    Creating,
    Filling,
    SyncingStaging,
    Confirming,
    TrashingDestination,
    Placing(Placing),
    SyncingDirectory,
    TrashingSource,
    Properties,
    Done,
}

/// One tree operation.
#[derive(Debug, Clone)]
pub struct TreeFlow {
    options: TreeOptions,
    stage: Stage,
    /// Sides still to lease, in order.
    to_lease: VecDeque<Side>,
    leases: Vec<LeaseId>,
    source: Existing,
    destination: Existing,
    staging: bool,
    /// The destination sits under a trash name (and comes back on failure).
    trashed_destination: bool,
    /// The source sits under a trash name (it goes: the operation is past its point of
    /// no return).
    trashed_source: bool,
    crossed: bool,
    /// Something was renamed into place at the destination.
    placed: bool,
    actions: VecDeque<TreeAction>,
}

impl TreeFlow {
    pub fn new(options: TreeOptions) -> TreeFlow {
        let sides: &[Side] = match options.op {
            TreeOp::MakeCollection => &[Side::Destination],
            TreeOp::Delete => &[Side::Source],
            TreeOp::Copy { .. } | TreeOp::Move if options.source_first => {
                &[Side::Source, Side::Destination]
            }
            TreeOp::Copy { .. } | TreeOp::Move => &[Side::Destination, Side::Source],
        };
        let mut to_lease: VecDeque<Side> = sides.iter().copied().collect();
        let first = to_lease.pop_front().unwrap_or(Side::Destination);
        TreeFlow {
            options,
            stage: Stage::Leasing(first),
            to_lease,
            leases: Vec::new(),
            source: Existing::Nothing,
            destination: Existing::Nothing,
            staging: false,
            trashed_destination: false,
            trashed_source: false,
            crossed: false,
            placed: false,
            actions: VecDeque::from([TreeAction::Lease(first)]),
        }
    }

    /// The next action; `None` while one that reports back is outstanding, and after
    /// [`TreeAction::Finish`].
    pub fn next_action(&mut self) -> Option<TreeAction> {
        self.actions.pop_front()
    }

    /// The leases the flow holds now.
    pub fn leases(&self) -> &[LeaseId] {
        &self.leases
    }

    /// Whether the operation is over (its `Finish` has been queued).
    pub fn is_done(&self) -> bool {
        self.stage == Stage::Done
    }

    /// What the last reporting action did.
    pub fn handle(&mut self, event: TreeEvent) {
        use TreeEvent as E;
        if self.stage == Stage::Done {
            return;
        }
        match (self.stage, event) {
            (Stage::Leasing(_), E::Leased(id)) => {
                self.leases.push(id);
                match self.to_lease.pop_front() {
                    Some(side) => self.go(Stage::Leasing(side), TreeAction::Lease(side)),
                    None => self.go(Stage::Inspecting, TreeAction::Inspect),
                }
            }
            (
                Stage::Inspecting,
                E::Found {
                    source,
                    destination,
                },
            ) => self.inspected(source, destination),
            (Stage::Creating, E::Staged) => {
                self.staging = true;
                let infinity = !matches!(self.options.op, TreeOp::Copy { infinity: false });
                self.go(Stage::Filling, TreeAction::FillStaging { infinity });
            }
            (Stage::Filling, E::Filled) => self.go(Stage::SyncingStaging, TreeAction::SyncStaging),
            (Stage::SyncingStaging, E::Synced) => {
                self.go(Stage::Confirming, TreeAction::ConfirmLeases)
            }
            (Stage::Confirming, E::Confirmed) => self.confirmed(),
            (Stage::TrashingDestination, E::Trashed) => {
                self.trashed_destination = true;
                self.place();
            }
            (Stage::Placing(placing), E::Placed) => {
                self.placed = true;
                if placing == Placing::Staging {
                    self.staging = false;
                }
                self.go(Stage::SyncingDirectory, TreeAction::SyncDirectory);
            }
            // A failed directory fsync (through `fail` below) leaves what was placed: it
            // is whole, and nothing can be put back durably where the fsync just failed.
            (Stage::SyncingDirectory, E::Synced) => {
                if self.crossed {
                    // The copy is in place; now the source goes.
                    self.go(Stage::TrashingSource, TreeAction::TrashSource);
                } else {
                    self.after_placing();
                }
            }
            (Stage::Placing(Placing::Source), E::CrossDevice) => {
                self.crossed = true;
                self.go(Stage::Creating, TreeAction::CreateStaging);
            }
            (Stage::TrashingSource, E::Trashed) => {
                self.trashed_source = true;
                self.after_placing();
            }
            (Stage::Properties, E::PropertiesDone) => self.finish(Ok(self.done())),
            (_, E::Refused(r)) => self.fail(WriteFailure::of_rejection(r)),
            (_, E::NoAnswer) => self.fail(WriteFailure::BrokerUnavailable),
            (_, E::Failed(f)) => self.fail(f),
            // An answer to a question not asked is a driver bug: stop safely.
            (_, _) => self.fail(WriteFailure::Io),
        }
    }

    fn inspected(&mut self, source: Existing, destination: Existing) {
        self.source = source;
        self.destination = destination;
        let op = self.options.op;
        if op != TreeOp::MakeCollection && source == Existing::Nothing {
            return self.fail(WriteFailure::NotFound);
        }
        if matches!(
            op,
            TreeOp::Copy { .. } | TreeOp::Move | TreeOp::MakeCollection
        ) && destination != Existing::Nothing
            && (op == TreeOp::MakeCollection || !self.options.overwrite)
        {
            return self.fail(WriteFailure::Exists);
        }
        match op {
            TreeOp::Copy { .. } => self.go(Stage::Creating, TreeAction::CreateStaging),
            _ => self.go(Stage::Confirming, TreeAction::ConfirmLeases),
        }
    }

    /// Step 4, under confirmed leases.
    fn confirmed(&mut self) {
        match self.options.op {
            TreeOp::Delete => self.go(Stage::TrashingSource, TreeAction::TrashSource),
            TreeOp::MakeCollection => self.place(),
            TreeOp::Copy { .. } | TreeOp::Move => {
                // One rename replaces a file with a file; a collection on either side
                // needs the destination out of the way first.
                let involves_collection =
                    self.destination == Existing::Directory || self.source == Existing::Directory;
                if self.destination != Existing::Nothing
                    && involves_collection
                    && !self.trashed_destination
                {
                    self.go(Stage::TrashingDestination, TreeAction::TrashDestination);
                } else {
                    self.place();
                }
            }
        }
    }

    fn place(&mut self) {
        let placing = match self.options.op {
            TreeOp::MakeCollection => Placing::NewCollection,
            TreeOp::Move if !self.crossed => Placing::Source,
            _ => Placing::Staging,
        };
        self.go(Stage::Placing(placing), TreeAction::Place(placing));
    }

    fn after_placing(&mut self) {
        if self.options.op == TreeOp::MakeCollection {
            self.finish(Ok(TreeDone::Created));
        } else {
            self.go(Stage::Properties, TreeAction::Properties);
        }
    }

    fn done(&self) -> TreeDone {
        match self.options.op {
            TreeOp::Delete => TreeDone::Deleted,
            _ if self.destination != Existing::Nothing => TreeDone::Replaced,
            _ => TreeDone::Created,
        }
    }

    fn go(&mut self, stage: Stage, action: TreeAction) {
        self.stage = stage;
        self.actions.push_back(action);
    }

    fn fail(&mut self, failure: WriteFailure) {
        if self.staging {
            self.staging = false;
            self.actions.push_back(TreeAction::RemoveStaging);
        }
        if self.trashed_destination && !self.placed {
            // Nothing was placed: the destination comes back as it was.
            self.trashed_destination = false;
            self.actions.push_back(TreeAction::Untrash);
        }
        self.finish(Err(failure));
    }

    /// Step 5: the trash goes, every lease back, then the answer.
    fn finish(&mut self, result: Result<TreeDone, WriteFailure>) {
        if self.trashed_destination || self.trashed_source {
            self.trashed_destination = false;
            self.trashed_source = false;
            self.actions.push_back(TreeAction::RemoveTrash);
        }
        for id in self.leases.drain(..).rev() {
            self.actions.push_back(TreeAction::ReleaseLease(id));
        }
        self.stage = Stage::Done;
        self.actions.push_back(TreeAction::Finish(result));
    }
}

#[cfg(test)]
#[path = "tree_flow_tests.rs"]
mod tests;
