//! The responses that carry a generated page or listing, each under its own
//! Content-Security-Policy.

use http::request::Parts;
use http::{Response, StatusCode, header};

use super::render::Features;
use crate::http::body::{self, Body};
use crate::http::error::HttpError;
use crate::http::listing::{self, Entry};
use crate::http::mime;
use crate::http::path::RequestPath;
use crate::http::site::joined_values;

/// A directory as the page (HTML) or as JSON, as the query and `Accept` ask.
pub(crate) fn listing(
    parts: &Parts,
    path: &RequestPath,
    mut entries: Vec<Entry>,
    readme: Option<&str>,
    want_body: bool,
    features: Features,
    qr_base: Option<&str>,
) -> Result<Response<Body>, HttpError> {
    let accept = joined_values(&parts.headers, header::ACCEPT);
    let query = listing::parse_query(parts.uri.query(), accept.as_deref());
    listing::sort(&mut entries, query.sort, query.order);
    let (content_type, text, csp) = if query.json {
        (
            "application/json",
            listing::render_json(&entries).map_err(internal)?,
            mime::GENERATED_PAGE_CSP,
        )
    } else {
        let html = super::render::render(&super::render::Page {
            dir: path,
            entries: &entries,
            query: &query,
            features,
            readme,
            qr_base,
        });
        ("text/html; charset=utf-8", html, super::PAGE_CSP)
    };
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CONTENT_LENGTH, text.len())
        .header(header::VARY, "Accept")
        .header(header::CACHE_CONTROL, "no-cache")
        .header(header::CONTENT_SECURITY_POLICY, csp)
        .body(if want_body {
            body::full(text)
        } else {
            body::empty()
        })
        .map_err(internal)
}

/// A generated page (search results) with the page's policy.
pub(crate) fn page(text: String, want_body: bool) -> Result<Response<Body>, HttpError> {
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/html; charset=utf-8")
        .header(header::CONTENT_LENGTH, text.len())
        .header(header::CACHE_CONTROL, "no-cache")
        .header(header::CONTENT_SECURITY_POLICY, super::PAGE_CSP)
        .body(if want_body {
            body::full(text)
        } else {
            body::empty()
        })
        .map_err(internal)
}

fn internal(e: impl std::error::Error + Send + Sync + 'static) -> HttpError {
    HttpError::Internal(std::io::Error::other(e))
}
