//! The control socket: one JSON request per line, one JSON answer per line.
//!
//! ```text
//! {"cmd":"status"}                        → {"ok":true,"status":{…}}
//! {"cmd":"reload"}                        → {"ok":true,"generation":N} once N serves
//! {"cmd":"reload","set":{"workers":3}}    (overrides on top of the original CLI/env)
//! {"cmd":"recycle"} / {"cmd":"stop"}      → {"ok":true}
//! anything refused                        → {"ok":false,"error":"…"}
//! ```

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::{Value, json};
use servery_core::RawConfig;
use servery_core::supervisor::{Command, Event};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::oneshot;

use super::io::{ControlState, Inbound, InboundTx};
use crate::knobs;

/// Requests longer than this are refused (they are a few dozen bytes).
const MAX_REQUEST: u64 = 64 * 1024;

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
}

/// `$XDG_RUNTIME_DIR/servery-<port>.sock`, or `/tmp/servery-<uid>-<port>.sock`.
pub fn default_path(port: u16) -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => Path::new(&dir).join(format!("servery-{port}.sock")),
        None => PathBuf::from(format!(
            "/tmp/servery-{}-{port}.sock",
            rustix::process::getuid().as_raw()
        )),
    }
}

/// Bind the control socket, replacing a stale file left by a servery that died, but
/// never one a live servery still answers on. Only the owner may connect.
pub fn bind(path: &Path) -> Result<UnixListener, ControlError> {
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(ControlError::InUse(path.to_owned()));
        }
        let _ = std::fs::remove_file(path);
    }
    let err = |source| ControlError::Bind {
        path: path.to_owned(),
        source,
    };
    let listener = UnixListener::bind(path).map_err(err)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
    listener.set_nonblocking(true).map_err(err)?;
    Ok(listener)
}

/// Removes the socket file when the parent is done with it.
#[derive(Debug)]
pub struct SocketFile(pub PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Re-reads the configuration the parent was started with (for reloads).
pub type Reparse = Arc<dyn Fn() -> Result<RawConfig, String> + Send + Sync>;

/// What the server needs from the rest of the parent.
#[derive(Clone)]
pub struct ControlContext {
    pub events: InboundTx,
    pub state: Arc<ControlState>,
    pub reparse: Reparse,
}

impl std::fmt::Debug for ControlContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlContext").finish_non_exhaustive()
    }
}

/// Accept control connections until the host runtime shuts down.
pub async fn serve(listener: UnixListener, ctx: ControlContext) {
    let listener = match tokio::net::UnixListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "cannot serve the control socket");
            return;
        }
    };
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(connection(stream, ctx.clone()));
            }
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
    let closing = ctx.state.closing.load(Ordering::Acquire);
    let cmd = request.get("cmd").and_then(Value::as_str).unwrap_or("");
    let result = match cmd {
        "status" => status(ctx).await,
        "stop" if closing => Ok(json!({"ok": true, "note": "already stopping"})),
        "stop" => {
            send(ctx, Inbound::Event(Event::Command(Command::Stop))).map(|()| json!({"ok": true}))
        }
        "reload" | "recycle" if closing => Err(refuse("the service is stopping")),
        "recycle" => send(ctx, Inbound::Event(Event::Command(Command::Recycle)))
            .map(|()| json!({"ok": true})),
        "reload" => reload(request, ctx).await,
        other => Err(refuse(format!(
            "unknown command `{other}` (expected status, reload, recycle or stop)"
        ))),
    };
    result.unwrap_or_else(|refusal| refusal)
}

async fn status(ctx: &ControlContext) -> Result<Value, Value> {
    let (tx, rx) = oneshot::channel();
    send(ctx, Inbound::Status(tx))?;
    let status = rx.await.map_err(|_| refuse("the service is exiting"))?;
    Ok(json!({"ok": true, "status": status}))
}

async fn reload(request: &Value, ctx: &ControlContext) -> Result<Value, Value> {
    let mut raw =
        (ctx.reparse)().map_err(|e| refuse(format!("cannot re-read the configuration: {e}")))?;
    match request.get("set") {
        None | Some(Value::Null) => {}
        Some(Value::Object(set)) => knobs::apply_overrides(&mut raw, set)
            .map_err(|errors| refuse(format!("invalid overrides: {}", errors.join("; "))))?,
        Some(other) => return Err(refuse(format!("`set` must be an object, got {other}"))),
    }
    let (tx, rx) = oneshot::channel();
    send(ctx, Inbound::Reload(Box::new(raw), Some(tx)))?;
    match rx.await {
        Ok(Ok(generation)) => Ok(json!({"ok": true, "generation": generation})),
        Ok(Err(message)) => Err(refuse(message)),
        Err(_) => Err(refuse("the service stopped before the reload finished")),
    }
}
