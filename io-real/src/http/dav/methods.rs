//! LOCK, UNLOCK, MKCOL, DELETE, COPY and MOVE.

use std::io;

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderValue, Response, StatusCode, header};
use servery_core::dav_lock::{self, Write};
use servery_core::proto::DavDepth;

use super::super::body::{self, Body};
use super::super::conditional::{self, Validators};
use super::super::error::HttpError;
use super::super::path::RequestPath;
use super::locks;
use super::resource::{self, DavPath};
use super::xml;
use super::{Dav, DavError, blocking, single, uri_authority, uri_path, xml_response};
use crate::write::{ChunkSource, Grant, WriteError, Writer, target, write_file};
use servery_core::precondition::{Conditions, lease_wait};
use servery_core::tree_flow::{TreeDone, TreeOp};

/// The content of a resource a LOCK creates (RFC 4918 §7.3): nothing.
struct Nothing;

impl ChunkSource for Nothing {
    async fn next_chunk(&mut self) -> Option<Result<Bytes, WriteError>> {
        None
    }
}

fn created_or_replaced(outcome: TreeDone) -> Response<Body> {
    let mut response = Response::new(body::empty());
    match outcome {
        TreeDone::Created | TreeDone::Deleted => {
            *response.status_mut() = StatusCode::CREATED;
            response
                .headers_mut()
                .insert(header::CONTENT_LENGTH, HeaderValue::from(0));
        }
        TreeDone::Replaced => *response.status_mut() = StatusCode::NO_CONTENT,
    }
    response
}

/// The answer to a tree operation's (MKCOL, DELETE, COPY, MOVE) failed step.
pub(super) fn io_error(e: io::Error) -> HttpError {
    match e.kind() {
        io::ErrorKind::AlreadyExists => HttpError::Dav(DavError::Exists),
        // The write path's mapping of what the file system refused (507 for a full one,
        // else 500), counted as a storage fault as an upload's is.
        _ => match HttpError::from_io(e) {
            HttpError::Internal(e) => HttpError::Write(WriteError::Io(e)),
            other => other,
        },
    }
}

impl Dav {
    /// The broker lease on `path`'s target key: writes to one resource, by any worker,
    /// happen one at a time.
    pub(super) async fn lease(
        &self,
        writer: &Writer,
        path: &DavPath,
        conditional: bool,
    ) -> Result<Grant, HttpError> {
        let Some(parent) = path.parent() else {
            return Err(HttpError::Forbidden);
        };
        let name = path.name().unwrap_or_default().to_owned();
        let root = self.root.dir();
        let target = blocking(move || {
            target::resolve(&root, &parent.rel(), &name).map_err(|e| match e {
                WriteError::NoParent => HttpError::Dav(DavError::Conflict),
                e => HttpError::Write(e),
            })
        })
        .await?;
        let wait = lease_wait(writer.settings.write_lock_timeout, conditional);
        Ok(Grant::lease(&writer.broker, &target.key, wait).await?)
    }

    /// For a change that leaves the resource's content alone (LOCK of an existing resource,
    /// PROPPATCH): when the request has `If-Match`, `If-None-Match` or
    /// `If-Unmodified-Since`, takes `path`'s target lease, judges them against the
    /// resource as it is under that lease, and hands the lease back for the caller to hold
    /// until its change is made, so no write through another worker comes in between.
    /// `None` when there is nothing to judge (or the share is read-only, where nothing
    /// can change the resource meanwhile).
    pub(super) async fn hold_if_conditional(
        &self,
        parts: &Parts,
        path: &DavPath,
    ) -> Result<Option<Grant>, HttpError> {
        let conditions = conditional::conditions(&parts.headers);
        if !conditions.any_for_write() {
            return Ok(None);
        }
        let grant = match &self.writer {
            Some(writer) if !path.is_root() => Some(self.lease(writer, path, true).await?),
            _ => None,
        };
        let (root, rel) = (self.root.dir(), path.rel());
        let current =
            blocking(move || resource::stat_opt(&root, &rel).map_err(HttpError::from_io)).await?;
        let current = current.map(|meta| Validators::of(&meta));
        if !conditional::write_allowed(&conditions, current.as_ref()) {
            if let Some(grant) = grant {
                grant.release().await;
            }
            return Err(HttpError::Write(WriteError::ConditionFalse));
        }
        Ok(grant)
    }

    /// What exists at `path`: `None`, or whether it is a collection.
    async fn kind(&self, path: &DavPath) -> Result<Option<bool>, HttpError> {
        let root = self.root.dir();
        let rel = path.rel();
        blocking(move || {
            Ok(resource::stat_opt(&root, &rel)
                .map_err(HttpError::from_io)?
                .map(|m| m.is_dir()))
        })
        .await
    }

