//! `--proxy` and the settings of the reverse proxy. The routes and `--proxy-max-inflight`
//! are reloadable (decision 0108): each generation's workers serve the routes of their
//! configuration, and the parent's health table follows the upstreams the live
//! generations name. The health policy and the clients' timeouts, `Host` and balance are
//! reloadable too (decision 0118): core settings (`proxy.*`), so the parent's judge takes
//! the committed policy and each generation's workers their own clients' settings. So
//! are the CA and `--trust-proxy` (decision 0118, addendum): a generation's workers read
//! its CA file and believe its peers, the parent's probes are built again with the
//! committed CA, and a reload whose CA file does not parse is refused naming `proxy.ca`.

use std::net::IpAddr;

use clap::Args;
use serde::{Deserialize, Serialize};

use servery_core::upstream_choice::Balance;

use super::route::Routes;
use crate::parent::site::SiteIssue;

/// The default upstream connect timeout, in seconds.
pub const DEFAULT_CONNECT_TIMEOUT: f64 = 5.0;
/// The default wait for the upstream's response head after the last request byte.
pub const DEFAULT_FIRST_BYTE_TIMEOUT: f64 = 60.0;
/// The default longest silence of an upstream in the middle of its response body.
pub const DEFAULT_IDLE_TIMEOUT: f64 = 60.0;
/// The default failures in a row that mark an upstream down (nginx's `max_fails`).
pub const DEFAULT_MAX_FAILS: u32 = 1;
/// The default time an upstream marked down without probes stays down (nginx's
/// `fail_timeout`).
pub const DEFAULT_FAIL_TIMEOUT: f64 = 10.0;
/// The default time between probes of each upstream with `--proxy-health`.
pub const DEFAULT_HEALTH_INTERVAL: f64 = 5.0;

/// The default balancing policy among a prefix's upstreams.
pub const DEFAULT_BALANCE: &str = "round-robin";

/// The reverse proxy.
#[derive(Debug, Clone, Default, Args, Serialize, Deserialize)]
#[command(next_help_heading = "Reverse proxy")]
pub struct ProxyArgs {
    /// Forward requests whose path starts with PREFIX (a whole segment: `/api` takes
    /// `/api` and `/api/x`, not `/apix`) to URL: `http://HOST[:PORT][/PATH]`,
    /// `https://…`, `h2://…` (HTTP/2 over TLS, offered by ALPN), `h2c://…` (HTTP/2 in
    /// cleartext) or `unix:/PATH.sock`. Repeat for several; the longest matching prefix wins. A URL with
    /// a path replaces the prefix with it (`/api=http://up/v1`: `/api/x` → `/v1/x`);
    /// without one the path goes unchanged. A reload may change the routes: the new
    /// generation serves the new ones, the old drains with its own. See docs/proxy.md.
    #[arg(
        long,
        value_name = "PREFIX=URL",
        env = "SERVERY_PROXY",
        value_delimiter = '\n',
        group = crate::settings::LIVE
    )]
    pub proxy: Vec<String>,
    /// Verify `https://` and `h2://` upstreams against the certificates in this PEM file
    /// instead of the system's roots. A reload reads the file again (a new generation's
    /// workers and the parent's probes use what it holds then); a reload whose file does
    /// not parse is refused and the running generation keeps its CA.
    #[arg(long, value_name = "FILE", env = "SERVERY_PROXY_CA", value_hint = clap::ValueHint::AnyPath, group = crate::settings::LIVE)]
    pub proxy_ca: Option<std::path::PathBuf>,
    /// A peer whose `X-Forwarded-*` and `Forwarded` headers are believed and extended
    /// (a load balancer in front of servery); repeat for several. From any other peer
    /// they are removed before the request is forwarded. A reload may change the list:
    /// the new generation's workers believe the new peers.
    #[arg(
        long,
        value_name = "ADDR",
        env = "SERVERY_TRUST_PROXY",
        value_delimiter = ',',
        group = crate::settings::LIVE
    )]
    pub trust_proxy: Vec<IpAddr>,
    /// Send each route's upstream host (the host and port of its URL; `localhost` for a
    /// `unix:` route) as `Host` instead of the client's, as nginx does by default: for an
    /// upstream that answers only to its own name. The client's host is still passed on
    /// in `X-Forwarded-Host` and `Forwarded`.
    #[arg(long, env = "SERVERY_PROXY_UPSTREAM_HOST", group = crate::settings::LIVE)]
    pub proxy_upstream_host: bool,
    /// Seconds to wait for a connection to an upstream (then 504). A reload may change the
    /// timeouts, `Host` and balance: the new generation's workers use the new values.
    #[arg(long, value_name = "SECS", env = "SERVERY_PROXY_CONNECT_TIMEOUT", default_value_t = DEFAULT_CONNECT_TIMEOUT, group = crate::settings::LIVE)]
    pub proxy_connect_timeout: f64,
    /// Seconds to wait for the upstream's response head once the request is sent, or
    /// since the request body last moved (then 504).
    #[arg(long, value_name = "SECS", env = "SERVERY_PROXY_FIRST_BYTE_TIMEOUT", default_value_t = DEFAULT_FIRST_BYTE_TIMEOUT, group = crate::settings::LIVE)]
    pub proxy_first_byte_timeout: f64,
    /// Seconds an upstream may stay silent in the middle of its response body before the
    /// response is cut off.
    #[arg(long, value_name = "SECS", env = "SERVERY_PROXY_IDLE_TIMEOUT", default_value_t = DEFAULT_IDLE_TIMEOUT, group = crate::settings::LIVE)]
    pub proxy_idle_timeout: f64,
    /// Upstream requests in flight at once across all workers (0: no bound). Workers take
    /// grants from the parent's broker (in small blocks under a large bound); a request
    /// that finds none is answered 503 with `Retry-After` before its body is read.
    #[arg(long, value_name = "N", env = "SERVERY_PROXY_MAX_INFLIGHT", default_value_t = servery_core::config::RawBroker::default().max_proxy_inflight, allow_negative_numbers = true, group = crate::settings::LIVE)]
    pub proxy_max_inflight: i64,
    /// Failures in a row, seen by any worker (refused, unreachable, timed out, broken
    /// before the response head) or by `--proxy-health` probes, that mark an upstream
    /// down for every worker; a prefix given several URLs sends to those not down. A
    /// reload may change the health settings: the verdicts given are kept and take the
    /// new terms from the commit (docs/proxy.md).
    #[arg(long, value_name = "N", env = "SERVERY_PROXY_MAX_FAILS", default_value_t = DEFAULT_MAX_FAILS, group = crate::settings::LIVE)]
    pub proxy_max_fails: u32,
    /// Seconds an upstream marked down stays down before it is tried again (without
    /// `--proxy-health`; with it, until a probe passes).
    #[arg(long, value_name = "SECS", env = "SERVERY_PROXY_FAIL_TIMEOUT", default_value_t = DEFAULT_FAIL_TIMEOUT, group = crate::settings::LIVE)]
    pub proxy_fail_timeout: f64,
    /// Probe every upstream with `GET PATH` from the parent: an answer 2xx or 3xx within
    /// the interval (at most 5 s) passes, anything else fails. A down upstream comes back
    /// only when a probe passes.
    #[arg(long, value_name = "PATH", env = "SERVERY_PROXY_HEALTH", group = crate::settings::LIVE)]
    pub proxy_health: Option<String>,
    /// How a prefix's requests are spread over its upstreams: `round-robin` (each in
    /// turn, the default) or `least-inflight` (the one with the fewest requests this
    /// worker has in flight to it, ties in turn). Upstreams marked down are skipped
    /// either way.
    #[arg(long, value_name = "POLICY", env = "SERVERY_PROXY_BALANCE", default_value = DEFAULT_BALANCE, group = crate::settings::LIVE)]
    pub proxy_balance: String,
    /// Seconds between probes of each upstream (`--proxy-health`).
    #[arg(long, value_name = "SECS", env = "SERVERY_PROXY_HEALTH_INTERVAL", default_value_t = DEFAULT_HEALTH_INTERVAL, group = crate::settings::LIVE)]
    pub proxy_health_interval: f64,
}

