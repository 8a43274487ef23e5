//! CGI scripts (`--cgi DIR`, RFC 3875): a request under `--cgi-prefix` runs the script
//! its path names, one process per request, each leading its own process group. The
//! request body streams to its stdin, its header block is parsed ([`head`]) and its
//! body streamed back; stderr goes to the log. `docs/cgi.md` describes it; decision 0092
//! what it chose where the RFC leaves a choice.

pub mod args;
mod env;
pub mod groups;
pub mod head;
mod run;
mod script;

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode};

pub use args::CgiArgs;

/// The user servery's `--auth` authenticated for a request, as the request's extension:
/// a script sees it as `REMOTE_USER`, with `AUTH_TYPE=Basic` (RFC 3875 §4.1.1, §4.1.11).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteUser(pub Vec<u8>);

use crate::http::Body;
use crate::proxy::admission::Admission;
use groups::Groups;
use head::Reply;
use run::{Output, Running};
use script::Script;

/// One worker's CGI: where scripts are, and what every run shares.
#[derive(Debug)]
pub struct Cgi {
    /// The scripts' directory, canonical.
    dir: PathBuf,
    /// The served directory, which `PATH_TRANSLATED` maps `PATH_INFO` into.
    document_root: Option<PathBuf>,
    prefix: String,
    allowed: Vec<(OsString, OsString)>,
    timeout: Duration,
    max_output: u64,
    /// This worker's share of `--cgi-max-concurrent`, when it is bounded.
    admission: Option<Arc<Admission>>,
    groups: Arc<Groups>,
}

/// What a request under the prefix comes to.
#[derive(Debug)]
pub enum Answer {
    Response(Response<Body>),
    /// The script asked the server to answer with another local resource, with `GET`
    /// (RFC 3875 §6.2.2): this path and query.
    LocalRedirect(String),
}

