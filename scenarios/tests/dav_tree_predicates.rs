//! The predicates of `dav-move-crash-between-steps` reject the outcomes they exist to
//! catch: a half-moved tree, a leaked lease, a private name the cleanup missed.

use servery_core::supervisor::Platform;
use servery_scenarios::{find, judge_as, run};
use servery_sim::{Outcome, TreeEnd, TreeMethod};

const NAME: &str = "dav-move-crash-between-steps";

/// The first seed whose run holds and has a MOVE of a collection that succeeded.
fn passing_run() -> (u64, Outcome, usize) {
    let scenario = find(NAME).expect("the scenario");
    for seed in 0..50 {
        let r = run(scenario, seed, Platform::Posix, false);
        assert!(r.verdict.is_ok(), "seed {seed}: {:?}", r.verdict);
        let t = &r.outcome.dav_tree;
        let moved = t.ops.iter().enumerate().position(|(i, op)| {
            let inside = op.to.as_ref().map(|to| format!("{to}/"));
            op.method == TreeMethod::Move
                && matches!(op.end, Some(TreeEnd::Done(_)))
                && t.snapshots.iter().any(|s| {
                    s.op == Some(i)
                        && inside
                            .as_ref()
                            .is_some_and(|d| s.visible.keys().any(|p| p.starts_with(d)))
                })
        });
        if let Some(i) = moved {
            return (seed, r.outcome, i);
        }
    }
    panic!("no run of seeds 0..50 moved a collection successfully");
}

fn judge(seed: u64, o: &mut Outcome) -> Result<(), String> {
    judge_as(find(NAME).expect("the scenario"), seed, Platform::Posix, o)
}

#[test]
fn a_half_moved_tree_is_caught() {
    let (seed, outcome, i) = passing_run();
    let mut o = outcome.clone();
    let to = o.dav_tree.ops[i].to.clone().expect("a destination");
    let snap = o
        .dav_tree
        .snapshots
        .iter_mut()
        .find(|s| s.op == Some(i) && s.visible.keys().any(|p| p.starts_with(&format!("{to}/"))))
        .expect("the moved tree at its destination");
    let member = snap
        .visible
        .keys()
        .find(|p| p.starts_with(&format!("{to}/")))
        .cloned()
        .expect("a member");
    snap.visible.remove(&member);
    let err = judge(seed, &mut o).expect_err("a half-moved tree passed");
    assert!(err.contains("half-moved"), "{err}");
}

#[test]
fn a_leaked_lease_or_a_missed_private_name_is_caught() {
    let (seed, outcome, _) = passing_run();
    let mut o = outcome.clone();
    o.dav_tree
        .stale_leases
        .push((1_000_000_000, "/a".into(), 3));
    let err = judge(seed, &mut o).expect_err("a dead worker's lease passed");
    assert!(err.contains("had let go (leaked)"), "{err}");
    let mut o = outcome.clone();
    o.dav_tree.idle_leases.push((1_000_000_000, 1));
    let err = judge(seed, &mut o).expect_err("a lease held while idle passed");
    assert!(err.contains("no tree request was in flight"), "{err}");
    let mut o = outcome.clone();
    o.dav_tree
        .stale_private
        .push((1_000_000_000, "/.servery-tmp-3-copy-1".into(), 3));
    let err = judge(seed, &mut o).expect_err("a missed private name passed");
    assert!(err.contains("its cleanup missed it"), "{err}");
    let mut o = outcome;
    o.dav_tree.private_at_end = 1;
    let err = judge(seed, &mut o).expect_err("a private name left at the end passed");
    assert!(err.contains("left when the run ended"), "{err}");
}
