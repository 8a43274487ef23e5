//! `servery ctl`: one request over the control socket, one answer.
//!
//! Before it says anything, `ctl` makes sure it talks to a servery of the same user (or
//! root): the socket file must belong to one, and so must the process listening on it
//! (`SO_PEERCRED`). Otherwise anyone who could put a socket at the path `ctl` uses — a
//! predictable name in `/tmp`, a symbolic link — would be answering, and `ctl` would
//! print their status or report their "success" of a `stop`.
//!
//! Root is the exception the shipped unit's logrotate `postrotate` needs: root's `ctl`
//! also talks to a service running as another user, through a socket root names with
//! `--socket` (never one found at a default path, which anyone could have made first),
//! as long as the process listening on it runs as the user that owns the socket file
//! (decision 0059).

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::process::{Uid, geteuid};
use serde_json::{Value, json};

use crate::cli::{CtlArgs, CtlCommand};
use crate::{EXIT_CONFIG, EXIT_RUNTIME, knobs, parent};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CtlError {
    #[error("cannot reach servery at {path}: {source} (is it running? see --socket)", path = .path.display())]
    Connect {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "refusing to talk to {path}: the socket file belongs to uid {owner}, neither you (uid {me}) nor root; another user may have put it there{hint}",
        path = .path.display(),
        hint = if *.me == 0 { " (root talks to another user's servery only through a socket it names with --socket)" } else { "" }
    )]
    ForeignSocket { path: PathBuf, owner: u32, me: u32 },
    #[error(
        "refusing to talk to {path}: the socket file belongs to uid {owner}, but the process listening on it (pid {pid}) runs as uid {uid}; another user may be impersonating servery",
        path = .path.display()
    )]
    Relayed {
        path: PathBuf,
        owner: u32,
        uid: u32,
        pid: i32,
    },
    #[error(
        "refusing to talk to {path}: the process listening on it (pid {pid}) runs as uid {uid}, neither you (uid {me}) nor root; another user may be impersonating servery",
        path = .path.display()
    )]
    ForeignPeer {
        path: PathBuf,
        uid: u32,
        pid: i32,
        me: u32,
    },
    #[error(
        "the connection closed without an answer (servery answers only clients of the user it runs as, and root)"
    )]
    Closed,
    #[error("control socket: {0}")]
    Io(#[from] io::Error),
    #[error("unintelligible answer: {0}")]
    BadAnswer(String),
    #[error("{0}")]
    Refused(String),
}

/// How `ctl` came by the socket's path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketPath {
    /// Named by the operator (`--socket`, `SERVERY_CONTROL_SOCKET`).
    Named,
    /// Worked out from `--port` (a place another user may have taken first).
    Default,
}

/// Connect to the socket at `path` if it belongs to the same user or root, and so does
/// the process listening on it; or, for root and a path it named, if the process
/// listening runs as the user the socket file belongs to.
pub fn connect(path: &Path, how: SocketPath) -> Result<UnixStream, CtlError> {
    let connect_error = |source| CtlError::Connect {
        path: path.to_owned(),
        source,
    };
    let me = geteuid().as_raw();
    // The file as named (not what a symbolic link points to): its owner is who created
    // it. The peer check below decides about whatever answers through it.
    let owner = std::fs::symlink_metadata(path)
        .map_err(connect_error)?
        .uid();
    let ours = crate::parent::trusted_uid(Uid::from_raw(owner));
    let root_names_theirs = !ours && geteuid().is_root() && how == SocketPath::Named;
    if !ours && !root_names_theirs {
        return Err(CtlError::ForeignSocket {
            path: path.to_owned(),
            owner,
            me,
        });
    }
    let stream = UnixStream::connect(path).map_err(connect_error)?;
    let peer = rustix::net::sockopt::socket_peercred(&stream).map_err(io::Error::from)?;
    if root_names_theirs {
        if peer.uid.as_raw() != owner {
            return Err(CtlError::Relayed {
                path: path.to_owned(),
                owner,
                uid: peer.uid.as_raw(),
                pid: peer.pid.as_raw_nonzero().get(),
            });
        }
        return Ok(stream);
    }
    if !crate::parent::trusted_uid(peer.uid) {
        return Err(CtlError::ForeignPeer {
            path: path.to_owned(),
            uid: peer.uid.as_raw(),
            pid: peer.pid.as_raw_nonzero().get(),
            me,
        });
    }
    Ok(stream)
}

/// Send one request and return the answer; `Err(Refused)` when servery said no.
pub fn request(
    path: &Path,
    how: SocketPath,
    request: &Value,
    timeout: Duration,
) -> Result<Value, CtlError> {
    let mut stream = connect(path, how)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut line = request.to_string();
    line.push('\n');
    // A servery that refuses us closes the connection at once, which may be noticed by
    // the write (EPIPE), the read (ECONNRESET) or as an empty answer.
    let closed = |e: io::Error| match e.kind() {
        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => CtlError::Closed,
        _ => CtlError::Io(e),
    };
    stream.write_all(line.as_bytes()).map_err(closed)?;
    let mut answer = String::new();
    BufReader::new(stream)
        .read_line(&mut answer)
        .map_err(closed)?;
    if answer.is_empty() {
        return Err(CtlError::Closed);
    }
    let value: Value =
        serde_json::from_str(&answer).map_err(|e| CtlError::BadAnswer(e.to_string()))?;
    if value.get("ok") == Some(&Value::Bool(true)) {
        Ok(value)
    } else {
        Err(CtlError::Refused(
            value
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or("refused without a reason")
                .to_owned(),
        ))
    }
}

pub fn run(args: CtlArgs) -> i32 {
    let (path, how) = match args.socket.clone() {
        Some(path) => (path, SocketPath::Named),
        None => (
            parent::default_control_socket(args.port),
            SocketPath::Default,
        ),
    };
    let body = match &args.command {
        CtlCommand::Status { .. } => json!({"cmd": "status"}),
        CtlCommand::Recycle => json!({"cmd": "recycle"}),
        CtlCommand::ReopenLogs => json!({"cmd": "reopen-logs"}),
        CtlCommand::AcmeRenew => json!({"cmd": "acme-renew"}),
        CtlCommand::Stop => json!({"cmd": "stop"}),
        CtlCommand::Reload { set } => match knobs::parse_pairs(set) {
            Ok(set) if set.is_empty() => json!({"cmd": "reload"}),
            Ok(set) => json!({"cmd": "reload", "set": set}),
            Err(e) => {
                tell!("servery ctl: {e}");
                return EXIT_CONFIG;
            }
        },
    };
    let timeout = Duration::try_from_secs_f64(args.timeout).unwrap_or(Duration::from_secs(120));
    let answer = match request(&path, how, &body, timeout) {
        Ok(answer) => answer,
        Err(e) => {
            tell!("servery ctl: {e}");
            return EXIT_RUNTIME;
        }
    };
    match args.command {
        CtlCommand::Status { json: true } => say!("{}", answer["status"]),
        CtlCommand::Status { json: false } => {
            say!("{}", parent::status_text(&answer["status"]).trim_end())
        }
        CtlCommand::Reload { .. } => {
            say!("reloaded: generation {} is serving", answer["generation"]);
        }
        CtlCommand::Recycle => say!("recycling every worker, one at a time"),
        CtlCommand::ReopenLogs => say!("reopening the access log"),
        CtlCommand::AcmeRenew => say!("ordering a new certificate (see `ctl status`)"),
        CtlCommand::Stop => say!("stopping"),
    }
    0
}
