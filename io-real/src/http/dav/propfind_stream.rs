//! PROPFIND with Depth 1 on a collection of any size: the answer is written while the
//! directory is read, one batch at a time, so what a worker holds for it is one batch and
//! the directory cursor, not the folder (issue 37: rclone opening a folder of 100,000
//! files). The Depth-infinity cap (`--dav-propfind-max-entries`) does not apply here.
//!
//! Each batch is read and rendered on the blocking pool; the next one is asked for only
//! when hyper has taken the previous, so a slow client holds no thread, and a client that
//! goes away ends the reading. Members are sent in the order the directory gives them
//! (RFC 4918 asks for none); a failure half-way fails the body, so the client sees a broken
//! answer, never a short one that looks whole. When the client accepts a coding, each
//! batch goes through one streaming encoder (the page's streaming level) on the same
//! blocking job: 73 MB of XML for 100,000 files is mostly repeated markup.

use std::collections::HashSet;
use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use cap_std::fs::{Dir, Metadata, ReadDir};
use http_body_util::BodyExt;
use hyper::body::Frame;
use servery_core::proto::DavLockInfo;
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use super::super::body::Body;
use super::super::compress::{Coding, Level, StreamEncoder};
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
    /// The answer's encoder when it is sent compressed; taken when the stream ends.
    encoder: Option<StreamEncoder>,
    /// Whether the answer was sent compressed (the encoder is gone once finished).
    encoded: bool,
}

impl Cursor {
    /// The next piece of the answer as sent (encoded when it is); `None` once it has all
    /// been given. An encoder that holds a batch back (it gathers input for a block)
    /// gets the next one in the same call, so no empty piece is sent.
    fn next_piece(&mut self) -> io::Result<Option<Bytes>> {
        if !self.encoded {
            return self.next_batch();
        }
        loop {
            if self.encoder.is_none() {
                return Ok(None);
            }
            let batch = self.next_batch()?;
            let mut out = match (batch, self.encoder.as_mut()) {
                (Some(batch), Some(encoder)) => encoder.push(&batch)?,
                _ => Vec::new(),
            };
            if self.out.is_none() {
                // The last batch was just read: the trailer goes with it.
                if let Some(encoder) = self.encoder.take() {
                    out.extend(encoder.finish()?);
                }
                return Ok(Some(Bytes::from(out)));
            }
            if !out.is_empty() {
                return Ok(Some(Bytes::from(out)));
            }
        }
    }

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

enum State {
    Idle(Box<Cursor>),
    Reading(JoinHandle<(Box<Cursor>, io::Result<Option<Bytes>>)>),
    Done,
}

/// The body that reads and renders `listing` a batch at a time.
struct ListingBody {
    state: State,
    runtime: Handle,
}

/// The streamed `207` body of a Depth 1 PROPFIND on `listing`'s collection, encoded in
/// `coding` when one is given.
pub(super) fn stream(listing: Listing, coding: Option<Coding>, runtime: Handle) -> Body {
    let encoder = coding.and_then(|c| match StreamEncoder::new(c, Level::Streaming) {
        Ok(e) => Some(e),
        Err(e) => {
            tracing::warn!(error = %e, "cannot encode a PROPFIND answer");
            None
        }
    });
    ListingBody {
        state: State::Idle(Box::new(Cursor {
            listing,
            stage: Stage::Start,
            with_props: HashSet::new(),
            out: Some(Multistatus::new()),
            encoded: encoder.is_some(),
            encoder,
        })),
        runtime,
    }
    .boxed()
}

impl hyper::body::Body for ListingBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        loop {
            match std::mem::replace(&mut self.state, State::Done) {
                State::Done => return Poll::Ready(None),
                State::Idle(mut cursor) => {
                    let job = self.runtime.spawn_blocking(move || {
                        let piece = cursor.next_piece();
                        (cursor, piece)
                    });
                    self.state = State::Reading(job);
                }
                State::Reading(mut job) => match Pin::new(&mut job).poll(cx) {
                    Poll::Pending => {
                        self.state = State::Reading(job);
                        return Poll::Pending;
                    }
                    Poll::Ready(Ok((cursor, Ok(Some(bytes))))) => {
                        self.state = State::Idle(cursor);
                        return Poll::Ready(Some(Ok(Frame::data(bytes))));
                    }
                    Poll::Ready(Ok((_, Ok(None)))) => return Poll::Ready(None),
                    Poll::Ready(Ok((_, Err(e)))) => {
                        tracing::warn!(error = %e, "PROPFIND listing ended early");
                        return Poll::Ready(Some(Err(e)));
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(io::Error::other(e)))),
                },
            }
        }
    }
}
