//! The reverse proxy's routes (`--proxy PREFIX=URL`), as written and as validated
//! (decision 0108). They are reloadable: each generation's workers serve the routes of
//! the configuration they were spawned under, and the parent's upstream health follows
//! the upstreams the live generations name ([`crate::parent::Parent`]).
//!
//! An upstream is its URL as written: two routes naming the same URL (under two
//! prefixes, or in two generations) name one upstream, judged once. The upstreams of a
//! generation are numbered in the order its workers number them: longest prefix first, a
//! prefix's URLs in the order given — the order the worker's messages use.

use core::time::Duration;
use std::net::IpAddr;
use std::path::PathBuf;

use super::validate::Checker;
use crate::upstream_choice::Balance;
use crate::upstream_health::HealthPolicy;

/// The most routes one configuration may give (each one upstream of its prefix).
pub const MAX_ROUTES: usize = 1000;

/// The field validation names.
const FIELD: &str = "proxy.routes";

/// As written. Every field is reloadable (decisions 0108 and 0118).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct RawProxy {
    /// `PREFIX=URL` values, in the order given.
    pub routes: Vec<String>,
    /// Failures in a row that mark an upstream down (1 to 1000).
    pub max_fails: i64,
    /// Seconds an upstream marked down stays down without probes.
    pub fail_timeout: f64,
    /// The path the parent probes every upstream with; none: no probes.
    pub health: Option<String>,
    /// Seconds between probes of each upstream.
    pub health_interval: f64,
    /// Seconds to wait for a connection to an upstream.
    pub connect_timeout: f64,
    /// Seconds to wait for an upstream's response head.
    pub first_byte_timeout: f64,
    /// Seconds an upstream may stay silent in its response body.
    pub idle_timeout: f64,
    /// Whether the upstream's host is sent as `Host` instead of the client's.
    pub upstream_host: bool,
    /// How a prefix's requests are spread over its upstreams (`round-robin`,
    /// `least-inflight`).
    pub balance: String,
    /// The PEM file `https://` and `h2://` upstreams are verified against; none: the
    /// system's roots. The core does not read it (the drivers do, and a reload whose file
    /// does not parse is refused naming this field).
    pub ca: Option<PathBuf>,
    /// Peers whose forwarding headers are believed and extended.
    pub trust_proxy: Vec<IpAddr>,
}

impl Default for RawProxy {
    fn default() -> Self {
        RawProxy {
            routes: Vec::new(),
            max_fails: 1,
            fail_timeout: 10.0,
            health: None,
            health_interval: 5.0,
            connect_timeout: 5.0,
            first_byte_timeout: 60.0,
            idle_timeout: 60.0,
            upstream_host: false,
            balance: Balance::default().name().to_owned(),
            ca: None,
            trust_proxy: Vec::new(),
        }
    }
}

/// The most trusted peers one configuration may name.
pub const MAX_TRUSTED_PEERS: usize = 1000;

/// The longest a probe may take, whatever the interval (a probe answered later failed).
pub const PROBE_BOUND: Duration = Duration::from_secs(5);

/// The proxy's settings besides the routes, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxySettings {
    /// How the parent judges upstreams.
    pub health: HealthPolicy,
    /// The probe path (with probes on).
    pub probe_path: Option<String>,
    /// The probe interval as written (also when probes are off).
    pub health_interval: Duration,
    pub connect_timeout: Duration,
    pub first_byte_timeout: Duration,
    pub idle_timeout: Duration,
    pub upstream_host: bool,
    pub balance: Balance,
    /// The CA file upstreams are verified against (none: the system's roots).
    pub ca: Option<PathBuf>,
    /// Peers whose forwarding headers are believed, as written.
    pub trust_proxy: Vec<IpAddr>,
}

/// What the parent's probe clients are built from (decision 0118, addendum): the
/// committed configuration's CA, connect timeout and `Host` choice. The parent says when
/// to build them again ([`crate::parent::ParentAction::BuildProbeClients`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeClients {
    pub ca: Option<PathBuf>,
    pub connect_timeout: Duration,
    pub upstream_host: bool,
}

impl Default for ProxySettings {
    fn default() -> Self {
        let mut c = Checker::new();
        RawProxy::default().check_settings(&mut c)
    }
}

