//! Python applications in the workers (`--wsgi`): every worker embeds CPython (pyo3, the
//! `python` feature), imports the application while it prepares — so an application that
//! cannot start fails its worker's start with its own traceback and never receives a
//! request — and answers every request that is not for a static file by calling it on a
//! bounded pool of threads ([`pool`]).
//!
//! The lifecycle sees the application in one place: the interpreter is probed from a
//! thread of its own, and the worker's heartbeats carry the probe's answers
//! (`WorkerLifecycle::watch_app`), so a request wedged in C code holding the GIL silences
//! the worker and the supervisor replaces it as it replaces any hang.

pub mod args;
#[cfg(any(feature = "python", test))]
mod pool;
#[cfg(feature = "python")]
mod python;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use http::request::Parts;

use crate::clock::Clock;
use crate::http::body::Body;

/// Whether this build can host Python applications.
pub const PYTHON_BUILT_IN: bool = cfg!(feature = "python");

/// `MODULE:NAME`: a dotted module path, and a dotted attribute path inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub module: String,
    pub name: String,
}

impl Target {
    pub fn parse(s: &str) -> Result<Target, String> {
        let Some((module, name)) = s.split_once(':') else {
            return Err(format!(
                "expected MODULE:NAME (`myproject.wsgi:application`), got `{s}`"
            ));
        };
        let dotted = |part: &str| {
            !part.is_empty()
                && part.split('.').all(|word| {
                    let mut chars = word.chars();
                    chars.next().is_some_and(|c| c == '_' || c.is_alphabetic())
                        && chars.all(|c| c == '_' || c.is_alphanumeric())
                })
        };
        if !dotted(module) {
            return Err(format!("`{module}` is not a dotted module name (in `{s}`)"));
        }
        if !dotted(name) {
            return Err(format!(
                "`{name}` is not a dotted attribute name (in `{s}`)"
            ));
        }
        Ok(Target {
            module: module.to_owned(),
            name: name.to_owned(),
        })
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.module, self.name)
    }
}

/// Which protocol the application speaks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Interface {
    Wsgi,
    /// ASGI 3, with how its lifespan runs (`auto`, `on`, `off`) and may take.
    Asgi {
        lifespan: &'static str,
        lifespan_timeout: Duration,
        /// `auto`, `asyncio` or `uvloop`.
        event_loop: &'static str,
    },
}

/// Everything a worker needs to load and call its application.
#[derive(Debug, Clone)]
pub struct AppSpec {
    pub target: Target,
    pub interface: Interface,
    pub factory: bool,
    /// Put in front of `sys.path`, in this order, before the import.
    pub app_dirs: Vec<PathBuf>,
    /// The most application calls at once (threads of the pool).
    pub threads: usize,
    /// `wsgi.multiprocess`: more than one worker serves the application.
    pub multiprocess: bool,
    /// Paths under this prefix are answered from the served directory; `None` when no
    /// directory was given, so every path goes to the application.
    pub static_prefix: Option<String>,
    /// How long a read of the request body may wait for the client.
    pub body_timeout: Duration,
}

impl AppSpec {
    /// The application the settings ask for, if any.
    pub fn from_settings(settings: &crate::cli::ServeArgs, body_timeout: Duration) -> Option<Self> {
        let app = &settings.app;
        let (flag, target) = app.target()?;
        let target = Target::parse(target).ok()?;
        let interface = if flag == "--asgi" {
            Interface::Asgi {
                lifespan: match app.lifespan.as_str() {
                    "on" => "on",
                    "off" => "off",
                    _ => "auto",
                },
                lifespan_timeout: Duration::try_from_secs_f64(app.lifespan_timeout)
                    .unwrap_or(Duration::from_secs(30)),
                event_loop: match app.event_loop.as_str() {
                    "asyncio" => "asyncio",
                    "uvloop" => "uvloop",
                    _ => "auto",
                },
            }
        } else {
            Interface::Wsgi
        };
        Some(AppSpec {
            target,
            interface,
            factory: app.app_factory,
            app_dirs: app.app_dir.clone(),
            threads: usize::try_from(settings.budgets.max_blocking_threads)
                .unwrap_or(1)
                .max(1),
            multiprocess: settings.workers.count() > 1,
            static_prefix: settings.dir.is_some().then(|| app.static_prefix.clone()),
            body_timeout,
        })
    }
}

/// Why an application could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AppError {
    #[error("this build of servery has no Python (build it with `--features python`)")]
    NoPython,
    /// The import, the factory call or a check of what it gave failed; the text carries
    /// the application's traceback.
    #[error("cannot load the application {target}: {detail}")]
    Load { target: Target, detail: String },
}

/// What a request carries besides its head and body.
#[derive(Debug, Clone, Copy)]
pub struct Caller {
    pub peer: Option<SocketAddr>,
    pub tls: bool,
}

