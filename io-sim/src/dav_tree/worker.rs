//! The worker's side of a tree request: the core's tree flow driven against the simulated
//! tree and the broker, as `io-real/src/http/dav/tree_run.rs` drives it against the file
//! system — each action carried out, what happened reported back — with the plan's kill
//! before a chosen step.
//!
//! Differences from the real driver, and why they do not matter here: a lease the broker
//! refuses (`Busy`) is answered at once instead of retried for the write-lock timeout
//! (the client sends the next request; there is one client); a lease is confirmed without
//! a renewal, as the simulated upload does (requests take milliseconds, leases seconds);
//! dead properties are not modelled (the step runs, and a kill before it is a boundary).

use servery_core::proto::{BrokerReply, BrokerRequest, Rejection};
use servery_core::tree_flow::{
    Placing, Side, TreeAction, TreeEvent, TreeFlow, TreeOp, TreeOptions,
};
use servery_core::write_flow::WriteFailure;
use servery_core::{LeaseId, WorkerId};

use super::client::tree_key;
use super::{TreeEnd, TreeMethod, TreeStep, TreeStepFails};
use crate::plan::FaultKind;
use crate::process::Waiting;
use crate::tree::RenameError;
use crate::world::SimWorld;

/// A tree request a worker is carrying out.
#[derive(Debug)]
pub(crate) struct TreeRun {
    rec: usize,
    flow: TreeFlow,
    /// Actions taken so far, by step.
    taken: [u32; TreeStep::ALL.len()],
    leases: Vec<LeaseId>,
    staging: Option<String>,
    /// The staging copy was made durable (fsynced) since it was filled.
    staging_synced: bool,
    /// What was placed came from a staging copy: whether that copy was durable.
    placed_durable: Option<bool>,
    trash_destination: Option<String>,
    trash_source: Option<String>,
}

impl SimWorld {
    /// `worker` took the connection of tree request `rec`.
    pub(crate) fn dav_tree_accept(&mut self, worker: WorkerId, conn: u64, rec: usize) {
        let Some(r) = self.out.dav_tree.ops.get_mut(rec) else {
            return;
        };
        r.worker = Some(worker.0);
        let op = match r.method {
            TreeMethod::Move => TreeOp::Move,
            TreeMethod::Copy => TreeOp::Copy { infinity: true },
            TreeMethod::CopyDepth0 => TreeOp::Copy { infinity: false },
            TreeMethod::Delete => TreeOp::Delete,
            TreeMethod::Mkcol => TreeOp::MakeCollection,
        };
        // The global lease order of the real driver: the canonical paths' order.
        let source_first = r.to.as_ref().is_none_or(|to| r.from < *to);
        let flow = TreeFlow::new(TreeOptions {
            op,
            overwrite: r.overwrite,
            source_first,
        });
        let Some(t) = self.dav_tree.as_mut() else {
            return;
        };
        t.serving.insert(
            (worker, conn),
            TreeRun {
                rec,
                flow,
                taken: [0; TreeStep::ALL.len()],
                leases: Vec::new(),
                staging: None,
                staging_synced: false,
                placed_durable: None,
                trash_destination: None,
                trash_source: None,
            },
        );
        self.dav_tree_drive(worker, conn);
    }

    /// The broker's answer to a lease request of `worker`'s tree request on `conn`.
    pub(crate) fn dav_tree_reply(
        &mut self,
        worker: WorkerId,
        conn: u64,
        reply: Option<BrokerReply>,
    ) {
        let Some(run) = self
            .dav_tree
            .as_mut()
            .and_then(|t| t.serving.get_mut(&(worker, conn)))
        else {
            return;
        };
        let event = match reply {
            None => TreeEvent::NoAnswer,
            Some(BrokerReply::Granted { id, .. }) => {
                run.leases.push(id);
                TreeEvent::Leased(id)
            }
            Some(BrokerReply::Rejected(r)) => TreeEvent::Refused(r),
            Some(_) => TreeEvent::Refused(Rejection::Saturated),
        };
        run.flow.handle(event);
        self.dav_tree_drive(worker, conn);
    }

