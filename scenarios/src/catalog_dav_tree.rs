//! WebDAV tree operations under crashes: a client MOVEs, COPYs (Depth infinity and
//! Depth 0), DELETEs and MKCOLs small collections one request at a time, and the worker carrying a request out
//! is killed just before a step of the core's tree flow that the seed picks.
//!
//! The predicates judge the simulator's record (`Outcome::dav_tree`): the visible tree
//! after every step that changed it, with the request whose step it was; the tree leases
//! the broker still held for a worker the parent had let go, or while the client was
//! idle; the private names (staging copies, trash) of workers the parent had let go.

use std::collections::BTreeMap;

use servery_core::tree_flow::TreeDone;
use servery_sim::tree::{Node, Visible};
use servery_sim::{
    DavTreePlan, FaultKind, Outcome, TreeEnd, TreeMethod, TreeOpPlan, TreeOutcome, TreeRecord,
    TreeStep, TreeStepFails,
};

use crate::catalog::{expect, secs, spec, workers};
use crate::catalog_dav::dav_config;
use crate::{Ctx, End, Plan};

/// Requests per run (a killed one is sent again once, as it was).
const OPS: usize = 8;
/// The chance a request's worker is killed before a step.
const KILL_CHANCE: f64 = 0.8;

fn initial() -> Vec<(&'static str, Node)> {
    vec![
        ("/a", Node::Collection),
        ("/a/1", Node::File(11)),
        ("/a/2", Node::File(12)),
        ("/a/sub", Node::Collection),
        ("/a/sub/3", Node::File(13)),
        ("/b", Node::Collection),
        ("/b/x", Node::File(21)),
        ("/b/sub", Node::Collection),
        ("/b/sub/y", Node::File(22)),
        ("/f", Node::File(31)),
    ]
}

pub(crate) fn move_crash_between_steps(ctx: &mut Ctx) -> Plan {
    let mut config = dav_config(workers(ctx, 2, 4));
    // Every request may cost a worker: the restart limit is not what this scenario tests.
    config.recovery.worker_restart_limit = 40;
    let kill_on = ctx.kinds.has(FaultKind::CrashDavTreeStep);
    let ops = (0..OPS)
        .map(|_| {
            let kill = ctx.rng.chance(KILL_CHANCE);
            let step = TreeStep::ALL[ctx.rng.range(0, TreeStep::ALL.len() as u64 - 1) as usize];
            let nth = match step {
                TreeStep::Lease | TreeStep::ReleaseLease => ctx.rng.range(0, 1) as u32,
                _ => 0,
            };
            let fails = match ctx.rng.range(0, 9) {
                0 => Some(TreeStepFails::Fill),
                1 => Some(TreeStepFails::Place),
                _ => None,
            };
            TreeOpPlan {
                kill_before: (kill && kill_on).then_some((step, nth)),
                overwrite: ctx.rng.chance(0.85),
                cross_device: ctx.rng.chance(0.25),
                fails,
            }
        })
        .collect();
    let mut spec = spec(ctx, config.clone(), 7.0);
    spec.workload.dav_tree = Some(DavTreePlan {
        initial: initial(),
        names: vec!["/a", "/b", "/c", "/f"],
        ops,
        start: secs(0.5),
        gap_ms: (50, 300),
        retry_lost: true,
        idle_grace: secs(0.1),
    });
    crate::catalog_chunks::storage_faults(ctx, &mut spec, 5.0);
    let mut e = expect(&config, End::Ready);
    e.extra = Some(|o, _| {
        tree_held(o)?;
        o.coverage
            .insert("dav tree requests killed between steps showed no half tree");
        Ok(())
    });
    Plan { spec, expect: e }
}

/// The subtree at top-level `name`, relative to it; `None`: nothing there.
fn subtree(v: &Visible, name: &str) -> Option<Visible> {
    let inside: Visible = v
        .iter()
        .filter(|(p, _)| {
            *p == name || (p.starts_with(name) && p.as_bytes().get(name.len()) == Some(&b'/'))
        })
        .map(|(p, c)| (p[name.len()..].to_owned(), *c))
        .collect();
    (!inside.is_empty()).then_some(inside)
}

