//! `--cgi` and the settings of CGI scripts (fixed for the parent's life, like the served
//! directory; `--cgi-max-concurrent` is the broker's and changes on a reload).

use std::path::PathBuf;

use clap::Args;
use serde::{Deserialize, Serialize};

use crate::parent::site::SiteIssue;

/// Where scripts are mounted unless `--cgi-prefix` says (Apache's `ScriptAlias` and
/// Debian's nginx `fcgiwrap` examples both use it).
pub const DEFAULT_PREFIX: &str = "/cgi-bin";
/// Seconds a script may stay silent (no output while its response is wanted, or no
/// response head) before it is killed.
pub const DEFAULT_TIMEOUT: f64 = 60.0;
/// The most a script may write, head and body, before it is cut off and killed.
pub const DEFAULT_MAX_OUTPUT: u64 = 1 << 30;

/// CGI scripts (RFC 3875).
#[derive(Debug, Clone, Default, Args, Serialize, Deserialize)]
#[command(next_help_heading = "CGI scripts")]
pub struct CgiArgs {
    /// Run executable files under DIR as CGI scripts (RFC 3875), one process per request,
    /// for requests under --cgi-prefix: `/cgi-bin/app.py/x/y?q` runs DIR/app.py with
    /// `PATH_INFO=/x/y`. Only executable regular files inside DIR run; a name starting
    /// with `nph-` is a non-parsed-header script. See docs/cgi.md.
    #[arg(long, value_name = "DIR", env = "SERVERY_CGI", value_hint = clap::ValueHint::DirPath)]
    pub cgi: Option<PathBuf>,
    /// The URL path under which --cgi's scripts are found (a whole segment: `/cgi-bin`
    /// takes `/cgi-bin/x`, not `/cgi-binx`).
    #[arg(long, value_name = "PREFIX", env = "SERVERY_CGI_PREFIX", default_value = DEFAULT_PREFIX)]
    pub cgi_prefix: String,
    /// Pass this variable of servery's environment to scripts (`NAME`), or set it
    /// (`NAME=VALUE`); repeat for several. Scripts otherwise see only the CGI variables
    /// and `PATH`.
    #[arg(
        long,
        value_name = "NAME[=VALUE]",
        env = "SERVERY_CGI_ENV",
        value_delimiter = '\n'
    )]
    pub cgi_env: Vec<String>,
    /// Seconds a script may go without producing its response head, or without writing
    /// while its response is being read, before its process group is killed (a script
    /// that gave no head yet is answered 504).
    #[arg(long, value_name = "SECS", env = "SERVERY_CGI_TIMEOUT", default_value_t = DEFAULT_TIMEOUT)]
    pub cgi_timeout: f64,
    /// The most bytes a script may write (head and body; 0: no bound); past it the
    /// response is cut off and the script killed.
    #[arg(long, value_name = "BYTES", env = "SERVERY_CGI_MAX_OUTPUT", default_value_t = DEFAULT_MAX_OUTPUT)]
    pub cgi_max_output: u64,
    /// Scripts running at once across all workers (0: no bound). A request that finds
    /// the bound reached is answered 503 with `Retry-After` before its body is read.
    #[arg(long, value_name = "N", env = "SERVERY_CGI_MAX_CONCURRENT", default_value_t = servery_core::config::RawBroker::default().max_cgi_concurrent, allow_negative_numbers = true, group = crate::settings::LIVE)]
    pub cgi_max_concurrent: i64,
}

/// Variables servery sets itself: an allow-list entry cannot replace them.
const META: &[&str] = &[
    "AUTH_TYPE",
    "CONTENT_LENGTH",
    "CONTENT_TYPE",
    "GATEWAY_INTERFACE",
    "PATH_INFO",
    "PATH_TRANSLATED",
    "QUERY_STRING",
    "REMOTE_ADDR",
    "REMOTE_HOST",
    "REMOTE_IDENT",
    "REMOTE_PORT",
    "REMOTE_USER",
    "REQUEST_METHOD",
    "REQUEST_URI",
    "SCRIPT_FILENAME",
    "SCRIPT_NAME",
    "SERVER_NAME",
    "SERVER_PORT",
    "SERVER_PROTOCOL",
    "SERVER_SOFTWARE",
    "HTTPS",
];