    /// Carries out what the flow asks until it waits for the broker or ends, or the
    /// plan kills the worker.
    fn dav_tree_drive(&mut self, worker: WorkerId, conn: u64) {
        let now = self.now;
        loop {
            let Some(t) = self.dav_tree.as_mut() else {
                return;
            };
            let Some(run) = t.serving.get_mut(&(worker, conn)) else {
                return;
            };
            let Some(action) = run.flow.next_action() else {
                return;
            };
            let rec = run.rec;
            let step = TreeStep::of(&action);
            let nth = run.taken[step as usize];
            run.taken[step as usize] += 1;
            let Some(r) = self.out.dav_tree.ops.get(rec).cloned() else {
                return;
            };
            if r.kill_before == Some((step, nth)) {
                return self.dav_tree_kill(worker, rec, step);
            }
            // A MKCOL's one resource is its destination.
            let (from, to) = match r.method {
                TreeMethod::Mkcol => (r.from.as_str(), Some(r.from.as_str())),
                _ => (r.from.as_str(), r.to.as_deref()),
            };
            let tree = &mut t.tree;
            // A staging copy renamed into place before it was made durable.
            let mut placed_unsynced = false;
            let event = match action {
                TreeAction::Lease(side) => {
                    let path = match side {
                        Side::Source => from,
                        Side::Destination => to.unwrap_or(from),
                    };
                    let Some(p) = self.procs.get_mut(&worker) else {
                        return;
                    };
                    let request = BrokerRequest::AcquireLease {
                        key: tree_key(path),
                    };
                    match p.client.request(p.clock.own(now), request) {
                        Ok(id) => {
                            p.waiting.insert(id, Waiting::DavTree(conn));
                            self.pump(worker);
                            return;
                        }
                        Err(_) => TreeEvent::Refused(Rejection::Saturated),
                    }
                }
                TreeAction::Inspect => TreeEvent::Found {
                    source: tree.existing(from),
                    destination: to.map_or(servery_core::write_flow::Existing::Nothing, |to| {
                        tree.existing(to)
                    }),
                },
                TreeAction::CreateStaging => {
                    let name = tree.private_name(worker, "copy", to.unwrap_or(from));
                    if tree.create_like(from, &name) {
                        run.staging = Some(name);
                        TreeEvent::Staged
                    } else {
                        TreeEvent::Failed(WriteFailure::NotFound)
                    }
                }
                TreeAction::FillStaging { infinity } => match &run.staging {
                    _ if r.fails == Some(TreeStepFails::Fill) => {
                        TreeEvent::Failed(WriteFailure::NoSpace)
                    }
                    // The file system fills part-way through the copy (ENOSPC).
                    Some(staging) if now < self.disk_full_until => {
                        tree.fill(from, staging, false);
                        self.out
                            .coverage
                            .insert(crate::labels::DAV_COPY_STORAGE_FAULT_PLACED_NOTHING);
                        TreeEvent::Failed(WriteFailure::NoSpace)
                    }
                    Some(staging) if tree.fill(from, staging, infinity) => TreeEvent::Filled,
                    _ => TreeEvent::Failed(WriteFailure::Io),
                },
                TreeAction::SyncStaging if now < self.fsync_fails_until => {
                    // fsync(2) of a file of the copy: EIO.
                    self.out
                        .coverage
                        .insert(crate::labels::DAV_COPY_STORAGE_FAULT_PLACED_NOTHING);
                    TreeEvent::Failed(WriteFailure::Io)
                }
                TreeAction::SyncStaging => {
                    run.staging_synced = run.staging.is_some();
                    TreeEvent::Synced
                }
                TreeAction::SyncDirectory => {
                    if let Some(durable) = self.dav_tree_power_lost(worker, conn, rec) {
                        if !durable {
                            self.violation(format!(
                                "torn-rename rule: the power went between the placing rename \
                                 of {} and its directory's fsync, and the copy placed was \
                                 never made durable (part of it under the public name)",
                                r.describe()
                            ));
                        }
                        self.dav_tree_snapshot(rec);
                        return;
                    }
                    if now < self.dir_sync_fails_until {
                        // fsync(2) of the destination's directory: EIO.
                        self.out.unsynced_renames += 1;
                        if let Some(r) = self.out.dav_tree.ops.get_mut(rec) {
                            r.unsynced = true;
                        }
                        // Its answer is judged by the scenario (`directory-fsync rule:`).
                        self.out
                            .coverage
                            .insert(crate::labels::DIR_SYNC_FAILED_ANSWERED);
                        TreeEvent::Failed(WriteFailure::Io)
                    } else {
                        TreeEvent::Synced
                    }
                }
                TreeAction::ConfirmLeases => TreeEvent::Confirmed,
                TreeAction::TrashDestination | TreeAction::TrashSource => {
                    let (path, side) = match action {
                        TreeAction::TrashSource => (from, Side::Source),
                        _ => (to.unwrap_or(from), Side::Destination),
                    };
                    let name = tree.private_name(worker, "trash", path);
                    match tree.rename(path, &name) {
                        Ok(()) => {
                            match side {
                                Side::Source => run.trash_source = Some(name),
                                Side::Destination => run.trash_destination = Some(name),
                            }
                            TreeEvent::Trashed
                        }
                        // Nothing there any more: nothing to move aside (as the real one).
                        Err(RenameError::NotFound) => TreeEvent::Trashed,
                        Err(_) => TreeEvent::Failed(WriteFailure::Io),
                    }
                }
                TreeAction::Place(_) if r.fails == Some(TreeStepFails::Place) => {
                    TreeEvent::Failed(WriteFailure::Io)
                }
                TreeAction::Place(Placing::Source) if r.cross_device => TreeEvent::CrossDevice,
                TreeAction::Place(placing) => {
                    let to = to.unwrap_or(from);
                    let placed = match placing {
                        Placing::NewCollection => {
                            tree.insert(to, crate::tree::Node::Collection);
                            Ok(())
                        }
                        Placing::Source => tree.rename(from, to),
                        Placing::Staging => match run.staging.take() {
                            Some(staging) => {
                                run.placed_durable = Some(run.staging_synced);
                                placed_unsynced = !run.staging_synced;
                                tree.rename(&staging, to)
                            }
                            None => Err(RenameError::NotFound),
                        },
                    };
                    match placed {
                        Ok(()) => TreeEvent::Placed,
                        Err(_) => TreeEvent::Failed(WriteFailure::Io),
                    }
                }
                TreeAction::Properties => TreeEvent::PropertiesDone,
                TreeAction::Untrash => {
                    if let (Some(name), Some(to)) = (run.trash_destination.take(), to) {
                        let _ = tree.rename(&name, to);
                    }
                    self.dav_tree_snapshot(rec);
                    continue;
                }
                TreeAction::RemoveTrash => {
                    for name in [run.trash_destination.take(), run.trash_source.take()]
                        .into_iter()
                        .flatten()
                    {
                        tree.remove(&name);
                    }
                    continue;
                }
                TreeAction::RemoveStaging => {
                    if let Some(name) = run.staging.take() {
                        tree.remove(&name);
                    }
                    continue;
                }
                TreeAction::ReleaseLease(id) => {
                    run.leases.retain(|l| *l != id);
                    if let Some(p) = self.procs.get_mut(&worker) {
                        p.client
                            .release(p.clock.own(now), BrokerRequest::ReleaseLease { id });
                    }
                    continue;
                }
                TreeAction::Finish(result) => {
                    let end = match result {
                        Ok(done) => TreeEnd::Done(done),
                        Err(f) => TreeEnd::Failed(f),
                    };
                    return self.dav_tree_answer(worker, conn, rec, end);
                }
            };
            if placed_unsynced {
                self.violation(format!(
                    "torn-rename rule: {} renamed its staging copy into place before it was \
                     made durable (a crash before the directory's fsync could show part of it)",
                    r.describe()
                ));
            }
            self.dav_tree_snapshot(rec);
            self.dav_tree_event(worker, conn, event);
        }
    }

