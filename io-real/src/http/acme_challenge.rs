//! ACME HTTP-01 (RFC 8555 §8.3): `GET /.well-known/acme-challenge/TOKEN` answers the key
//! authorization the parent's certificate manager published in the broker for TOKEN.
//! Every worker asks the broker for each such request rather than keeping a copy, so a
//! worker started after the order began answers as well as the others, and a withdrawn
//! challenge is gone everywhere at once.
//!
//! On the cleartext listener a TLS site opens for the CA (`--acme-http-port`), nothing
//! else is served: every other request is redirected to HTTPS.

use http::request::Parts;
use http::{HeaderValue, Method, Response, StatusCode, header};
use servery_core::acme::MAX_TOKEN;
use servery_core::proto::{BrokerReply, BrokerRequest};

use super::body::{self, Body};
use super::conn::Transport;
use super::error::{HttpError, error_response};
use crate::worker::broker::BrokerHandle;

pub const PREFIX: &str = "/.well-known/acme-challenge/";

/// The token a request path names: one non-empty base64url segment, as the manager
/// accepts from a CA. Anything else under the prefix is no challenge (404).
pub fn token_of(path: &str) -> Option<&str> {
    let token = path.strip_prefix(PREFIX)?;
    let ok = !token.is_empty()
        && token.len() <= MAX_TOKEN
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    ok.then_some(token)
}

/// Where a cleartext request is sent instead: the same host (its port replaced) and
/// target over HTTPS.
pub fn https_location(parts: &Parts, https_port: u16) -> Option<String> {
    let host = parts
        .headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| parts.uri.host())?;
    let authority: http::uri::Authority = host.parse().ok()?;
    let name = authority.host();
    let target = parts
        .uri
        .path_and_query()
        .map_or("/", http::uri::PathAndQuery::as_str);
    Some(if https_port == 443 {
        format!("https://{name}{target}")
    } else {
        format!("https://{name}:{https_port}{target}")
    })
}

/// The challenge route, in a worker of an `--acme` site.
#[derive(Debug, Clone)]
pub struct AcmeResponder {
    pub broker: BrokerHandle,
    /// The HTTPS port cleartext requests are redirected to.
    pub https_port: u16,
}

impl AcmeResponder {
    /// The response for `parts` if this route takes it: a challenge on any listener,
    /// anything else on cleartext.
    pub async fn respond(&self, parts: &Parts) -> Option<Response<Body>> {
        if parts.uri.path().starts_with(PREFIX) {
            return Some(self.challenge(parts).await);
        }
        if parts.extensions.get::<Transport>() == Some(&Transport::Tls) {
            return None;
        }
        Some(match https_location(parts, self.https_port) {
            Some(location) => {
                let mut r = Response::new(body::empty());
                *r.status_mut() = StatusCode::PERMANENT_REDIRECT;
                if let Ok(v) = HeaderValue::from_str(&location) {
                    r.headers_mut().insert(header::LOCATION, v);
                }
                r
            }
            None => error_response(&HttpError::BadRequest("no usable Host header")),
        })
    }

    async fn challenge(&self, parts: &Parts) -> Response<Body> {
        if parts.method != Method::GET && parts.method != Method::HEAD {
            return error_response(&HttpError::MethodNotAllowed);
        }
        let Some(token) = token_of(parts.uri.path()) else {
            return error_response(&HttpError::NotFound);
        };
        let reply = self
            .broker
            .call(BrokerRequest::AcmeChallenge {
                token: token.to_owned(),
            })
            .await;
        match reply {
            Ok(BrokerReply::KeyAuthorization(Some(answer))) => {
                let mut r = Response::new(if parts.method == Method::HEAD {
                    body::empty()
                } else {
                    body::full(answer)
                });
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/octet-stream"),
                );
                r
            }
            Ok(BrokerReply::KeyAuthorization(None)) => error_response(&HttpError::NotFound),
            Ok(_) | Err(_) => error_response(&HttpError::Unavailable),
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn parts(uri: &str, host: Option<&str>) -> Parts {
        let mut b = http::Request::builder().uri(uri);
        if let Some(h) = host {
            b = b.header(header::HOST, h);
        }
        b.body(()).expect("request").into_parts().0
    }

    #[test]
    fn tokens_are_one_base64url_segment() {
        assert_eq!(
            token_of("/.well-known/acme-challenge/abc-_9"),
            Some("abc-_9")
        );
        for bad in [
            "/.well-known/acme-challenge/",
            "/.well-known/acme-challenge/a/b",
            "/.well-known/acme-challenge/..",
            "/.well-known/acme-challenge/a%2Fb",
            "/.well-known/acme-challengeX/a",
            "/other",
        ] {
            assert_eq!(token_of(bad), None, "{bad}");
        }
    }

    #[test]
    fn cleartext_requests_go_to_the_same_host_over_https() {
        assert_eq!(
            https_location(&parts("/a/b?c=d", Some("files.example:80")), 443).as_deref(),
            Some("https://files.example/a/b?c=d")
        );
        assert_eq!(
            https_location(&parts("/", Some("files.example")), 8443).as_deref(),
            Some("https://files.example:8443/")
        );
        assert_eq!(https_location(&parts("/", Some("bad host/")), 443), None);
        assert_eq!(https_location(&parts("/", None), 443), None);
    }

    proptest! {
        #[test]
        fn any_path_or_host_gives_an_answer_or_none_never_a_panic(path in ".{0,300}", host in ".{0,80}") {
            if let Some(t) = token_of(&path) {
                prop_assert!(!t.contains('/') && !t.contains('.'));
            }
            if let Ok(p) = http::Request::builder().uri("/").header(header::HOST, host.as_str()).body(()) {
                let location = https_location(&p.into_parts().0, 443);
                if let Some(l) = location {
                    prop_assert!(l.starts_with("https://"));
                    prop_assert!(HeaderValue::from_str(&l).is_ok());
                }
            }
        }
    }
}
