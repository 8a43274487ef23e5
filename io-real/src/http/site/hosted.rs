//! The two routes that hand a request to someone else, the reverse proxy's upstream and
//! the hosted application, under the same ACME answers and authorization as files; each
//! answer comes with the route class its duration is counted under (decision 0081).

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, header};
use servery_core::request_stats::RouteClass;

use super::super::body::{self, Body};
use super::super::conn::Transport;
use super::super::error::{HttpError, error_response};
use super::super::policy;
use super::Site;

impl Site {
    /// What answers a request for the proxy or the application before its host sees it:
    /// ACME's challenge answers, then the authorization every request of the site needs.
    async fn before_the_host(
        &self,
        parts: &http::request::Parts,
    ) -> Option<(Response<Body>, RouteClass)> {
        if let Some(acme) = &self.acme
            && let Some(response) = Box::pin(acme.respond(parts)).await
        {
            return Some((response, RouteClass::Other));
        }
        if !policy::authorized(&self.auth, &parts.headers) {
            return Some((
                error_response(&HttpError::Unauthorized),
                RouteClass::Refused,
            ));
        }
        None
    }

    /// Answers a request the reverse proxy takes: under the same authorization and ACME
    /// answers as files, then as the upstream answers (its headers are its own, but for
    /// the transport's HSTS); with the route class its duration is counted under.
    pub async fn handle_proxy<B>(
        &self,
        proxy: &crate::proxy::Proxy,
        req: Request<B>,
        peer: Option<std::net::SocketAddr>,
    ) -> (Response<Body>, RouteClass)
    where
        B: hyper::body::Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: std::fmt::Display,
    {
        let (parts, body) = req.into_parts();
        if let Some(answered) = self.before_the_host(&parts).await {
            return answered;
        }
        let tls = parts.extensions.get::<Transport>() == Some(&Transport::Tls);
        let mut response = proxy
            .handle(Request::from_parts(parts, body), peer, tls)
            .await;
        if self.hsts && tls {
            response.headers_mut().insert(
                header::STRICT_TRANSPORT_SECURITY,
                HeaderValue::from_static(policy::HSTS),
            );
        }
        (response, RouteClass::Proxy)
    }

    /// Answers a request the application takes: under the same authorization and ACME
    /// answers as files, with the transport's headers (HSTS, Alt-Svc), and otherwise the
    /// application's response as it made it (its own security headers and CSRF defence:
    /// servery's are for its own pages and writes); with the route class its duration is
    /// counted under.
    pub async fn handle_app<B>(
        &self,
        app: &crate::app::App,
        req: Request<B>,
        peer: Option<std::net::SocketAddr>,
    ) -> (Response<Body>, RouteClass)
    where
        B: hyper::body::Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: std::fmt::Display,
    {
        let (parts, body) = req.into_parts();
        if let Some(answered) = self.before_the_host(&parts).await {
            return answered;
        }
        let tls = parts.extensions.get::<Transport>() == Some(&Transport::Tls);
        let (head, version) = (parts.method == Method::HEAD, parts.version);
        let caller = crate::app::Caller { peer, tls };
        let mut response = app.handle(parts, body, caller).await;
        let headers = response.headers_mut();
        if self.hsts && tls {
            headers.insert(
                header::STRICT_TRANSPORT_SECURITY,
                HeaderValue::from_static(policy::HSTS),
            );
        }
        if let Some(alt_svc) = &self.alt_svc
            && version != http::Version::HTTP_3
        {
            headers.insert(header::ALT_SVC, alt_svc.clone());
        }
        if head {
            *response.body_mut() = body::empty();
        }
        (response, RouteClass::App)
    }

    /// Answers a request for a CGI script: under the same authorization and ACME answers
    /// as files, then as the script answers. A script's local redirect (RFC 3875 §6.2.2)
    /// is answered as a `GET` of its path would be, a few times at most.
    pub async fn handle_cgi<B>(
        &self,
        cgi: &crate::cgi::Cgi,
        req: Request<B>,
        peer: Option<std::net::SocketAddr>,
    ) -> (Response<Body>, RouteClass)
    where
        B: hyper::body::Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: std::fmt::Display,
    {
        /// Local redirects followed for one request (Apache follows ten).
        const MAX_LOCAL_REDIRECTS: usize = 10;
        let (mut parts, body) = req.into_parts();
        if let Some(answered) = self.before_the_host(&parts).await {
            return answered;
        }
        // Authorized: the user `--auth` let in is the script's `REMOTE_USER`.
        if let Some(user) = policy::authenticated_user(&self.auth, &parts.headers) {
            parts.extensions.insert(crate::cgi::RemoteUser(user));
        }
        let tls = parts.extensions.get::<Transport>() == Some(&Transport::Tls);
        let mut answer = cgi
            .handle(Request::from_parts(parts.clone(), body), peer, tls)
            .await;
        let mut redirects = 0;
        let mut response = loop {
            let path_and_query = match answer {
                crate::cgi::Answer::Response(response) => break response,
                crate::cgi::Answer::LocalRedirect(path_and_query) => path_and_query,
            };
            redirects += 1;
            let uri = match path_and_query.parse::<http::Uri>() {
                Ok(uri) if redirects <= MAX_LOCAL_REDIRECTS => uri,
                _ => {
                    tracing::warn!(location = %path_and_query, "CGI local redirect refused (malformed or too many)");
                    break crate::cgi::bad_local_redirect();
                }
            };
            let mut again = http::request::Parts::clone(&parts);
            again.method = Method::GET;
            again.uri = uri;
            again.headers.remove(header::CONTENT_LENGTH);
            again.headers.remove(header::CONTENT_TYPE);
            again.headers.remove(header::TRANSFER_ENCODING);
            if cgi.takes(again.uri.path()) {
                let req = Request::from_parts(again, http_body_util::Empty::<Bytes>::new());
                answer = cgi.handle(req, peer, tls).await;
            } else {
                let req = Request::from_parts(again, http_body_util::Empty::<Bytes>::new());
                break Box::pin(self.handle_classed(req)).await.0;
            }
        };
        if self.hsts && tls {
            response.headers_mut().insert(
                header::STRICT_TRANSPORT_SECURITY,
                HeaderValue::from_static(policy::HSTS),
            );
        }
        (response, RouteClass::Cgi)
    }
}