fn plain(status: StatusCode, text: String) -> Response<Body> {
    let mut response = Response::new(crate::http::body::full(text));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

fn failed(status: StatusCode, reason: &dyn std::fmt::Display) -> Response<Body> {
    plain(
        status,
        format!(
            "{} {}: {reason}\n",
            status.as_u16(),
            status.canonical_reason().unwrap_or("")
        ),
    )
}

fn saturated(refused: &crate::proxy::admission::Refused) -> Response<Body> {
    let mut response = failed(StatusCode::SERVICE_UNAVAILABLE, refused);
    let headers = response.headers_mut();
    headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    // The body was not read: the connection cannot carry another request.
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

impl Cgi {
    /// The CGI the settings describe; `None` without `--cgi`. The settings were checked
    /// by the parent ([`CgiArgs::check`]), so a refusal here is a worker's startup
    /// failure.
    pub fn from_settings(
        args: &CgiArgs,
        document_root: &std::path::Path,
        admission: Option<Arc<Admission>>,
        groups: Arc<Groups>,
    ) -> Result<Option<Cgi>, String> {
        let Some(dir) = &args.cgi else {
            return Ok(None);
        };
        let dir =
            std::fs::canonicalize(dir).map_err(|e| format!("--cgi {}: {e}", dir.display()))?;
        Ok(Some(Cgi {
            dir,
            document_root: std::fs::canonicalize(document_root).ok(),
            prefix: args.cgi_prefix.clone(),
            allowed: env::allowed(&args.cgi_env),
            timeout: Duration::try_from_secs_f64(args.cgi_timeout).map_err(|e| e.to_string())?,
            max_output: args.cgi_max_output,
            admission,
            groups,
        }))
    }

    /// Whether a request for `path` is for a script (the prefix as a whole segment).
    pub fn takes(&self, path: &str) -> bool {
        path.strip_prefix(self.prefix.as_str())
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    }

    /// Runs the script `req` names and answers with its response, or with why not.
    pub async fn handle<B>(&self, req: Request<B>, peer: Option<SocketAddr>, tls: bool) -> Answer
    where
        B: hyper::body::Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: std::fmt::Display,
    {
        let rest = req.uri().path()[self.prefix.len()..].to_owned();
        let (dir, prefix) = (self.dir.clone(), self.prefix.clone());
        let found = tokio::task::spawn_blocking(move || script::find(&dir, &prefix, &rest)).await;
        let script = match found {
            Ok(Ok(script)) => script,
            Ok(Err(not_run)) => {
                tracing::info!(path = req.uri().path(), reason = %not_run, "no CGI script runs");
                return Answer::Response(failed(not_run.status(), &not_run));
            }
            Err(e) => return Answer::Response(failed(StatusCode::INTERNAL_SERVER_ERROR, &e)),
        };
        // Admitted before anything of the request is read.
        let permit = match &self.admission {
            None => None,
            Some(admission) => match admission.permit().await {
                Ok(permit) => Some(permit),
                Err(refused) => {
                    tracing::info!(script = %script.script_name, %refused, "CGI request refused");
                    return Answer::Response(saturated(&refused));
                }
            },
        };
        self.run(req, script, peer, tls, permit).await
    }

    async fn run<B>(
        &self,
        req: Request<B>,
        script: Script,
        peer: Option<SocketAddr>,
        tls: bool,
        permit: Option<crate::proxy::admission::Permit>,
    ) -> Answer
    where
        B: hyper::body::Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: std::fmt::Display,
    {
        let (parts, body) = req.into_parts();
        let name: Arc<str> = Arc::from(script.script_name.as_str());
        let mut command = tokio::process::Command::new(&script.file);
        command
            .env_clear()
            .envs(env::build(
                &parts,
                &script,
                env::Context {
                    peer,
                    tls,
                    document_root: self.document_root.as_deref(),
                },
                &self.allowed,
            ))
            .current_dir(script.file.parent().unwrap_or(&self.dir))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own group: whatever it starts is killed with it.
            .process_group(0)
            .kill_on_drop(true);
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(e) => {
                tracing::warn!(script = %name, error = %e, "cannot start the CGI script");
                let reason = format!("cannot start the script: {e}");
                return Answer::Response(failed(StatusCode::BAD_GATEWAY, &reason));
            }
        };
        let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok()) else {
            return Answer::Response(failed(
                StatusCode::BAD_GATEWAY,
                &"the script exited at once",
            ));
        };
        let group = self.groups.started(pid);
        tracing::debug!(script = %name, pid, "CGI script started");
        let (Some(stdin), Some(mut stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Answer::Response(failed(StatusCode::BAD_GATEWAY, &"the script has no pipes"));
        };
        let progress = run::Progress::new();
        // The feeder ends with the client's body or when the script stops reading; a
        // script killed closes its stdin, which ends it too.
        tokio::spawn(run::feed(
            body,
            stdin,
            Arc::clone(&progress),
            Arc::clone(&name),
        ));
        tokio::spawn(run::log_stderr(stderr, Arc::clone(&name)));
        let running = Running {
            child,
            group,
            permit,
            script: Arc::clone(&name),
            timeout: self.timeout,
        };
        let (head, first) = match run::read_head(&mut stdout, &progress, self.timeout).await {
            Ok(read) => read,
            Err(failure) => {
                tracing::warn!(script = %name, status = failure.status().as_u16(), error = %failure, "CGI script gave no usable response");
                // Dropping `running` kills the script's group.
                drop(running);
                return Answer::Response(failed(failure.status(), &failure));
            }
        };
        let head_len = head.len() as u64;
        let (status, headers) = if script.nph {
            match head::parse_nph(&head) {
                Ok(answer) => answer,
                Err(e) => return Answer::Response(malformed(&name, &e)),
            }
        } else {
            match head::parse(&head) {
                Ok(
                    Reply::Document { status, headers } | Reply::ClientRedirect { status, headers },
                ) => (status, headers),
                Ok(Reply::LocalRedirect { path_and_query }) => {
                    running.finish();
                    return Answer::LocalRedirect(path_and_query);
                }
                Err(e) => return Answer::Response(malformed(&name, &e)),
            }
        };
        let body = Output::new(first, stdout, running, head_len, self.max_output);
        let mut response = Response::new(http_body_util::combinators::BoxBody::new(body));
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        Answer::Response(response)
    }

    /// The groups of the scripts this worker is running.
    pub fn groups(&self) -> &Arc<Groups> {
        &self.groups
    }
}

/// The answer to a local redirect that cannot be followed.
pub fn bad_local_redirect() -> Response<Body> {
    failed(
        StatusCode::BAD_GATEWAY,
        &"the script's local redirect is malformed or one of too many",
    )
}

fn malformed(script: &str, error: &head::HeadError) -> Response<Body> {
    tracing::warn!(%script, error = %error, "CGI script's header block is malformed");
    failed(StatusCode::BAD_GATEWAY, error)
}