/// `before` with the subtrees at these names replaced.
fn with(before: &Visible, changes: &[(&str, &Option<Visible>)]) -> Visible {
    let mut v: Visible = before
        .iter()
        .filter(|(p, _)| {
            !changes.iter().any(|(name, _)| {
                *p == name || (p.starts_with(name) && p.as_bytes().get(name.len()) == Some(&b'/'))
            })
        })
        .map(|(p, c)| (p.clone(), *c))
        .collect();
    for (name, tree) in changes {
        for (rel, c) in tree.iter().flatten() {
            v.insert(format!("{name}{rel}"), *c);
        }
    }
    v
}

fn is_collection(t: &Option<Visible>) -> bool {
    t.as_ref().is_some_and(|t| t.get("") == Some(&None))
}

/// Just a collection, no members: what MKCOL makes and a Depth-0 COPY of one copies.
fn empty_collection() -> Option<Visible> {
    Some(Visible::from([(String::new(), None)]))
}

/// The resource a request creates or replaces: its destination; a MKCOL's own path.
fn destination(r: &TreeRecord) -> &str {
    match r.method {
        TreeMethod::Mkcol => &r.from,
        _ => r.to.as_deref().unwrap_or(""),
    }
}

/// The trees a client may find while request `r` runs or after its worker died, per the
/// WebDAV guide's table (A the source, B an existing destination): before; after; the
/// destination given up when a collection was involved (moved aside, not yet replaced);
/// a MOVE across file systems with the copy placed and the source not yet gone. The
/// first is the state before, the second the one a success must leave. A MKCOL shows
/// nothing or the new empty collection; a Depth-0 COPY of a collection copies it without
/// its members.
fn allowed(before: &Visible, r: &TreeRecord) -> Vec<Visible> {
    let a = subtree(before, &r.from);
    let mut states = vec![before.clone()];
    if r.method == TreeMethod::Mkcol {
        if a.is_none() {
            states.push(with(before, &[(&r.from, &empty_collection())]));
        }
        return states;
    }
    if a.is_none() {
        return states;
    }
    let to = r.to.as_deref().unwrap_or("");
    let b = subtree(before, to);
    if r.method != TreeMethod::Delete && b.is_some() && !r.overwrite {
        return states;
    }
    let none = None;
    match r.method {
        TreeMethod::Delete => states.push(with(before, &[(&r.from, &none)])),
        TreeMethod::Move => {
            states.push(with(before, &[(&r.from, &none), (to, &a)]));
            if r.cross_device {
                states.push(with(before, &[(to, &a)]));
            }
        }
        TreeMethod::Copy => states.push(with(before, &[(to, &a)])),
        TreeMethod::CopyDepth0 if is_collection(&a) => {
            states.push(with(before, &[(to, &empty_collection())]));
        }
        TreeMethod::CopyDepth0 => states.push(with(before, &[(to, &a)])),
        TreeMethod::Mkcol => {}
    }
    if r.method != TreeMethod::Delete && b.is_some() && (is_collection(&a) || is_collection(&b)) {
        states.push(with(before, &[(to, &none)]));
    }
    states
}

fn paths(v: &Visible) -> String {
    let names: Vec<&str> = v.keys().map(String::as_str).collect();
    format!("[{}]", names.join(" "))
}

