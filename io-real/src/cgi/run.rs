//! One script's run: its request body fed to stdin a frame at a time (a frame is read
//! from the client only once the script has taken the last, so an upload is never held
//! in memory), its stderr logged a line at a time, its header block read and its body
//! streamed back under the silence timeout and the output bound.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::{Frame, SizeHint};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader, ReadBuf};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout};
use tokio::time::{Instant, Sleep};

use super::groups::Group;
use super::head::{self, HeadError};

/// The longest stderr line logged whole; a longer one is logged in pieces.
const MAX_LOG_LINE: u64 = 8 * 1024;
/// How much of the script's output is read at once.
const READ_SIZE: usize = 64 * 1024;

/// When the request body last moved into the script (the head's timeout counts from
/// then: a slow upload is the client's time, not the script's).
#[derive(Debug)]
pub(super) struct Progress {
    start: Instant,
    last_ms: AtomicU64,
}

impl Progress {
    pub(super) fn new() -> Arc<Progress> {
        Arc::new(Progress {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
        })
    }

    fn moved(&self) {
        let ms = self.start.elapsed().as_millis() as u64;
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    pub(super) fn last(&self) -> Instant {
        self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }
}

/// Feeds the request body to the script's stdin, then closes it. Stops (closing stdin)
/// when the script stops reading or the client's body fails.
pub(super) async fn feed<B>(
    mut body: B,
    mut stdin: ChildStdin,
    progress: Arc<Progress>,
    script: Arc<str>,
) where
    B: hyper::body::Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    loop {
        // The client's error is text at once: its type need not be `Send`.
        let next = body.frame().await.map(|f| f.map_err(|e| e.to_string()));
        let Some(frame) = next else { break };
        let frame = match frame {
            Ok(frame) => frame,
            Err(e) => {
                tracing::info!(%script, error = %e, "the client's request body failed");
                return;
            }
        };
        if let Ok(data) = frame.into_data() {
            if let Err(e) = stdin.write_all(&data).await {
                // A script may answer without reading its input (EPIPE): not an error.
                tracing::debug!(%script, error = %e, "the script stopped reading its input");
                return;
            }
            progress.moved();
        }
    }
    let _ = stdin.shutdown().await;
}

/// Logs the script's stderr, a line at a time.
pub(super) async fn log_stderr(stderr: ChildStderr, script: Arc<str>) {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut reader)
            .take(MAX_LOG_LINE)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let text = String::from_utf8_lossy(&line);
                tracing::warn!(%script, stderr = %text.trim_end(), "CGI script");
            }
        }
    }
}

/// Why a script gave no usable response head.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(super) enum HeadFailure {
    #[error("the script gave no response head within {0:?}")]
    TimedOut(Duration),
    #[error("{0}")]
    Malformed(#[from] HeadError),
    #[error("reading the script's output failed: {0}")]
    Read(io::Error),
}

impl HeadFailure {
    pub(super) fn status(&self) -> http::StatusCode {
        match self {
            HeadFailure::TimedOut(_) => http::StatusCode::GATEWAY_TIMEOUT,
            _ => http::StatusCode::BAD_GATEWAY,
        }
    }
}

/// Reads the script's header block: `(head, what followed it)`, the head with its blank
/// line. Waits at most `timeout` past when the request body last moved.
pub(super) async fn read_head(
    stdout: &mut ChildStdout,
    progress: &Progress,
    timeout: Duration,
) -> Result<(Bytes, Bytes), HeadFailure> {
    let mut buf = BytesMut::with_capacity(4096);
    loop {
        if let Some(end) = head::end_of_head(&buf) {
            let rest = buf.split_off(end);
            return Ok((buf.freeze(), rest.freeze()));
        }
        if buf.len() > head::MAX_HEAD {
            return Err(HeadError::TooLarge.into());
        }
        let read = loop {
            let deadline = progress.last() + timeout;
            tokio::select! {
                read = stdout.read_buf(&mut buf) => break read,
                () = tokio::time::sleep_until(deadline) => {
                    if progress.last() + timeout <= Instant::now() {
                        return Err(HeadFailure::TimedOut(timeout));
                    }
                }
            }
        };
        match read {
            Ok(0) => return Err(HeadError::Unfinished.into()),
            Ok(_) => {}
            Err(e) => return Err(HeadFailure::Read(e)),
        }
    }
}

