use super::*;
use proptest::prelude::*;

fn opts(reserve: Option<u64>, overwrite: bool, create_only: bool) -> WriteOptions {
    WriteOptions {
        reserve,
        overwrite,
        create_only,
    }
}

/// Runs a flow with a driver that answers each action with `answer`, collecting every
/// action taken.
fn run(
    options: WriteOptions,
    mut answer: impl FnMut(&WriteAction) -> Option<WriteEvent>,
) -> Vec<WriteAction> {
    let mut flow = WriteFlow::new(options);
    let mut taken = Vec::new();
    while let Some(action) = flow.next_action() {
        taken.push(action.clone());
        if let Some(event) = answer(&action) {
            flow.handle(event);
        }
        assert!(taken.len() < 100, "the flow ends: {taken:?}");
    }
    assert!(flow.is_done(), "no action left but not done: {taken:?}");
    taken
}

fn happy(action: &WriteAction) -> Option<WriteEvent> {
    Some(match action {
        WriteAction::Reserve { .. } => WriteEvent::Reserved(LeaseId(1)),
        WriteAction::Lease | WriteAction::ConfirmLease => WriteEvent::Leased(LeaseId(2)),
        WriteAction::Inspect => WriteEvent::Target(Existing::File),
        WriteAction::CreateTemp => WriteEvent::TempCreated,
        WriteAction::Stream => WriteEvent::Streamed,
        WriteAction::SyncTemp | WriteAction::SyncDirectory => WriteEvent::Synced,
        WriteAction::Publish { .. } => WriteEvent::Published { replaced: true },
        WriteAction::RemoveTemp
        | WriteAction::ReleaseLease(_)
        | WriteAction::ReleaseReservation(_)
        | WriteAction::Finish(_) => return None,
    })
}

#[test]
fn the_five_steps_in_order() {
    let taken = run(opts(Some(9), true, false), happy);
    assert_eq!(
        taken,
        vec![
            WriteAction::Reserve { bytes: 9 },
            WriteAction::Lease,
            WriteAction::Inspect,
            WriteAction::CreateTemp,
            WriteAction::Stream,
            WriteAction::SyncTemp,
            WriteAction::ConfirmLease,
            WriteAction::Publish { overwrite: true },
            WriteAction::SyncDirectory,
            WriteAction::ReleaseLease(LeaseId(2)),
            WriteAction::ReleaseReservation(LeaseId(1)),
            WriteAction::Finish(Ok(Published::Replaced)),
        ]
    );
    // A caller's reservation is the caller's to give back.
    let taken = run(opts(None, true, false), happy);
    assert_eq!(taken[0], WriteAction::Lease);
    assert!(
        !taken
            .iter()
            .any(|a| matches!(a, WriteAction::ReleaseReservation(_)))
    );
}

#[test]
fn a_grant_means_what_was_asked_for() {
    let mut flow = WriteFlow::new(opts(Some(9), true, false));
    assert_eq!(flow.next_action(), Some(WriteAction::Reserve { bytes: 9 }));
    assert_eq!(flow.granted(LeaseId(1)), WriteEvent::Reserved(LeaseId(1)));
    flow.handle(WriteEvent::Reserved(LeaseId(1)));
    assert_eq!(flow.next_action(), Some(WriteAction::Lease));
    assert_eq!(flow.granted(LeaseId(2)), WriteEvent::Leased(LeaseId(2)));
    assert_eq!(flow.lease(), None);
    flow.handle(WriteEvent::Leased(LeaseId(2)));
    assert_eq!(flow.lease(), Some(LeaseId(2)));
}

#[test]
fn what_is_at_the_target_decides() {
    let with = |existing, overwrite, create_only| {
        run(opts(None, overwrite, create_only), |a| match a {
            WriteAction::Inspect => Some(WriteEvent::Target(existing)),
            a => happy(a),
        })
        .last()
        .cloned()
    };
    let finish = |r| Some(WriteAction::Finish(r));
    assert_eq!(
        with(Existing::File, false, false),
        finish(Err(WriteFailure::Exists))
    );
    assert_eq!(
        with(Existing::File, true, true),
        finish(Err(WriteFailure::PreconditionFailed))
    );
    assert_eq!(
        with(Existing::Directory, true, false),
        finish(Err(WriteFailure::IsDirectory))
    );
    assert_eq!(
        with(Existing::Nothing, false, true),
        finish(Ok(Published::Replaced))
    );
    let publish = run(opts(None, true, true), |a| match a {
        WriteAction::Inspect => Some(WriteEvent::Target(Existing::Nothing)),
        a => happy(a),
    });
    assert!(
        publish.contains(&WriteAction::Publish { overwrite: false }),
        "create-only never replaces, even where overwriting is allowed"
    );
}

