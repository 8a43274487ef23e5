//! `--proxy` and the settings of the reverse proxy (fixed for the parent's life: the
//! routes are read once at start, like the served directory).

use std::net::IpAddr;

use clap::Args;
use serde::{Deserialize, Serialize};

use super::route::Routes;
use crate::parent::site::SiteIssue;

/// The default upstream connect timeout, in seconds.
pub const DEFAULT_CONNECT_TIMEOUT: f64 = 5.0;
/// The default wait for the upstream's response head after the last request byte.
pub const DEFAULT_FIRST_BYTE_TIMEOUT: f64 = 60.0;
/// The default longest silence of an upstream in the middle of its response body.
pub const DEFAULT_IDLE_TIMEOUT: f64 = 60.0;

/// The reverse proxy.
#[derive(Debug, Clone, Default, Args, Serialize, Deserialize)]
#[command(next_help_heading = "Reverse proxy")]
pub struct ProxyArgs {
    /// Forward requests whose path starts with PREFIX (a whole segment: `/api` takes
    /// `/api` and `/api/x`, not `/apix`) to URL: `http://HOST[:PORT][/PATH]` or
    /// `unix:/PATH.sock`. Repeat for several; the longest matching prefix wins. A URL with
    /// a path replaces the prefix with it (`/api=http://up/v1`: `/api/x` → `/v1/x`);
    /// without one the path goes unchanged. See docs/proxy.md.
    #[arg(
        long,
        value_name = "PREFIX=URL",
        env = "SERVERY_PROXY",
        value_delimiter = '\n'
    )]
    pub proxy: Vec<String>,
    /// Verify `https://` upstreams against the certificates in this PEM file instead of
    /// the system's roots.
    #[arg(long, value_name = "FILE", env = "SERVERY_PROXY_CA", value_hint = clap::ValueHint::AnyPath)]
    pub proxy_ca: Option<std::path::PathBuf>,
    /// A peer whose `X-Forwarded-*` and `Forwarded` headers are believed and extended
    /// (a load balancer in front of servery); repeat for several. From any other peer
    /// they are removed before the request is forwarded.
    #[arg(
        long,
        value_name = "ADDR",
        env = "SERVERY_TRUST_PROXY",
        value_delimiter = ','
    )]
    pub trust_proxy: Vec<IpAddr>,
    /// Send each route's upstream host (the host and port of its URL; `localhost` for a
    /// `unix:` route) as `Host` instead of the client's, as nginx does by default: for an
    /// upstream that answers only to its own name. The client's host is still passed on
    /// in `X-Forwarded-Host` and `Forwarded`.
    #[arg(long, env = "SERVERY_PROXY_UPSTREAM_HOST")]
    pub proxy_upstream_host: bool,
    /// Seconds to wait for a connection to an upstream (then 504).
    #[arg(long, value_name = "SECS", env = "SERVERY_PROXY_CONNECT_TIMEOUT", default_value_t = DEFAULT_CONNECT_TIMEOUT)]
    pub proxy_connect_timeout: f64,
    /// Seconds to wait for the upstream's response head once the request is sent, or
    /// since the request body last moved (then 504).
    #[arg(long, value_name = "SECS", env = "SERVERY_PROXY_FIRST_BYTE_TIMEOUT", default_value_t = DEFAULT_FIRST_BYTE_TIMEOUT)]
    pub proxy_first_byte_timeout: f64,
    /// Seconds an upstream may stay silent in the middle of its response body before the
    /// response is cut off.
    #[arg(long, value_name = "SECS", env = "SERVERY_PROXY_IDLE_TIMEOUT", default_value_t = DEFAULT_IDLE_TIMEOUT)]
    pub proxy_idle_timeout: f64,
    /// Upstream requests in flight at once across all workers (0: no bound). Workers take
    /// grants from the parent's broker (in small blocks under a large bound); a request
    /// that finds none is answered 503 with `Retry-After` before its body is read.
    #[arg(long, value_name = "N", env = "SERVERY_PROXY_MAX_INFLIGHT", default_value_t = servery_core::config::RawBroker::default().max_proxy_inflight, allow_negative_numbers = true, group = crate::settings::LIVE)]
    pub proxy_max_inflight: i64,
}

impl ProxyArgs {
    /// Every problem with the proxy's settings, each naming its flag and rule.
    pub fn check(&self) -> Vec<SiteIssue> {
        let mut issues = Vec::new();
        if let Err(e) = super::tls::client_config(self.proxy_ca.as_deref()) {
            issues.push(SiteIssue {
                flag: "--proxy-ca",
                message: e,
            });
        }
        if let Err(errors) = Routes::parse(&self.proxy) {
            issues.extend(errors.into_iter().map(|e| SiteIssue {
                flag: "--proxy",
                message: e.to_string(),
            }));
        }
        for (flag, secs) in [
            ("--proxy-connect-timeout", self.proxy_connect_timeout),
            ("--proxy-first-byte-timeout", self.proxy_first_byte_timeout),
            ("--proxy-idle-timeout", self.proxy_idle_timeout),
        ] {
            if !(secs.is_finite() && secs > 0.0 && secs <= 86_400.0) {
                issues.push(SiteIssue {
                    flag,
                    message: format!(
                        "must be a number of seconds above 0 and at most 86400, got {secs}"
                    ),
                });
            }
        }
        issues
    }
}

crate::knobs::core_fields! {
    impl ProxyArgs {
        proxy_max_inflight => broker.max_proxy_inflight;
    }
}
