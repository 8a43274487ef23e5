//! WebDAV's tree operations in the simulation, opt-in through [`crate::Workload::dav_tree`]:
//! a client that sends MOVE, COPY (Depth infinity and Depth 0), DELETE and MKCOL of small
//! collections one at a time, workers that carry each out by driving the core's [`servery_core::tree_flow`]
//! — the machine the real worker drives (`io-real/src/http/dav/tree_run.rs`) — against
//! the simulated tree ([`crate::tree`]) with target leases from the broker, and a plan
//! that kills the worker before a chosen step of the flow.
//!
//! What the oracle records for the scenario's predicates ([`TreeOutcome`]): the visible
//! tree after every step that changed it, tagged with the request in flight; after every
//! parent step, tree leases the broker still lists for a worker it has let go (or holds
//! while the client is idle) and private names of a worker the parent has let go.

mod client;
mod worker;

use core::time::Duration;

use servery_core::Instant;
use servery_core::tree_flow::{TreeAction, TreeDone};
use servery_core::write_flow::WriteFailure;

use crate::tree::{Node, Visible};

pub(crate) use client::DavTreeSim;

/// A step of the tree flow, as the plan names where to kill the worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TreeStep {
    Lease,
    Inspect,
    CreateStaging,
    FillStaging,
    SyncStaging,
    ConfirmLeases,
    TrashDestination,
    TrashSource,
    Place,
    SyncDirectory,
    Properties,
    Untrash,
    RemoveTrash,
    RemoveStaging,
    ReleaseLease,
    Answer,
}

impl TreeStep {
    pub const ALL: [TreeStep; 16] = [
        TreeStep::Lease,
        TreeStep::Inspect,
        TreeStep::CreateStaging,
        TreeStep::FillStaging,
        TreeStep::SyncStaging,
        TreeStep::ConfirmLeases,
        TreeStep::TrashDestination,
        TreeStep::TrashSource,
        TreeStep::Place,
        TreeStep::SyncDirectory,
        TreeStep::Properties,
        TreeStep::Untrash,
        TreeStep::RemoveTrash,
        TreeStep::RemoveStaging,
        TreeStep::ReleaseLease,
        TreeStep::Answer,
    ];

    pub fn of(action: &TreeAction) -> TreeStep {
        match action {
            TreeAction::Lease(_) => TreeStep::Lease,
            TreeAction::Inspect => TreeStep::Inspect,
            TreeAction::CreateStaging => TreeStep::CreateStaging,
            TreeAction::FillStaging { .. } => TreeStep::FillStaging,
            TreeAction::SyncStaging => TreeStep::SyncStaging,
            TreeAction::ConfirmLeases => TreeStep::ConfirmLeases,
            TreeAction::TrashDestination => TreeStep::TrashDestination,
            TreeAction::TrashSource => TreeStep::TrashSource,
            TreeAction::Place(_) => TreeStep::Place,
            TreeAction::SyncDirectory => TreeStep::SyncDirectory,
            TreeAction::Properties => TreeStep::Properties,
            TreeAction::Untrash => TreeStep::Untrash,
            TreeAction::RemoveTrash => TreeStep::RemoveTrash,
            TreeAction::RemoveStaging => TreeStep::RemoveStaging,
            TreeAction::ReleaseLease(_) => TreeStep::ReleaseLease,
            TreeAction::Finish(_) => TreeStep::Answer,
        }
    }

    /// The coverage label of a worker killed just before this step.
    pub fn killed_label(self) -> &'static str {
        crate::labels::DAV_TREE_KILLED_BEFORE[self as usize]
    }
}

/// The tree methods the client sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TreeMethod {
    Move,
    /// COPY with `Depth: infinity`.
    Copy,
    Delete,
    /// MKCOL of `from`.
    Mkcol,
    /// COPY with `Depth: 0`: a collection is copied without its members.
    CopyDepth0,
}

/// A file-system call that fails on purpose, to reach the flow's way back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TreeStepFails {
    /// Filling the staging copy: ENOSPC.
    Fill,
    /// The rename into place: EIO.
    Place,
}

