//! The real driver of the core's tree flow: MKCOL, DELETE, COPY and MOVE carried out
//! against the broker and the file system ([`super::tree`]), each step in the order the
//! [`TreeFlow`] decides and what happened reported back. The simulator drives the same
//! machine against its own file system.

use std::sync::Arc;

use servery_core::precondition::Conditions;
use servery_core::tree_flow::{
    Placing, Side, TreeAction, TreeDone, TreeEvent, TreeFlow, TreeOp, TreeOptions,
};
use servery_core::write_flow::WriteFailure;

use super::super::conditional::{self, Validators};
use super::super::error::HttpError;
use super::super::long_work;
use super::resource::DavPath;
use super::tree::{self, Placed};
use super::{Dav, DavError, blocking, props};
use crate::write::{Grant, WriteError, Writer, file::failure};

/// A test fault (`SERVERY_TEST_FAULT=kill-before-tree-step=STEP[:N]`, only in builds with
/// the `test-hooks` feature): the worker aborts just before the `nth` (from 0) action
/// named `step` of a tree request, so the black-box tests can crash a real worker
/// between any two steps of the flow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeKill {
    /// One of [`servery_core::tree_flow::STEPS`].
    pub step: &'static str,
    pub nth: u32,
}

/// The flow's summary of an error; the error itself is kept for the answer.
fn failure_of(e: &HttpError) -> WriteFailure {
    match e {
        HttpError::Write(w) => failure(w),
        HttpError::NotFound => WriteFailure::NotFound,
        HttpError::Internal(e) if crate::write::is_out_of_space(e) => WriteFailure::NoSpace,
        _ => WriteFailure::Io,
    }
}

/// The answer for a failure the flow decided on its own.
fn error_of(f: WriteFailure, op: TreeOp) -> HttpError {
    match f {
        WriteFailure::NotFound => HttpError::NotFound,
        WriteFailure::Exists if op == TreeOp::MakeCollection => HttpError::Dav(DavError::Exists),
        WriteFailure::Exists => HttpError::Dav(DavError::DestinationExists),
        WriteFailure::Busy => HttpError::Write(WriteError::Busy),
        WriteFailure::Saturated => HttpError::Write(WriteError::Saturated),
        WriteFailure::LeaseLost => HttpError::Write(WriteError::LeaseLost),
        WriteFailure::PreconditionFailed => HttpError::Write(WriteError::ConditionFalse),
        WriteFailure::BrokerUnavailable => HttpError::Write(WriteError::Broker(
            servery_core::broker::ClientError::ParentGone,
        )),
        _ => HttpError::Internal(std::io::Error::other("tree operation failed")),
    }
}

/// What the driver holds while the flow runs.
struct Run<'a> {
    dav: &'a Dav,
    writer: &'a Writer,
    op: TreeOp,
    from: Option<&'a DavPath>,
    to: Option<&'a DavPath>,
    /// The request's `If-Match`, `If-None-Match` and `If-Unmodified-Since`, judged against
    /// the request's target (a DELETE's, COPY's or MOVE's source, a MKCOL's new
    /// collection) once every lease is held.
    conditions: &'a Conditions<'a>,
    leases: Vec<Grant>,
    source: Option<Arc<Placed>>,
    dest: Option<Arc<Placed>>,
    staging: Option<String>,
    trash_dest: Option<String>,
    trash_source: Option<String>,
    error: Option<HttpError>,
    /// A copy's place in the worker's share of long blocking work, from its staging to
    /// the end of its filling.
    long_work: Option<long_work::Permit>,
}

