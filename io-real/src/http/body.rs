//! The response body type: in-memory bytes, or a file streamed in bounded chunks.
//!
//! File chunks are read one at a time with positioned reads: first on the async thread for
//! as much as the page cache holds (`cached_read`), then, for whatever would have to come
//! from the disk, on tokio's blocking pool, with the next chunk requested as soon as the
//! previous one is handed to hyper, so disk and socket overlap while at most two chunks per
//! response are in memory.

use std::fs::File;
use std::future::Future;
use std::io;
use std::os::unix::fs::FileExt;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Frame, SizeHint};
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use super::cached_read::fill_cached;
use super::compress::StreamEncoder;

/// Every response body this module produces.
pub type Body = BoxBody<Bytes, io::Error>;

/// Size of one streamed file chunk.
pub const CHUNK_SIZE: usize = 128 * 1024;

/// A body that is entirely in memory.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// A body with no bytes (HEAD, 204, 304).
pub fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed()
}

/// Streams `len` bytes of `file` starting at `start`. Needs a tokio runtime (for the
/// blocking pool); the caller is an async request handler, which has one.
pub fn file(file: File, start: u64, len: u64, runtime: Handle) -> Body {
    BoxBody::new(FileBody {
        state: State::Idle { file },
        offset: start,
        remaining: len,
        runtime,
    })
}

/// Streams the whole `len`-byte `file` through `encoder`. The encoded length is unknown up
/// front, so the response goes out chunked (HTTP/1.1) or as plain DATA frames (HTTP/2).
/// Reading and encoding both happen on the blocking pool: compression is CPU work that
/// must not run inside a poll on the async threads.
pub fn encoded_file(file: File, len: u64, encoder: StreamEncoder, runtime: Handle) -> Body {
    BoxBody::new(EncodedBody {
        state: EncState::Idle(Box::new(EncodeStep {
            file,
            encoder,
            remaining: len,
            offset: 0,
        })),
        runtime,
    })
}

type Chunk = io::Result<(File, Vec<u8>)>;

#[derive(Debug)]
enum State {
    Idle { file: File },
    Reading(JoinHandle<Chunk>),
    Done,
}

#[derive(Debug)]
struct FileBody {
    state: State,
    /// Where the next chunk starts in the file.
    offset: u64,
    /// Bytes not yet handed to hyper.
    remaining: u64,
    runtime: Handle,
}

impl FileBody {
    /// The next chunk: what the page cache holds right here, the rest from the pool.
    /// Returns the chunk when it is complete without the pool.
    fn next_chunk(&mut self, file: File) -> Option<Vec<u8>> {
        let want = usize::try_from(self.remaining.min(CHUNK_SIZE as u64)).unwrap_or(CHUNK_SIZE);
        let mut buf = vec![0; want];
        let cached = fill_cached(&file, self.offset, &mut buf);
        if cached == want {
            self.state = State::Idle { file };
            return Some(buf);
        }
        let offset = self.offset;
        self.state = State::Reading(
            self.runtime
                .spawn_blocking(move || read_rest(file, offset, buf, cached)),
        );
        None
    }

    fn deliver(&mut self, buf: Vec<u8>) -> Frame<Bytes> {
        self.remaining -= buf.len() as u64;
        self.offset += buf.len() as u64;
        Frame::data(Bytes::from(buf))
    }
}

/// Fills `buf` from `filled` on, reading at `offset + filled`; a file that shrank under us
/// is an error, because the Content-Length we already sent would otherwise be a lie.
fn read_rest(file: File, offset: u64, mut buf: Vec<u8>, filled: usize) -> Chunk {
    match file.read_exact_at(&mut buf[filled..], offset + filled as u64) {
        Ok(()) => Ok((file, buf)),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "file shrank while being served",
        )),
        Err(e) => Err(e),
    }
}

