//! One whole file through steps 2–5, for `PUT`, each file of a multipart `POST`, and the
//! empty resource a WebDAV LOCK creates: this is the real driver of the core's
//! [`WriteFlow`], which decides the order of the steps and what every way out gives back
//! (the simulator drives the same machine against its own file system). Here each action
//! is carried out against the broker and the file system, and what happened goes back.

use std::fs::File;
use std::sync::Arc;

use servery_core::broker::ClientError;
use servery_core::write_flow::{
    Existing as FlowExisting, WriteAction, WriteEvent, WriteFailure, WriteFlow, WriteOptions,
};

use super::publish::{Published, Stored, publish, sync_directory};
use super::stream::{BATCH, ChunkSource, copy};
use super::target::{Existing, Target};
use super::temp::TempFile;
use super::{Grant, LockCheck, WriteError, Writer, blocking, temp};
use servery_core::precondition::{Conditions, lease_wait};

/// The flow's summary of an error; the error itself is kept for the answer.
pub(crate) fn failure(e: &WriteError) -> WriteFailure {
    match e {
        WriteError::Saturated => WriteFailure::Saturated,
        WriteError::TooLarge { .. } | WriteError::TooManyFiles { .. } => WriteFailure::TooLarge,
        WriteError::Busy => WriteFailure::Busy,
        WriteError::Broker(_) => WriteFailure::BrokerUnavailable,
        WriteError::LeaseLost => WriteFailure::LeaseLost,
        WriteError::Exists | WriteError::PartialOverExisting => WriteFailure::Exists,
        WriteError::PreconditionFailed | WriteError::ConditionFalse => {
            WriteFailure::PreconditionFailed
        }
        WriteError::IsDirectory => WriteFailure::IsDirectory,
        WriteError::Incomplete { .. }
        | WriteError::BodyTimeout(_)
        | WriteError::Body(_)
        | WriteError::BadRequest(_) => WriteFailure::Source,
        WriteError::ShuttingDown => WriteFailure::Abandoned,
        WriteError::Locked => WriteFailure::Locked,
        WriteError::Io(e) if super::is_out_of_space(e) => WriteFailure::NoSpace,
        _ => WriteFailure::Io,
    }
}

/// Keeps `e` for the answer and reports its kind to the flow.
fn fail(e: WriteError, error: &mut Option<WriteError>) -> WriteEvent {
    let f = failure(&e);
    *error = Some(e);
    WriteEvent::Failed(f)
}

/// The answer for a failure the flow decided on its own (from what is at the target).
pub(crate) fn error_of(f: WriteFailure) -> WriteError {
    match f {
        WriteFailure::Saturated => WriteError::Saturated,
        WriteFailure::Busy => WriteError::Busy,
        WriteFailure::BrokerUnavailable => WriteError::Broker(ClientError::ParentGone),
        WriteFailure::LeaseLost => WriteError::LeaseLost,
        WriteFailure::Exists => WriteError::Exists,
        WriteFailure::PreconditionFailed => WriteError::PreconditionFailed,
        WriteFailure::IsDirectory => WriteError::IsDirectory,
        WriteFailure::Abandoned => WriteError::ShuttingDown,
        WriteFailure::Locked => WriteError::Locked,
        _ => WriteError::Io(std::io::Error::other("write failed")),
    }
}

