//! The control socket: one JSON request per line, one JSON answer per line.
//!
//! ```text
//! {"cmd":"status"}                        → {"ok":true,"status":{…}}
//! {"cmd":"reload"}                        → {"ok":true,"generation":N} once N serves
//! {"cmd":"reload","set":{"workers":3}}    (overrides on top of the original CLI/env)
//! {"cmd":"recycle"} / {"cmd":"stop"}      → {"ok":true}
//! {"cmd":"acme-renew"}                    → {"ok":true} (the certificate manager orders now)
//! anything refused                        → {"ok":false,"error":"…"}
//! ```
//!
//! Every request but `status` is decided by the core, which gives each exactly one
//! answer (`servery_core::control`, decision 0071): this server parses, hands the request
//! to the driver and writes back what the core answered. It refuses only what it cannot
//! parse, and answers for the core only when the core is gone.
//!
//! Who may use it (decision 0012): the socket is bound mode 0600 (under a umask, so
//! from the start), by default in a private directory, and a client is served only when
//! its `SO_PEERCRED` uid is servery's own or root's.

use std::io;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{Mode, OFlags};
use rustix::process::{Uid, geteuid};
use serde_json::{Value, json};
use servery_core::RawConfig;
use servery_core::control::{Answer, Request};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::oneshot;

use super::io::{Call, Inbound, InboundTx};
use crate::knobs;

/// Requests longer than this are refused (they are a few dozen bytes).
const MAX_REQUEST: u64 = 64 * 1024;

/// The mode of the private directory that holds the default socket without
/// `XDG_RUNTIME_DIR`, and the only mode servery accepts on an existing one.
const PRIVATE_DIR_MODE: u32 = 0o700;

/// The umask the socket is bound under: the file is created 0600, with no moment at which
/// anyone else may connect (a `chmod` after `bind` leaves one).
const SOCKET_UMASK: u32 = 0o177;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    #[error("another servery is already listening on the control socket {}", .0.display())]
    InUse(PathBuf),
    #[error("cannot create the control socket {path}: {source}", path = .path.display())]
    Bind {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "will not replace {} with the control socket: it exists and is not a socket (remove it, or choose another --control-socket)",
        .0.display()
    )]
    NotASocket(PathBuf),
    #[error(
        "the control socket directory {} {problem}: remove it (servery creates it, mode 0700), set XDG_RUNTIME_DIR, or pass --control-socket",
        .path.display()
    )]
    UnsafeDirectory { path: PathBuf, problem: DirProblem },
}

/// What is wrong with an existing directory at the default socket location.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DirProblem {
    #[error("is a symbolic link")]
    Symlink,
    #[error("is not a directory")]
    NotADirectory,
    #[error("is owned by uid {owner}, not by uid {me} who runs servery")]
    Owner { owner: u32, me: u32 },
    #[error("has mode {mode:04o}; it must be 0700, private to its owner")]
    Mode { mode: u32 },
    #[error("cannot be used: {0}")]
    Io(#[source] io::Error),
}

/// Whether a peer or a file owner is one servery trusts on the control socket: the user
/// servery runs as, or root (who can do anything anyway).
pub fn trusted_uid(uid: Uid) -> bool {
    uid == geteuid() || uid.is_root()
}

/// The file name of the socket in a directory: `servery-<port>.sock`.
fn socket_name(port: u16) -> String {
    format!("servery-{port}.sock")
}

/// Where the socket goes when `--control-socket` is not given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum DefaultDir {
    /// `$XDG_RUNTIME_DIR`: private to the user by the XDG specification (and systemd).
    Runtime(PathBuf),
    /// `<tmp>/servery-<uid>`, a directory servery creates 0700 (`<tmp>` is `$TMPDIR`,
    /// or `/tmp`), and checks when it exists already.
    Private(PathBuf),
}

impl DefaultDir {
    pub(super) fn path(&self) -> &Path {
        match self {
            Self::Runtime(p) | Self::Private(p) => p,
        }
    }
}

/// `$XDG_RUNTIME_DIR`, or `<tmp>/servery-<uid>` when it is unset or empty.
pub(super) fn default_dir() -> DefaultDir {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => DefaultDir::Runtime(PathBuf::from(dir)),
        None => DefaultDir::Private(
            std::env::temp_dir().join(format!("servery-{}", geteuid().as_raw())),
        ),
    }
}

/// `$XDG_RUNTIME_DIR/servery-<port>.sock`, or `<tmp>/servery-<uid>/servery-<port>.sock`.
/// Only computes the path (what `servery ctl` needs); [`Place::prepare`] makes the directory.
pub fn default_path(port: u16) -> PathBuf {
    default_dir().path().join(socket_name(port))
}

