//! The tree client (one request at a time, each a connection of its own) and the oracle
//! that looks at the tree, the broker's leases and the private names after every step.

use core::time::Duration;
use std::collections::BTreeMap;

use servery_core::parent::Parent;
use servery_core::{Instant, WorkerId};

use super::worker::TreeRun;
use super::{
    DavTreePlan, TreeEnd, TreeMethod, TreeOpPlan, TreeRecord, TreeSnapshot, TreeStep,
    TreeStepFails, ns,
};
use crate::tree::SimTree;
use crate::world::{ConnKind, SimEvent, SimWorld};

/// How many of each oracle finding are kept.
const KEEP: usize = 8;

/// The tree workload's state: the tree itself, the client, and the requests workers are
/// carrying out.
#[derive(Debug)]
pub(crate) struct DavTreeSim {
    pub(super) plan: DavTreePlan,
    pub(crate) tree: SimTree,
    /// The plan's next request.
    next: usize,
    /// The request in flight (its record), if any.
    pub(super) in_flight: Option<usize>,
    idle_since: Instant,
    pub(super) serving: BTreeMap<(WorkerId, u64), TreeRun>,
    /// Workers the plan killed, until the parent has let them go and nothing of theirs
    /// is left.
    pub(super) killed: Vec<WorkerId>,
}

/// The tree-lease key of a path (top-level names: the root directory's).
pub(crate) fn tree_key(path: &str) -> servery_core::proto::TargetKey {
    servery_core::proto::TargetKey {
        dir_device: 1,
        dir_inode: 3,
        name: path.to_owned(),
    }
}

impl SimWorld {
    /// Sets up the tree and schedules the first request (only with a tree workload).
    pub(crate) fn dav_tree_start(&mut self) {
        let Some(plan) = self.spec.workload.dav_tree.clone() else {
            return;
        };
        let mut tree = SimTree::default();
        for (path, node) in &plan.initial {
            tree.insert(path, *node);
        }
        self.out.dav_tree.snapshots.push(TreeSnapshot {
            at_ns: 0,
            op: None,
            visible: tree.visible(),
        });
        let start = crate::world::ms(plan.start);
        self.dav_tree = Some(DavTreeSim {
            plan,
            tree,
            next: 0,
            in_flight: None,
            idle_since: Instant::ZERO,
            serving: BTreeMap::new(),
            killed: Vec::new(),
        });
        self.schedule_at(start, SimEvent::DavTreeSend);
    }

    /// The client sends its next request: the plan's, or the lost one again.
    pub(crate) fn dav_tree_send(&mut self) {
        let until = self.spec.workload.until;
        if Duration::from_nanos(ns(self.now)) >= until {
            return;
        }
        let Some(t) = self.dav_tree.as_mut() else {
            return;
        };
        let retry = self
            .out
            .dav_tree
            .ops
            .last()
            .filter(|r| t.plan.retry_lost && r.end == Some(TreeEnd::Lost) && !r.retry);
        let record = match retry {
            Some(r) => TreeRecord {
                retry: true,
                fails: None,
                kill_before: None,
                killed_before: None,
                worker: None,
                end: None,
                unsynced: false,
                ..r.clone()
            },
            None => {
                let Some(&op) = t.plan.ops.get(t.next) else {
                    return;
                };
                t.next += 1;
                self.dav_tree_draw(op)
            }
        };
        let Some(t) = self.dav_tree.as_mut() else {
            return;
        };
        let rec = self.out.dav_tree.ops.len();
        t.in_flight = Some(rec);
        self.out.dav_tree.ops.push(TreeRecord {
            sent_ns: ns(self.now),
            ..record
        });
        self.arrive(ConnKind::DavTree { rec });
    }