    fn dav_tree_event(&mut self, worker: WorkerId, conn: u64, event: TreeEvent) {
        if let Some(run) = self
            .dav_tree
            .as_mut()
            .and_then(|t| t.serving.get_mut(&(worker, conn)))
        {
            run.flow.handle(event);
        }
    }

    /// A torn rename armed: the power goes after `worker`'s placing rename, before the
    /// directory's fsync. The worker dies; the rename is kept (the simulated tree has no
    /// undo: a kept rename is the case that can show a copy not on the disk). Whether
    /// what was placed was durable, when the power went (`None`: it did not).
    fn dav_tree_power_lost(&mut self, worker: WorkerId, conn: u64, rec: usize) -> Option<bool> {
        if self.torn_renames_armed == 0 {
            return None;
        }
        self.torn_renames_armed -= 1;
        let durable = self
            .dav_tree
            .as_ref()
            .and_then(|t| t.serving.get(&(worker, conn)))
            .and_then(|run| run.placed_durable)
            .unwrap_or(true);
        if let Some(r) = self.out.dav_tree.ops.get_mut(rec) {
            r.unsynced = true;
        }
        self.out.torn_renames.kept += 1;
        if durable {
            self.out.coverage.insert(crate::labels::TORN_RENAME_WHOLE);
        }
        self.out.crash_faults += 1;
        self.injected(FaultKind::TornRename, Some(worker));
        self.process_died(worker, servery_core::supervisor::ExitStatus::Signal(9));
        Some(durable)
    }

    /// The plan's fault: `kill -9` of the worker just before `step`.
    fn dav_tree_kill(&mut self, worker: WorkerId, rec: usize, step: TreeStep) {
        if let Some(r) = self.out.dav_tree.ops.get_mut(rec) {
            r.killed_before = Some(step);
        }
        if let Some(t) = self.dav_tree.as_mut() {
            t.killed.push(worker);
        }
        self.kill_before_step(worker, step.killed_label(), FaultKind::CrashDavTreeStep);
    }

    /// Answer the client and close the connection.
    fn dav_tree_answer(&mut self, worker: WorkerId, conn: u64, rec: usize, end: TreeEnd) {
        if let Some(t) = self.dav_tree.as_mut() {
            t.serving.remove(&(worker, conn));
        }
        self.close_served(worker, conn);
        self.dav_tree_ended(rec, end);
        self.pump(worker);
        self.dispatch();
    }
}
