//! One chunk of a resumable upload: the real driver of the core's [`ChunkFlow`], which
//! decides the order of the steps and what every way out keeps or gives back (see
//! [`super::partial`] for the files). Here each action is carried out against the broker
//! and the file system, and what happened goes back.

use std::fs::File;
use std::sync::Arc;

use servery_core::chunk_flow::{
    ChunkAction, ChunkDone, ChunkEvent, ChunkFailure, ChunkFlow, ChunkOptions,
};
use servery_core::precondition::{Conditions, lease_wait};
use servery_core::proto::{BrokerRequest, Rejection};
use servery_core::write_flow::Existing as FlowExisting;

use super::file::{error_of, failure};
use super::partial::{discard, look, open_data, record};
use super::publish::{Published, publish, sync_directory};
use super::stream::{ChunkSource, RESUMABLE_BATCH, copy};
use super::target::{Existing, Target};
use super::{Grant, WriteError, Writer, blocking};

/// What one chunk achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkOutcome {
    /// More is needed; `have` bytes are held.
    Incomplete { have: u64 },
    /// The last byte arrived and the file is published.
    Complete(Published),
}

/// The grants a chunk holds while it runs; each gives itself back from `Drop` unless
/// the flow has kept or released it first.
#[derive(Default)]
struct Grants {
    reservation: Option<Grant>,
    lease: Option<Grant>,
    partial: Option<Grant>,
}

/// Keeps `e` for the answer and reports its kind to the flow.
fn fail(e: WriteError, error: &mut Option<WriteError>) -> ChunkEvent {
    let f = failure(&e);
    *error = Some(e);
    ChunkEvent::Failed(f)
}

fn answer(
    done: Result<ChunkDone, ChunkFailure>,
    error: Option<WriteError>,
) -> Result<ChunkOutcome, WriteError> {
    match done {
        Ok(ChunkDone::Incomplete { have }) => Ok(ChunkOutcome::Incomplete { have }),
        Ok(ChunkDone::Complete(p)) => Ok(ChunkOutcome::Complete(match p {
            servery_core::write_flow::Published::Created => Published::Created,
            servery_core::write_flow::Published::Replaced => Published::Replaced,
        })),
        Err(ChunkFailure::RangeMismatch { total, held }) => {
            Err(WriteError::RangeMismatch { total, held })
        }
        Err(ChunkFailure::RangeGap { start, have }) => Err(WriteError::RangeGap { start, have }),
        Err(ChunkFailure::Write(f)) => Err(error.unwrap_or_else(|| error_of(f))),
    }
}