    pub(super) async fn lock(
        &self,
        parts: &Parts,
        path: &DavPath,
        body: &[u8],
    ) -> Result<Response<Body>, HttpError> {
        let timeout = locks::timeout_ms(single(&parts.headers, "timeout").as_deref());
        let mut seen = self.locks.seen();
        let submitted = self.preconditions(parts, path, &mut seen).await?;
        if body.iter().all(u8::is_ascii_whitespace) {
            let held = self.hold_if_conditional(parts, path).await?;
            let refreshed = self.refresh(path, &submitted, timeout).await;
            if let Some(grant) = held {
                grant.release().await;
            }
            return refreshed;
        }
        let info = xml::parse_lockinfo(body).map_err(DavError::Xml)?;
        let depth = dav_lock::lock_depth(single(&parts.headers, "depth").as_deref())?;
        let exists = self.kind(path).await?.is_some();
        if !exists {
            // Locking an unmapped URL creates a resource: a write, which needs the
            // tokens of the locks on the collection it joins.
            let resource = path.resource();
            let creating = Write::CreatingLock {
                resource: &resource,
                writable: self.writer.is_some(),
            };
            seen.require_all(creating, &submitted).await?;
        }
        // An existing resource's preconditions hold until the lock is granted; a new
        // one's are judged by the write that creates it, under its lease.
        let held = if exists {
            self.hold_if_conditional(parts, path).await?
        } else {
            None
        };
        let owner = info.owner.unwrap_or_default();
        let granted = self
            .locks
            .lock(path, depth, info.exclusive, owner.clone(), timeout)
            .await;
        if let Some(grant) = held {
            grant.release().await;
        }
        let (token, granted) = granted?;
        if self.kill_after_lock_grant {
            crate::worker::crash();
        }
        let mut status = StatusCode::OK;
        if !exists && let Some(writer) = &self.writer {
            let conditions = conditional::conditions(&parts.headers);
            if let Err(e) = self.create_empty(writer, path, &conditions).await {
                let _ = self.locks.unlock(token).await;
                return Err(e);
            }
            status = StatusCode::CREATED;
        }
        let active = xml::ActiveLock {
            exclusive: info.exclusive,
            depth_infinity: depth == DavDepth::Infinity,
            owner: (!owner.is_empty()).then_some(owner),
            timeout_secs: Some(granted.div_ceil(1000)),
            token: locks::token_uri(token),
            root: path.href(false),
        };
        let mut response = xml_response(status, xml::lock_response_body(&[active]));
        if let Ok(value) = HeaderValue::from_str(&format!("<{}>", locks::token_uri(token))) {
            response.headers_mut().insert("lock-token", value);
        }
        Ok(response)
    }

    /// A LOCK without a body refreshes the lock whose token the `If` header submits.
    async fn refresh(
        &self,
        path: &DavPath,
        submitted: &[servery_core::LeaseId],
        timeout: u64,
    ) -> Result<Response<Body>, HttpError> {
        let key = path.resource();
        let held = self.locks.around(&key).await?;
        let lock = dav_lock::refresh_target(&key, &held, submitted)?;
        let granted = self.locks.refresh(lock.token, timeout).await?;
        let mut refreshed = lock.clone();
        refreshed.expires_in_ms = granted;
        Ok(xml_response(
            StatusCode::OK,
            xml::lock_response_body(&[locks::active(&refreshed)]),
        ))
    }

    /// The empty resource a LOCK of an unmapped URL creates, through the write flow.
    async fn create_empty(
        &self,
        writer: &Writer,
        path: &DavPath,
        conditions: &Conditions<'_>,
    ) -> Result<(), HttpError> {
        let (Some(parent), Some(name)) = (path.parent(), path.name()) else {
            return Err(HttpError::Forbidden);
        };
        target::check_name(name, self.show_hidden)?;
        let root = self.root.dir();
        let name = name.to_owned();
        let target = blocking(move || {
            target::resolve(&root, &parent.rel(), &name).map_err(|e| match e {
                WriteError::NoParent => HttpError::Dav(DavError::Conflict),
                e => HttpError::Write(e),
            })
        })
        .await?;
        let mut reservation = Grant::reserve_upload(&writer.broker, 0).await?;
        write_file(
            writer,
            &target,
            &mut reservation,
            true,
            None,
            conditions,
            &mut Nothing,
        )
        .await?;
        Ok(())
    }

    pub(super) async fn unlock(
        &self,
        parts: &Parts,
        path: &DavPath,
    ) -> Result<Response<Body>, HttpError> {
        let header = single(&parts.headers, "lock-token");
        let token = dav_lock::unlock_token(header.as_deref())?;
        let key = path.resource();
        let held = self.locks.around(&key).await?;
        let lock = dav_lock::unlock_target(&key, token, &held)?;
        self.locks.unlock(lock).await?;
        let mut response = Response::new(body::empty());
        *response.status_mut() = StatusCode::NO_CONTENT;
        Ok(response)
    }

