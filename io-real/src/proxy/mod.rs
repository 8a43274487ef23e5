//! The reverse proxy (`--proxy PREFIX=URL`): requests under a prefix are forwarded to an
//! upstream over a pool of hyper's HTTP/1.1 connections per upstream (`pool.rs`,
//! decision 0123), or hyper-util's pooled client for `h2://` and `h2c://` routes
//! (decision 0102), bodies streamed both ways a frame at a
//! time (never buffered whole), hop-by-hop fields removed, the forwarding headers set,
//! and an upstream that cannot be reached or does not answer in time answered 502 or 504
//! with the reason in the body and the log. `docs/proxy.md` describes it; decision 0075
//! what it chose where the RFCs leave a choice.

pub mod admission;
pub mod args;
mod body;
pub(crate) mod connect;
pub mod headers;
mod health;
mod pool;
pub mod route;
mod tls;
mod tunnel;

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode, Uri, Version};
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

pub use args::ProxyArgs;
use connect::{ConnectError, Connector, Target};
pub use health::{DownSet, HealthLink};
use route::{Routes, Upstream};
pub(crate) use tls::pem_certs;

use crate::http::Body;

type UpstreamBody = UnsyncBoxBody<Bytes, io::Error>;

/// How long an idle pooled upstream connection is kept.
const POOL_IDLE: Duration = Duration::from_secs(90);

/// hyper-util's pooled clients of the HTTP/2 routes (the HTTP/1.1 routes have a
/// [`pool::Pool`] each).
struct Clients {
    /// `h2://`: HTTP/2 where TLS negotiates it by ALPN (one connection carries many
    /// requests at once), else HTTP/1.1 with the route's host as `Host`.
    h2: Client<Connector, UpstreamBody>,
    /// `h2c://`: HTTP/2 with prior knowledge.
    h2c: Client<Connector, UpstreamBody>,
}

/// Which of the [`Clients`] a route's requests take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Http11,
    H2,
    H2c,
}

/// One worker's proxy: the routes and the pooled clients they share.
pub struct Proxy {
    routes: Routes,
    /// The scheme and authority each route's upstream URIs carry (by the routes' order).
    authorities: Vec<String>,
    /// The same, read once: a request's URI is built from them and its own path, not
    /// formatted and read again.
    bases: Vec<(http::uri::Scheme, http::uri::Authority)>,
    /// Each route's `given` text, for logs.
    names: Vec<Arc<str>>,
    /// With `--proxy-upstream-host`: the `Host` each route sends (by the routes' order);
    /// without it the client's goes upstream.
    upstream_hosts: Option<Vec<HeaderValue>>,
    clients: Clients,
    /// Each HTTP/1.1 route's pool of connections (by the routes' order; `None` for the
    /// HTTP/2 routes).
    pools: Vec<Option<Arc<pool::Pool>>>,
    /// Each route's kind of client (by the routes' order).
    kinds: Vec<Kind>,
    trusted: Vec<IpAddr>,
    first_byte: Duration,
    idle: Duration,
    /// This worker's share of `--proxy-max-inflight`, when it is bounded.
    admission: Option<Arc<admission::Admission>>,
    /// The parent's verdict on the upstreams, and this worker's reports.
    health: health::Health,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("routes", &self.routes)
            .finish_non_exhaustive()
    }
}

/// Why an upstream gave no response, and the status that says so.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UpstreamError {
    #[error("{0}")]
    Connect(ConnectError),
    #[error("the upstream sent no response head within {0:?}")]
    FirstByte(Duration),
    #[error("the upstream failed: {0}")]
    Failed(String),
    #[error("every upstream of this route is marked down")]
    AllDown,
}

impl UpstreamError {
    pub fn status(&self) -> StatusCode {
        match self {
            UpstreamError::Connect(ConnectError::TimedOut(_)) | UpstreamError::FirstByte(_) => {
                StatusCode::GATEWAY_TIMEOUT
            }
            _ => StatusCode::BAD_GATEWAY,
        }
    }
}

/// The connect error somewhere in a client error's chain of causes.
fn connect_cause<'e>(e: &'e (dyn std::error::Error + 'static)) -> Option<&'e ConnectError> {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if let Some(found) = c.downcast_ref::<ConnectError>() {
            return Some(found);
        }
        cause = c.source();
    }
    None
}

