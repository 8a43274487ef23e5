//! `MKCOL` with `--upload` alone: the page's "New folder" and its folder uploads create
//! directories the same way a WebDAV client would, without turning WebDAV on. Same
//! answers as WebDAV's `MKCOL` (201; 405 when something exists; 409 without a parent),
//! under a lease on the name so it cannot race an upload to the same name.

use http::request::Parts;
use http::{HeaderValue, Response, StatusCode, header};

use super::{Uploads, parent_of};
use crate::http::body::{self, Body};
use crate::http::error::HttpError;
use crate::write::target::{self, Existing, check_name};
use crate::write::{Grant, WriteError, blocking};

impl Uploads {
    /// Creates the directory the request path names (with or without a trailing slash).
    pub(super) async fn mkcol(&self, parts: &Parts) -> Result<Response<Body>, HttpError> {
        if parts
            .headers
            .get(header::CONTENT_LENGTH)
            .is_some_and(|v| v.as_bytes() != b"0")
            || parts.headers.contains_key(header::TRANSFER_ENCODING)
        {
            return Err(HttpError::Write(WriteError::UnsupportedMediaType));
        }
        let path = self.path(parts)?;
        let Some(name) = path.file_name() else {
            return Err(HttpError::MethodNotAllowed); // the root exists
        };
        check_name(name, self.show_hidden)?;
        let root = self.writer.root.dir();
        let (rel_dir, dir_name) = (parent_of(&path), name.to_owned());
        let target = blocking(move || target::resolve(&root, &rel_dir, &dir_name)).await?;
        let lease = Grant::lease(
            &self.writer.broker,
            &target.key,
            self.writer.settings.write_lock_timeout,
        )
        .await?;
        let made = blocking(move || match target.existing()? {
            Existing::Nothing => target.dir.create_dir(&target.name).map_err(WriteError::Io),
            Existing::File | Existing::Directory => Err(WriteError::Exists),
        })
        .await;
        lease.release().await;
        match made {
            Ok(()) => {}
            Err(WriteError::Exists) => return Err(HttpError::MethodNotAllowed),
            Err(e) => return Err(HttpError::Write(e)),
        }
        let mut response = Response::new(body::empty());
        *response.status_mut() = StatusCode::CREATED;
        response
            .headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from(0));
        Ok(response)
    }
}
