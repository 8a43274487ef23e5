//! PROPFIND with Depth 1 on a collection of any size: the answer is written while the
//! directory is read, one batch at a time, so what a worker holds for it is one batch and
//! the directory cursor, not the folder (issue 37: rclone opening a folder of 100,000
//! files). The Depth-infinity cap (`--dav-propfind-max-entries`) does not apply here.
//!
//! Each batch is read and rendered on the blocking pool as one of the body's pieces
//! (`http::pieces`: one job per piece, the next asked for only when hyper took the last,
//! encoded as the client accepts: 73 MB of XML for 100,000 files is mostly repeated
//! markup). Members are sent in the order the directory gives them (RFC 4918 asks for
//! none).

use std::collections::HashSet;
use std::io;
use std::sync::Arc;

use bytes::Bytes;
use cap_std::fs::{Dir, Metadata, ReadDir};
use servery_core::proto::DavLockInfo;
use tokio::runtime::Handle;

use super::super::body::Body;
use super::super::compress::Coding;
use super::super::pieces::{self, Pieces};
use super::propfind::{Found, describe};
use super::props;
use super::resource::{self, DavPath};
use super::xml::{Multistatus, Propfind};

/// Rendered bytes that make one batch: large enough that the hop to the blocking pool is
/// noise, small enough that a worker streaming many listings stays small.
const BATCH_BYTES: usize = 64 * 1024;

/// What a Depth 1 answer is about: the collection and how to describe its members.
pub(super) struct Listing {
    pub root: Arc<Dir>,
    pub dir: DavPath,
    pub meta: Metadata,
    pub request: Propfind,
    pub locks: Vec<DavLockInfo>,
    pub quota: Option<(u64, u64)>,
    pub show_hidden: bool,
}

enum Stage {
    /// Nothing sent yet: the collection itself comes first.
    Start,
    /// Members being read.
    Members(ReadDir),
    Done,
}

struct Cursor {
    listing: Listing,
    stage: Stage,
    /// Members with a property sidecar (read in a first pass over the directory; as many
    /// names as members that carry dead properties).
    with_props: HashSet<String>,
    out: Option<Multistatus>,
}

impl Cursor {
    /// The next piece of the XML; `None` once it has all been given.
    fn next_batch(&mut self) -> io::Result<Option<Bytes>> {
        let Some(out) = self.out.as_mut() else {
            return Ok(None);
        };
        let l = &self.listing;
        if matches!(self.stage, Stage::Start) {
            let start = Found {
                path: l.dir.clone(),
                meta: l.meta.clone(),
                dead: props::load(&l.root, &l.dir).unwrap_or_default(),
            };
            describe(out, &l.request, &start, &l.locks, l.quota);
            self.with_props = resource::sidecars(&l.root, &l.dir)?;
            self.stage = Stage::Members(resource::read(&l.root, &l.dir)?);
        }
        if let Stage::Members(entries) = &mut self.stage {
            while out.pending() < BATCH_BYTES {
                let Some(entry) = entries.next() else {
                    self.stage = Stage::Done;
                    break;
                };
                let Some((name, meta)) = resource::member(&l.root, &l.dir, &entry?, l.show_hidden)
                else {
                    continue;
                };
                let path = l.dir.child(&name);
                let dead = if self.with_props.contains(&name) {
                    props::load(&l.root, &path).unwrap_or_default()
                } else {
                    Vec::new()
                };
                describe(
                    out,
                    &l.request,
                    &Found { path, meta, dead },
                    &l.locks,
                    l.quota,
                );
            }
        }
        let mut piece = out.take();
        if matches!(self.stage, Stage::Done) {
            piece.push_str(&self.out.take().map(Multistatus::finish).unwrap_or_default());
        }
        Ok(Some(Bytes::from(piece)))
    }
}

impl Pieces for Cursor {
    fn next_piece(&mut self) -> io::Result<Option<Bytes>> {
        self.next_batch()
    }
}

/// The streamed `207` body of a Depth 1 PROPFIND on `listing`'s collection, encoded in
/// `coding` when one is given; the coding it is sent in.
pub(super) fn stream(
    listing: Listing,
    coding: Option<Coding>,
    runtime: Handle,
) -> (Body, Option<Coding>) {
    let cursor = Cursor {
        listing,
        stage: Stage::Start,
        with_props: HashSet::new(),
        out: Some(Multistatus::new()),
    };
    pieces::stream(cursor, coding, runtime, "PROPFIND listing")
}