/// A loaded application, shared by the worker's connections.
#[derive(Debug)]
pub struct App {
    static_prefix: Option<String>,
    #[cfg(feature = "python")]
    host: Host,
}

/// The adapter the application runs under.
#[cfg(feature = "python")]
#[derive(Debug)]
enum Host {
    Wsgi(python::Wsgi),
    Asgi(python::Asgi),
}

impl App {
    /// Imports the application. Blocking (it runs the application's module code): call it
    /// from a blocking thread.
    #[cfg_attr(not(feature = "python"), allow(unused_variables))]
    pub fn load(
        spec: &AppSpec,
        runtime: tokio::runtime::Handle,
        clock: Clock,
    ) -> Result<App, AppError> {
        #[cfg(feature = "python")]
        {
            let host = match spec.interface {
                Interface::Wsgi => Host::Wsgi(python::Wsgi::load(spec, runtime, clock)?),
                Interface::Asgi {
                    lifespan,
                    lifespan_timeout,
                    event_loop,
                } => {
                    let mode = match lifespan {
                        "on" => python::LifespanMode::On,
                        "off" => python::LifespanMode::Off,
                        _ => python::LifespanMode::Auto,
                    };
                    Host::Asgi(python::Asgi::load(
                        spec,
                        runtime,
                        clock,
                        mode,
                        lifespan_timeout,
                        event_loop,
                    )?)
                }
            };
            Ok(App {
                static_prefix: spec.static_prefix.clone(),
                host,
            })
        }
        #[cfg(not(feature = "python"))]
        Err(AppError::NoPython)
    }

    /// Whether a request for `path` goes to the application (else to the files).
    pub fn takes(&self, path: &str) -> bool {
        self.static_prefix
            .as_deref()
            .is_none_or(|prefix| !under_prefix(path, prefix))
    }

    /// When the interpreter last answered the liveness probe, in the worker's clock.
    pub fn last_alive(&self) -> Option<servery_core::Instant> {
        #[cfg(feature = "python")]
        match &self.host {
            Host::Wsgi(w) => w.last_alive(),
            Host::Asgi(a) => a.last_alive(),
        }
        #[cfg(not(feature = "python"))]
        None
    }

    /// The application's answer to one request. Never fails: an application that raises
    /// before its response starts gets 500 (its traceback in the log); one that raises
    /// after ends the response early, so the client sees it cut.
    #[cfg_attr(not(feature = "python"), allow(unused_variables))]
    pub async fn handle<B>(&self, parts: Parts, body: B, caller: Caller) -> Response<Body>
    where
        B: hyper::body::Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: std::fmt::Display,
    {
        #[cfg(feature = "python")]
        match &self.host {
            Host::Wsgi(w) => w.handle(parts, body, caller).await,
            Host::Asgi(a) => a.handle(parts, body, caller).await,
        }
        #[cfg(not(feature = "python"))]
        crate::http::error::error_response(&crate::http::HttpError::Unavailable)
    }
}

impl App {
    /// Whether the application has a shutdown to run when its worker drains.
    pub fn has_shutdown(&self) -> bool {
        #[cfg(feature = "python")]
        {
            matches!(&self.host, Host::Asgi(a) if a.has_lifespan())
        }
        #[cfg(not(feature = "python"))]
        false
    }

    /// Runs the application's shutdown (ASGI lifespan) once the worker has drained, bounded
    /// by its timeout. Blocking: call it from a blocking thread.
    pub fn shutdown(&self) {
        #[cfg(feature = "python")]
        if let Host::Asgi(a) = &self.host {
            a.shutdown();
        }
    }
}

/// `path` is `prefix` or below it: a prefix without a trailing slash still ends at a
/// segment boundary (`/static` takes `/static/a.css`, not `/staticfoo`).
fn under_prefix(path: &str, prefix: &str) -> bool {
    match path.strip_prefix(prefix) {
        Some(rest) => prefix.ends_with('/') || rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_as_module_and_attribute_paths() {
        assert_eq!(
            Target::parse("myproject.wsgi:application"),
            Ok(Target {
                module: "myproject.wsgi".into(),
                name: "application".into()
            })
        );
        assert!(Target::parse("app:create_app.inner").is_ok());
        for bad in [
            "app",
            ":app",
            "app:",
            "my-app:app",
            "app:1x",
            "a..b:app",
            "app:a b",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn the_static_prefix_ends_at_a_segment_boundary() {
        assert!(under_prefix("/static/a.css", "/static/"));
        assert!(!under_prefix("/static", "/static/"));
        assert!(under_prefix("/static", "/static"));
        assert!(under_prefix("/static/a.css", "/static"));
        assert!(!under_prefix("/staticfoo", "/static"));
        assert!(!under_prefix("/api/static/a", "/static/"));
    }
}