/// One `--cgi-env` entry: its name, and its value when it sets one.
pub fn env_entry(entry: &str) -> Result<(&str, Option<&str>), String> {
    let (name, value) = match entry.split_once('=') {
        Some((name, value)) => (name, Some(value)),
        None => (entry, None),
    };
    let valid = name
        .bytes()
        .enumerate()
        .all(|(i, b)| b == b'_' || b.is_ascii_alphabetic() || (i > 0 && b.is_ascii_digit()));
    if name.is_empty() || !valid {
        return Err(format!(
            "{name:?} is not a variable name (letters, digits and `_`, not starting with a digit)"
        ));
    }
    if name.starts_with("SERVERY_") {
        return Err(format!(
            "{name} is servery's own setting, which may hold secrets; it is never passed to scripts"
        ));
    }
    if META.contains(&name) || name.starts_with("HTTP_") {
        return Err(format!(
            "{name} is a CGI variable servery sets for each request"
        ));
    }
    if value.is_some_and(|v| v.contains('\0')) {
        return Err(format!("the value of {name} holds a NUL byte"));
    }
    Ok((name, value))
}

/// Whether `prefix` is a usable `--cgi-prefix`.
pub fn check_prefix(prefix: &str) -> Result<(), String> {
    if !prefix.starts_with('/') || prefix.len() < 2 || prefix.ends_with('/') {
        return Err(format!(
            "{prefix:?} must start with `/`, name at least one segment and not end with `/`"
        ));
    }
    if prefix
        .split('/')
        .skip(1)
        .any(|s| s.is_empty() || s == "." || s == ".." || s.contains(['%', '?', '#']))
    {
        return Err(format!(
            "{prefix:?} must be plain segments (no empty, `.`, `..`, `%`, `?` or `#`)"
        ));
    }
    Ok(())
}

impl CgiArgs {
    /// Every problem with the CGI settings, each naming its flag and rule.
    pub fn check(&self) -> Vec<SiteIssue> {
        let mut issues = Vec::new();
        let Some(dir) = &self.cgi else {
            return issues;
        };
        if !dir.is_dir() {
            issues.push(SiteIssue {
                flag: "--cgi",
                message: format!("{} must be a directory", dir.display()),
            });
        }
        if let Err(message) = check_prefix(&self.cgi_prefix) {
            issues.push(SiteIssue {
                flag: "--cgi-prefix",
                message,
            });
        }
        for entry in &self.cgi_env {
            if let Err(message) = env_entry(entry) {
                issues.push(SiteIssue {
                    flag: "--cgi-env",
                    message,
                });
            }
        }
        let secs = self.cgi_timeout;
        if !(secs.is_finite() && secs > 0.0 && secs <= 86_400.0) {
            issues.push(SiteIssue {
                flag: "--cgi-timeout",
                message: format!(
                    "must be a number of seconds above 0 and at most 86400, got {secs}"
                ),
            });
        }
        issues
    }
}

crate::knobs::core_fields! {
    impl CgiArgs {
        cgi_max_concurrent => broker.max_cgi_concurrent;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn env_entries_name_a_plain_variable_that_is_not_servery_s() {
        assert_eq!(
            env_entry("GIT_PROJECT_ROOT"),
            Ok(("GIT_PROJECT_ROOT", None))
        );
        assert_eq!(env_entry("LANG=C.UTF-8"), Ok(("LANG", Some("C.UTF-8"))));
        assert!(
            env_entry("SERVERY_AUTH")
                .expect_err("refused")
                .contains("secrets")
        );
        assert!(
            env_entry("HTTP_PROXY")
                .expect_err("refused")
                .contains("CGI variable")
        );
        assert!(env_entry("1X").is_err());
        assert!(env_entry("").is_err());
    }

    #[test]
    fn prefixes_are_whole_plain_segments() {
        assert!(check_prefix("/cgi-bin").is_ok());
        assert!(check_prefix("/a/b").is_ok());
        for bad in ["", "/", "cgi", "/cgi/", "/a//b", "/a/../b", "/a%2f"] {
            assert!(check_prefix(bad).is_err(), "{bad:?}");
        }
    }

    proptest! {
        #[test]
        fn any_env_entry_is_taken_or_refused(entry in "\\PC{0,24}") {
            if let Ok((name, _)) = env_entry(&entry) {
                prop_assert!(!name.is_empty() && !name.starts_with("SERVERY_"));
            }
        }
    }
}