impl Run<'_> {
    /// Keeps `e` for the answer and reports its kind to the flow.
    fn fail(&mut self, e: HttpError) -> TreeEvent {
        let f = failure_of(&e);
        self.error = Some(e);
        TreeEvent::Failed(f)
    }

    fn worker(&self) -> u64 {
        self.writer.settings.worker_id
    }

    async fn lease(&mut self, side: Side) -> TreeEvent {
        let path = match side {
            Side::Source => self.from,
            Side::Destination => self.to,
        };
        let Some(path) = path else {
            return self.fail(HttpError::Forbidden);
        };
        let conditional = self.conditions.any_for_write();
        match self.dav.lease(self.writer, path, conditional).await {
            Ok(grant) => {
                let id = grant.id();
                self.leases.push(grant);
                TreeEvent::Leased(id)
            }
            Err(e) => self.fail(e),
        }
    }

    async fn inspect(&mut self) -> TreeEvent {
        let (root, from, to) = (self.dav.root.dir(), self.from.cloned(), self.to.cloned());
        // The request target: the source, or a MKCOL's destination.
        let requested = if self.op == TreeOp::MakeCollection {
            Side::Destination
        } else {
            Side::Source
        };
        let conditional = self.conditions.any_for_write();
        let found = blocking(move || {
            let open = |p: Option<DavPath>| -> Result<Option<Placed>, HttpError> {
                p.map(|p| tree::place(&root, &p).map_err(io_conflict))
                    .transpose()
            };
            let (source, dest) = (open(from)?, open(to)?);
            let kind = |p: &Option<Placed>| match p {
                Some(p) => tree::existing(p).map_err(HttpError::from_io),
                None => Ok(servery_core::write_flow::Existing::Nothing),
            };
            let found = (kind(&source)?, kind(&dest)?);
            let target = match requested {
                Side::Source => &source,
                Side::Destination => &dest,
            };
            let current = match target {
                Some(p) if conditional => Some(validators(p)?),
                _ => None,
            };
            Ok((source, dest, found, current))
        })
        .await;
        match found {
            Ok((_, _, _, Some(current)))
                if !conditional::write_allowed(self.conditions, current.as_ref()) =>
            {
                self.fail(HttpError::Write(WriteError::ConditionFalse))
            }
            Ok((source, dest, (source_kind, dest_kind), _)) => {
                self.source = source.map(Arc::new);
                self.dest = dest.map(Arc::new);
                TreeEvent::Found {
                    source: source_kind,
                    destination: dest_kind,
                }
            }
            Err(e) => self.fail(e),
        }
    }

    /// A blocking file-system step on the two places.
    async fn fs<T: Send + 'static>(
        &mut self,
        work: impl FnOnce(&Placed, &Placed) -> std::io::Result<T> + Send + 'static,
    ) -> Result<T, TreeEvent> {
        let (Some(source), Some(dest)) = (self.source.clone(), self.dest.clone()) else {
            return Err(self.fail(HttpError::Forbidden));
        };
        match blocking(move || work(&source, &dest).map_err(super::methods::io_error)).await {
            Ok(v) => Ok(v),
            Err(e) => Err(self.fail(e)),
        }
    }

    /// The one place a side-only step works on (a DELETE's source, a MKCOL's destination).
    fn side(&self, side: Side) -> Option<Arc<Placed>> {
        match side {
            Side::Source => self.source.clone(),
            Side::Destination => self.dest.clone(),
        }
    }

    async fn trash(&mut self, side: Side) -> TreeEvent {
        let (Some(placed), worker) = (self.side(side), self.worker()) else {
            return self.fail(HttpError::Forbidden);
        };
        match blocking(move || tree::trash(&placed, worker).map_err(super::methods::io_error)).await
        {
            Ok(name) => {
                match side {
                    Side::Source => self.trash_source = name,
                    Side::Destination => self.trash_dest = name,
                }
                TreeEvent::Trashed
            }
            Err(e) => self.fail(e),
        }
    }

    async fn place(&mut self, placing: Placing) -> TreeEvent {
        let Some(dest) = self.dest.clone() else {
            return self.fail(HttpError::Forbidden);
        };
        let source = self.source.clone();
        let staging = self.staging.clone();
        let done = blocking(move || {
            let placed = match (placing, source, staging) {
                (Placing::NewCollection, _, _) => dest.dir.create_dir(&dest.name),
                (Placing::Source, Some(s), _) => s.dir.rename(&s.name, &dest.dir, &dest.name),
                (Placing::Staging, _, Some(staging)) => {
                    dest.dir.rename(&staging, &dest.dir, &dest.name)
                }
                _ => Err(std::io::Error::other("nothing to place")),
            };
            match placed {
                Ok(()) => Ok(true),
                Err(e) if placing == Placing::Source && tree::is_cross_device(&e) => Ok(false),
                Err(e) => Err(super::methods::io_error(e)),
            }
        })
        .await;
        match done {
            Ok(true) => {
                if placing == Placing::Staging {
                    self.staging = None;
                }
                TreeEvent::Placed
            }
            Ok(false) => TreeEvent::CrossDevice,
            Err(e) => self.fail(e),
        }
    }

    /// The fsync that makes the placing rename durable: of the destination's directory.
    async fn sync_destination_directory(&mut self) -> TreeEvent {
        let Some(dest) = self.side(Side::Destination) else {
            return self.fail(HttpError::Forbidden);
        };
        let synced = blocking(move || {
            crate::write::publish::sync_directory(&dest.dir).map_err(super::methods::io_error)
        })
        .await;
        match synced {
            Ok(()) => TreeEvent::Synced,
            Err(e) => self.fail(e),
        }
    }

    async fn properties(&mut self) -> TreeEvent {
        let (root, worker, op) = (self.dav.root.dir(), self.worker(), self.op);
        let (from, to) = (self.from.cloned(), self.to.cloned());
        // A MOVE that crossed file systems copied; its source is gone now.
        let crossed = self.trash_source.is_some() && op == TreeOp::Move;
        let done = blocking(move || {
            let r = match (op, from, to) {
                (TreeOp::Delete, Some(from), _) => props::remove(&root, &from),
                (TreeOp::Copy { .. }, Some(from), Some(to)) => {
                    props::copy(&root, &from, &to, worker)
                }
                (TreeOp::Move, Some(from), Some(to)) if crossed => {
                    props::copy(&root, &from, &to, worker)
                        .and_then(|()| props::remove(&root, &from))
                }
                (TreeOp::Move, Some(from), Some(to)) => props::rename(&root, &from, &to),
                _ => Ok(()),
            };
            r.map_err(super::methods::io_error)
        })
        .await;
        match done {
            Ok(()) => TreeEvent::PropertiesDone,
            Err(e) => self.fail(e),
        }
    }

    /// Deletes a private name in `side`'s directory (best effort, blocking).
    async fn remove(&self, side: Side, name: Option<String>) {
        if let (Some(placed), Some(name)) = (self.side(side), name) {
            let _ = blocking(move || {
                tree::remove_private(&placed.dir, &name);
                Ok(())
            })
            .await;
        }
    }
}