/// One request of the plan. The client picks the method and the names when it sends
/// it, from what the tree then holds, so that the step to kill the worker before is on
/// the request's way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeOpPlan {
    /// Kill the worker just before the `n`-th (from 0) action of this kind.
    pub kill_before: Option<(TreeStep, u32)>,
    /// `Overwrite: T` (the service allows replacing).
    pub overwrite: bool,
    /// A MOVE's rename crosses file systems (EXDEV): copy, place, then the source goes.
    pub cross_device: bool,
    pub fails: Option<TreeStepFails>,
}

/// The tree workload.
#[derive(Debug, Clone, PartialEq)]
pub struct DavTreePlan {
    /// The share's top-level names and their contents before the run.
    pub initial: Vec<(&'static str, Node)>,
    /// The names requests pick from.
    pub names: Vec<&'static str>,
    pub ops: Vec<TreeOpPlan>,
    /// The first request, and the time between an answer (or a lost connection) and the
    /// next request (ms, uniform).
    pub start: Duration,
    pub gap_ms: (u64, u64),
    /// A request whose worker died is sent again, as it was, without the fault.
    pub retry_lost: bool,
    /// How long the client must have been idle before any tree lease still held counts
    /// as leaked: the releases of an answered request are still on their way.
    pub idle_grace: Duration,
}

/// How a tree request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TreeEnd {
    Done(TreeDone),
    Failed(WriteFailure),
    /// Its worker died first: no answer.
    Lost,
    /// The listener was closed.
    Refused,
}

/// One tree request as sent and answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeRecord {
    pub method: TreeMethod,
    pub from: String,
    /// The destination (MOVE, COPY).
    pub to: Option<String>,
    pub overwrite: bool,
    pub cross_device: bool,
    pub fails: Option<TreeStepFails>,
    pub kill_before: Option<(TreeStep, u32)>,
    /// A resend of the request before it, whose worker died.
    pub retry: bool,
    pub worker: Option<u64>,
    pub sent_ns: u64,
    pub ended_ns: u64,
    pub end: Option<TreeEnd>,
    /// Where its worker was killed.
    pub killed_before: Option<TreeStep>,
    /// The fsync of the destination's directory after placing failed (or the power went
    /// before it): the result is in place, and the answer may not be a success.
    pub unsynced: bool,
}

impl TreeRecord {
    pub fn describe(&self) -> String {
        let to = self
            .to
            .as_deref()
            .map_or(String::new(), |t| format!(" → {t}"));
        format!(
            "{:?} {}{to}{}{}{} (w{}, sent at {} ms)",
            self.method,
            self.from,
            if self.overwrite || self.to.is_none() {
                ""
            } else {
                " Overwrite: F"
            },
            if self.cross_device {
                " across file systems"
            } else {
                ""
            },
            self.killed_before
                .map_or(String::new(), |s| format!(", worker killed before {s:?}")),
            self.worker.unwrap_or_default(),
            self.sent_ns / 1_000_000
        )
    }
}

/// The visible tree after a step that changed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeSnapshot {
    pub at_ns: u64,
    /// The request whose step changed it (`None`: the tree before the run).
    pub op: Option<usize>,
    pub visible: Visible,
}

/// What the tree workload's oracle saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TreeOutcome {
    pub ops: Vec<TreeRecord>,
    pub snapshots: Vec<TreeSnapshot>,
    /// (ns, name, worker): a tree lease the broker still listed for a worker the parent
    /// had let go. The first few.
    pub stale_leases: Vec<(u64, String, u64)>,
    /// (ns, leases): tree leases the broker held while the client had been idle for the
    /// plan's grace. The first few.
    pub idle_leases: Vec<(u64, usize)>,
    /// (ns, path, worker): a private name of a worker the parent had let go. The first
    /// few.
    pub stale_private: Vec<(u64, String, u64)>,
    /// Private names left when the run ended.
    pub private_at_end: usize,
    /// Observations made while the client was idle.
    pub idle_observations: u64,
}

pub(crate) fn ns(t: Instant) -> u64 {
    t.as_nanos()
}
