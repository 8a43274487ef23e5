//! `--proxy PREFIX=URL`: the workers' form of the routes the core validated
//! ([`servery_core::config::RawProxy::validated`], the one reading of the values: every
//! broken rule reported there, naming the route), and the longest-prefix match on whole
//! path segments.

use http::uri::Authority;
use servery_core::config::{ProxyRoute, RawProxy};

/// Where one route's requests go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upstream {
    /// `http://HOST[:PORT]`.
    Http { authority: Authority },
    /// `https://HOST[:PORT]`: TLS (HTTP/1.1), the certificate verified for HOST.
    Https { authority: Authority },
    /// `h2://HOST[:PORT]`: TLS as `https://`, offering HTTP/2 by ALPN (HTTP/1.1 when the
    /// upstream declines it).
    H2 { authority: Authority },
    /// `h2c://HOST[:PORT]`: HTTP/2 over cleartext TCP, with prior knowledge (RFC 9113
    /// §3.3), as Caddy's `h2c://` upstreams.
    H2c { authority: Authority },
    /// `unix:/PATH`: HTTP/1.1 over a Unix socket.
    Unix { path: std::path::PathBuf },
}

/// One `--proxy` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The path prefix, without a trailing `/` (the root is `""`).
    pub prefix: String,
    pub upstream: Upstream,
    /// What the prefix becomes upstream (the URL's path, without a trailing `/`); `None`
    /// when the URL has no path, so the request's path goes unchanged.
    pub replace_with: Option<String>,
    /// The value as given, for logs.
    pub given: String,
}

/// Why a `--proxy` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RouteError {
    /// A rule of the core's validation (`proxy.routes`), in its words.
    #[error("{0}")]
    Invalid(String),
    /// A host the core's rules let through that the `http` crate cannot read.
    #[error("`{given}`: the URL's host is missing or malformed (no user, query or fragment)")]
    BadAuthority { given: String },
}

/// Every route, longest prefix first; the routes of one prefix (its upstreams, balanced
/// between) next to each other in the order given.
#[derive(Debug, Clone, Default)]
pub struct Routes {
    routes: Vec<Route>,
}

impl Upstream {
    /// Whether requests go over HTTP/2 (`h2://` when the upstream accepts it by ALPN).
    pub fn http2(&self) -> bool {
        matches!(self, Upstream::H2 { .. } | Upstream::H2c { .. })
    }
}

impl Route {
    /// The worker's form of one route the core validated: only what the core keeps as
    /// text (the scheme, the host read by the `http` crate, the path) is read here.
    pub fn from_validated(route: &ProxyRoute) -> Result<Route, RouteError> {
        let given = || route.given.clone();
        let url = route.url.as_str();
        if let Some(path) = url.strip_prefix("unix:") {
            return Ok(Route {
                prefix: route.prefix.clone(),
                upstream: Upstream::Unix { path: path.into() },
                replace_with: None,
                given: given(),
            });
        }
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(RouteError::Invalid(format!(
                "`{}`: the URL has no scheme",
                route.given
            )));
        };
        let (authority, path) = match rest.find('/') {
            Some(at) => (&rest[..at], Some(&rest[at..])),
            None => (rest, None),
        };
        let authority: Authority = authority
            .parse()
            .ok()
            .filter(|a: &Authority| !a.host().is_empty())
            .ok_or(RouteError::BadAuthority { given: given() })?;
        let upstream = match scheme {
            "http" => Upstream::Http { authority },
            "https" => Upstream::Https { authority },
            "h2" => Upstream::H2 { authority },
            "h2c" => Upstream::H2c { authority },
            _ => {
                return Err(RouteError::Invalid(format!(
                    "`{}`: unknown scheme `{scheme}`",
                    route.given
                )));
            }
        };
        Ok(Route {
            prefix: route.prefix.clone(),
            upstream,
            replace_with: path.map(|p| p.trim_end_matches('/').to_owned()),
            given: given(),
        })
    }

    /// One value read on its own (the core's rules, then the worker's form).
    pub fn parse(given: &str) -> Result<Route, RouteError> {
        let nothing = || RouteError::Invalid(format!("`{given}`: no route"));
        let routes = Routes::parse(&[given.to_owned()])
            .map_err(|errors| errors.into_iter().next().unwrap_or_else(nothing))?;
        routes.routes.into_iter().next().ok_or_else(nothing)
    }

    /// The `Host` a request made by servery itself (a probe) names: the URL's host and
    /// port, `localhost` for a Unix socket.
    pub fn host_header(&self) -> String {
        match &self.upstream {
            Upstream::Http { authority }
            | Upstream::Https { authority }
            | Upstream::H2 { authority }
            | Upstream::H2c { authority } => authority.to_string(),
            Upstream::Unix { .. } => "localhost".into(),
        }
    }

    /// The part of `path` after this route's prefix (`""` or starting with `/`), if the
    /// prefix covers `path` on a segment boundary.
    fn rest<'p>(&self, path: &'p str) -> Option<&'p str> {
        let rest = path.strip_prefix(self.prefix.as_str())?;
        (rest.is_empty() || rest.starts_with('/')).then_some(rest)
    }

    /// The path and query the upstream is asked for.
    pub fn upstream_target(&self, path: &str, query: Option<&str>) -> String {
        let rest = self.rest(path).unwrap_or(path);
        let mut target = match &self.replace_with {
            None => path.to_owned(),
            Some(base) => format!("{base}{rest}"),
        };
        if target.is_empty() {
            target.push('/');
        }
        if let Some(q) = query {
            target.push('?');
            target.push_str(q);
        }
        target
    }
}