/// The tree never shows half a tree, never loses a MOVE's source, and ends each request
/// as its answer says; every lease of a killed worker is back in the broker once the
/// parent has let it go, none is held while the client is idle; no private name outlives
/// the parent's cleanup of its worker, none is left at the end.
pub(crate) fn tree_held(o: &mut Outcome) -> Result<(), String> {
    let t = &o.dav_tree;
    let initial = t
        .snapshots
        .first()
        .filter(|s| s.op.is_none())
        .ok_or("no tree before the run")?;
    // The state before each request: the last snapshot of an earlier one.
    let mut state = initial.visible.clone();
    let mut by_op: BTreeMap<usize, Vec<&servery_sim::TreeSnapshot>> = BTreeMap::new();
    for s in &t.snapshots[1..] {
        by_op.entry(s.op.unwrap_or(usize::MAX)).or_default().push(s);
    }
    if by_op.contains_key(&usize::MAX) {
        return Err("a tree snapshot that no request made".into());
    }
    if t.ops.is_empty() {
        return Err("the tree client sent no request".into());
    }
    let mut reached = Vec::new();
    for (i, r) in t.ops.iter().enumerate() {
        let before = state.clone();
        let states = allowed(&before, r);
        let done = matches!(r.end, Some(TreeEnd::Done(_)));
        match (r.method, r.killed_before) {
            (TreeMethod::Mkcol, Some(_)) => reached.push(MKCOL_KILLED),
            (TreeMethod::CopyDepth0, Some(_)) => reached.push(COPY_DEPTH0_KILLED),
            (TreeMethod::Mkcol, None) if done => reached.push(MKCOL_CREATED),
            (TreeMethod::CopyDepth0, None) if done && is_collection(&subtree(&before, &r.from)) => {
                reached.push(COPY_DEPTH0_DONE)
            }
            _ => {}
        }
        for s in by_op.get(&i).into_iter().flatten() {
            if !states.contains(&s.visible) {
                return Err(format!(
                    "at {} ms, during {}, clients saw {} — neither the tree before {} nor one \
                     the request may leave (a half-moved or half-copied tree, or a lost source)",
                    s.at_ns / 1_000_000,
                    r.describe(),
                    paths(&s.visible),
                    paths(&before)
                ));
            }
            state = s.visible.clone();
        }
        let want = match r.end {
            Some(TreeEnd::Done(_)) if r.unsynced => {
                return Err(format!(
                    "directory-fsync rule: {} was answered a success though the fsync of its \
                     directory after placing failed (the rename may not survive a crash)",
                    r.describe()
                ));
            }
            Some(TreeEnd::Done(done)) => {
                let after = states.get(1).unwrap_or(&before);
                let created = subtree(&before, destination(r)).is_none();
                let answer_ok = match (r.method, done) {
                    (TreeMethod::Delete, TreeDone::Deleted) => true,
                    (TreeMethod::Delete, _) | (_, TreeDone::Deleted) => false,
                    (_, TreeDone::Created) => created,
                    (_, TreeDone::Replaced) => !created,
                };
                if !answer_ok {
                    return Err(format!("{} was answered {done:?}", r.describe()));
                }
                Some((after, "answered success (201/204)"))
            }
            // The directory's fsync failed after placing (decision 0131): the whole result
            // is in place and the answer is 500, never a success.
            Some(TreeEnd::Failed(_)) if r.unsynced => {
                if state == before && !states[1..].contains(&before) {
                    return Err(format!(
                        "directory-fsync rule: {} failed the fsync of its directory after \
                         placing, and clients then saw the tree before it (the placed result \
                         was undone)",
                        r.describe()
                    ));
                }
                None
            }
            Some(TreeEnd::Failed(_)) => Some((&before, "answered with an error")),
            _ => None,
        };
        if let Some((want, how)) = want
            && state != *want
        {
            return Err(format!(
                "{} {how}, and clients then saw {}, not {}",
                r.describe(),
                paths(&state),
                paths(want)
            ));
        }
    }
    leases_and_names_held(t)?;
    o.coverage.extend(reached);
    Ok(())
}

/// Coverage goals: MKCOL and Depth-0 COPY answered and killed between steps.
pub(crate) const MKCOL_CREATED: &str = "dav tree: a MKCOL created a collection";
pub(crate) const MKCOL_KILLED: &str = "dav tree: a MKCOL's worker was killed between steps";
pub(crate) const COPY_DEPTH0_DONE: &str = "dav tree: a Depth-0 COPY of a collection succeeded";
pub(crate) const COPY_DEPTH0_KILLED: &str =
    "dav tree: a Depth-0 COPY's worker was killed between steps";

fn leases_and_names_held(t: &TreeOutcome) -> Result<(), String> {
    if let Some((at, name, w)) = t.stale_leases.first() {
        return Err(format!(
            "at {} ms the broker still held the lease on {name} for w{w}, which the parent \
             had let go (leaked)",
            at / 1_000_000
        ));
    }
    if let Some((at, n)) = t.idle_leases.first() {
        return Err(format!(
            "at {} ms the broker held {n} tree lease(s) while no tree request was in flight \
             (leaked)",
            at / 1_000_000
        ));
    }
    if t.idle_observations == 0 {
        return Err("the broker was never observed with the tree client idle".into());
    }
    if let Some((at, path, w)) = t.stale_private.first() {
        return Err(format!(
            "at {} ms the private name {path} of w{w} was still there after the parent let \
             w{w} go (its cleanup missed it)",
            at / 1_000_000
        ));
    }
    if t.private_at_end > 0 {
        return Err(format!(
            "{} private names (staging copies, trash) were left when the run ended",
            t.private_at_end
        ));
    }
    Ok(())
}