/// What a running script holds until its response ends: the process, its group (killed
/// when this goes), and its admission grant.
pub(super) struct Running {
    pub child: Child,
    pub group: Group,
    pub permit: Option<crate::proxy::admission::Permit>,
    pub script: Arc<str>,
    pub timeout: Duration,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running")
            .field("script", &self.script)
            .field("pgid", &self.group.pgid())
            .finish_non_exhaustive()
    }
}

impl Running {
    /// The output ended: the script is waited for (at most the timeout), then its group
    /// killed, whatever it left behind with it.
    pub(super) fn finish(self) {
        let Running {
            mut child,
            group,
            permit,
            script,
            timeout,
        } = self;
        drop(permit);
        tokio::spawn(async move {
            match tokio::time::timeout(timeout, child.wait()).await {
                Ok(Ok(status)) if !status.success() => {
                    tracing::info!(%script, %status, "CGI script exited unsuccessfully");
                }
                Ok(_) => {}
                Err(_) => {
                    tracing::warn!(%script, ?timeout, "CGI script closed its output but did not exit: killed");
                }
            }
            drop(group);
        });
    }
}

/// The script's response body on its way to the client.
pub(super) struct Output {
    first: Option<Bytes>,
    stdout: ChildStdout,
    /// `None` once the output ended and the script was handed to [`Running::finish`].
    running: Option<Running>,
    written: u64,
    max_output: u64,
    silence: Pin<Box<Sleep>>,
    /// Where each read lands before it is copied into a frame of its own size.
    buf: Box<[u8]>,
}

impl Output {
    pub(super) fn new(
        first: Bytes,
        stdout: ChildStdout,
        running: Running,
        head_len: u64,
        max_output: u64,
    ) -> Self {
        let timeout = running.timeout;
        Output {
            first: (!first.is_empty()).then_some(first),
            stdout,
            running: Some(running),
            written: head_len,
            max_output,
            silence: Box::pin(tokio::time::sleep(timeout)),
            buf: vec![0; READ_SIZE].into_boxed_slice(),
        }
    }

    fn script(&self) -> Arc<str> {
        self.running
            .as_ref()
            .map_or_else(|| Arc::from(""), |r| Arc::clone(&r.script))
    }

    /// Cuts the response off: the script's group is killed (by dropping it).
    fn cut_off(&mut self, error: io::Error) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        self.running = None;
        Poll::Ready(Some(Err(error)))
    }

    fn counted(&mut self, data: Bytes) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        self.written += data.len() as u64;
        if self.max_output > 0 && self.written > self.max_output {
            let script = self.script();
            tracing::warn!(%script, max = self.max_output, "CGI script wrote more than --cgi-max-output: cut off and killed");
            return self.cut_off(io::Error::other(
                "the script's output passed --cgi-max-output",
            ));
        }
        Poll::Ready(Some(Ok(Frame::data(data))))
    }
}

impl hyper::body::Body for Output {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = &mut *self;
        if let Some(first) = this.first.take() {
            return this.counted(first);
        }
        let Some(timeout) = this.running.as_ref().map(|r| r.timeout) else {
            return Poll::Ready(None);
        };
        let mut read = ReadBuf::new(&mut this.buf);
        match Pin::new(&mut this.stdout).poll_read(cx, &mut read) {
            Poll::Ready(Ok(())) => {
                let n = read.filled().len();
                if n == 0 {
                    if let Some(running) = this.running.take() {
                        running.finish();
                    }
                    return Poll::Ready(None);
                }
                let data = Bytes::copy_from_slice(&this.buf[..n]);
                this.silence.as_mut().reset(Instant::now() + timeout);
                this.counted(data)
            }
            Poll::Ready(Err(e)) => {
                let script = this.script();
                tracing::warn!(%script, error = %e, "reading the CGI script's output failed");
                this.cut_off(e)
            }
            Poll::Pending => match this.silence.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    let script = this.script();
                    tracing::warn!(%script, ?timeout, "CGI script silent in its response body: cut off and killed");
                    this.cut_off(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "CGI script timeout",
                    ))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.first.is_none() && self.running.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