impl Routes {
    /// Every value read by the core's rules, then each route in the worker's form; all the
    /// broken ones reported at once.
    pub fn parse(values: &[String]) -> Result<Routes, Vec<RouteError>> {
        let validated = RawProxy {
            routes: values.to_vec(),
            ..RawProxy::default()
        }
        .validated()
        .map_err(|rules| {
            rules
                .into_iter()
                .map(RouteError::Invalid)
                .collect::<Vec<_>>()
        })?;
        let mut routes = Vec::with_capacity(validated.routes().len());
        let mut errors = Vec::new();
        for route in validated.routes() {
            match Route::from_validated(route) {
                Ok(route) => routes.push(route),
                Err(e) => errors.push(e),
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        // The core's order: longest prefix first, a prefix's upstreams as given.
        Ok(Routes { routes })
    }

    pub fn len(&self) -> usize {
        self.routes.len()
    }

    pub fn get(&self, index: usize) -> Option<&Route> {
        self.routes.get(index)
    }

    /// The indices of every upstream of the longest prefix covering `path`.
    pub fn group(&self, path: &str) -> Option<std::ops::Range<usize>> {
        let (first, route) = self.find(path)?;
        let len = self.routes[first..]
            .iter()
            .take_while(|r| r.prefix == route.prefix)
            .count();
        Some(first..first + len)
    }

    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Route> {
        self.routes.iter()
    }

    /// The route with the longest prefix covering `path`.
    pub fn find(&self, path: &str) -> Option<(usize, &Route)> {
        self.routes
            .iter()
            .enumerate()
            .find(|(_, r)| r.rest(path).is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn routes(v: &[&str]) -> Routes {
        Routes::parse(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>()).expect("valid")
    }

    #[test]
    fn the_longest_prefix_wins_on_segment_boundaries() {
        let r = routes(&[
            "/=http://a:1",
            "/api=http://b:2",
            "/api/v2/=unix:/run/c.sock",
        ]);
        let given = |p: &str| r.find(p).map(|(_, r)| r.given.as_str());
        assert_eq!(given("/api"), Some("/api=http://b:2"));
        assert_eq!(given("/api/x"), Some("/api=http://b:2"));
        assert_eq!(given("/apix"), Some("/=http://a:1"));
        assert_eq!(given("/api/v2"), Some("/api/v2/=unix:/run/c.sock"));
        assert_eq!(given("/api/v2/y"), Some("/api/v2/=unix:/run/c.sock"));
        assert_eq!(given("/"), Some("/=http://a:1"));
        assert!(routes(&["/api=http://b:2"]).find("/other").is_none());
    }

    #[test]
    fn a_url_path_replaces_the_prefix_and_none_keeps_the_path() {
        let keep = Route::parse("/api=http://up:8000").expect("valid");
        assert_eq!(keep.upstream_target("/api/x", Some("a=1")), "/api/x?a=1");
        let strip = Route::parse("/api=http://up:8000/").expect("valid");
        assert_eq!(strip.upstream_target("/api/x", None), "/x");
        assert_eq!(strip.upstream_target("/api", None), "/");
        let base = Route::parse("/api/=http://up/v1/").expect("valid");
        assert_eq!(base.upstream_target("/api/x/y", Some("q")), "/v1/x/y?q");
        assert_eq!(base.upstream_target("/api", None), "/v1");
    }

    #[test]
    fn broken_values_are_refused_by_the_cores_rules_naming_the_route() {
        let bad = |s: &str| match Route::parse(s) {
            Ok(route) => panic!(
                "route rule: `{s}` was accepted ({route:?}); the core's validation of proxy.routes refuses it"
            ),
            Err(e) => e.to_string(),
        };
        for (value, rule) in [
            ("/api", "expected PREFIX=URL"),
            ("api=http://a", "the prefix must start with `/`"),
            ("/a/../b=http://a", "the prefix must start with `/`"),
            ("/a=ftp://a", "the URL must be"),
            ("/a=htps://a", "the URL must be"),
            ("/a=h2c://", "host is missing or malformed"),
            ("/a=http://", "host is missing or malformed"),
            ("/a=http://u@h", "host is missing or malformed"),
            ("/a=http://h:99999", "host is missing or malformed"),
            ("/a=http://h/x?y", "the URL's path must hold no"),
            ("/a=unix:run.sock", "must be absolute"),
        ] {
            let message = bad(value);
            assert!(
                message.contains(value) && message.contains(rule),
                "route rule: `{value}` must be refused by the core's rule for proxy.routes ({rule}), got: {message}"
            );
        }
        for (value, scheme) in [
            ("/a=https://a:8443/x", "https"),
            ("/a=h2c://a:8080/x", "h2c"),
            ("/a=h2://a:8443", "h2"),
        ] {
            let upstream = Route::parse(value).expect(value).upstream;
            let found = match upstream {
                Upstream::Https { .. } => "https",
                Upstream::H2c { .. } => "h2c",
                Upstream::H2 { .. } => "h2",
                _ => "other",
            };
            assert_eq!(found, scheme, "{value}");
        }
        let twice = Routes::parse(&["/a=http://h".into(), "/a/=http://h".into(), "x".into()])
            .expect_err("duplicate");
        assert_eq!(twice.len(), 2, "{twice:?}");
        assert!(
            twice
                .iter()
                .any(|e| e.to_string().contains("already routed"))
        );
    }

    /// A host the core's rules accept but the `http` crate cannot read is refused by the
    /// worker's form, naming the route (what a reload checks before its workers start).
    #[test]
    fn a_host_the_http_crate_cannot_read_is_refused_naming_the_route() {
        let refused = Routes::parse(&["/a=http://h<st:80".into()]).expect_err("unreadable host");
        assert!(
            matches!(&refused[..], [RouteError::BadAuthority { given }] if given == "/a=http://h<st:80"),
            "{refused:?}"
        );
    }

    #[test]
    fn a_prefix_given_several_urls_balances_between_them_in_the_order_given() {
        let r = routes(&[
            "/api=http://a:1",
            "/b=http://x:9",
            "/api=http://a:2",
            "/=http://root:3",
            "/api/=unix:/run/a3.sock",
        ]);
        let group = r.group("/api/x").expect("routed");
        let given: Vec<&str> = group
            .clone()
            .filter_map(|i| r.get(i))
            .map(|route| route.given.as_str())
            .collect();
        assert_eq!(
            given,
            [
                "/api=http://a:1",
                "/api=http://a:2",
                "/api/=unix:/run/a3.sock"
            ]
        );
        assert_eq!(r.group("/b").map(|g| g.len()), Some(1));
        assert_eq!(r.group("/other").map(|g| g.len()), Some(1));
        let many: Vec<String> = (0..=servery_core::config::MAX_PROXY_ROUTES)
            .map(|i| format!("/p{i}=http://h:1"))
            .collect();
        let Err(refused) = Routes::parse(&many) else {
            panic!("route rule: at most 1000 routes (proxy.routes), yet 1001 were taken");
        };
        assert!(refused[0].to_string().contains("at most 1000 routes"));
    }

    proptest! {
        /// Any text is parsed to a route or refused, never a panic; a route found for a
        /// path covers it on a segment boundary, and no longer matching prefix exists.
        #[test]
        fn parsing_and_matching_hold_for_any_input(
            values in proptest::collection::vec("[/a-z=:.?%@ ]{0,16}(=http://h(:[0-9]{1,5})?(/[a-z.]{0,4})?)?", 0..5),
            path in "/[a-z/]{0,12}",
        ) {
            if let Ok(routes) = Routes::parse(&values) {
                match routes.find(&path) {
                    Some((first, r)) => {
                        let group = routes.group(&path).expect("found");
                        prop_assert_eq!(group.start, first);
                        prop_assert!(group.clone().all(|i| routes.get(i).is_some_and(|g| g.prefix == r.prefix)));
                        prop_assert!(routes.get(group.end).is_none_or(|next| next.prefix != r.prefix));
                        prop_assert!(path.starts_with(&r.prefix));
                        let rest = &path[r.prefix.len()..];
                        prop_assert!(rest.is_empty() || rest.starts_with('/'));
                        for other in routes.iter().filter(|o| o.prefix.len() > r.prefix.len()) {
                            prop_assert!(other.rest(&path).is_none());
                        }
                        prop_assert!(r.upstream_target(&path, None).starts_with('/'));
                    }
                    None => prop_assert!(routes.iter().all(|r| r.rest(&path).is_none())),
                }
            }
        }
    }
}