/// One route, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyRoute {
    /// The value as given.
    pub given: String,
    /// The prefix without a trailing `/` (the root is `""`).
    pub prefix: String,
    /// The upstream's URL as written: its identity for the parent's health.
    pub url: String,
}

/// The routes, validated and in the workers' order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProxyRoutes {
    routes: Vec<ProxyRoute>,
    settings: ProxySettings,
}

impl ProxyRoutes {
    /// The health policy, probe path, timeouts and balance of this configuration.
    pub fn settings(&self) -> &ProxySettings {
        &self.settings
    }

    /// Every route, longest prefix first.
    pub fn routes(&self) -> &[ProxyRoute] {
        &self.routes
    }

    /// The upstream each index of this configuration's workers names (its URL).
    pub fn upstreams(&self) -> impl Iterator<Item = &str> {
        self.routes.iter().map(|r| r.url.as_str())
    }

    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }
}

/// Whether a route's prefix or URL path is a clean absolute path: no query, fragment,
/// whitespace, control byte, `.` or `..` segment. The workers' route parser uses it too.
pub fn clean_path(path: &str) -> bool {
    path.starts_with('/')
        && !path
            .bytes()
            .any(|b| b == b'?' || b == b'#' || b.is_ascii_whitespace() || b.is_ascii_control())
        && !path.split('/').any(|s| s == "." || s == "..")
}

/// A host and optional port: no user, query or fragment, a port from 1 to 65535.
fn authority_ok(authority: &str) -> bool {
    if authority.is_empty()
        || authority.bytes().any(|b| {
            matches!(b, b'@' | b'?' | b'#' | b'/')
                || b.is_ascii_whitespace()
                || b.is_ascii_control()
        })
    {
        return false;
    }
    let host = match authority.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') => {
            if port.parse::<u16>().map_or(true, |p| p == 0) {
                return false;
            }
            host
        }
        _ => authority,
    };
    !host.is_empty()
}

/// Why one value is refused, or its route.
fn parse(given: &str) -> Result<ProxyRoute, String> {
    let Some((prefix, url)) = given.split_once('=') else {
        return Err(format!(
            "`{given}`: expected PREFIX=URL (`/api=http://127.0.0.1:9000`)"
        ));
    };
    if !clean_path(prefix) || prefix.contains('%') {
        return Err(format!(
            "`{given}`: the prefix must start with `/` and hold no `?`, `#`, `%`, spaces or `.`/`..` segments"
        ));
    }
    let route = ProxyRoute {
        given: given.to_string(),
        prefix: prefix.trim_end_matches('/').to_string(),
        url: url.to_string(),
    };
    if let Some(path) = url.strip_prefix("unix:") {
        if !path.starts_with('/') || path.bytes().any(|b| b.is_ascii_control()) {
            return Err(format!("`{given}`: the Unix socket path must be absolute"));
        }
        return Ok(route);
    }
    let Some(rest) = ["http://", "https://", "h2://", "h2c://"]
        .iter()
        .find_map(|scheme| url.strip_prefix(scheme))
    else {
        return Err(format!(
            "`{given}`: the URL must be http://HOST[:PORT][/PATH], https://…, h2://…, h2c://… or unix:/PATH"
        ));
    };
    let (authority, path) = match rest.find('/') {
        Some(at) => (&rest[..at], Some(&rest[at..])),
        None => (rest, None),
    };
    if !authority_ok(authority) {
        return Err(format!(
            "`{given}`: the URL's host is missing or malformed (no user, query or fragment)"
        ));
    }
    if path.is_some_and(|p| !clean_path(p)) {
        return Err(format!(
            "`{given}`: the URL's path must hold no `?`, `#`, spaces or `.`/`..` segments"
        ));
    }
    Ok(route)
}

impl RawProxy {
    /// The routes alone, validated as [`crate::RawConfig::validate`] validates them: the
    /// one reading of `--proxy` values, which the workers' route table is built from.
    /// Every broken rule at once (each naming the route) when any is.
    pub fn validated(&self) -> Result<ProxyRoutes, Vec<String>> {
        let mut c = Checker::new();
        let routes = self.check(&mut c);
        let rules = c.into_rules();
        if rules.is_empty() {
            Ok(routes)
        } else {
            Err(rules)
        }
    }

