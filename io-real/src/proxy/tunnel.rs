//! `Upgrade` through the proxy (WebSocket, RFC 6455 §4; RFC 9110 §7.8): the client's
//! `Upgrade` is asked of the upstream, and when the upstream switches protocols the two
//! connections are joined byte for byte until either side closes. The admission grant is
//! held for as long as the tunnel is open.

use std::sync::Arc;

use http::header::{self, HeaderMap, HeaderValue};
use http::{Request, Version};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;

use crate::http::has_token;

/// The protocol an HTTP/1.1 request asks to upgrade to, if it asks.
pub(super) fn wanted<B>(req: &Request<B>) -> Option<HeaderValue> {
    if req.version() != Version::HTTP_11 || !has_token(req.headers(), header::CONNECTION, "upgrade")
    {
        return None;
    }
    req.headers().get(header::UPGRADE).cloned()
}

/// Puts the upgrade back after the hop-by-hop fields were removed.
pub(super) fn ask(headers: &mut HeaderMap, protocol: HeaderValue) {
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(header::UPGRADE, protocol);
}

/// Joins the client's and the upstream's upgraded connections until one ends.
pub(super) async fn join(
    client: OnUpgrade,
    upstream: OnUpgrade,
    route: Arc<str>,
    permit: super::Hold,
) {
    let _permit = permit;
    let (client, upstream) = match tokio::join!(client, upstream) {
        (Ok(c), Ok(u)) => (c, u),
        (c, u) => {
            tracing::warn!(route = %route, client = ?c.err(), upstream = ?u.err(), "upgrade failed");
            return;
        }
    };
    let (mut client, mut upstream) = (TokioIo::new(client), TokioIo::new(upstream));
    match tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
        Ok((up, down)) => tracing::debug!(route = %route, up, down, "tunnel closed"),
        Err(e) => tracing::debug!(route = %route, error = %e, "tunnel ended"),
    }
}