impl hyper::body::Body for FileBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = &mut *self;
        loop {
            match std::mem::replace(&mut this.state, State::Done) {
                State::Done => return Poll::Ready(None),
                State::Idle { .. } if this.remaining == 0 => return Poll::Ready(None),
                State::Idle { file } => {
                    if let Some(buf) = this.next_chunk(file) {
                        return Poll::Ready(Some(Ok(this.deliver(buf))));
                    }
                }
                State::Reading(mut task) => {
                    let chunk = match Pin::new(&mut task).poll(cx) {
                        Poll::Pending => {
                            this.state = State::Reading(task);
                            return Poll::Pending;
                        }
                        Poll::Ready(Err(join)) => Err(io::Error::other(join)),
                        Poll::Ready(Ok(chunk)) => chunk,
                    };
                    // An error leaves the state Done: hyper aborts the response.
                    let (file, buf) = chunk?;
                    this.state = State::Idle { file };
                    return Poll::Ready(Some(Ok(this.deliver(buf))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

/// The state carried from one blocking encode step to the next.
#[derive(Debug)]
struct EncodeStep {
    file: File,
    encoder: StreamEncoder,
    /// Input bytes not yet read.
    remaining: u64,
    /// Where the next read starts: positioned reads, so no other handle on the open file
    /// (a digest's duplicate, say) can move it.
    offset: u64,
}

/// What one step produced: output, and the state for the next step unless finished.
type Encoded = io::Result<(Vec<u8>, Option<Box<EncodeStep>>)>;

impl EncodeStep {
    /// Reads and encodes until some output is ready or the input is exhausted (encoders
    /// buffer internally, so one input chunk often yields nothing). Reading exactly the
    /// promised length keeps the stream tied to the validators that were already sent.
    fn run(mut self: Box<Self>) -> Encoded {
        let mut buf = vec![0; CHUNK_SIZE];
        loop {
            if self.remaining == 0 {
                return Ok((self.encoder.finish()?, None));
            }
            let want = usize::try_from(self.remaining.min(CHUNK_SIZE as u64)).unwrap_or(CHUNK_SIZE);
            let n = match self.file.read_at(&mut buf[..want], self.offset) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "file shrank while being served",
                    ));
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            self.remaining -= n as u64;
            self.offset += n as u64;
            let out = self.encoder.push(&buf[..n])?;
            if !out.is_empty() {
                return Ok((out, Some(self)));
            }
        }
    }
}

#[derive(Debug)]
enum EncState {
    Idle(Box<EncodeStep>),
    Running(JoinHandle<Encoded>),
    Done,
}

#[derive(Debug)]
struct EncodedBody {
    state: EncState,
    runtime: Handle,
}

impl hyper::body::Body for EncodedBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = &mut *self;
        loop {
            match std::mem::replace(&mut this.state, EncState::Done) {
                EncState::Done => return Poll::Ready(None),
                EncState::Idle(step) => {
                    this.state = EncState::Running(this.runtime.spawn_blocking(move || step.run()));
                }
                EncState::Running(mut task) => {
                    let step = match Pin::new(&mut task).poll(cx) {
                        Poll::Pending => {
                            this.state = EncState::Running(task);
                            return Poll::Pending;
                        }
                        Poll::Ready(Err(join)) => Err(io::Error::other(join)),
                        Poll::Ready(Ok(step)) => step,
                    };
                    // An error leaves the state Done: hyper aborts the response, and the
                    // client sees a truncated body rather than a wrong one.
                    let (out, next) = step?;
                    if let Some(next) = next {
                        // Start the next step now, so encoding overlaps the socket write.
                        this.state =
                            EncState::Running(this.runtime.spawn_blocking(move || next.run()));
                    }
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, EncState::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn temp_file(name: &str, contents: &[u8]) -> (std::path::PathBuf, File) {
        let path = std::env::temp_dir().join(format!("servery-body-{}-{name}", std::process::id()));
        let mut f = File::create(&path).expect("create temp file");
        f.write_all(contents).expect("write temp file");
        (path.clone(), File::open(&path).expect("reopen temp file"))
    }

    #[tokio::test]
    async fn streams_the_requested_slice_in_chunks() {
        let data: Vec<u8> = (0..(CHUNK_SIZE * 2 + 100))
            .map(|i| (i % 251) as u8)
            .collect();
        let (path, f) = temp_file("slice", &data);
        let body = file(f, 7, (CHUNK_SIZE + 50) as u64, Handle::current());
        let got = body.collect().await.expect("body").to_bytes();
        assert_eq!(&got[..], &data[7..7 + CHUNK_SIZE + 50]);
        std::fs::remove_file(path).expect("cleanup");
    }

    #[tokio::test]
    async fn encodes_a_file_in_streamed_steps() {
        use crate::http::compress::{Coding, Level, encode_all};
        let data: Vec<u8> = b"0123456789abcdef".repeat(CHUNK_SIZE / 4);
        let (path, f) = temp_file("encoded", &data);
        let encoder = StreamEncoder::new(Coding::Gzip, Level::Streaming).expect("encoder");
        let body = encoded_file(f, data.len() as u64, encoder, Handle::current());
        let got = body.collect().await.expect("body").to_bytes();
        let whole = encode_all(Coding::Gzip, Level::Streaming, &data).expect("encode");
        assert_eq!(&got[..], &whole[..]);
        std::fs::remove_file(path).expect("cleanup");
    }

    #[tokio::test]
    async fn another_handle_moving_the_offset_does_not_disturb_an_encoded_stream() {
        use std::io::{Seek, SeekFrom};

        use crate::http::compress::{Coding, Level, encode_all};
        // Incompressible input, so every step yields output and the stream takes several.
        let data: Vec<u8> = (0..CHUNK_SIZE * 3)
            .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[1])
            .collect();
        let (path, f) = temp_file("encoded-offset", &data);
        let mut other = f.try_clone().expect("duplicate: shares the file offset");
        let encoder = StreamEncoder::new(Coding::Gzip, Level::Streaming).expect("encoder");
        let mut body = encoded_file(f, data.len() as u64, encoder, Handle::current());
        let mut got = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.expect("a whole stream");
            if let Ok(bytes) = frame.into_data() {
                got.extend_from_slice(&bytes);
            }
            other
                .seek(SeekFrom::End(0))
                .expect("move the shared offset");
        }
        let whole = encode_all(Coding::Gzip, Level::Streaming, &data).expect("encode");
        assert!(got == whole, "the stream read from the moved offset");
        std::fs::remove_file(path).expect("cleanup");
    }

    #[tokio::test]
    async fn an_encoded_file_shorter_than_promised_is_an_error() {
        use crate::http::compress::{Coding, Level};
        let (path, f) = temp_file("encoded-short", b"abc");
        let encoder = StreamEncoder::new(Coding::Zstd, Level::Streaming).expect("encoder");
        let body = encoded_file(f, 10, encoder, Handle::current());
        assert!(body.collect().await.is_err());
        std::fs::remove_file(path).expect("cleanup");
    }

    #[test]
    fn the_pool_reads_what_the_page_cache_did_not_hold() {
        let data: Vec<u8> = (0..50_000u32).map(|i| (i % 239) as u8).collect();
        let (path, f) = temp_file("rest", &data);
        // The first 10 bytes came from the cache; the rest is read at its own offset.
        let mut buf = vec![0u8; 1_000];
        buf[..10].copy_from_slice(&data[100..110]);
        let (_, got) = read_rest(f, 100, buf, 10).expect("read");
        assert_eq!(&got[..], &data[100..1_100]);
        let f = File::open(&path).expect("reopen");
        let past_end = read_rest(f, 49_500, vec![0u8; 1_000], 0);
        assert!(
            past_end.is_err(),
            "a file shorter than promised is an error"
        );
        std::fs::remove_file(path).expect("cleanup");
    }

    #[tokio::test]
    async fn a_file_evicted_from_the_page_cache_streams_through_the_pool() {
        let data: Vec<u8> = (0..(CHUNK_SIZE * 3)).map(|i| (i % 233) as u8).collect();
        let (path, f) = temp_file("evicted", &data);
        File::options()
            .write(true)
            .open(&path)
            .and_then(|w| w.sync_all())
            .expect("sync");
        let _ = rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed);
        let mut probe = vec![0u8; data.len()];
        let cached = fill_cached(&f, 0, &mut probe);
        if cached == data.len() {
            eprintln!("NOTICE: this file system kept the pages; only the cached path ran");
        }
        let body = file(f, 0, data.len() as u64, Handle::current());
        let got = body.collect().await.expect("body").to_bytes();
        assert!(got[..] == data[..], "streamed bytes differ");
        std::fs::remove_file(path).expect("cleanup");
    }

    #[tokio::test]
    async fn a_file_shorter_than_promised_is_an_error() {
        let (path, f) = temp_file("short", b"abc");
        let body = file(f, 0, 10, Handle::current());
        assert!(body.collect().await.is_err());
        std::fs::remove_file(path).expect("cleanup");
    }
}
