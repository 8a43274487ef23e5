//! The response to `?archive=` on a directory: limits checked first, then the stream.

use std::path::PathBuf;
use std::sync::Arc;

use cap_std::fs::Dir;
use http::{Response, StatusCode, header};
use tokio::runtime::Handle;

use super::archive::{self, ArchiveError, Format, Limits};
use crate::http::body::{self, Body};
use crate::http::error::HttpError;
use crate::http::long_work;
use crate::http::path::RequestPath;

/// One archive request.
#[derive(Debug)]
pub struct Download<'a> {
    pub root: &'a Arc<Dir>,
    pub path: &'a RequestPath,
    /// The directory, relative to the root.
    pub rel: PathBuf,
    pub format: Format,
    pub show_hidden: bool,
    /// GET (the archive) rather than HEAD (its head only).
    pub want_body: bool,
}

/// Scans the directory (on the blocking pool), refuses a folder over `limits`, and
/// streams the archive or answers its head. The walk and the writer hold a blocking
/// thread each for as long as they take (the writer as long as its client takes to read),
/// so an archive first takes a place in the worker's share of long work: when the share
/// is full it is answered `503` with `Retry-After` before any thread is taken.
pub async fn respond(
    download: Download<'_>,
    limits: Option<Limits>,
    runtime: &Handle,
) -> Result<Response<Body>, HttpError> {
    let Download {
        root,
        path,
        rel,
        format,
        show_hidden,
        want_body,
    } = download;
    let Some(limits) = limits else {
        return Err(HttpError::Archive(ArchiveError::Off));
    };
    let place = long_work::try_start().ok_or(HttpError::Unavailable)?;
    let top = path.file_name().unwrap_or("files").to_owned();
    let scan_root = Arc::clone(root);
    let scan_top = top.clone();
    let members = runtime
        .spawn_blocking(move || archive::scan(&scan_root, &rel, &scan_top, show_hidden, limits))
        .await
        .map_err(|_| HttpError::Unavailable)?
        .map_err(HttpError::from_io)?
        .map_err(HttpError::Archive)?;
    let body = if want_body {
        archive::stream(format, Arc::clone(root), members, place, runtime)
    } else {
        body::empty()
    };
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, format.content_type())
        .header(
            header::CONTENT_DISPOSITION,
            archive::disposition(&top, format),
        )
        .header(header::CACHE_CONTROL, "no-store")
        .body(body)
        .map_err(|e| HttpError::Internal(std::io::Error::other(e)))
}
