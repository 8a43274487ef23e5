use super::*;
use proptest::prelude::*;

/// A tree in the model: whose content it is, and whether all of it is there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tree {
    Complete(char),
    /// Created but not yet filled: a half-built copy.
    Partial(char),
    /// Filled but not yet made durable: whole until the power goes, then part of it.
    Volatile(char),
}

/// The model file system: the two visible names, and the private ones a crash leaves to
/// the parent's sweep.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Fs {
    source: Option<Tree>,
    destination: Option<Tree>,
    staging: Option<Tree>,
    trash_destination: Option<Tree>,
    trash_source: Option<Tree>,
}

/// How the model world behaves.
#[derive(Debug, Clone, Copy)]
struct World {
    /// Source and destination are collections (else plain files).
    collections: bool,
    /// The destination exists before the operation.
    destination_exists: bool,
    /// The rename crosses file systems.
    cross_device: bool,
}

const LEASES: [LeaseId; 2] = [LeaseId(7), LeaseId(8)];

fn kind(t: Option<Tree>, collections: bool) -> Existing {
    match t {
        None => Existing::Nothing,
        Some(_) if collections => Existing::Directory,
        Some(_) => Existing::File,
    }
}

fn before(op: TreeOp, w: World) -> Fs {
    Fs {
        source: (op != TreeOp::MakeCollection).then_some(Tree::Complete('A')),
        destination: (w.destination_exists && op != TreeOp::Delete).then_some(Tree::Complete('B')),
        ..Fs::default()
    }
}

/// Runs the flow against the model; stops (the worker dies) after `crash_after` actions.
/// Returns the file system, the leases still held, and the answer if one was given.
fn run(
    op: TreeOp,
    w: World,
    crash_after: usize,
) -> (Fs, Vec<LeaseId>, Option<Result<TreeDone, WriteFailure>>) {
    let mut fs = before(op, w);
    let mut flow = TreeFlow::new(TreeOptions {
        op,
        overwrite: true,
        source_first: true,
    });
    let mut held: Vec<LeaseId> = Vec::new();
    let mut taken = 0;
    while let Some(action) = flow.next_action() {
        if taken == crash_after {
            return (fs, held, None);
        }
        taken += 1;
        assert!(taken < 100, "the flow ends");
        let must_hold = |held: &[LeaseId]| {
            let need = if matches!(op, TreeOp::Copy { .. } | TreeOp::Move) {
                2
            } else {
                1
            };
            assert_eq!(held.len(), need, "{action:?} under every lease");
        };
        let event = match action {
            TreeAction::Lease(_) => {
                let id = LEASES[held.len()];
                held.push(id);
                TreeEvent::Leased(id)
            }
            TreeAction::Inspect => TreeEvent::Found {
                source: kind(fs.source, w.collections),
                destination: kind(fs.destination, w.collections),
            },
            TreeAction::CreateStaging => {
                let Some(Tree::Complete(c)) = fs.source else {
                    panic!("staging a copy of nothing");
                };
                fs.staging = Some(Tree::Partial(c));
                TreeEvent::Staged
            }
            TreeAction::FillStaging { infinity } => {
                // Depth 0 copies the collection alone; a deep copy, and a move that
                // crosses devices, copy all of it.
                assert_eq!(
                    infinity,
                    op != (TreeOp::Copy { infinity: false }),
                    "{op:?} fills to the wrong depth"
                );
                let Some(Tree::Partial(c)) = fs.staging else {
                    panic!("filling no staging");
                };
                fs.staging = Some(Tree::Volatile(c));
                TreeEvent::Filled
            }
            TreeAction::SyncStaging => {
                let Some(Tree::Volatile(c)) = fs.staging else {
                    panic!("syncing no filled staging");
                };
                fs.staging = Some(Tree::Complete(c));
                TreeEvent::Synced
            }
            TreeAction::SyncDirectory => TreeEvent::Synced,
            TreeAction::ConfirmLeases => TreeEvent::Confirmed,
            TreeAction::TrashDestination => {
                must_hold(&held);
                fs.trash_destination = fs.destination.take();
                TreeEvent::Trashed
            }
            TreeAction::TrashSource => {
                must_hold(&held);
                fs.trash_source = fs.source.take();
                TreeEvent::Trashed
            }
            TreeAction::Place(placing) => {
                must_hold(&held);
                if fs.destination.is_some() && w.collections {
                    // rename(2) over a non-empty directory: ENOTEMPTY.
                    TreeEvent::Failed(WriteFailure::Io)
                } else {
                    match placing {
                        Placing::NewCollection => {
                            fs.destination = Some(Tree::Complete('N'));
                            TreeEvent::Placed
                        }
                        Placing::Source if w.cross_device => TreeEvent::CrossDevice,
                        Placing::Source => {
                            fs.destination = fs.source.take();
                            TreeEvent::Placed
                        }
                        Placing::Staging => {
                            fs.destination = fs.staging.take();
                            TreeEvent::Placed
                        }
                    }
                }
            }
            TreeAction::Properties => TreeEvent::PropertiesDone,
            TreeAction::Untrash => {
                fs.destination = fs.trash_destination.take();
                continue;
            }
            TreeAction::RemoveTrash => {
                fs.trash_destination = None;
                fs.trash_source = None;
                continue;
            }
            TreeAction::RemoveStaging => {
                fs.staging = None;
                continue;
            }
            TreeAction::ReleaseLease(id) => {
                held.retain(|h| *h != id);
                continue;
            }
            TreeAction::Finish(result) => return (fs, held, Some(result)),
        };
        flow.handle(event);
    }
    panic!("the flow ended without an answer");
}