fn describe(e: &hyper_util::client::legacy::Error) -> UpstreamError {
    match connect_cause(e) {
        Some(ConnectError::TimedOut(d)) => UpstreamError::Connect(ConnectError::TimedOut(*d)),
        Some(ConnectError::Failed(io)) => UpstreamError::Connect(ConnectError::Failed(
            io::Error::new(io.kind(), io.to_string()),
        )),
        None => UpstreamError::Failed(with_causes(e)),
    }
}

/// An error and its chain of causes, as one line of a 502's reason.
fn with_causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

fn gateway_error(error: &UpstreamError) -> Response<Body> {
    let status = error.status();
    let text = format!(
        "{} {}: {error}\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    );
    let mut response = Response::new(crate::http::body::full(text));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

fn saturated(refused: &admission::Refused) -> Response<Body> {
    let mut response = Response::new(crate::http::body::full(format!(
        "503 Service Unavailable: {refused}\n"
    )));
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    let headers = response.headers_mut();
    headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    // The body was not read: the connection cannot carry another request.
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// What an exchange holds until it is over: its admission grant and its count in flight
/// to its upstream (given back when dropped).
#[derive(Debug)]
pub(super) struct Hold {
    _permit: Option<admission::Permit>,
    _flight: health::InFlight,
}

impl Proxy {
    /// The proxy the settings describe; `None` when no route is given. The settings were
    /// checked by the parent ([`ProxyArgs::check`]), so a refusal here is a worker's
    /// startup failure.
    pub fn from_settings(
        args: &ProxyArgs,
        admission: Option<Arc<admission::Admission>>,
        health: Option<HealthLink>,
    ) -> Result<Option<Proxy>, String> {
        let routes = Routes::parse(&args.proxy).map_err(|errors| {
            errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        })?;
        if routes.is_empty() {
            return Ok(None);
        }
        let mut unix = Vec::new();
        let mut authorities = Vec::new();
        let mut upstream_hosts = Vec::new();
        for route in routes.iter() {
            upstream_hosts.push(match &route.upstream {
                Upstream::Http { authority }
                | Upstream::Https { authority }
                | Upstream::H2 { authority }
                | Upstream::H2c { authority } => {
                    HeaderValue::from_str(authority.as_str()).map_err(|e| e.to_string())?
                }
                Upstream::Unix { .. } => HeaderValue::from_static("localhost"),
            });
            authorities.push(match &route.upstream {
                Upstream::Http { authority } | Upstream::H2c { authority } => {
                    format!("http://{authority}")
                }
                Upstream::Https { authority } | Upstream::H2 { authority } => {
                    format!("https://{authority}")
                }
                Upstream::Unix { path } => {
                    unix.push(path.clone());
                    format!("http://{}", connect::unix_host(unix.len() - 1))
                }
            });
        }
        let bases = authorities
            .iter()
            .map(|a| {
                let uri: Uri = a.parse().map_err(|e| format!("upstream URI `{a}`: {e}"))?;
                let parts = uri.into_parts();
                match (parts.scheme, parts.authority) {
                    (Some(scheme), Some(authority)) => Ok((scheme, authority)),
                    _ => Err(format!("upstream URI `{a}`: no scheme or host")),
                }
            })
            .collect::<Result<Vec<_>, String>>()?;
        let names = routes.iter().map(|r| Arc::from(r.given.as_str())).collect();
        let routes_len = routes.len();
        let secs = |s: f64| Duration::try_from_secs_f64(s).map_err(|e| e.to_string());
        let connector = |offer| -> Result<Connector, String> {
            Ok(Connector {
                unix: Arc::new(unix.clone()),
                timeout: secs(args.proxy_connect_timeout)?,
                tls: tokio_rustls::TlsConnector::from(tls::client_config(
                    args.proxy_ca.as_deref(),
                    offer,
                )?),
            })
        };
        let builder = |set_host| {
            let mut b = Client::builder(TokioExecutor::new());
            b.pool_timer(TokioTimer::new())
                .timer(TokioTimer::new())
                .pool_idle_timeout(POOL_IDLE)
                .set_host(set_host);
            b
        };
        let http11 = Arc::new(connector(tls::Offer::Http11)?);
        let idle = POOL_IDLE;
        let pools = routes
            .iter()
            .map(|route| {
                let target = match &route.upstream {
                    Upstream::Http { authority } => {
                        Target::tcp(authority.host(), authority.port_u16().unwrap_or(80), false)
                    }
                    Upstream::Https { authority } => {
                        Target::tcp(authority.host(), authority.port_u16().unwrap_or(443), true)
                    }
                    Upstream::Unix { path } => Target::Unix(path.clone()),
                    Upstream::H2 { .. } | Upstream::H2c { .. } => return None,
                };
                Some(Arc::new(pool::Pool::new(target, Arc::clone(&http11), idle)))
            })
            .collect();
        let clients = Clients {
            // Over HTTP/1.1 (the upstream declined h2) the route's host is the `Host`;
            // over HTTP/2 it is the `:authority` and no `Host` is sent.
            h2: builder(true).build(connector(tls::Offer::H2OrHttp11)?),
            h2c: builder(true)
                .http2_only(true)
                .build(connector(tls::Offer::Http11)?),
        };
        let kinds = routes
            .iter()
            .map(|r| match r.upstream {
                Upstream::H2 { .. } => Kind::H2,
                Upstream::H2c { .. } => Kind::H2c,
                _ => Kind::Http11,
            })
            .collect();
        Ok(Some(Proxy {
            routes,
            authorities,
            bases,
            names,
            upstream_hosts: args.proxy_upstream_host.then_some(upstream_hosts),
            clients,
            pools,
            kinds,
            trusted: args
                .trust_proxy
                .iter()
                .map(|ip| ip.to_canonical())
                .collect(),
            first_byte: secs(args.proxy_first_byte_timeout)?,
            idle: secs(args.proxy_idle_timeout)?,
            admission,
            health: health::Health::new(health, routes_len, args.balance()),
        }))
    }

    /// Whether a request for `path` is forwarded.
    pub fn takes(&self, path: &str) -> bool {
        self.routes.find(path).is_some()
    }

    /// Forwards `req` and answers with the upstream's response, or with 502/504 and why.
    pub async fn handle<B>(
        &self,
        mut req: Request<B>,
        peer: Option<SocketAddr>,
        tls: bool,
    ) -> Response<Body>
    where
        B: hyper::body::Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: std::fmt::Display,
    {
        let Some(group) = self.routes.group(req.uri().path()) else {
            return gateway_error(&UpstreamError::Failed("no route".into()));
        };
        // Admitted before anything of the request is read or sent.
        let permit = match &self.admission {
            None => None,
            Some(admission) => match admission.permit().await {
                Ok(permit) => Some(permit),
                Err(refused) => {
                    let name = self
                        .routes
                        .get(group.start)
                        .map_or("", |r| r.given.as_str());
                    tracing::info!(route = %name, %refused, "proxy request refused");
                    return saturated(&refused);
                }
            },
        };
        // Then the upstream, under the parent's latest verdict (the core's choice,
        // decision 0100): a verdict that arrived while the request waited for its grant
        // is followed.
        let Some((flight, route)) = self.health.choose(group.clone()).and_then(|f| {
            let route = self.routes.get(f.upstream())?;
            Some((f, route))
        }) else {
            let name = self
                .routes
                .get(group.start)
                .map_or("", |r| r.given.as_str());
            tracing::warn!(route = %name, "every upstream of the route is marked down");
            return gateway_error(&UpstreamError::AllDown);
        };
        let index = flight.upstream();
        let name = Arc::clone(&self.names[index]);
        // An HTTP/1.1 `Upgrade` (WebSocket) is asked of the upstream as the client asked
        // it, and on its 101 the two connections are joined.
        let upgrade = tunnel::wanted(&req);
        let client_side = upgrade.is_some().then(|| hyper::upgrade::on(&mut req));
        let (mut parts, body) = req.into_parts();
        let kind = self.kinds.get(index).copied().unwrap_or(Kind::Http11);
        let uri = match self.upstream_uri(index, kind, route, &parts.uri) {
            Ok(uri) => uri,
            Err(e) => return gateway_error(&UpstreamError::Failed(format!("upstream URI: {e}"))),
        };
        // The client's Host goes upstream unchanged (decision 0075); an HTTP/2 request
        // carries it as its authority. Held as the field value it came in (a shared
        // buffer, not a copy).
        let host_value = match parts.headers.get(header::HOST) {
            Some(h) if h.to_str().is_ok() => Some(h.clone()),
            _ => parts
                .uri
                .authority()
                .and_then(|a| HeaderValue::from_str(a.as_str()).ok()),
        };
        let host = host_value.as_ref().and_then(|h| h.to_str().ok());
        headers::strip_hop_by_hop(&mut parts.headers);
        // hyper's client does not wait for 100 Continue; the body is read when sent.
        parts.headers.remove(header::EXPECT);
        let trusted = peer.is_some_and(|p| self.trusted.contains(&p.ip().to_canonical()));
        headers::set_forwarded(
            &mut parts.headers,
            headers::Client {
                peer,
                trusted,
                tls,
                host,
            },
        );
        let sent_host = match &self.upstream_hosts {
            Some(hosts) => hosts.get(index).cloned(),
            None => host_value.clone(),
        };
        match sent_host {
            // HTTP/2 names the host in `:authority`, the route's (RFC 9113 §8.3.1: a
            // `Host` that differs is malformed); an `h2://` upstream that declines HTTP/2
            // gets it as `Host` from the client (decision 0102).
            _ if kind != Kind::Http11 => {
                parts.headers.remove(header::HOST);
            }
            Some(v) => {
                parts.headers.insert(header::HOST, v);
            }
            None => {}
        }
        if let Some(protocol) = &upgrade {
            tunnel::ask(&mut parts.headers, protocol.clone());
        }
        parts.uri = uri;
        parts.version = Version::HTTP_11;
        let progress = body::Progress::new();
        let outgoing = body::Outgoing::new(body, Arc::clone(&progress)).boxed_unsync();
        let request = Request::from_parts(parts, outgoing);
        if kind != Kind::Http11 && upgrade.is_some() {
            let error = UpstreamError::Failed(
                "an Upgrade cannot be tunnelled to an h2:// or h2c:// upstream (HTTP/2)".into(),
            );
            tracing::warn!(route = %name, %error, "upgrade refused");
            return gateway_error(&error);
        }
        let pool = self.pools.get(index).and_then(Option::as_ref);
        let sent = match self.first_byte(pool, kind, request, &progress).await {
            Ok(sent) => {
                self.health.answered(&flight);
                sent
            }
            Err(error) => {
                tracing::warn!(route = %name, status = error.status().as_u16(), %error, "upstream gave no response");
                self.health.failed(flight);
                return gateway_error(&error);
            }
        };
        let (mut answer, lease) = sent;
        if let (StatusCode::SWITCHING_PROTOCOLS, Some(client_side), Some(protocol)) =
            (answer.status(), client_side, &upgrade)
        {
            let upstream_side = hyper::upgrade::on(&mut answer);
            let (mut parts, _) = answer.into_parts();
            headers::strip_hop_by_hop(&mut parts.headers);
            tunnel::ask(&mut parts.headers, protocol.clone());
            parts.version = Version::default();
            let hold = Hold {
                _permit: permit,
                _flight: flight,
            };
            // The connection is the tunnel's now, never the pool's.
            drop(lease);
            tokio::spawn(tunnel::join(client_side, upstream_side, name, hold));
            return Response::from_parts(parts, crate::http::body::empty());
        }
        let (mut parts, incoming) = answer.into_parts();
        headers::strip_hop_by_hop(&mut parts.headers);
        // The client's connection speaks its own version, whatever the upstream spoke.
        parts.version = Version::default();
        let hold = Hold {
            _permit: permit,
            _flight: flight,
        };
        let body = body::Incoming::new(incoming, self.idle, name, hold, lease);
        Response::from_parts(parts, http_body_util::combinators::BoxBody::new(body))
    }

    /// The URI a request for `client_uri` is sent to on upstream `index` (`route`): the
    /// target the route makes, in origin form on an HTTP/1.1 connection of the pool;
    /// for hyper-util's client (HTTP/2 routes), after the upstream's scheme and
    /// authority, read once.
    fn upstream_uri(
        &self,
        index: usize,
        kind: Kind,
        route: &route::Route,
        client_uri: &Uri,
    ) -> Result<Uri, http::Error> {
        if kind == Kind::Http11
            && route.replace_with.is_none()
            && let Some(target) = client_uri.path_and_query()
            && !target.path().is_empty()
        {
            // A route without a path of its own sends the client's target as it came:
            // the one hyper parsed is shared, not written out and parsed again.
            return Ok(Uri::from(target.clone()));
        }
        let target = route.upstream_target(client_uri.path(), client_uri.query());
        if kind == Kind::Http11 {
            let target = http::uri::PathAndQuery::from_maybe_shared(Bytes::from(target))?;
            return Ok(Uri::from(target));
        }
        let (scheme, authority) = self.bases.get(index).cloned().unwrap_or_else(|| {
            (
                http::uri::Scheme::HTTP,
                http::uri::Authority::from_static("invalid"),
            )
        });
        Uri::builder()
            .scheme(scheme)
            .authority(authority)
            .path_and_query(http::uri::PathAndQuery::from_maybe_shared(Bytes::from(
                target,
            ))?)
            .build()
    }

    /// The upstream's response head, within the first-byte timeout counted from when the
    /// request body last moved (a slow upload is not the upstream's delay).
    async fn first_byte(
        &self,
        pool: Option<&Arc<pool::Pool>>,
        kind: Kind,
        request: Request<UpstreamBody>,
        progress: &body::Progress,
    ) -> Result<(Response<hyper::body::Incoming>, Option<pool::Lease>), UpstreamError> {
        let mut sent = std::pin::pin!(self.send(pool, kind, request));
        loop {
            let deadline = progress.last() + self.first_byte;
            tokio::select! {
                answer = &mut sent => return answer,
                () = tokio::time::sleep_until(deadline) => {
                    if progress.last() + self.first_byte <= tokio::time::Instant::now() {
                        return Err(UpstreamError::FirstByte(self.first_byte));
                    }
                }
            }
        }
    }

    /// Sends `request` on the route's pool (HTTP/1.1) or hyper-util's client (HTTP/2
    /// routes); the pool's lease of the connection comes with the response head.
    async fn send(
        &self,
        pool: Option<&Arc<pool::Pool>>,
        kind: Kind,
        request: Request<UpstreamBody>,
    ) -> Result<(Response<hyper::body::Incoming>, Option<pool::Lease>), UpstreamError> {
        let client = match (kind, pool) {
            (Kind::Http11, Some(pool)) => return pool.send(request).await,
            (Kind::Http11, None) => {
                return Err(UpstreamError::Failed("no pool for the route".into()));
            }
            (Kind::H2, _) => &self.clients.h2,
            (Kind::H2c, _) => &self.clients.h2c,
        };
        match client.request(request).await {
            Ok(answer) => Ok((answer, None)),
            Err(e) => Err(describe(&e)),
        }
    }

    /// The parent's probe of `upstream` (`--proxy-health PATH`): whether `GET PATH`
    /// answers 2xx or 3xx within `within`.
    pub async fn probe(&self, upstream: usize, path: &str, within: Duration) -> bool {
        let Some(authority) = self.authorities.get(upstream) else {
            return false;
        };
        let kind = self.kinds.get(upstream).copied().unwrap_or(Kind::Http11);
        // Origin form on the pool's HTTP/1.1 connections; absolute for hyper-util's client.
        let uri = match kind {
            Kind::Http11 => path.parse::<Uri>(),
            _ => format!("{authority}{path}").parse::<Uri>(),
        };
        let Ok(uri) = uri else {
            return false;
        };
        let mut request = Request::new(
            http_body_util::Empty::new()
                .map_err(|never| match never {})
                .boxed_unsync(),
        );
        *request.uri_mut() = uri;
        if let Some(host) = self.upstream_hosts.as_ref().and_then(|h| h.get(upstream)) {
            request.headers_mut().insert(header::HOST, host.clone());
        } else if let Some(Ok(host)) = self
            .routes
            .get(upstream)
            .map(|r| HeaderValue::from_str(&r.host_header()))
        {
            request.headers_mut().insert(header::HOST, host);
        }
        if kind != Kind::Http11 {
            request.headers_mut().remove(header::HOST);
        }
        let pool = self.pools.get(upstream).and_then(Option::as_ref);
        match tokio::time::timeout(within, self.send(pool, kind, request)).await {
            Ok(Ok((answer, _))) => {
                let status = answer.status();
                status.is_success() || status.is_redirection()
            }
            _ => false,
        }
    }
}

#[cfg(test)]
#[path = "exchange_tests.rs"]
mod exchange_tests;
