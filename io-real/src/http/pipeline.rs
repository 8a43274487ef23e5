//! What every transport does with a request once it is read (HTTP/1.1 and HTTP/2 in
//! [`super::conn`], HTTP/3 in `crate::http3`): check it, hand it to the site, log it and
//! count it. One place, so a step added here is taken by every protocol.

use bytes::Bytes;
use http::{Method, Request, Response, Version};
use servery_core::request_stats::RouteClass;

use super::body::Body;
use super::error::{HttpError, StorageFault, error_response};
use super::site::Site;
use super::validate;
use super::watchdog::Activity;

/// What is taken from a request as it arrives, before it is handed on: the access log's
/// fields and the metrics' method and start time, each only when that is on.
pub(crate) struct Arrival {
    logged: Option<Logged>,
    metered: Option<(usize, std::time::Instant)>,
    /// The client's address, for an application (`REMOTE_ADDR`).
    peer: Option<std::net::SocketAddr>,
}

impl Arrival {
    pub(crate) fn of<B>(site: &Site, req: &Request<B>, activity: &Activity) -> Arrival {
        Arrival {
            logged: site.recorder().map(|_| Logged::of(req, activity)),
            metered: site.meter().map(|_| {
                let method = servery_core::request_stats::method_index(req.method().as_str());
                (method, std::time::Instant::now())
            }),
            peer: (site.app().is_some() || site.proxy().is_some() || site.cgi().is_some())
                .then(|| activity.peer())
                .flatten(),
        }
    }

    /// The response to `req`: refused if malformed or addressed to a host name this
    /// server does not answer for (before any handler, the application's included), else
    /// the site's answer; logged and counted once it is known.
    pub(crate) async fn answer<B>(self, site: &Site, req: Request<B>) -> Response<Body>
    where
        B: hyper::body::Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: std::fmt::Display,
    {
        let (response, route) = match validate::check(&req) {
            Ok(()) if site.allowed_hosts().is_some_and(|h| !h.allow_request(&req)) => {
                (error_response(&HttpError::Misdirected), RouteClass::Refused)
            }
            Ok(()) if let Some(proxy) = site.proxy().filter(|p| p.takes(req.uri().path())) => {
                // Boxed, as the application's: the rare path's future stays off the rest.
                Box::pin(site.handle_proxy(proxy, req, self.peer)).await
            }
            Ok(()) if let Some(cgi) = site.cgi().filter(|c| c.takes(req.uri().path())) => {
                Box::pin(site.handle_cgi(cgi, req, self.peer)).await
            }
            Ok(()) => match site.app().filter(|app| app.takes(req.uri().path())) {
                // Boxed: the application's future is the rare path of a file server's
                // requests, and every request's future is as large as its largest await.
                Some(app) => Box::pin(site.handle_app(app, req, self.peer)).await,
                None => site.handle_classed(req).await,
            },
            Err(refused) => (error_response(&refused.into()), RouteClass::Refused),
        };
        if let (Some(logged), Some(recorder)) = (self.logged, site.recorder()) {
            logged.record(recorder, &response).await;
        }
        if let (Some((method, started)), Some(meter)) = (self.metered, site.meter()) {
            let bytes = hyper::body::Body::size_hint(response.body()).exact();
            let status = response.status().as_u16();
            meter.record(method, route, status, bytes.unwrap_or(0), started.elapsed());
            if let Some(fault) = response.extensions().get::<StorageFault>() {
                meter.storage_fault(fault.0);
            }
        }
        response
    }
}

/// A request refused before it reached [`Arrival`] — a head hyper could not parse (`400`,
/// `414`, `431`), one that did not arrive whole within its deadline (`408`, closed without
/// an answer, as nginx does) — logged and counted like any answered request, with the
/// raw request line as far as it arrived (decision 0080; `"-"` when none did): scanners
/// show up in the log (decision 0056).
pub(crate) async fn refused_before_request(site: &Site, activity: &Activity, status: u16) {
    let took = activity.accepted_at().elapsed();
    refused_logged(site, activity, status, took, &activity.head_line()).await;
}

/// An HTTP/2 or HTTP/3 request its protocol library refused before servery saw it as a
/// request, where the library lets that be seen (an undecodable header block, one too
/// large, a malformed request): logged and counted as a refused head is, its request
/// `"-"` (nothing of it was parsed); `took` from when its stream (or, for a connection
/// the refusal ends, the connection) began.
pub(crate) async fn refused_stream(
    site: &Site,
    activity: &Activity,
    status: u16,
    took: std::time::Duration,
) {
    refused_logged(site, activity, status, took, b"").await;
}

async fn refused_logged(
    site: &Site,
    activity: &Activity,
    status: u16,
    took: std::time::Duration,
    request_line: &[u8],
) {
    if let Some(recorder) = site.recorder() {
        let record = crate::access_log::format::Record {
            time: std::time::SystemTime::now(),
            remote: activity.peer(),
            user: None,
            method: "",
            target: "",
            protocol: "",
            request_line,
            status,
            bytes: Some(0),
            duration: took,
            referer: None,
            user_agent: None,
            worker: recorder.worker,
            generation: recorder.generation,
        };
        if !recorder.try_record(&record) {
            Box::pin(recorder.record(&record)).await;
        }
    }
    if let Some(meter) = site.meter() {
        let other = servery_core::request_stats::METHODS.len() - 1;
        meter.record(other, RouteClass::Refused, status, 0, took);
    }
}

/// What an access-log line says about a request, taken before the request is handed on.
struct Logged {
    started: std::time::Instant,
    time: std::time::SystemTime,
    peer: Option<std::net::SocketAddr>,
    method: Method,
    target: String,
    version: Version,
    referer: Option<http::HeaderValue>,
    user_agent: Option<http::HeaderValue>,
}

impl Logged {
    fn of<B>(req: &Request<B>, activity: &Activity) -> Logged {
        let headers = req.headers();
        Logged {
            started: std::time::Instant::now(),
            time: std::time::SystemTime::now(),
            peer: activity.peer(),
            method: req.method().clone(),
            target: req
                .uri()
                .path_and_query()
                .map_or_else(|| req.uri().to_string(), |p| p.as_str().to_owned()),
            version: req.version(),
            referer: headers.get(http::header::REFERER).cloned(),
            user_agent: headers.get(http::header::USER_AGENT).cloned(),
        }
    }

    async fn record<B>(
        self,
        recorder: &crate::access_log::recorder::Recorder,
        response: &Response<B>,
    ) {
        let bytes = response
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let protocol = match self.version {
            Version::HTTP_10 => "HTTP/1.0",
            Version::HTTP_2 => "HTTP/2.0",
            Version::HTTP_3 => "HTTP/3.0",
            _ => "HTTP/1.1",
        };
        let record = crate::access_log::format::Record {
            time: self.time,
            remote: self.peer,
            user: None,
            method: self.method.as_str(),
            target: &self.target,
            protocol,
            request_line: b"",
            status: response.status().as_u16(),
            bytes,
            duration: self.started.elapsed(),
            referer: self.referer.as_ref().map(|v| v.as_bytes()),
            user_agent: self.user_agent.as_ref().map(|v| v.as_bytes()),
            worker: recorder.worker,
            generation: recorder.generation,
        };
        if !recorder.try_record(&record) {
            // The buffer is full: the rare path, boxed so every request's future stays
            // small.
            Box::pin(recorder.record(&record)).await;
        }
    }
}