/// What the parent's cleanup of a dead worker does: its private names go.
fn swept(mut fs: Fs) -> Fs {
    fs.staging = None;
    fs.trash_destination = None;
    fs.trash_source = None;
    fs
}

/// What a power loss does: what was written and not made durable is only partly there.
fn power_lost(mut fs: Fs) -> Fs {
    for t in [
        &mut fs.source,
        &mut fs.destination,
        &mut fs.staging,
        &mut fs.trash_destination,
        &mut fs.trash_source,
    ] {
        if let Some(Tree::Volatile(c)) = *t {
            *t = Some(Tree::Partial(c));
        }
    }
    fs
}

/// The visible states a client may find after a crash: before, after, and for an
/// operation that must move a collection-involved destination out of the way first, the
/// destination gone with the source untouched (the replaced destination was given up).
fn allowed(op: TreeOp, w: World) -> Vec<(Option<Tree>, Option<Tree>)> {
    let b = before(op, w);
    let a = Some(Tree::Complete('A'));
    let mut states = vec![(b.source, b.destination)];
    match op {
        TreeOp::MakeCollection => states.push((None, Some(Tree::Complete('N')))),
        TreeOp::Delete => states.push((None, None)),
        TreeOp::Copy { .. } => states.push((a, a)),
        TreeOp::Move => {
            states.push((None, a));
            if w.cross_device {
                // The copy is in place, the source not yet gone: two complete trees.
                states.push((a, a));
            }
        }
    }
    if w.destination_exists && w.collections && matches!(op, TreeOp::Copy { .. } | TreeOp::Move) {
        states.push((a, None));
    }
    states
}

fn ops() -> impl Strategy<Value = TreeOp> {
    prop_oneof![
        Just(TreeOp::MakeCollection),
        Just(TreeOp::Delete),
        any::<bool>().prop_map(|infinity| TreeOp::Copy { infinity }),
        Just(TreeOp::Move),
    ]
}