/// Where this parent binds its socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Place {
    /// `--control-socket PATH`, used as given.
    Given(PathBuf),
    /// A file `servery-<port>.sock` in the default directory.
    Default(DefaultDir),
}

impl Place {
    /// The operator's path, or the default directory ready for the socket: a
    /// [`DefaultDir::Private`] one is created mode 0700 if missing, and otherwise must be
    /// a real directory (not a symbolic link), owned by us, mode 0700. Called before
    /// anything is bound.
    pub(super) fn prepare(given: Option<&Path>) -> Result<Place, ControlError> {
        if let Some(path) = given {
            return Ok(Place::Given(path.to_owned()));
        }
        let dir = default_dir();
        if let DefaultDir::Private(path) = &dir {
            ensure_private_dir(path).map_err(|problem| ControlError::UnsafeDirectory {
                path: path.clone(),
                problem,
            })?;
        }
        Ok(Place::Default(dir))
    }

    /// The socket's path, once the port is known.
    pub(super) fn socket(&self, port: u16) -> PathBuf {
        match self {
            Place::Given(path) => path.clone(),
            Place::Default(dir) => dir.path().join(socket_name(port)),
        }
    }
}

/// Creates `path` 0700, or checks that what is there is a directory of ours, mode 0700.
///
/// The decision is taken on the directory itself, opened with `O_NOFOLLOW`: a symbolic
/// link put there is refused rather than followed, and what was checked is what the
/// socket goes into, as long as nobody can rename it away — which `/tmp`'s sticky bit
/// guarantees for a directory we own.
fn ensure_private_dir(path: &Path) -> Result<(), DirProblem> {
    let created = match rustix::fs::mkdir(path, Mode::from_raw_mode(PRIVATE_DIR_MODE)) {
        Ok(()) => true,
        Err(rustix::io::Errno::EXIST) => false,
        Err(e) => return Err(DirProblem::Io(e.into())),
    };
    let meta = std::fs::symlink_metadata(path).map_err(DirProblem::Io)?;
    if meta.file_type().is_symlink() {
        return Err(DirProblem::Symlink);
    }
    if !meta.is_dir() {
        return Err(DirProblem::NotADirectory);
    }
    let dir = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| match e {
        rustix::io::Errno::LOOP => DirProblem::Symlink,
        rustix::io::Errno::NOTDIR => DirProblem::NotADirectory,
        e => DirProblem::Io(e.into()),
    })?;
    let st = rustix::fs::fstat(&dir).map_err(|e| DirProblem::Io(e.into()))?;
    let me = geteuid().as_raw();
    if st.st_uid != me {
        return Err(DirProblem::Owner {
            owner: st.st_uid,
            me,
        });
    }
    let mode = st.st_mode & 0o7777;
    if created && mode != PRIVATE_DIR_MODE {
        // mkdir's mode passed through the umask, which can only have removed bits of
        // ours; give them back.
        rustix::fs::fchmod(&dir, Mode::from_raw_mode(PRIVATE_DIR_MODE))
            .map_err(|e| DirProblem::Io(e.into()))?;
    } else if mode != PRIVATE_DIR_MODE {
        return Err(DirProblem::Mode { mode });
    }
    Ok(())
}

/// Bind the control socket, replacing a stale socket left by a servery that died, but
/// never one a live servery still answers on, and never a file that is not a socket.
/// The socket is created mode 0600 (see [`SOCKET_UMASK`]): only its owner may connect.
pub(super) fn bind(path: &Path) -> Result<UnixListener, ControlError> {
    let err = |source| ControlError::Bind {
        path: path.to_owned(),
        source,
    };
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => match UnixStream::connect(path) {
            Ok(_) => return Err(ControlError::InUse(path.to_owned())),
            // Nobody listens: left by a servery that died.
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                std::fs::remove_file(path).map_err(err)?;
            }
            Err(e) => return Err(err(e)),
        },
        Ok(_) => return Err(ControlError::NotASocket(path.to_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(e)),
    }
    let listener = bind_private(path).map_err(err)?;
    listener.set_nonblocking(true).map_err(err)?;
    Ok(listener)
}

/// `bind` under [`SOCKET_UMASK`], restoring the umask after. The umask is per process:
/// this runs while the parent starts, before the host runtime or any worker exists, so no
/// other thread creates a file meanwhile.
fn bind_private(path: &Path) -> io::Result<UnixListener> {
    let previous = rustix::process::umask(Mode::from_raw_mode(SOCKET_UMASK));
    let bound = UnixListener::bind(path);
    rustix::process::umask(previous);
    bound
}

