//! `--wsgi` and the settings of the application a worker hosts (fixed for the parent's
//! life: a reload starts new workers, which import the application again, so a deploy
//! is a reload, but which application is served does not change).

use clap::Args;
use serde::{Deserialize, Serialize};

use crate::parent::site::SiteIssue;

/// The default `--static-prefix`.
pub const DEFAULT_STATIC_PREFIX: &str = "/static/";

/// Python applications in the workers.
#[derive(Debug, Clone, Default, Args, Serialize, Deserialize)]
#[command(next_help_heading = "Applications (Python, in every worker)")]
pub struct AppArgs {
    /// Serve a WSGI (PEP 3333) application, `MODULE:NAME` (`myproject.wsgi:application`),
    /// imported by every worker before it reports ready; a failing import fails the
    /// worker's start with the application's traceback. With DIR given, requests under
    /// --static-prefix are answered from DIR and never reach Python. Needs a build with
    /// the `python` feature.
    #[arg(
        long,
        value_name = "MODULE:NAME",
        env = "SERVERY_WSGI",
        conflicts_with = "asgi"
    )]
    pub wsgi: Option<String>,
    /// Serve an ASGI 3 application (HTTP and lifespan), `MODULE:NAME`
    /// (`myproject.asgi:application`), on one asyncio loop per worker; its lifespan
    /// startup runs before the worker reports ready, its shutdown after it drains. As with
    /// --wsgi, static files under --static-prefix never reach Python.
    #[arg(long, value_name = "MODULE:NAME", env = "SERVERY_ASGI")]
    pub asgi: Option<String>,
    /// ASGI lifespan: `auto` (run it; an application that does not support it is served
    /// anyway), `on` (its failure fails the worker's start), `off`.
    #[arg(long, value_name = "auto|on|off", env = "SERVERY_LIFESPAN", default_value = "auto", value_parser = ["auto", "on", "off"])]
    pub lifespan: String,
    /// The ASGI event loop: `auto` (uvloop when it is installed, else asyncio's),
    /// `asyncio` or `uvloop` (its absence then fails the worker's start).
    #[arg(long = "loop", id = "event_loop", value_name = "auto|asyncio|uvloop", env = "SERVERY_LOOP", default_value = "auto", value_parser = ["auto", "asyncio", "uvloop"])]
    #[serde(rename = "loop")]
    pub event_loop: String,
    /// How long lifespan startup or shutdown may take, in seconds.
    #[arg(
        long,
        value_name = "SECS",
        env = "SERVERY_LIFESPAN_TIMEOUT",
        default_value_t = 30.0
    )]
    pub lifespan_timeout: f64,
    /// Directories put at the front of Python's module search path (repeat, or separate
    /// with commas), before the application is imported.
    #[arg(
        long,
        value_name = "PATH",
        env = "SERVERY_APP_DIR",
        value_delimiter = ','
    )]
    pub app_dir: Vec<std::path::PathBuf>,
    /// NAME is a factory: call it with no arguments and serve what it returns
    /// (`app:create_app`).
    #[arg(long, env = "SERVERY_APP_FACTORY", value_parser = clap::builder::BoolishValueParser::new())]
    pub app_factory: bool,
    /// With an application and DIR given: request paths starting with this prefix are
    /// answered from DIR (the path is not rewritten: `/static/app.css` is
    /// `DIR/static/app.css`); every other path goes to the application.
    #[arg(long, value_name = "PREFIX", env = "SERVERY_STATIC_PREFIX", default_value = DEFAULT_STATIC_PREFIX)]
    pub static_prefix: String,
}

impl AppArgs {
    /// Whether the workers host an application.
    pub fn enabled(&self) -> bool {
        self.target().is_some()
    }

    /// `--wsgi` or `--asgi`, with the flag that names it.
    pub fn target(&self) -> Option<(&'static str, &str)> {
        match (&self.wsgi, &self.asgi) {
            (Some(t), _) => Some(("--wsgi", t)),
            (None, Some(t)) => Some(("--asgi", t)),
            (None, None) => None,
        }
    }

    /// Every problem with the application's settings, each naming its flag; none when
    /// no application is asked for.
    pub fn check(&self) -> Vec<SiteIssue> {
        let mut issues = Vec::new();
        let Some((flag, target)) = self.target() else {
            return issues;
        };
        if !(self.lifespan_timeout.is_finite() && self.lifespan_timeout > 0.0) {
            issues.push(SiteIssue {
                flag: "--lifespan-timeout",
                message: format!(
                    "must be a number of seconds above 0, got {}",
                    self.lifespan_timeout
                ),
            });
        }
        if !super::PYTHON_BUILT_IN {
            issues.push(SiteIssue {
                flag,
                message: "this build of servery has no Python: build it with \
                          `--features python` (needs Python 3.9 or later with its shared \
                          library)"
                    .into(),
            });
        }
        if let Err(rule) = super::Target::parse(target) {
            issues.push(SiteIssue {
                flag,
                message: rule,
            });
        }
        if !self.static_prefix.starts_with('/') || self.static_prefix == "/" {
            issues.push(SiteIssue {
                flag: "--static-prefix",
                message: format!(
                    "must start with `/` and name more than the root, got `{}`",
                    self.static_prefix
                ),
            });
        }
        for dir in &self.app_dir {
            if !dir.is_dir() {
                issues.push(SiteIssue {
                    flag: "--app-dir",
                    message: format!("{} is not a directory", dir.display()),
                });
            }
        }
        issues
    }
}

// Which application is served is fixed for the parent's life; that there is one decides
// whether `worker_cpu_affinity = auto` pins the workers (decision 0122).
crate::knobs::core_fields! {
    impl AppArgs {
        wsgi => features.application = |a| a.enabled();
    }
}
