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
    #[arg(long, value_name = "MODULE:NAME", env = "SERVERY_WSGI")]
    pub wsgi: Option<String>,
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
        self.wsgi.is_some()
    }

    /// Every problem with the application's settings, each naming its flag; none when
    /// no application is asked for.
    pub fn check(&self) -> Vec<SiteIssue> {
        let mut issues = Vec::new();
        let Some(target) = &self.wsgi else {
            return issues;
        };
        if !super::PYTHON_BUILT_IN {
            issues.push(SiteIssue {
                flag: "--wsgi",
                message: "this build of servery has no Python: build it with \
                          `--features python` (needs Python 3.9 or later with its shared \
                          library)"
                    .into(),
            });
        }
        if let Err(rule) = super::Target::parse(target) {
            issues.push(SiteIssue {
                flag: "--wsgi",
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

crate::knobs::core_fields! {
    impl AppArgs {}
}