proptest! {
    /// A crash between any two steps leaves no half-built tree and nothing of the
    /// source lost: after the parent's sweep a client sees the state before, the state
    /// after, or (replacing a collection) the destination given up.
    #[test]
    fn a_crash_at_any_step_shows_no_half_tree(
        op in ops(),
        collections in any::<bool>(),
        destination_exists in any::<bool>(),
        cross_device in any::<bool>(),
        crash_after in 0usize..30,
    ) {
        let w = World { collections, destination_exists, cross_device };
        let (fs, _, _) = run(op, w, crash_after);
        let fs = swept(fs);
        let visible = (fs.source, fs.destination);
        prop_assert!(
            allowed(op, w).contains(&visible),
            "{op:?} {w:?} crash after {crash_after}: visible {visible:?}"
        );
    }

    /// The machine loses power between any two steps (a torn rename: after the placing
    /// rename, before the directory's fsync, included): what a client sees after the
    /// restart and the sweep is whole, never a copy only partly on the disk.
    #[test]
    fn a_power_loss_at_any_step_shows_no_half_tree(
        op in ops(),
        collections in any::<bool>(),
        destination_exists in any::<bool>(),
        cross_device in any::<bool>(),
        crash_after in 0usize..30,
    ) {
        let w = World { collections, destination_exists, cross_device };
        let (fs, _, _) = run(op, w, crash_after);
        let fs = swept(power_lost(fs));
        let visible = (fs.source, fs.destination);
        prop_assert!(
            allowed(op, w).contains(&visible),
            "torn-rename rule: {op:?} {w:?} power lost after {crash_after}: visible {visible:?} \
             (a copy placed before it was made durable)"
        );
    }

    /// Run to the end: the operation's result is there, nothing private is left, every
    /// lease is back.
    #[test]
    fn a_whole_operation_cleans_up(
        op in ops(),
        collections in any::<bool>(),
        destination_exists in any::<bool>(),
        cross_device in any::<bool>(),
    ) {
        let w = World { collections, destination_exists, cross_device };
        let (fs, held, result) = run(op, w, usize::MAX);
        prop_assert!(held.is_empty(), "leases left: {held:?}");
        prop_assert_eq!(fs.staging, None);
        prop_assert_eq!(fs.trash_destination, None);
        prop_assert_eq!(fs.trash_source, None);
        let existed = destination_exists && op != TreeOp::Delete;
        let expected = match op {
            TreeOp::MakeCollection if existed => Err(WriteFailure::Exists),
            TreeOp::MakeCollection => Ok(TreeDone::Created),
            TreeOp::Delete => Ok(TreeDone::Deleted),
            _ if existed => Ok(TreeDone::Replaced),
            _ => Ok(TreeDone::Created),
        };
        prop_assert_eq!(result, Some(expected));
    }
}

#[test]
fn a_move_in_order() {
    let mut flow = TreeFlow::new(TreeOptions {
        op: TreeOp::Move,
        overwrite: true,
        source_first: false,
    });
    let mut taken = Vec::new();
    for event in [
        TreeEvent::Leased(LeaseId(1)),
        TreeEvent::Leased(LeaseId(2)),
        TreeEvent::Found {
            source: Existing::Directory,
            destination: Existing::Directory,
        },
        TreeEvent::Confirmed,
        TreeEvent::Trashed,
        TreeEvent::Placed,
        TreeEvent::Synced,
        TreeEvent::PropertiesDone,
    ] {
        taken.push(flow.next_action().expect("an action"));
        flow.handle(event);
    }
    while let Some(a) = flow.next_action() {
        taken.push(a);
    }
    assert_eq!(
        taken,
        vec![
            TreeAction::Lease(Side::Destination),
            TreeAction::Lease(Side::Source),
            TreeAction::Inspect,
            TreeAction::ConfirmLeases,
            TreeAction::TrashDestination,
            TreeAction::Place(Placing::Source),
            TreeAction::SyncDirectory,
            TreeAction::Properties,
            TreeAction::RemoveTrash,
            TreeAction::ReleaseLease(LeaseId(2)),
            TreeAction::ReleaseLease(LeaseId(1)),
            TreeAction::Finish(Ok(TreeDone::Replaced)),
        ]
    );
}

#[test]
fn a_failed_placing_puts_the_destination_back() {
    let mut flow = TreeFlow::new(TreeOptions {
        op: TreeOp::Copy { infinity: true },
        overwrite: true,
        source_first: true,
    });
    for event in [
        TreeEvent::Leased(LeaseId(1)),
        TreeEvent::Leased(LeaseId(2)),
        TreeEvent::Found {
            source: Existing::Directory,
            destination: Existing::File,
        },
        TreeEvent::Staged,
        TreeEvent::Filled,
        TreeEvent::Synced,
        TreeEvent::Confirmed,
        TreeEvent::Trashed,
    ] {
        flow.next_action().expect("an action");
        flow.handle(event);
    }
    assert_eq!(
        flow.next_action(),
        Some(TreeAction::Place(Placing::Staging))
    );
    flow.handle(TreeEvent::Failed(WriteFailure::NoSpace));
    let rest: Vec<TreeAction> = std::iter::from_fn(|| flow.next_action()).collect();
    assert_eq!(
        rest,
        vec![
            TreeAction::RemoveStaging,
            TreeAction::Untrash,
            TreeAction::ReleaseLease(LeaseId(2)),
            TreeAction::ReleaseLease(LeaseId(1)),
            TreeAction::Finish(Err(WriteFailure::NoSpace)),
        ]
    );
}