    pub(super) async fn mkcol(
        &self,
        parts: &Parts,
        path: &DavPath,
        has_body: bool,
        writer: &Writer,
    ) -> Result<Response<Body>, HttpError> {
        if has_body {
            return Err(HttpError::Dav(DavError::MkcolBody));
        }
        if let Some(name) = path.name() {
            target::check_name(name, self.show_hidden)?;
        }
        let mut seen = self.locks.seen();
        let submitted = self.preconditions(parts, path, &mut seen).await?;
        if self.kind(path).await?.is_some() {
            return Err(HttpError::Dav(DavError::Exists));
        }
        let resource = path.resource();
        seen.require_all(Write::Mkcol(&resource), &submitted)
            .await?;
        let conditions = conditional::conditions(&parts.headers);
        self.run_tree(
            writer,
            TreeOp::MakeCollection,
            None,
            Some(path),
            false,
            &conditions,
        )
        .await?;
        Ok(created_or_replaced(TreeDone::Created))
    }

    pub(super) async fn delete(
        &self,
        parts: &Parts,
        path: &DavPath,
        writer: &Writer,
    ) -> Result<Response<Body>, HttpError> {
        if path.is_root() {
            return Err(HttpError::Forbidden);
        }
        let mut seen = self.locks.seen();
        let submitted = self.preconditions(parts, path, &mut seen).await?;
        if self.kind(path).await?.is_none() {
            return Err(HttpError::NotFound);
        }
        if !writer.settings.allow_overwrite {
            return Err(HttpError::Dav(DavError::OverwriteOff));
        }
        let resource = path.resource();
        seen.require_all(Write::Delete(&resource), &submitted)
            .await?;
        let conditions = conditional::conditions(&parts.headers);
        self.run_tree(writer, TreeOp::Delete, Some(path), None, true, &conditions)
            .await?;
        self.locks.end_within(path).await;
        let mut response = Response::new(body::empty());
        *response.status_mut() = StatusCode::NO_CONTENT;
        Ok(response)
    }

    pub(super) async fn copy_move(
        &self,
        parts: &Parts,
        from: &DavPath,
        moving: bool,
        writer: &Writer,
    ) -> Result<Response<Body>, HttpError> {
        let to = self.destination(parts)?;
        let infinity = match single(&parts.headers, "depth").as_deref() {
            None => true,
            Some(v) if v.eq_ignore_ascii_case("infinity") => true,
            Some("0") if !moving => false,
            Some(_) => return Err(HttpError::Dav(DavError::Depth)),
        };
        let overwrite = match single(&parts.headers, "overwrite").as_deref() {
            None | Some("T" | "t") => true,
            Some("F" | "f") => false,
            Some(_) => return Err(HttpError::BadRequest("Overwrite is T or F")),
        };
        if from.is_root() || to.is_root() || to.within(from) || from.within(&to) {
            return Err(HttpError::Dav(DavError::Overlap));
        }
        if let Some(name) = to.name() {
            target::check_name(name, self.show_hidden)?;
        }
        let mut seen = self.locks.seen();
        let submitted = self.preconditions(parts, from, &mut seen).await?;
        if self.kind(from).await?.is_none() {
            return Err(HttpError::NotFound);
        }
        let Some(parent) = to.parent() else {
            return Err(HttpError::Forbidden);
        };
        if self.kind(&parent).await? != Some(true) {
            return Err(HttpError::Dav(DavError::Conflict));
        }
        let exists = self.kind(&to).await?.is_some();
        if exists && !overwrite {
            return Err(HttpError::Dav(DavError::DestinationExists));
        }
        if exists && !writer.settings.allow_overwrite {
            return Err(HttpError::Dav(DavError::OverwriteOff));
        }
        let (source, destination) = (from.resource(), to.resource());
        let write = if moving {
            Write::Move {
                from: &source,
                to: &destination,
            }
        } else {
            Write::Copy {
                from: &source,
                to: &destination,
            }
        };
        seen.require_all(write, &submitted).await?;
        let op = if moving {
            TreeOp::Move
        } else {
            TreeOp::Copy { infinity }
        };
        let outcome = self
            .run_tree(
                writer,
                op,
                Some(from),
                Some(&to),
                overwrite && writer.settings.allow_overwrite,
                &conditional::conditions(&parts.headers),
            )
            .await?;
        if outcome == TreeDone::Replaced {
            self.locks.end_replaced(&to, &submitted).await;
        }
        if moving {
            self.locks.end_within(from).await;
        }
        Ok(created_or_replaced(outcome))
    }

    /// `Destination`: an absolute URI on this server, or an absolute path.
    fn destination(&self, parts: &Parts) -> Result<DavPath, HttpError> {
        let value =
            single(&parts.headers, "destination").ok_or(HttpError::Dav(DavError::Destination))?;
        if let Some(authority) = uri_authority(&value) {
            let host = parts
                .headers
                .get(header::HOST)
                .and_then(|v| v.to_str().ok())
                .or_else(|| parts.uri.authority().map(|a| a.as_str()));
            if host.is_some_and(|h| !h.eq_ignore_ascii_case(authority)) {
                return Err(HttpError::Dav(DavError::OtherServer));
            }
        }
        let path = uri_path(&value).ok_or(HttpError::Dav(DavError::Destination))?;
        let parsed =
            RequestPath::parse(path, self.show_hidden).map_err(|_| HttpError::Forbidden)?;
        Ok(DavPath::from_request(&parsed))
    }
}
