//! `servery ctl`: one request over the control socket, one answer.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

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
    #[error("control socket: {0}")]
    Io(#[from] io::Error),
    #[error("unintelligible answer: {0}")]
    BadAnswer(String),
    #[error("{0}")]
    Refused(String),
}

/// Send one request and return the answer; `Err(Refused)` when servery said no.
pub fn request(path: &Path, request: &Value, timeout: Duration) -> Result<Value, CtlError> {
    let mut stream = UnixStream::connect(path).map_err(|source| CtlError::Connect {
        path: path.to_owned(),
        source,
    })?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut line = request.to_string();
    line.push('\n');
    stream.write_all(line.as_bytes())?;
    let mut answer = String::new();
    BufReader::new(stream).read_line(&mut answer)?;
    if answer.is_empty() {
        return Err(CtlError::BadAnswer(
            "the connection closed without an answer".into(),
        ));
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
    let path = args
        .socket
        .clone()
        .unwrap_or_else(|| parent::default_control_socket(args.port));
    let body = match &args.command {
        CtlCommand::Status { .. } => json!({"cmd": "status"}),
        CtlCommand::Recycle => json!({"cmd": "recycle"}),
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
    let answer = match request(&path, &body, timeout) {
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
        CtlCommand::Stop => say!("stopping"),
    }
    0
}
