//! Cross-site request protection for everything that changes the served tree
//! (decision 0022).
//!
//! A servery on someone's machine is reachable from every page their browser opens, and a
//! hostile page can send a form `POST` (no preflight) or, with `--cors`, any request its
//! script likes. Browsers say where a request comes from, and nothing else does, so the
//! check reads what browsers send and lets everything else through:
//!
//! - `Sec-Fetch-Site` (every current browser): only `same-origin` (and `none`, a request the
//!   user started from the address bar) may change anything; `same-site` is refused too,
//!   since a page on another port of the same host is the same *site* but another origin.
//! - Otherwise `Origin` (older browsers send it on every non-GET request): it must be this
//!   server's own origin, built from the scheme it was reached over and its `Host`.
//! - Neither header: not a browser (curl, WebDAV clients, scripts); let through.
//!
//! Safe methods (GET, HEAD, OPTIONS, PROPFIND) are never checked: they change nothing, and
//! the listing must stay reachable from links on other sites.

use http::{HeaderMap, Method, header};

/// The request header browsers set to say how a request relates to the page that made it.
pub const SEC_FETCH_SITE: &str = "sec-fetch-site";

/// Whether `method` never changes the served tree.
pub fn is_safe(method: &Method) -> bool {
    matches!(
        method.as_str(),
        "GET" | "HEAD" | "OPTIONS" | "PROPFIND" | "TRACE"
    )
}

/// Whether a request may change the tree: `false` means it came from another origin's
/// page and is refused (403). `host` is the authority the request was addressed to (the
/// `Host` header, or the HTTP/2 `:authority`), `tls` whether it came over TLS.
pub fn allowed(method: &Method, headers: &HeaderMap, host: Option<&str>, tls: bool) -> bool {
    if is_safe(method) {
        return true;
    }
    let mut fetch_site = headers.get_all(SEC_FETCH_SITE).iter();
    match (fetch_site.next(), fetch_site.next()) {
        (None, _) => {}
        (Some(value), None) => {
            return matches!(value.as_bytes(), b"same-origin" | b"none");
        }
        // Sent twice: not something a browser does.
        (Some(_), Some(_)) => return false,
    }
    let mut origins = headers.get_all(header::ORIGIN).iter();
    match (origins.next(), origins.next()) {
        (None, _) => true,
        (Some(origin), None) => {
            let (Ok(origin), Some(host)) = (origin.to_str(), host) else {
                return false;
            };
            same_origin(origin, host, tls)
        }
        (Some(_), Some(_)) => false,
    }
}

/// Whether `origin` (`scheme://host[:port]`, as browsers serialise it) names the server
/// reached at `host` over `tls`. Browsers never write the default port in `Origin`; a
/// `Host` may, so it is compared with and without it.
fn same_origin(origin: &str, host: &str, tls: bool) -> bool {
    let (scheme, default_port) = if tls {
        ("https://", ":443")
    } else {
        ("http://", ":80")
    };
    let Some(rest) = origin
        .get(..scheme.len())
        .filter(|s| s.eq_ignore_ascii_case(scheme))
        .and_then(|_| origin.get(scheme.len()..))
    else {
        return false;
    };
    let bare = host.strip_suffix(default_port).unwrap_or(host);
    !rest.is_empty() && (rest.eq_ignore_ascii_case(host) || rest.eq_ignore_ascii_case(bare))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use proptest::prelude::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).expect("name"),
                HeaderValue::from_str(v).expect("value"),
            );
        }
        h
    }

    const HOST: Option<&str> = Some("127.0.0.1:8000");

    #[test]
    fn foreign_pages_cannot_change_anything() {
        for method in [
            Method::PUT,
            Method::POST,
            Method::DELETE,
            Method::from_bytes(b"MOVE").expect("m"),
        ] {
            for h in [
                headers(&[("sec-fetch-site", "cross-site")]),
                headers(&[("sec-fetch-site", "same-site")]),
                headers(&[
                    ("sec-fetch-site", "same-site"),
                    ("origin", "http://127.0.0.1:8000"),
                ]),
                headers(&[("origin", "http://127.0.0.1:9000")]),
                headers(&[("origin", "http://evil.example")]),
                headers(&[("origin", "null")]),
                headers(&[("origin", "https://127.0.0.1:8000")]),
                headers(&[
                    ("origin", "http://127.0.0.1:8000"),
                    ("origin", "http://evil.example"),
                ]),
            ] {
                assert!(!allowed(&method, &h, HOST, false), "{method} {h:?}");
            }
        }
    }

    #[test]
    fn the_page_itself_and_non_browsers_may() {
        for h in [
            headers(&[]),
            headers(&[
                ("sec-fetch-site", "same-origin"),
                ("origin", "http://127.0.0.1:8000"),
            ]),
            headers(&[("origin", "http://127.0.0.1:8000")]),
            headers(&[("origin", "HTTP://127.0.0.1:8000")]),
            headers(&[("sec-fetch-site", "none")]),
        ] {
            assert!(allowed(&Method::PUT, &h, HOST, false), "{h:?}");
        }
        assert!(allowed(
            &Method::DELETE,
            &headers(&[("origin", "https://files.example")]),
            Some("files.example:443"),
            true
        ));
        assert!(!allowed(
            &Method::DELETE,
            &headers(&[("origin", "http://files.example")]),
            Some("files.example"),
            true
        ));
    }

    #[test]
    fn reads_are_never_checked() {
        let h = headers(&[
            ("sec-fetch-site", "cross-site"),
            ("origin", "http://evil.example"),
        ]);
        for method in [Method::GET, Method::HEAD, Method::OPTIONS] {
            assert!(allowed(&method, &h, HOST, false));
        }
    }

    proptest! {
        /// Whatever a peer sends, the check answers without panicking, and an origin other
        /// than the server's own is never accepted.
        #[test]
        fn any_origin_but_our_own_is_refused(origin in "[ -~]{0,40}", site in "[ -~]{0,12}") {
            let mut h = HeaderMap::new();
            if let Ok(v) = HeaderValue::from_str(&origin) {
                h.insert(header::ORIGIN, v);
            }
            let verdict = allowed(&Method::POST, &h, HOST, false);
            let ours = origin.eq_ignore_ascii_case("http://127.0.0.1:8000");
            prop_assert_eq!(verdict, ours || !h.contains_key(header::ORIGIN));
            if let Ok(v) = HeaderValue::from_str(&site) {
                h.insert(SEC_FETCH_SITE, v);
                let verdict = allowed(&Method::POST, &h, HOST, false);
                prop_assert_eq!(verdict, site == "same-origin" || site == "none");
            }
        }
    }
}