    pub(super) fn check(&self, c: &mut Checker) -> ProxyRoutes {
        let mut routes: Vec<ProxyRoute> = Vec::new();
        for given in &self.routes {
            match parse(given) {
                Ok(route)
                    if routes
                        .iter()
                        .any(|r| r.prefix == route.prefix && r.url == route.url) =>
                {
                    c.fail(
                        FIELD,
                        format!(
                            "`{given}`: prefix `{}` is already routed to this URL",
                            if route.prefix.is_empty() {
                                "/"
                            } else {
                                &route.prefix
                            }
                        ),
                    );
                }
                Ok(route) => routes.push(route),
                Err(rule) => c.fail(FIELD, rule),
            }
        }
        if self.routes.len() > MAX_ROUTES {
            c.fail(
                FIELD,
                format!("at most {MAX_ROUTES} routes, got {}", self.routes.len()),
            );
        }
        // Stable: a prefix's upstreams keep the order they were given in (the workers'
        // numbering, which their messages to the parent use).
        routes.sort_by(|a, b| {
            b.prefix
                .len()
                .cmp(&a.prefix.len())
                .then_with(|| a.prefix.cmp(&b.prefix))
        });
        let settings = self.check_settings(c);
        ProxyRoutes { routes, settings }
    }

    fn check_settings(&self, c: &mut Checker) -> ProxySettings {
        let max_fails = c.count("proxy.max_fails", self.max_fails, 1, 1000);
        let fail_timeout = c.seconds("proxy.fail_timeout", self.fail_timeout, false);
        let health_interval = c.seconds("proxy.health_interval", self.health_interval, false);
        if let Some(path) = &self.health
            && !clean_probe_path(path)
        {
            c.fail(
                "proxy.health",
                format!("must be a path starting with `/`, got `{path}`"),
            );
        }
        let balance = Balance::parse(&self.balance).unwrap_or_else(|| {
            c.fail(
                "proxy.balance",
                format!(
                    "must be `round-robin` or `least-inflight`, got `{}`",
                    self.balance
                ),
            );
            Balance::default()
        });
        ProxySettings {
            health: HealthPolicy {
                max_fails: u32::try_from(max_fails).unwrap_or(1).max(1),
                fail_timeout,
                probe_interval: self.health.as_ref().map(|_| health_interval),
            },
            probe_path: self.health.clone(),
            health_interval,
            connect_timeout: c.seconds("proxy.connect_timeout", self.connect_timeout, false),
            first_byte_timeout: c.seconds(
                "proxy.first_byte_timeout",
                self.first_byte_timeout,
                false,
            ),
            idle_timeout: c.seconds("proxy.idle_timeout", self.idle_timeout, false),
            upstream_host: self.upstream_host,
            balance,
            ca: self.checked_ca(c),
            trust_proxy: self.checked_trust(c),
        }
    }

    fn checked_ca(&self, c: &mut Checker) -> Option<PathBuf> {
        let path = self.ca.as_ref()?;
        let text = path.as_os_str().as_encoded_bytes();
        if text.is_empty() || text.contains(&0) {
            c.fail(
                "proxy.ca",
                format!("must name a PEM file, got `{}`", path.display()),
            );
            return None;
        }
        Some(path.clone())
    }

    fn checked_trust(&self, c: &mut Checker) -> Vec<IpAddr> {
        if self.trust_proxy.len() > MAX_TRUSTED_PEERS {
            c.fail(
                "proxy.trust_proxy",
                format!(
                    "at most {MAX_TRUSTED_PEERS} peers, got {}",
                    self.trust_proxy.len()
                ),
            );
        }
        self.trust_proxy.clone()
    }
}

impl ProxySettings {
    /// What the parent's probe clients are built from under these settings.
    pub fn probe_clients(&self) -> ProbeClients {
        ProbeClients {
            ca: self.ca.clone(),
            connect_timeout: self.connect_timeout,
            upstream_host: self.upstream_host,
        }
    }

    /// The longest one probe may take: the interval, at most [`PROBE_BOUND`].
    pub fn probe_within(&self) -> Duration {
        self.health_interval.min(PROBE_BOUND)
    }
}