#[test]
fn a_failed_stream_removes_the_temporary_file_and_gives_everything_back() {
    let taken = run(opts(Some(9), true, false), |a| match a {
        WriteAction::Stream => Some(WriteEvent::Failed(WriteFailure::Io)),
        a => happy(a),
    });
    assert_eq!(
        &taken[taken.len() - 4..],
        &[
            WriteAction::RemoveTemp,
            WriteAction::ReleaseLease(LeaseId(2)),
            WriteAction::ReleaseReservation(LeaseId(1)),
            WriteAction::Finish(Err(WriteFailure::Io)),
        ]
    );
    // A lost lease at the last moment publishes nothing.
    let taken = run(opts(None, true, false), |a| match a {
        WriteAction::ConfirmLease => Some(WriteEvent::Refused(Rejection::NotFound)),
        a => happy(a),
    });
    assert!(
        !taken
            .iter()
            .any(|a| matches!(a, WriteAction::Publish { .. }))
    );
    assert_eq!(
        taken.last(),
        Some(&WriteAction::Finish(Err(WriteFailure::LeaseLost)))
    );
}

#[test]
fn a_failed_fsync_of_the_file_publishes_nothing_and_removes_it() {
    for failure in [WriteFailure::Io, WriteFailure::NoSpace] {
        let taken = run(opts(Some(9), true, false), |a| match a {
            WriteAction::SyncTemp => Some(WriteEvent::Failed(failure)),
            a => happy(a),
        });
        assert!(
            !taken
                .iter()
                .any(|a| matches!(a, WriteAction::Publish { .. })),
            "fsync rule: nothing is renamed into place before its bytes are durable"
        );
        assert_eq!(
            &taken[taken.len() - 4..],
            &[
                WriteAction::RemoveTemp,
                WriteAction::ReleaseLease(LeaseId(2)),
                WriteAction::ReleaseReservation(LeaseId(1)),
                WriteAction::Finish(Err(failure)),
            ]
        );
    }
}

#[test]
fn a_failed_fsync_of_the_directory_is_answered_as_a_failure() {
    let taken = run(opts(Some(9), true, false), |a| match a {
        WriteAction::SyncDirectory => Some(WriteEvent::Failed(WriteFailure::Io)),
        a => happy(a),
    });
    // The rename happened: there is no temporary file left to remove, and the client
    // hears that the write is not known to be durable, with every grant given back.
    assert_eq!(
        &taken[taken.len() - 4..],
        &[
            WriteAction::SyncDirectory,
            WriteAction::ReleaseLease(LeaseId(2)),
            WriteAction::ReleaseReservation(LeaseId(1)),
            WriteAction::Finish(Err(WriteFailure::Io)),
        ],
        "directory-fsync rule: a rename not made durable is answered 500, not 201"
    );
}

/// A driver's answer to a reporting action: the success it asked for (with a fresh grant
/// id where one is granted, or what is at the target), or one of the ways it can fail.
fn any_answer() -> impl Strategy<Value = Option<WriteEvent>> {
    prop_oneof![
        4 => Just(None),
        1 => Just(Some(WriteEvent::Refused(Rejection::Busy))),
        1 => Just(Some(WriteEvent::Refused(Rejection::Saturated))),
        1 => Just(Some(WriteEvent::Refused(Rejection::Revoked))),
        1 => Just(Some(WriteEvent::NoAnswer)),
        1 => Just(Some(WriteEvent::Failed(WriteFailure::Io))),
        1 => Just(Some(WriteEvent::Failed(WriteFailure::NoSpace))),
        1 => Just(Some(WriteEvent::Failed(WriteFailure::Source))),
        1 => Just(Some(WriteEvent::Failed(WriteFailure::Abandoned))),
        // A driver bug: an answer to a question not asked.
        1 => Just(Some(WriteEvent::TempCreated)),
    ]
}