/// Writes `source` to `target`. The caller holds `reservation` (taken before any byte of
/// the body was read); the target lease is taken here, before any byte of this file's
/// content is read, together with the WebDAV lock `check` when there is one. The request's
/// `conditions` (`If-Match`, `If-None-Match`, `If-Unmodified-Since`) are judged when the
/// target is looked at, under that lease: a write through another worker cannot come
/// between the check and this write.
pub async fn write_file<S: ChunkSource>(
    w: &Writer,
    target: &Target,
    reservation: &mut Grant,
    if_none_match_star: bool,
    check: Option<&LockCheck>,
    conditions: &Conditions<'_>,
    source: &mut S,
) -> Result<Stored, WriteError> {
    let mut flow = WriteFlow::new(WriteOptions {
        reserve: None,
        overwrite: w.settings.allow_overwrite,
        create_only: if_none_match_star,
    });
    let mut lease: Option<Grant> = None;
    // The temporary file's guard (it unlinks the private name when dropped) and the file.
    let mut guard: Option<TempFile> = None;
    let mut file: Option<File> = None;
    // The error behind the last failure reported, for the answer.
    let mut error: Option<WriteError> = None;
    // The published file's metadata, for the answer's validators.
    let mut meta: Option<std::fs::Metadata> = None;
    while let Some(action) = flow.next_action() {
        let event = match action {
            WriteAction::Reserve { .. } => {
                // The caller reserved for this write (WriteOptions::reserve is None).
                fail(
                    WriteError::Io(std::io::Error::other("unexpected reservation")),
                    &mut error,
                )
            }
            WriteAction::Lease => {
                let wait = lease_wait(w.settings.write_lock_timeout, conditions.any_for_write());
                match Grant::lease_checked(&w.broker, &target.key, wait, check).await {
                    Ok(grant) => {
                        let id = grant.id();
                        lease = Some(grant);
                        WriteEvent::Leased(id)
                    }
                    Err(e) => fail(e, &mut error),
                }
            }
            WriteAction::Inspect => {
                let t = target.clone();
                let conditional = conditions.any_for_write();
                let looked = blocking(move || t.look(conditional)).await;
                match looked.and_then(|looked| looked.judge(conditions)) {
                    Ok(Existing::Nothing) => WriteEvent::Target(FlowExisting::Nothing),
                    Ok(Existing::File) => WriteEvent::Target(FlowExisting::File),
                    Ok(Existing::Directory) => WriteEvent::Target(FlowExisting::Directory),
                    Err(e) => fail(e, &mut error),
                }
            }
            WriteAction::CreateTemp => {
                let (dir, worker) = (Arc::clone(&target.dir), w.settings.worker_id);
                match blocking(move || Ok(temp::create(&dir, worker)?)).await {
                    Ok((g, f)) => {
                        guard = Some(g);
                        file = Some(f);
                        WriteEvent::TempCreated
                    }
                    Err(e) => fail(e, &mut error),
                }
            }
            WriteAction::Stream => {
                let Some(f) = file.take() else {
                    return Err(WriteError::Io(std::io::Error::other("no temporary file")));
                };
                let mut grants: Vec<&mut Grant> = lease.iter_mut().collect();
                grants.push(reservation);
                let copied = copy(source, f, 0, BATCH, &mut grants, &w.broker).await;
                file = copied.file;
                match copied.result {
                    Ok(()) if file.is_some() => WriteEvent::Streamed,
                    Ok(()) => fail(
                        WriteError::Io(std::io::Error::other("upload file lost")),
                        &mut error,
                    ),
                    Err(e) => fail(e, &mut error),
                }
            }
            WriteAction::SyncTemp => {
                let Some(f) = file.take() else {
                    return Err(WriteError::Io(std::io::Error::other("no temporary file")));
                };
                match blocking(move || f.sync_all().map(|()| f).map_err(WriteError::Io)).await {
                    Ok(f) => {
                        file = Some(f);
                        WriteEvent::Synced
                    }
                    Err(e) => fail(e, &mut error),
                }
            }
            WriteAction::SyncDirectory => {
                let dir = Arc::clone(&target.dir);
                match blocking(move || Ok(sync_directory(&dir)?)).await {
                    Ok(()) => WriteEvent::Synced,
                    Err(e) => fail(e, &mut error),
                }
            }
            WriteAction::ConfirmLease => {
                // A lease confirmed less than a third of its TTL ago cannot have expired;
                // one older than that (a client that stalled, then sent its last bytes) is
                // confirmed now, so nothing is published under a lease the broker has
                // already given to someone else.
                let Some(grant) = lease.as_mut() else {
                    return Err(WriteError::LeaseLost);
                };
                match grant.renew_if_due().await {
                    Ok(()) if w.broker.is_closed() => {
                        fail(WriteError::Broker(ClientError::ParentGone), &mut error)
                    }
                    Ok(()) => WriteEvent::Leased(grant.id()),
                    Err(e) => fail(e, &mut error),
                }
            }
            WriteAction::Publish { overwrite } => {
                let (Some(g), Some(f), Some(grant)) = (guard.take(), file.take(), lease.take())
                else {
                    return Err(WriteError::Io(std::io::Error::other("nothing to publish")));
                };
                let (root, t) = (w.root.dir(), target.clone());
                // The lease and the temporary file's guard go into the blocking job: if
                // hyper drops this handler while the rename runs, the lease is still
                // released only after it.
                let done = blocking(move || {
                    let mut g = g;
                    let result =
                        publish(&root, &t, &f, g.name(), overwrite).map(|p| (p, f.metadata().ok()));
                    if result.is_ok() {
                        g.disarm();
                    }
                    Ok((result, grant, g))
                })
                .await;
                match done {
                    Ok((result, grant, g)) => {
                        lease = Some(grant);
                        guard = Some(g);
                        match result {
                            Ok((p, m)) => {
                                meta = m;
                                WriteEvent::Published {
                                    replaced: p == Published::Replaced,
                                }
                            }
                            Err(e) => fail(e, &mut error),
                        }
                    }
                    Err(e) => fail(e, &mut error),
                }
            }
            WriteAction::RemoveTemp => {
                // The guard unlinks the private name when dropped.
                drop(file.take());
                drop(guard.take());
                continue;
            }
            WriteAction::ReleaseLease(_) => {
                // Given back and confirmed before the answer, so the client's next request
                // finds the target free.
                if let Some(grant) = lease.take() {
                    grant.release().await;
                }
                continue;
            }
            // The caller's reservation (WriteOptions::reserve is None): never asked for.
            WriteAction::ReleaseReservation(_) => continue,
            WriteAction::Finish(result) => {
                let published = match result {
                    Ok(servery_core::write_flow::Published::Created) => Published::Created,
                    Ok(servery_core::write_flow::Published::Replaced) => Published::Replaced,
                    Err(f) => return Err(error.take().unwrap_or_else(|| error_of(f))),
                };
                return Ok(Stored {
                    published,
                    meta: meta.take(),
                });
            }
        };
        flow.handle(event);
    }
    Err(WriteError::Io(std::io::Error::other(
        "the write flow ended without an answer",
    )))
}
