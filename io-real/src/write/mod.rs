//! The write flow (SPEC §5) shared by every way a worker writes a file: `PUT`, multipart
//! `POST`, resumable chunks, and later DAV and TFTP writes.
//!
//! 1. **Resolve** the parent directory beneath the served root with cap-std and take its
//!    identity (device, inode) without ever following the target's own final component
//!    ([`target`]).
//! 2. **Reserve** global upload count and bytes, then **acquire** the target lease keyed
//!    by (device, inode, basename) ([`grant`]). Both happen before a single body byte is
//!    read, so saturation, a busy target or a parent that does not answer cost the client
//!    nothing but a status line.
//! 3. **Stream** into a private temporary file `.servery-tmp-<worker>-<random>` created
//!    with `O_EXCL` in the target directory, never past the reserved bound ([`temp`],
//!    [`stream`]). The lease and reservation are renewed as the write goes on.
//! 4. **Revalidate** that the directory we hold is still the one the path names beneath
//!    the root, and **publish** with one `renameat` inside that directory
//!    (`RENAME_NOREPLACE` unless overwriting is allowed) ([`publish`]).
//! 5. **Release** the lease and the reservation from `Drop`, on every path out, including
//!    a handler that hyper drops because its client went away. The parent's revocation
//!    and temp-file cleanup of a dead worker are the backstop ([`crate::parent`]).
//!
//! Resumable uploads keep their bytes in a partial file keyed by the target instead of a
//! temporary one ([`partial`]).

pub mod args;
mod chunk_run;
pub mod deny;
pub mod file;
pub mod grant;
pub mod partial;
pub mod publish;
pub mod stream;
pub mod target;
pub mod temp;

use std::io;
use std::sync::Arc;
use std::time::Duration;

use servery_core::broker::ClientError;
use tokio::runtime::Handle;

use crate::worker::broker::BrokerHandle;

pub use file::write_file;
pub use grant::{Grant, LockCheck};
pub use stream::ChunkSource;
pub use target::Target;

/// Name prefix of every file servery keeps next to served files for its own use. Such
/// names are never served, listed or accepted as upload targets.
pub const PRIVATE_PREFIX: &str = ".servery-";

/// Whether an I/O error means the file system (or the user's quota) is full.
pub fn is_out_of_space(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::StorageFull
        || e.raw_os_error() == Some(rustix::io::Errno::DQUOT.raw_os_error())
}

/// Whether `name` is one of servery's own files (temporaries, partial uploads,
/// property sidecars).
pub fn is_own(name: &str) -> bool {
    name.starts_with(PRIVATE_PREFIX)
}

/// Whether `name` is private: one of servery's own files, or a name the operator's
/// `--deny` list names. Never served, listed or written.
pub fn is_private(name: &str) -> bool {
    is_own(name) || deny::is_denied(name)
}

/// How this worker writes. Fixed for the worker's life.
#[derive(Debug, Clone)]
pub struct WriteSettings {
    /// Names temporary files, so the parent can remove a dead worker's leftovers.
    pub worker_id: u64,
    /// Replace existing files (off: 409, or 412 under `If-None-Match: *`).
    pub allow_overwrite: bool,
    /// The largest single upload, in bytes (already capped by the global byte budget).
    pub max_upload_size: u64,
    /// Files one multipart request may create (413 before the next one is written).
    pub max_upload_files: u32,
    /// A body that delivers no byte this long ends its upload with 408.
    pub body_timeout: Duration,
    /// How long a writer waits for a target another writer holds (0: 409 at once).
    pub write_lock_timeout: Duration,
    /// A resumable upload untouched this long is abandoned (the broker's `partial_ttl`).
    pub partial_ttl: Duration,
}

impl Default for WriteSettings {
    fn default() -> Self {
        WriteSettings {
            worker_id: 0,
            allow_overwrite: false,
            max_upload_size: 1 << 30,
            max_upload_files: 1000,
            body_timeout: Duration::from_secs(20),
            write_lock_timeout: Duration::ZERO,
            partial_ttl: Duration::from_secs(24 * 3600),
        }
    }
}