/// A probe path: absolute, printable, no spaces or fragment.
fn clean_probe_path(path: &str) -> bool {
    path.starts_with('/')
        && !path
            .bytes()
            .any(|b| b == b'#' || b.is_ascii_whitespace() || !b.is_ascii_graphic())
}

#[cfg(test)]
mod tests {
    use super::super::validate::tests::fields;
    use crate::RawConfig;

    fn with(routes: &[&str]) -> RawConfig {
        let mut raw = RawConfig::default();
        raw.proxy.routes = routes.iter().map(|s| s.to_string()).collect();
        raw
    }

    #[test]
    fn upstreams_are_numbered_longest_prefix_first_in_the_order_given() {
        let v = with(&[
            "/=http://a:1",
            "/api=http://b:2",
            "/api=h2c://c:3/v1",
            "/api/v2/=unix:/run/d.sock",
        ])
        .validate()
        .expect("valid");
        let urls: Vec<&str> = v.proxy().upstreams().collect();
        assert_eq!(
            urls,
            [
                "unix:/run/d.sock",
                "http://b:2",
                "h2c://c:3/v1",
                "http://a:1"
            ]
        );
    }

    #[test]
    fn every_broken_route_names_the_field() {
        let raw = with(&[
            "api=http://a",
            "/a",
            "/a=ftp://a",
            "/a=http://u@a",
            "/a=http://a:0",
            "/a=http://a/../x",
            "/a=unix:rel.sock",
            "/b=http://a",
            "/b=http://a",
        ]);
        assert_eq!(fields(&raw), vec!["proxy.routes"; 8]);
        assert!(fields(&with(&["/b=http://a", "/c=http://a"])).is_empty());
    }

    #[test]
    fn too_many_routes_are_refused() {
        let mut raw = RawConfig::default();
        raw.proxy.routes = (0..=super::MAX_ROUTES)
            .map(|i| format!("/r{i}=http://a"))
            .collect();
        assert_eq!(fields(&raw), ["proxy.routes"]);
    }

    #[test]
    fn every_broken_proxy_setting_names_its_field() {
        let mut raw = RawConfig::default();
        raw.proxy.max_fails = 0;
        raw.proxy.fail_timeout = 0.0;
        raw.proxy.health = Some("health".into());
        raw.proxy.health_interval = f64::NAN;
        raw.proxy.connect_timeout = -1.0;
        raw.proxy.first_byte_timeout = f64::INFINITY;
        raw.proxy.idle_timeout = 0.0;
        raw.proxy.balance = "random".into();
        raw.proxy.ca = Some("".into());
        raw.proxy.trust_proxy =
            vec![std::net::IpAddr::from([127, 0, 0, 1]); super::MAX_TRUSTED_PEERS + 1];
        assert_eq!(
            fields(&raw),
            [
                "proxy.max_fails",
                "proxy.fail_timeout",
                "proxy.health_interval",
                "proxy.health",
                "proxy.balance",
                "proxy.connect_timeout",
                "proxy.first_byte_timeout",
                "proxy.idle_timeout",
                "proxy.ca",
                "proxy.trust_proxy",
            ]
        );
    }

    #[test]
    fn the_settings_round_trip_through_the_written_form() {
        let mut raw = RawConfig::default();
        raw.proxy.max_fails = 4;
        raw.proxy.fail_timeout = 2.5;
        raw.proxy.health = Some("/up?full=1".into());
        raw.proxy.health_interval = 0.5;
        raw.proxy.first_byte_timeout = 1.25;
        raw.proxy.upstream_host = true;
        raw.proxy.balance = "least-inflight".into();
        raw.proxy.ca = Some("/etc/servery/upstream-ca.pem".into());
        raw.proxy.trust_proxy = vec![[10, 0, 0, 1].into(), "::1".parse().expect("v6")];
        let valid = raw.validate().expect("valid");
        assert_eq!(valid.as_written().proxy, raw.proxy);
        let s = valid.proxy().settings();
        assert_eq!(
            s.health.probe_interval,
            Some(core::time::Duration::from_millis(500))
        );
        assert_eq!(s.probe_within(), core::time::Duration::from_millis(500));
    }
}