/// Receives one chunk of a resumable upload. A chunk cut short by its client keeps what
/// arrived (the answer is the body's error; `bytes */total` then tells how much is held).
pub async fn chunk<S: ChunkSource>(
    w: &Writer,
    target: Target,
    range: (u64, u64, u64),
    if_none_match_star: bool,
    conditions: &Conditions<'_>,
    source: &mut S,
) -> Result<ChunkOutcome, WriteError> {
    let (start, end, total) = range;
    let settings = Arc::clone(&w.settings);
    let mut flow = ChunkFlow::new(ChunkOptions {
        start,
        end,
        total,
        overwrite: settings.allow_overwrite,
        create_only: if_none_match_star,
    });
    let mut grants = Grants::default();
    let mut file: Option<File> = None;
    // The error behind the last failure reported, for the answer.
    let mut error: Option<WriteError> = None;
    while let Some(action) = flow.next_action() {
        let event = match action {
            ChunkAction::Reserve { bytes } => match Grant::reserve_upload(&w.broker, bytes).await {
                Ok(g) => {
                    let id = g.id();
                    grants.reservation = Some(g);
                    ChunkEvent::Granted(id)
                }
                Err(e) => fail(e, &mut error),
            },
            ChunkAction::Lease => {
                let wait = lease_wait(settings.write_lock_timeout, conditions.any_for_write());
                match Grant::lease(&w.broker, &target.key, wait).await {
                    Ok(g) => {
                        let id = g.id();
                        grants.lease = Some(g);
                        ChunkEvent::Granted(id)
                    }
                    Err(e) => fail(e, &mut error),
                }
            }
            ChunkAction::InspectTarget => {
                // The preconditions are judged here, under the target lease, for every
                // chunk: the file a resumable upload will replace must still be the one
                // the client named.
                let t = target.clone();
                let conditional = conditions.any_for_write();
                let looked = blocking(move || t.look(conditional)).await;
                match looked.and_then(|looked| looked.judge(conditions)) {
                    Ok(Existing::Nothing) => ChunkEvent::Target(FlowExisting::Nothing),
                    Ok(Existing::File) => ChunkEvent::Target(FlowExisting::File),
                    Ok(Existing::Directory) => ChunkEvent::Target(FlowExisting::Directory),
                    Err(e) => fail(e, &mut error),
                }
            }
            ChunkAction::InspectPartial => {
                let (t, ttl) = (target.clone(), settings.partial_ttl);
                match blocking(move || Ok(look(&t.dir, &t.key, ttl)?)).await {
                    Ok(held) => ChunkEvent::Held(held),
                    Err(e) => fail(e, &mut error),
                }
            }
            ChunkAction::DiscardStale => {
                let t = target.clone();
                tracing::info!(target = %t.name, "discarding an abandoned partial upload");
                match blocking(move || Ok(discard(&t.dir, &t.key)?)).await {
                    Ok(()) => ChunkEvent::Discarded,
                    Err(e) => fail(e, &mut error),
                }
            }
            ChunkAction::TakePartial { adopt } => {
                match Grant::partial(&w.broker, &target.key, total, adopt).await {
                    Ok(Some(g)) => {
                        let id = g.id();
                        grants.partial = Some(g);
                        ChunkEvent::Granted(id)
                    }
                    Ok(None) => ChunkEvent::Refused(Rejection::Busy),
                    Err(WriteError::LeaseLost) if adopt => ChunkEvent::Refused(Rejection::NotFound),
                    Err(e) => fail(e, &mut error),
                }
            }
            ChunkAction::TakeOver(id) => {
                w.broker.release(BrokerRequest::ReleasePartial { id });
                continue;
            }
            ChunkAction::Record(id) => {
                let (t, worker) = (target.clone(), settings.worker_id);
                match blocking(move || Ok(record(&t, worker, total, id)?)).await {
                    Ok(()) => ChunkEvent::Recorded,
                    Err(e) => fail(e, &mut error),
                }
            }
            ChunkAction::OpenAt { at } => {
                let t = target.clone();
                match blocking(move || Ok(open_data(&t.dir, &t.key, at)?)).await {
                    Ok(f) => {
                        file = Some(f);
                        ChunkEvent::Opened
                    }
                    Err(e) => fail(e, &mut error),
                }
            }
            ChunkAction::Copy { skip } => {
                let Some(f) = file.take() else {
                    return Err(WriteError::Io(std::io::Error::other("no partial file")));
                };
                let mut held: Vec<&mut Grant> = grants
                    .lease
                    .iter_mut()
                    .chain(&mut grants.reservation)
                    .collect();
                let copied = copy(source, f, skip, RESUMABLE_BATCH, &mut held, &w.broker).await;
                file = copied.file;
                let result = match copied.result {
                    Ok(()) => Ok(()),
                    Err(e) => {
                        let f = failure(&e);
                        error = Some(e);
                        Err(f)
                    }
                };
                ChunkEvent::Copied {
                    written: copied.written,
                    file: file.is_some(),
                    result,
                }
            }
            ChunkAction::Sync => {
                let Some(f) = file.take() else {
                    return Err(WriteError::Io(std::io::Error::other("no partial file")));
                };
                // The file is kept: the last chunk's publishing rename follows a sync.
                match blocking(move || f.sync_data().map(|()| f).map_err(WriteError::Io)).await {
                    Ok(f) => {
                        file = Some(f);
                        ChunkEvent::Synced
                    }
                    Err(e) => fail(e, &mut error),
                }
            }
            ChunkAction::ConfirmLease => match grants.lease.as_mut() {
                Some(g) => match g.renew_if_due().await {
                    Ok(()) => ChunkEvent::Granted(g.id()),
                    Err(e) => fail(e, &mut error),
                },
                None => fail(WriteError::LeaseLost, &mut error),
            },
            ChunkAction::Publish { overwrite } => {
                let Some(f) = file.take() else {
                    return Err(WriteError::Io(std::io::Error::other("no partial file")));
                };
                let (root, t) = (w.root.dir(), target.clone());
                // The grants go into the blocking job: if hyper drops this handler while
                // the rename runs, they are still given back only after it.
                let held = std::mem::take(&mut grants);
                let done = blocking(move || {
                    let (data, _) = super::partial::names(&t.key);
                    Ok((publish(&root, &t, &f, &data, overwrite), held))
                })
                .await;
                match done {
                    Ok((result, held)) => {
                        grants = held;
                        match result {
                            Ok(p) => ChunkEvent::Published {
                                replaced: p == Published::Replaced,
                            },
                            Err(e) => fail(e, &mut error),
                        }
                    }
                    Err(e) => fail(e, &mut error),
                }
            }
            ChunkAction::SyncDirectory => {
                let dir = Arc::clone(&target.dir);
                match blocking(move || Ok(sync_directory(&dir)?)).await {
                    Ok(()) => ChunkEvent::Synced,
                    Err(e) => fail(e, &mut error),
                }
            }
            ChunkAction::RemovePartial => {
                let t = target.clone();
                match blocking(move || Ok(discard(&t.dir, &t.key)?)).await {
                    Ok(()) => ChunkEvent::Removed,
                    Err(e) => fail(e, &mut error),
                }
            }
            ChunkAction::KeepPartial(_) => {
                // Stays in the broker, owned by this worker, for the next chunk.
                if let Some(g) = grants.partial.take() {
                    g.keep();
                }
                continue;
            }
            ChunkAction::ReleasePartial(_) => {
                drop(grants.partial.take());
                continue;
            }
            ChunkAction::ReleaseLease(_) => {
                // Given back and confirmed before the answer, so the client's next chunk,
                // through any worker, finds the target free.
                if let Some(g) = grants.lease.take() {
                    g.release().await;
                }
                continue;
            }
            ChunkAction::ReleaseReservation(_) => {
                drop(grants.reservation.take());
                continue;
            }
            ChunkAction::Finish(done) => return answer(done, error.take()),
        };
        flow.handle(event);
    }
    Err(WriteError::Io(std::io::Error::other(
        "the chunk flow ended without an answer",
    )))
}