/// The validators of what `p` names (following a symlink, as GET does); `None`: nothing.
fn validators(p: &Placed) -> Result<Option<Validators>, HttpError> {
    match p.dir.metadata(&p.name) {
        Ok(meta) => Ok(Some(Validators::of(&meta))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(HttpError::from_io(e)),
    }
}

/// A parent that is missing or not a collection: 409 (RFC 4918 §9.3.1, §9.8.5).
fn io_conflict(e: std::io::Error) -> HttpError {
    match e.kind() {
        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory => {
            HttpError::Dav(DavError::Conflict)
        }
        _ => HttpError::from_io(e),
    }
}

impl Dav {
    /// Runs one tree operation through the core's tree flow. `from` is the source (COPY,
    /// MOVE, DELETE), `to` the destination (COPY, MOVE, MKCOL).
    pub(super) async fn run_tree(
        &self,
        writer: &Writer,
        op: TreeOp,
        from: Option<&DavPath>,
        to: Option<&DavPath>,
        overwrite: bool,
        conditions: &Conditions<'_>,
    ) -> Result<TreeDone, HttpError> {
        // Leases in one global order, so two workers moving in opposite directions wait
        // for each other instead of deadlocking until the lease timeout.
        let source_first = match (from, to) {
            (Some(f), Some(t)) => f.resource() < t.resource(),
            _ => true,
        };
        let mut flow = TreeFlow::new(TreeOptions {
            op,
            overwrite,
            source_first,
        });
        let mut run = Run {
            dav: self,
            writer,
            op,
            from,
            to,
            conditions,
            leases: Vec::new(),
            source: None,
            dest: None,
            staging: None,
            trash_dest: None,
            trash_source: None,
            error: None,
            long_work: None,
        };
        // The test fault's count of the actions taken so far, per step.
        let mut taken = [0u32; servery_core::tree_flow::STEPS.len()];
        while let Some(action) = flow.next_action() {
            if let Some(kill) = &self.tree_kill {
                let step = action.step();
                let i = servery_core::tree_flow::STEPS
                    .iter()
                    .position(|s| *s == step)
                    .unwrap_or(0);
                if step == kill.step && taken[i] == kill.nth {
                    crate::worker::crash();
                }
                taken[i] += 1;
            }
            let event = match action {
                TreeAction::Lease(side) => run.lease(side).await,
                TreeAction::Inspect => run.inspect().await,
                TreeAction::CreateStaging => {
                    // Filling the copy holds a blocking thread for as long as the tree is
                    // large: long work, which first takes a place in the worker's share
                    // (decision 0042), or is answered 503 before anything is made.
                    match long_work::try_start() {
                        None => run.fail(HttpError::Unavailable),
                        Some(place) => {
                            run.long_work = Some(place);
                            let worker = run.worker();
                            match run.fs(move |s, d| tree::create_staging(s, d, worker)).await {
                                Ok(name) => {
                                    run.staging = Some(name);
                                    TreeEvent::Staged
                                }
                                Err(event) => event,
                            }
                        }
                    }
                }
                TreeAction::FillStaging { infinity } => {
                    let Some(staging) = run.staging.clone() else {
                        return Err(HttpError::Internal(std::io::Error::other("no staging")));
                    };
                    let filled = run
                        .fs(move |s, d| tree::fill_staging(s, d, &staging, infinity))
                        .await;
                    run.long_work = None;
                    match filled {
                        Ok(()) => TreeEvent::Filled,
                        Err(event) => event,
                    }
                }
                TreeAction::SyncStaging => {
                    let Some(staging) = run.staging.clone() else {
                        return Err(HttpError::Internal(std::io::Error::other("no staging")));
                    };
                    match run.fs(move |_, d| tree::sync_staging(d, &staging)).await {
                        Ok(()) => TreeEvent::Synced,
                        Err(event) => event,
                    }
                }
                TreeAction::SyncDirectory => run.sync_destination_directory().await,
                TreeAction::ConfirmLeases => {
                    let mut event = TreeEvent::Confirmed;
                    for grant in &mut run.leases {
                        if let Err(e) = grant.renew_if_due().await {
                            event = TreeEvent::Failed(failure(&e));
                            run.error = Some(HttpError::Write(e));
                            break;
                        }
                    }
                    event
                }
                TreeAction::TrashDestination => run.trash(Side::Destination).await,
                TreeAction::TrashSource => run.trash(Side::Source).await,
                TreeAction::Place(placing) => run.place(placing).await,
                TreeAction::Properties => run.properties().await,
                TreeAction::Untrash => {
                    if let (Some(dest), Some(name)) = (run.dest.clone(), run.trash_dest.take()) {
                        let _ = blocking(move || {
                            Ok(dest.dir.rename(&name, &dest.dir, &dest.name).map_err(
                                |e| tracing::warn!(error = %e, "cannot put a destination back"),
                            ))
                        })
                        .await;
                    }
                    continue;
                }
                TreeAction::RemoveTrash => {
                    let (d, s) = (run.trash_dest.take(), run.trash_source.take());
                    run.remove(Side::Destination, d).await;
                    run.remove(Side::Source, s).await;
                    continue;
                }
                TreeAction::RemoveStaging => {
                    let staging = run.staging.take();
                    run.remove(Side::Destination, staging).await;
                    continue;
                }
                TreeAction::ReleaseLease(id) => {
                    // Given back and confirmed before the answer, so the client's next
                    // request finds the resources free.
                    if let Some(i) = run.leases.iter().position(|g| g.id() == id) {
                        run.leases.swap_remove(i).release().await;
                    }
                    continue;
                }
                TreeAction::Finish(result) => {
                    return result.map_err(|f| run.error.take().unwrap_or_else(|| error_of(f, op)));
                }
            };
            flow.handle(event);
        }
        Err(HttpError::Internal(std::io::Error::other(
            "the tree flow ended without an answer",
        )))
    }
}