    /// A request for `op`: the method and names, drawn from what the tree holds now so
    /// that the step the plan kills the worker before is on the way.
    fn dav_tree_draw(&mut self, op: TreeOpPlan) -> TreeRecord {
        let (names, visible) = match self.dav_tree.as_ref() {
            Some(t) => (t.plan.names.clone(), t.tree.visible()),
            None => (Vec::new(), Default::default()),
        };
        let exists = |n: &str| visible.contains_key(n);
        let collection = |n: &str| visible.get(n) == Some(&None);
        let step = op.kill_before.map(|(s, _)| s);
        let mut method = match self.rng.range(0, 4) {
            0 => TreeMethod::Move,
            1 => TreeMethod::Copy,
            2 => TreeMethod::Delete,
            3 => TreeMethod::Mkcol,
            _ => TreeMethod::CopyDepth0,
        };
        let mut cross_device = op.cross_device;
        let mut overwrite = op.overwrite;
        let mut wants_destination = false;
        match step {
            Some(
                TreeStep::CreateStaging
                | TreeStep::FillStaging
                | TreeStep::SyncStaging
                | TreeStep::RemoveStaging,
            ) => {
                if matches!(method, TreeMethod::Delete | TreeMethod::Mkcol) {
                    method = TreeMethod::Copy;
                }
                if method == TreeMethod::Move {
                    cross_device = true;
                }
            }
            Some(TreeStep::TrashDestination | TreeStep::Untrash) => {
                if matches!(method, TreeMethod::Delete | TreeMethod::Mkcol) {
                    method = TreeMethod::Move;
                }
                overwrite = true;
                wants_destination = true;
            }
            Some(TreeStep::TrashSource) => {
                if matches!(
                    method,
                    TreeMethod::Copy | TreeMethod::CopyDepth0 | TreeMethod::Mkcol
                ) {
                    method = TreeMethod::Delete;
                }
                if method == TreeMethod::Move {
                    cross_device = true;
                }
            }
            // Everything but a DELETE places something.
            Some(TreeStep::SyncDirectory) if method == TreeMethod::Delete => {
                method = TreeMethod::Copy;
            }
            // A MKCOL has no properties to carry and nothing to move aside.
            Some(TreeStep::Properties) if method == TreeMethod::Mkcol => {
                method = TreeMethod::Copy;
            }
            Some(TreeStep::RemoveTrash) if method == TreeMethod::Mkcol => {
                method = TreeMethod::Delete;
            }
            _ => {}
        }
        let fails = match step {
            Some(TreeStep::Untrash) => Some(TreeStepFails::Place),
            Some(TreeStep::RemoveStaging) if self.rng.chance(0.5) => Some(TreeStepFails::Fill),
            Some(TreeStep::RemoveStaging) => Some(TreeStepFails::Place),
            _ => op.fails,
        };
        // A source that exists (a collection when there is one), and a destination
        // that exists when the step needs one to move aside.
        let pick = |rng: &mut crate::rng::SimRng, from: Vec<&'static str>| {
            (!from.is_empty()).then(|| from[rng.range(0, from.len() as u64 - 1) as usize])
        };
        let collections: Vec<&'static str> =
            names.iter().copied().filter(|n| collection(n)).collect();
        let existing: Vec<&'static str> = names.iter().copied().filter(|n| exists(n)).collect();
        let absent: Vec<&'static str> = names.iter().copied().filter(|n| !exists(n)).collect();
        let from = if method == TreeMethod::Mkcol {
            // A name that is free, so that most MKCOLs create (one taken: 405).
            pick(&mut self.rng, absent).or_else(|| pick(&mut self.rng, existing.clone()))
        } else {
            pick(&mut self.rng, collections.clone())
                .or_else(|| pick(&mut self.rng, existing.clone()))
        }
        .unwrap_or(names.first().copied().unwrap_or("/"));
        let others: Vec<&'static str> = names.iter().filter(|n| **n != from).copied().collect();
        let occupied: Vec<&'static str> = others.iter().copied().filter(|n| exists(n)).collect();
        let to = if wants_destination {
            pick(&mut self.rng, occupied).or_else(|| pick(&mut self.rng, others.clone()))
        } else {
            pick(&mut self.rng, others.clone())
        };
        TreeRecord {
            method,
            from: from.to_owned(),
            to: (!matches!(method, TreeMethod::Delete | TreeMethod::Mkcol))
                .then(|| to.unwrap_or("/").to_owned()),
            overwrite,
            cross_device: cross_device && method == TreeMethod::Move,
            fails,
            kill_before: op.kill_before,
            retry: false,
            worker: None,
            sent_ns: 0,
            ended_ns: 0,
            end: None,
            killed_before: None,
            unsynced: false,
        }
    }

    /// Request `rec` ended so (its connection is closed): the client goes on.
    pub(crate) fn dav_tree_ended(&mut self, rec: usize, end: TreeEnd) {
        let now = self.now;
        let Some(r) = self.out.dav_tree.ops.get_mut(rec) else {
            return;
        };
        if r.end.is_some() {
            return;
        }
        r.end = Some(end);
        r.ended_ns = ns(now);
        let Some(t) = self.dav_tree.as_mut() else {
            return;
        };
        t.in_flight = None;
        t.idle_since = now;
        let (lo, hi) = t.plan.gap_ms;
        let d = Duration::from_micros(self.rng.range(lo * 1000, hi * 1000));
        self.schedule_in(d, SimEvent::DavTreeSend);
    }

    /// `worker` died with these tree requests in flight.
    pub(crate) fn dav_tree_lost(&mut self, worker: WorkerId, recs: Vec<usize>) {
        if let Some(t) = self.dav_tree.as_mut() {
            t.serving.retain(|(w, _), _| *w != worker);
        }
        for rec in recs {
            self.dav_tree_ended(rec, TreeEnd::Lost);
        }
    }

    /// After a step of request `rec`: note the visible tree if it changed.
    pub(super) fn dav_tree_snapshot(&mut self, rec: usize) {
        let Some(t) = self.dav_tree.as_ref() else {
            return;
        };
        let visible = t.tree.visible();
        let snaps = &mut self.out.dav_tree.snapshots;
        if snaps.last().is_some_and(|s| s.visible == visible) {
            return;
        }
        snaps.push(TreeSnapshot {
            at_ns: ns(self.now),
            op: Some(rec),
            visible,
        });
    }

    /// The parent let `worker` go: its private names go (the real parent's cleanup).
    pub(crate) fn dav_tree_cleanup(&mut self, worker: WorkerId) {
        if let Some(t) = self.dav_tree.as_mut() {
            t.tree.remove_private_of(worker);
        }
    }

    /// After every parent step: tree leases and private names of workers the parent has
    /// let go, and tree leases held while the client is idle.
    pub(crate) fn dav_tree_observe(&mut self, now: Instant, parent: &Parent) {
        let Some(t) = self.dav_tree.as_mut() else {
            return;
        };
        let sup = parent.supervisor();
        let at = ns(now);
        let leases = parent.broker().leases();
        let privates = t.tree.private_roots();
        let coverage = &mut self.out.coverage;
        t.killed.retain(|&w| {
            let left = privates.iter().any(|(_, o)| *o == Some(w));
            let leased = parent.broker().leases().any(|(_, l)| l.owner.worker == w);
            let swept = !sup.is_connected(w) && !left && !leased;
            if swept {
                coverage.insert(crate::labels::DAV_TREE_KILL_SWEPT);
            }
            !swept
        });
        let out = &mut self.out.dav_tree;
        let mut held = 0;
        for (_, lease) in leases {
            if lease.key.dir_inode != 3 || lease.key.dir_device != 1 {
                continue;
            }
            held += 1;
            let w = lease.owner.worker;
            if !sup.is_connected(w) && out.stale_leases.len() < KEEP {
                out.stale_leases.push((at, lease.key.name.clone(), w.0));
            }
        }
        let idle = t.in_flight.is_none() && now >= t.idle_since + t.plan.idle_grace;
        if idle {
            out.idle_observations += 1;
            if held > 0 && out.idle_leases.len() < KEEP {
                out.idle_leases.push((at, held));
            }
        }
        for (path, owner) in privates {
            let gone = owner.is_none_or(|w| !sup.is_connected(w));
            if gone && out.stale_private.len() < KEEP {
                out.stale_private.push((at, path, owner.map_or(0, |w| w.0)));
            }
        }
    }

    /// At the run's end: private names left behind.
    pub(crate) fn dav_tree_finish(&mut self) {
        if let Some(t) = self.dav_tree.as_ref() {
            self.out.dav_tree.private_at_end = t.tree.private_roots().len();
        }
    }
}