proptest! {
    /// Whatever a driver reports: the flow ends with one Finish, gives back every grant it
    /// took, removes the temporary file unless it was published, and publishes only with
    /// the lease it was granted, confirmed.
    #[test]
    fn every_way_out_gives_everything_back(
        reserve in proptest::option::of(1u64..100),
        overwrite in any::<bool>(),
        create_only in any::<bool>(),
        existing in prop_oneof![Just(Existing::Nothing), Just(Existing::File), Just(Existing::Directory)],
        answers in proptest::collection::vec(any_answer(), 0..12),
    ) {
        let mut flow = WriteFlow::new(opts(reserve, overwrite, create_only));
        let mut answers = answers.into_iter();
        let mut next_id = 10u128;
        let (mut granted, mut released) = (Vec::new(), Vec::new());
        let (mut temp, mut lease, mut confirmed) = (false, None, false);
        let (mut synced, mut renamed, mut dir_synced) = (false, false, false);
        let mut finished = 0;
        while let Some(action) = flow.next_action() {
            let success = match &action {
                WriteAction::Reserve { .. } => {
                    next_id += 1;
                    Some(WriteEvent::Reserved(LeaseId(next_id)))
                }
                WriteAction::Lease => {
                    next_id += 1;
                    Some(WriteEvent::Leased(LeaseId(next_id)))
                }
                WriteAction::ConfirmLease => lease.map(WriteEvent::Leased),
                WriteAction::Inspect => Some(WriteEvent::Target(existing)),
                WriteAction::CreateTemp => Some(WriteEvent::TempCreated),
                WriteAction::Stream => Some(WriteEvent::Streamed),
                WriteAction::SyncTemp => Some(WriteEvent::Synced),
                WriteAction::SyncDirectory => {
                    prop_assert!(renamed, "a directory fsync with nothing renamed");
                    Some(WriteEvent::Synced)
                }
                WriteAction::Publish { overwrite: o } => {
                    prop_assert!(lease.is_some() && confirmed, "published without a confirmed lease");
                    prop_assert!(synced, "renamed into place before its bytes were durable");
                    prop_assert!(!o || (overwrite && !create_only));
                    Some(WriteEvent::Published { replaced: existing == Existing::File })
                }
                WriteAction::RemoveTemp => {
                    prop_assert!(temp);
                    temp = false;
                    None
                }
                WriteAction::ReleaseLease(id) => {
                    prop_assert_eq!(Some(*id), lease);
                    released.push(*id);
                    None
                }
                WriteAction::ReleaseReservation(id) => {
                    released.push(*id);
                    None
                }
                WriteAction::Finish(result) => {
                    finished += 1;
                    prop_assert_eq!(flow.next_action(), None, "Finish is last");
                    if result.is_ok() {
                        prop_assert!(renamed && dir_synced, "answered a success not yet durable");
                    }
                    break;
                }
            };
            let Some(success) = success else { continue };
            let event = answers.next().flatten().unwrap_or(success);
            if event == success {
                match (&action, event) {
                    (WriteAction::Reserve { .. }, WriteEvent::Reserved(id)) => granted.push(id),
                    (WriteAction::Lease, WriteEvent::Leased(id)) => {
                        granted.push(id);
                        lease = Some(id);
                    }
                    (WriteAction::ConfirmLease, _) => confirmed = true,
                    (WriteAction::CreateTemp, _) => temp = true,
                    (WriteAction::SyncTemp, _) => synced = true,
                    (WriteAction::SyncDirectory, _) => dir_synced = true,
                    (WriteAction::Publish { .. }, _) => {
                        prop_assert!(temp, "published a temporary file that was never made");
                        temp = false;
                        renamed = true;
                    }
                    _ => {}
                }
            }
            flow.handle(event);
        }
        prop_assert_eq!(finished, 1);
        prop_assert!(!temp, "the temporary file outlived a failed write");
        let mut g = granted.clone();
        g.sort();
        released.sort();
        prop_assert_eq!(g, released, "every grant taken is given back, once");
    }
}