/// Removes the socket file when the parent is done with it.
#[derive(Debug)]
pub(super) struct SocketFile(pub PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Re-reads the configuration the parent was started with (for reloads).
pub(super) type Reparse = Arc<dyn Fn() -> Result<RawConfig, String> + Send + Sync>;

/// What the server needs from the rest of the parent.
#[derive(Clone)]
pub(super) struct ControlContext {
    pub events: InboundTx,
    pub reparse: Reparse,
}

impl std::fmt::Debug for ControlContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlContext").finish_non_exhaustive()
    }
}

/// Accept control connections until the host runtime shuts down.
pub(super) async fn serve(listener: UnixListener, ctx: ControlContext) {
    let listener = match tokio::net::UnixListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "cannot serve the control socket");
            return;
        }
    };
    loop {
        match listener.accept().await {
            Ok((stream, _)) => match rustix::net::sockopt::socket_peercred(&stream) {
                Ok(peer) if trusted_uid(peer.uid) => {
                    tokio::spawn(connection(stream, ctx.clone()));
                }
                Ok(peer) => {
                    tracing::warn!(
                        peer_uid = peer.uid.as_raw(),
                        peer_pid = peer.pid.as_raw_nonzero().get(),
                        our_uid = geteuid().as_raw(),
                        "control socket: refused a client of another user (only the same user and root are served)"
                    );
                }
                Err(e) => {
                    tracing::warn!(error = %e, "control socket: cannot read the client's credentials; refused");
                }
            },
            Err(e) => {
                tracing::warn!(error = %e, "control socket accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

async fn connection(stream: tokio::net::UnixStream, ctx: ControlContext) {
    let (rd, mut wr) = stream.into_split();
    let mut line = String::new();
    let answer = match BufReader::new(rd.take(MAX_REQUEST))
        .read_line(&mut line)
        .await
    {
        Ok(_) => match serde_json::from_str::<Value>(&line) {
            Ok(request) => dispatch(&request, &ctx).await,
            Err(e) => refuse(format!("not a JSON request: {e}")),
        },
        Err(e) => refuse(format!("cannot read the request: {e}")),
    };
    let mut out = answer.to_string();
    out.push('\n');
    let _ = wr.write_all(out.as_bytes()).await;
}

fn refuse(error: impl Into<String>) -> Value {
    json!({"ok": false, "error": error.into()})
}

fn send(ctx: &ControlContext, inbound: Inbound) -> Result<(), Value> {
    ctx.events
        .send(inbound)
        .map_err(|_| refuse("the service is exiting"))
}

async fn dispatch(request: &Value, ctx: &ControlContext) -> Value {
    let cmd = request.get("cmd").and_then(Value::as_str).unwrap_or("");
    let call = match cmd {
        "status" => return status(ctx).await.unwrap_or_else(|refusal| refusal),
        "stop" => Call::Request(Request::Stop),
        "recycle" => Call::Request(Request::Recycle),
        "reopen-logs" => Call::Request(Request::ReopenLogs),
        "acme-renew" => Call::Request(Request::AcmeRenew {
            wall: super::services::acme::facts::wall_now(),
        }),
        "reload" => match reload(request, ctx) {
            Ok(call) => call,
            Err(refusal) => return refusal,
        },
        other => {
            return refuse(format!(
                "unknown command `{other}` (expected status, reload, recycle, reopen-logs, acme-renew or stop)"
            ));
        }
    };
    let (tx, rx) = oneshot::channel();
    if let Err(refusal) = send(ctx, Inbound::Control(call, Some(tx))) {
        return refusal;
    }
    match rx.await {
        Ok(answer) => answer_json(&answer),
        Err(_) => refuse("the service stopped before it answered"),
    }
}

/// The core's answer as the protocol writes it.
fn answer_json(answer: &Answer) -> Value {
    match answer {
        Answer::Accepted => json!({"ok": true}),
        Answer::AlreadyStopping => json!({"ok": true, "note": "already stopping"}),
        Answer::Committed { generation } => json!({"ok": true, "generation": generation.0}),
        Answer::Refused(why) => refuse(why.to_string()),
    }
}

async fn status(ctx: &ControlContext) -> Result<Value, Value> {
    let (tx, rx) = oneshot::channel();
    send(ctx, Inbound::Status(tx))?;
    let status = rx.await.map_err(|_| refuse("the service is exiting"))?;
    Ok(json!({"ok": true, "status": status}))
}

/// The reload's configuration: read again, with the request's overrides on top.
fn reload(request: &Value, ctx: &ControlContext) -> Result<Call, Value> {
    // A configuration that cannot be read is the core's to reject (counted, reported in
    // the status, told to systemd); a malformed request is this client's alone.
    let mut raw = (ctx.reparse)().map(Box::new);
    match (request.get("set"), &mut raw) {
        (None | Some(Value::Null), _) | (Some(Value::Object(_)), Err(_)) => {}
        (Some(Value::Object(set)), Ok(raw)) => knobs::apply_overrides(raw, set)
            .map_err(|errors| refuse(format!("invalid overrides: {}", errors.join("; "))))?,
        (Some(other), _) => return Err(refuse(format!("`set` must be an object, got {other}"))),
    }
    // What the overrides gave is held to what the new workers could start with, as the
    // configuration read again was.
    if request.get("set").is_some_and(Value::is_object)
        && let Ok(config) = &raw
    {
        let problems = crate::settings::worker_problems(config);
        if !problems.is_empty() {
            raw = Err(problems.join("; "));
        }
    }
    Ok(Call::Reload(raw))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("sv-ctl-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
        dir
    }

    #[test]
    fn the_socket_is_created_0600_by_the_umask_alone() {
        let dir = scratch("mode");
        let path = dir.join("s.sock");
        let _listener = bind(&path).expect("bind");
        let meta = std::fs::symlink_metadata(&path).expect("lstat");
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.mode() & 0o777, 0o600, "{:o}", meta.mode());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_stale_socket_is_replaced_a_live_one_and_other_files_are_not() {
        let dir = scratch("stale");
        let path = dir.join("s.sock");
        // A live listener: refused, and left in place.
        let live = bind(&path).expect("first bind");
        assert!(matches!(bind(&path), Err(ControlError::InUse(p)) if p == path));
        // The listener gone but its file left (a servery killed with SIGKILL): replaced.
        drop(live);
        assert!(path.exists(), "closing a listener leaves its file");
        let again = bind(&path).expect("a stale socket is replaced");
        drop(again);
        std::fs::remove_file(&path).expect("rm");
        // Anything that is not a socket is never removed.
        std::fs::write(&path, b"precious").expect("write");
        assert!(matches!(bind(&path), Err(ControlError::NotASocket(_))));
        assert_eq!(std::fs::read(&path).expect("still there"), b"precious");
        std::fs::remove_file(&path).expect("rm");
        std::os::unix::fs::symlink(dir.join("elsewhere.sock"), &path).expect("symlink");
        assert!(matches!(bind(&path), Err(ControlError::NotASocket(_))));
        assert!(std::fs::symlink_metadata(&path).is_ok(), "the link stays");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn the_private_directory_is_made_0700_and_checked_when_it_exists() {
        let base = scratch("private");
        let dir = base.join("servery-x");
        ensure_private_dir(&dir).expect("created");
        let mode = std::fs::symlink_metadata(&dir).expect("lstat").mode();
        assert_eq!(mode & 0o7777, 0o700, "{mode:o}");
        ensure_private_dir(&dir).expect("ours, 0700: accepted again");

        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        assert!(matches!(
            ensure_private_dir(&dir),
            Err(DirProblem::Mode { mode: 0o755 })
        ));
        let mode = std::fs::symlink_metadata(&dir).expect("lstat").mode();
        assert_eq!(
            mode & 0o7777,
            0o755,
            "an existing directory is not repaired"
        );

        let link = base.join("link");
        let target = base.join("target");
        ensure_private_dir(&target).expect("a good directory");
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        assert!(matches!(
            ensure_private_dir(&link),
            Err(DirProblem::Symlink)
        ));

        let file = base.join("file");
        std::fs::write(&file, b"").expect("write");
        assert!(matches!(
            ensure_private_dir(&file),
            Err(DirProblem::NotADirectory)
        ));
        let _ = std::fs::remove_dir_all(base);
    }

    #[test]
    fn the_answer_written_is_the_cores() {
        use servery_core::control::Refusal;
        assert_eq!(answer_json(&Answer::Accepted), json!({"ok": true}));
        assert_eq!(
            answer_json(&Answer::AlreadyStopping),
            json!({"ok": true, "note": "already stopping"})
        );
        assert_eq!(
            answer_json(&Answer::Committed {
                generation: servery_core::Generation(3)
            }),
            json!({"ok": true, "generation": 3})
        );
        assert_eq!(
            answer_json(&Answer::Refused(Refusal::Stopping)),
            json!({"ok": false, "error": "the service is stopping"})
        );
    }

    #[test]
    fn the_default_place_is_a_file_per_port() {
        let given = Place::prepare(Some(Path::new("/x/ctl.sock"))).expect("given");
        assert_eq!(given.socket(8000), PathBuf::from("/x/ctl.sock"));
        let dir = DefaultDir::Runtime(PathBuf::from("/run/user/7"));
        assert_eq!(
            Place::Default(dir).socket(8443),
            PathBuf::from("/run/user/7/servery-8443.sock")
        );
        assert!(trusted_uid(geteuid()));
        assert!(trusted_uid(Uid::ROOT));
    }
}