impl ProxyArgs {
    /// Every problem with the proxy's settings, each naming its flag and rule.
    pub fn check(&self) -> Vec<SiteIssue> {
        let mut issues = Vec::new();
        if let Err(e) =
            super::tls::client_config(self.proxy_ca.as_deref(), super::tls::Offer::Http11)
        {
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
        if !(1..=1000).contains(&self.proxy_max_fails) {
            issues.push(SiteIssue {
                flag: "--proxy-max-fails",
                message: format!("must be from 1 to 1000, got {}", self.proxy_max_fails),
            });
        }
        if Balance::parse(&self.proxy_balance).is_none() {
            issues.push(SiteIssue {
                flag: "--proxy-balance",
                message: format!(
                    "must be `round-robin` or `least-inflight`, got `{}`",
                    self.proxy_balance
                ),
            });
        }
        if let Some(path) = &self.proxy_health
            && (!path.starts_with('/')
                || path
                    .bytes()
                    .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
                || path.parse::<http::uri::PathAndQuery>().is_err())
        {
            issues.push(SiteIssue {
                flag: "--proxy-health",
                message: format!("must be a path starting with `/`, got `{path}`"),
            });
        }
        for (flag, secs) in [
            ("--proxy-connect-timeout", self.proxy_connect_timeout),
            ("--proxy-first-byte-timeout", self.proxy_first_byte_timeout),
            ("--proxy-idle-timeout", self.proxy_idle_timeout),
            ("--proxy-fail-timeout", self.proxy_fail_timeout),
            ("--proxy-health-interval", self.proxy_health_interval),
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

/// Why the CA file at `ca` cannot verify upstreams (unreadable, no certificate, a
/// certificate that does not parse), if it cannot: the reading a worker makes at start.
pub fn ca_problem(ca: &std::path::Path) -> Option<String> {
    super::tls::client_config(Some(ca), super::tls::Offer::Http11).err()
}

impl ProxyArgs {
    /// The balancing policy (the default when the setting is unreadable, which
    /// [`ProxyArgs::check`] refuses at start).
    pub fn balance(&self) -> Balance {
        Balance::parse(&self.proxy_balance).unwrap_or_default()
    }
}

/// A count as the core's configuration writes it.
fn count_as_written(n: u32) -> i64 {
    i64::from(n)
}

crate::knobs::core_fields! {
    impl ProxyArgs {
        proxy => proxy.routes cloned;
        proxy_max_inflight => broker.max_proxy_inflight;
        proxy_max_fails => proxy.max_fails via count_as_written;
        proxy_fail_timeout => proxy.fail_timeout;
        proxy_health => proxy.health cloned;
        proxy_health_interval => proxy.health_interval;
        proxy_connect_timeout => proxy.connect_timeout;
        proxy_first_byte_timeout => proxy.first_byte_timeout;
        proxy_idle_timeout => proxy.idle_timeout;
        proxy_upstream_host => proxy.upstream_host;
        proxy_balance => proxy.balance cloned;
        proxy_ca => proxy.ca cloned;
        trust_proxy => proxy.trust_proxy cloned;
    }
}