#[test]
fn refusals_and_missing_sources_end_with_the_leases_back() {
    let mut flow = TreeFlow::new(TreeOptions {
        op: TreeOp::Move,
        overwrite: false,
        source_first: true,
    });
    flow.next_action();
    flow.handle(TreeEvent::Leased(LeaseId(1)));
    flow.next_action();
    flow.handle(TreeEvent::Refused(Rejection::Busy));
    let rest: Vec<TreeAction> = std::iter::from_fn(|| flow.next_action()).collect();
    assert_eq!(
        rest,
        vec![
            TreeAction::ReleaseLease(LeaseId(1)),
            TreeAction::Finish(Err(WriteFailure::Busy)),
        ]
    );
    let mut flow = TreeFlow::new(TreeOptions {
        op: TreeOp::Delete,
        overwrite: true,
        source_first: true,
    });
    flow.next_action();
    flow.handle(TreeEvent::Leased(LeaseId(3)));
    flow.next_action();
    flow.handle(TreeEvent::Found {
        source: Existing::Nothing,
        destination: Existing::Nothing,
    });
    assert_eq!(
        flow.next_action(),
        Some(TreeAction::ReleaseLease(LeaseId(3)))
    );
    assert_eq!(
        flow.next_action(),
        Some(TreeAction::Finish(Err(WriteFailure::NotFound)))
    );
}

/// Drives a COPY of a collection over an existing file to the step `failing`, which fails
/// with `failure`; returns the rest of the actions.
fn copy_failing_at(failing: TreeAction, failure: WriteFailure) -> Vec<TreeAction> {
    let mut flow = TreeFlow::new(TreeOptions {
        op: TreeOp::Copy { infinity: true },
        overwrite: true,
        source_first: true,
    });
    let mut leases = 0u128;
    while let Some(action) = flow.next_action() {
        if action == failing {
            flow.handle(TreeEvent::Failed(failure));
            return std::iter::from_fn(|| flow.next_action()).collect();
        }
        let event = match action {
            TreeAction::Lease(_) => {
                leases += 1;
                TreeEvent::Leased(LeaseId(leases))
            }
            TreeAction::Inspect => TreeEvent::Found {
                source: Existing::Directory,
                destination: Existing::File,
            },
            TreeAction::CreateStaging => TreeEvent::Staged,
            TreeAction::FillStaging { .. } => TreeEvent::Filled,
            TreeAction::SyncStaging | TreeAction::SyncDirectory => TreeEvent::Synced,
            TreeAction::ConfirmLeases => TreeEvent::Confirmed,
            TreeAction::TrashDestination | TreeAction::TrashSource => TreeEvent::Trashed,
            TreeAction::Place(_) => TreeEvent::Placed,
            TreeAction::Properties => TreeEvent::PropertiesDone,
            _ => continue,
        };
        flow.handle(event);
    }
    panic!("{failing:?} never came");
}

#[test]
fn a_copy_that_cannot_be_made_durable_places_nothing() {
    for failure in [WriteFailure::NoSpace, WriteFailure::Io] {
        assert_eq!(
            copy_failing_at(TreeAction::SyncStaging, failure),
            vec![
                TreeAction::RemoveStaging,
                TreeAction::ReleaseLease(LeaseId(2)),
                TreeAction::ReleaseLease(LeaseId(1)),
                TreeAction::Finish(Err(failure)),
            ],
            "fsync rule: a copy whose fsync failed is never placed, and goes"
        );
    }
}

#[test]
fn a_placing_rename_not_made_durable_is_answered_as_a_failure() {
    assert_eq!(
        copy_failing_at(TreeAction::SyncDirectory, WriteFailure::Io),
        vec![
            TreeAction::RemoveTrash,
            TreeAction::ReleaseLease(LeaseId(2)),
            TreeAction::ReleaseLease(LeaseId(1)),
            TreeAction::Finish(Err(WriteFailure::Io)),
        ],
        "directory-fsync rule: the placed copy stays (it is whole), the replaced \
         destination goes, and the answer is 500"
    );
}
