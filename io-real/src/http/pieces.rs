//! A response body made a piece at a time on the blocking pool, for answers too large to
//! build whole: a PROPFIND of a big folder (`dav/propfind_stream.rs`) and the directory
//! page of one (`page/response.rs`). Each piece is made by one blocking job, and the next
//! is asked for only when hyper has taken the previous, so a slow client holds no thread
//! and a client that goes away ends the making. A failure half-way fails the body: the
//! client sees a broken answer, never a short one that looks whole.
//!
//! When the client accepts a coding, the pieces go through one streaming encoder in the
//! same jobs.

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Frame;
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use super::body::Body;
use super::compress::{Coding, Level, StreamEncoder};

/// What makes the pieces. Blocking: called on the blocking pool.
pub(crate) trait Pieces: Send + Sync + 'static {
    /// The next piece; `None` once everything was given.
    fn next_piece(&mut self) -> io::Result<Option<Bytes>>;
}

/// `inner`'s pieces through a streaming encoder. An encoder that holds a piece back (it
/// gathers input for a block) gets the next one in the same call, so no empty piece is
/// sent; the trailer goes with the last.
struct Encoded<P> {
    inner: P,
    /// Taken when the stream ends.
    encoder: Option<StreamEncoder>,
}

impl<P: Pieces> Pieces for Encoded<P> {
    fn next_piece(&mut self) -> io::Result<Option<Bytes>> {
        loop {
            let Some(encoder) = self.encoder.as_mut() else {
                return Ok(None);
            };
            match self.inner.next_piece()? {
                Some(piece) => {
                    let out = encoder.push(&piece)?;
                    if !out.is_empty() {
                        return Ok(Some(Bytes::from(out)));
                    }
                }
                None => {
                    let out = self.encoder.take().map(StreamEncoder::finish).transpose()?;
                    return Ok(out.map(Bytes::from));
                }
            }
        }
    }
}

/// What one blocking job gives back: the maker, and the piece it made.
type Made = (Box<dyn Pieces>, io::Result<Option<Bytes>>);

enum State {
    Idle(Box<dyn Pieces>),
    Making(JoinHandle<Made>),
    Done,
}

struct PiecesBody {
    state: State,
    runtime: Handle,
    /// What the answer is, for the log line of one that broke off.
    what: &'static str,
}

/// The body of `pieces`, encoded in `coding` when one is given (an encoder that cannot be
/// made leaves the body plain: the caller learns it from the returned coding).
pub(crate) fn stream(
    pieces: impl Pieces,
    coding: Option<Coding>,
    runtime: Handle,
    what: &'static str,
) -> (Body, Option<Coding>) {
    let encoder = coding.and_then(|c| match StreamEncoder::new(c, Level::Streaming) {
        Ok(e) => Some((c, e)),
        Err(e) => {
            tracing::warn!(error = %e, what, "cannot encode a streamed answer");
            None
        }
    });
    let (coding, pieces): (Option<Coding>, Box<dyn Pieces>) = match encoder {
        Some((c, encoder)) => (
            Some(c),
            Box::new(Encoded {
                inner: pieces,
                encoder: Some(encoder),
            }),
        ),
        None => (None, Box::new(pieces)),
    };
    let body = PiecesBody {
        state: State::Idle(pieces),
        runtime,
        what,
    }
    .boxed();
    (body, coding)
}

impl hyper::body::Body for PiecesBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        loop {
            match std::mem::replace(&mut self.state, State::Done) {
                State::Done => return Poll::Ready(None),
                State::Idle(mut pieces) => {
                    let job = self.runtime.spawn_blocking(move || {
                        let piece = pieces.next_piece();
                        (pieces, piece)
                    });
                    self.state = State::Making(job);
                }
                State::Making(mut job) => match Pin::new(&mut job).poll(cx) {
                    Poll::Pending => {
                        self.state = State::Making(job);
                        return Poll::Pending;
                    }
                    Poll::Ready(Ok((pieces, Ok(Some(bytes))))) => {
                        self.state = State::Idle(pieces);
                        return Poll::Ready(Some(Ok(Frame::data(bytes))));
                    }
                    Poll::Ready(Ok((_, Ok(None)))) => return Poll::Ready(None),
                    Poll::Ready(Ok((_, Err(e)))) => {
                        tracing::warn!(error = %e, what = self.what, "a streamed answer ended early");
                        return Poll::Ready(Some(Err(e)));
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(io::Error::other(e)))),
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;

    /// Pieces of a known text, some of them empty.
    struct Counted {
        left: Vec<&'static str>,
    }

    impl Pieces for Counted {
        fn next_piece(&mut self) -> io::Result<Option<Bytes>> {
            Ok((!self.left.is_empty()).then(|| Bytes::from_static(self.left.remove(0).as_bytes())))
        }
    }

    #[test]
    fn encoded_pieces_decode_to_the_whole_and_end_once() {
        let text = ["<a>", "", "one ", "two ", "three</a>"];
        let mut encoded = Encoded {
            inner: Counted {
                left: text.to_vec(),
            },
            encoder: Some(StreamEncoder::new(Coding::Gzip, Level::Streaming).expect("gzip")),
        };
        let mut wire = Vec::new();
        while let Some(piece) = encoded.next_piece().expect("a piece") {
            assert!(!piece.is_empty(), "no empty piece is sent");
            wire.extend_from_slice(&piece);
        }
        assert!(
            encoded.next_piece().expect("the end").is_none(),
            "ended once"
        );
        let mut decoded = String::new();
        flate2::read::GzDecoder::new(&wire[..])
            .read_to_string(&mut decoded)
            .expect("a whole gzip stream");
        assert_eq!(decoded, text.concat());
    }
}