/// Why a write did not happen. Mapped to a status in one place, `http::error`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// A global budget (uploads, bytes, leases, partial uploads) is full: 503.
    #[error("the upload budget is exhausted")]
    Saturated,
    /// The broker did not answer: too many requests outstanding, no reply in time, or the
    /// parent is gone. Fails closed: 503.
    #[error("the state broker is unavailable: {0}")]
    Broker(ClientError),
    /// Another writer holds the target (and did not let go within the lock timeout): 409.
    #[error("another upload to this target is in progress")]
    Busy,
    /// The target exists and overwriting is off: 409.
    #[error("the target exists and overwriting is not allowed")]
    Exists,
    /// `If-None-Match: *` and the target exists: 412.
    #[error("the target exists (If-None-Match: *)")]
    PreconditionFailed,
    /// `If-Match`, `If-None-Match` or `If-Unmodified-Since` is false for what the target
    /// is now, looked at under the target's lease: 412, and nothing was written.
    #[error("the request's precondition (If-Match, If-None-Match or If-Unmodified-Since) is false")]
    ConditionFalse,
    /// A resumable (`Content-Range`) PUT to an existing file while overwriting is off:
    /// 409, saying why. Such a PUT uploads a whole new file in pieces; it never changes
    /// part of an existing one.
    #[error(
        "a PUT with Content-Range uploads a whole new file in pieces; it cannot change \
         part of an existing file, and replacing one needs --allow-overwrite"
    )]
    PartialOverExisting,
    /// The upload is larger than it may be: 413.
    #[error("the upload exceeds {limit} bytes")]
    TooLarge { limit: u64 },
    /// The parent directory does not exist or is not a directory: 409 (RFC 4918 §9.7.1).
    #[error("the parent directory does not exist")]
    NoParent,
    /// The target names a directory, or the request path is a directory where a file
    /// was expected (or the other way round): 409.
    #[error("the target is a directory")]
    IsDirectory,
    /// A `POST` to something that is not a directory: 409.
    #[error("uploads by POST go to a directory")]
    NotADirectory,
    /// A name that may not be written (servery's own files, dot-files while hidden,
    /// separators), or a path that escapes the root: 403.
    #[error("this name may not be written")]
    Forbidden,
    /// The body ended before its announced length (the client went away): 400.
    #[error("the request body ended early ({received} of {expected} bytes)")]
    Incomplete { received: u64, expected: u64 },
    /// The body delivered no byte for the body timeout: 408, and the connection closes
    /// (what the peer still sends is not read).
    #[error("the request body stalled for {0:?}")]
    BodyTimeout(Duration),
    /// A multipart request holds more files than one request may create: 413, before
    /// the first file past the limit is written (the earlier ones stay published).
    #[error("the form holds more than {limit} files")]
    TooManyFiles { limit: u32 },
    /// The body could not be read (connection reset, protocol error): 400.
    #[error("the request body could not be read: {0}")]
    Body(String),
    /// A malformed upload request (headers, multipart framing, `Content-Range`): 400.
    #[error("bad upload request: {0}")]
    BadRequest(&'static str),
    /// Not multipart/form-data: 415.
    #[error("POST uploads must be multipart/form-data")]
    UnsupportedMediaType,
    /// A resumable chunk that starts after the bytes held so far: 409, with the `Range`
    /// held.
    #[error(
        "chunk starts at {start} but {have} bytes are held: a PUT with Content-Range \
         uploads a whole new file in order from byte 0, and never changes part of an \
         existing file"
    )]
    RangeGap { start: u64, have: u64 },
    /// A resumable chunk for a different total length than the upload in progress: 409.
    #[error("total length {total} differs from the upload in progress ({held})")]
    RangeMismatch { total: u64, held: u64 },
    /// The directory moved or was replaced while we wrote: nothing was published. 409.
    #[error("the target directory changed during the upload")]
    Moved,
    /// A grant expired or was revoked under us (a stalled write outlived its lease): 503.
    #[error("the lease was lost during the upload")]
    LeaseLost,
    /// The broker's lock check refused a WebDAV write: it would break a lock whose token
    /// was not submitted. 423 (the WebDAV layer names the locks).
    #[error("the target is locked")]
    Locked,
    /// The worker's blocking pool is shutting down: 503.
    #[error("the worker is shutting down")]
    ShuttingDown,
    /// Anything else the file system said: 500.
    #[error("I/O error during upload: {0}")]
    Io(#[from] io::Error),
}

impl WriteError {
    /// Classifies an error met while resolving a client-chosen path.
    pub fn from_resolve(e: io::Error) -> Self {
        match e.kind() {
            io::ErrorKind::NotFound | io::ErrorKind::NotADirectory => WriteError::NoParent,
            // cap-std reports an escape from the root (through a symlink) this way.
            io::ErrorKind::PermissionDenied => WriteError::Forbidden,
            _ if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
                WriteError::Forbidden
            }
            _ => WriteError::Io(e),
        }
    }

    /// Whether the failure is the service's momentary state rather than the request's:
    /// such answers carry `Retry-After`.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            WriteError::Saturated
                | WriteError::Broker(_)
                | WriteError::LeaseLost
                | WriteError::ShuttingDown
        )
    }
}

/// Everything a request handler needs to write: the root, the broker and the settings.
#[derive(Debug, Clone)]
pub struct Writer {
    /// Followed per request (`crate::served_root`): each write takes the directory the
    /// root's path names when it starts.
    pub root: Arc<crate::served_root::LiveRoot>,
    pub broker: BrokerHandle,
    pub settings: Arc<WriteSettings>,
}

/// Runs file-system work on the blocking pool.
pub async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, WriteError> + Send + 'static,
) -> Result<T, WriteError> {
    let runtime = Handle::try_current().map_err(|_| WriteError::ShuttingDown)?;
    match runtime.spawn_blocking(work).await {
        Ok(result) => result,
        Err(e) if e.is_cancelled() => Err(WriteError::ShuttingDown),
        Err(e) => Err(WriteError::Io(io::Error::other(e))),
    }
}
