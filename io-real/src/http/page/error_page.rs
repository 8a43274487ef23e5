//! What a browser is shown when a page cannot be: the status in words, styled like the
//! directory page, with the way back. Scripts and tools (anything that does not ask for
//! HTML) keep the one-line text of [`error_response`], and WebDAV clients their XML.

use http::request::Parts;
use http::{HeaderValue, Method, Response, StatusCode, header};

use super::assets;
use super::render::{display_name, html_escape};
use crate::http::body::{self, Body};
use crate::http::dav::DavError;
use crate::http::error::{HttpError, error_response};
use crate::http::policy;

/// The response to `err`: a page for a browser's navigation (a `GET`, `HEAD` or form
/// `POST` that accepts HTML), otherwise [`error_response`] as it is. The status and the
/// headers it requires are the same either way.
pub(crate) fn respond(parts: &Parts, err: &HttpError) -> Response<Body> {
    let mut response = error_response(err);
    let browsing = matches!(parts.method, Method::GET | Method::HEAD | Method::POST)
        && policy::accepts_html(&parts.headers);
    let plain = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/plain"));
    if !browsing || !plain {
        return response;
    }
    let status = response.status();
    let html = render(status, parts.uri.path(), detail(err, status));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(html.len()));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(super::PAGE_CSP),
    );
    *response.body_mut() = body::full(html);
    response
}

/// The reason servery can give in words (fixed texts, never a path or an OS error).
fn detail(err: &HttpError, status: StatusCode) -> Option<String> {
    match err {
        HttpError::CrossSite | HttpError::Misdirected | HttpError::Archive(_) => {
            Some(err.to_string())
        }
        HttpError::Dav(why @ (DavError::ReadOnly | DavError::OverwriteOff)) => {
            Some(why.to_string())
        }
        HttpError::Write(why) if status.is_client_error() => Some(why.to_string()),
        _ => None,
    }
}

/// A heading and a sentence for each status a reader may meet.
fn words(status: StatusCode) -> (&'static str, &'static str) {
    match status.as_u16() {
        400 => (
            "Bad request",
            "The server could not understand this request.",
        ),
        401 => (
            "Sign-in needed",
            "This server asks for a user name and password.",
        ),
        403 => ("Not allowed", "This is not allowed here."),
        404 => (
            "Not found",
            "There is nothing at this address: it may have been moved, renamed or deleted.",
        ),
        405 => ("Not possible here", "This cannot be done at this address."),
        409 => ("Not saved", "This clashes with what is there now."),
        412 => (
            "Changed meanwhile",
            "It was changed by someone else in the meantime.",
        ),
        413 => ("Too large", "This is larger than the server accepts."),
        421 => (
            "Wrong address",
            "This server does not answer for that host name.",
        ),
        503 => ("Busy", "The server is busy: try again in a moment."),
        507 => ("Disk full", "The server has no space left."),
        s if s >= 500 => ("Server error", "Something went wrong on the server."),
        _ => ("Refused", "The server refused this request."),
    }
}

fn render(status: StatusCode, path: &str, detail: Option<String>) -> String {
    let (heading, sentence) = words(status);
    let shown = percent_encoding::percent_decode_str(path).decode_utf8_lossy();
    let reason = detail.map_or_else(String::new, |d| {
        let mut d = html_escape(&d);
        if let Some(first) = d.get(..1) {
            d.replace_range(..1, &first.to_uppercase());
        }
        format!("<p class=\"err\">{d}.</p>")
    });
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <meta name=\"color-scheme\" content=\"light dark\">\
         <link rel=\"icon\" href=\"data:,\">\
         <title>{heading}</title><link rel=\"stylesheet\" href=\"{css}\"></head>\n\
         <body><main id=\"main\" class=\"problem\"><h1>{heading}</h1>\
         <p>{sentence}</p>{reason}<p class=\"note\">Address: <code>{shown}</code> \
         ({code} {canonical})</p>\
         <p><a href=\"{up}\">Go to the folder above</a> · <a href=\"/\">Home</a></p>\
         </main></body></html>\n",
        css = assets::STYLE.href(),
        shown = display_name(&shown),
        code = status.as_u16(),
        canonical = status.canonical_reason().unwrap_or("Error"),
        up = html_escape(&folder_above(path)),
    )
}

/// The folder that holds what `path` names (`/a/b/c` and `/a/b/c/` give `/a/b/`),
/// always a path on this site (never `//host/`).
fn folder_above(path: &str) -> String {
    let trimmed = path.trim_end_matches('/');
    let parent = match trimmed.rfind('/') {
        Some(i) => &trimmed[..=i],
        None => "/",
    };
    if parent.starts_with('/') && !parent.starts_with("//") {
        parent.to_owned()
    } else {
        "/".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Request;

    fn parts(method: &str, path: &str, accept: Option<&str>) -> Parts {
        let mut req = Request::builder().method(method).uri(path);
        if let Some(accept) = accept {
            req = req.header(header::ACCEPT, accept);
        }
        req.body(()).expect("request").into_parts().0
    }

    const BROWSER: &str = "text/html,application/xhtml+xml,*/*;q=0.8";

    fn text(response: Response<Body>) -> String {
        use http_body_util::BodyExt as _;
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let bytes = rt
            .block_on(response.into_body().collect())
            .expect("body")
            .to_bytes();
        String::from_utf8(bytes.to_vec()).expect("utf-8")
    }

    #[test]
    fn a_browser_gets_a_styled_page_in_words() {
        let r = respond(
            &parts("GET", "/a/%3Cb%3E/gone.txt", Some(BROWSER)),
            &HttpError::NotFound,
        );
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
        assert_eq!(
            r.headers()[header::CONTENT_TYPE],
            "text/html; charset=utf-8"
        );
        assert_eq!(
            r.headers()[header::CONTENT_SECURITY_POLICY],
            super::super::PAGE_CSP
        );
        let html = text(r);
        assert!(html.contains("<h1>Not found</h1>"), "{html}");
        assert!(html.contains("moved, renamed or deleted"));
        assert!(
            html.contains("<code>/a/&lt;b&gt;/gone.txt</code>"),
            "{html}"
        );
        assert!(html.contains("href=\"/a/%3Cb%3E/\">Go to the folder above"));
        assert!(html.contains(assets::STYLE.href()));
        assert!(!html.contains("<script") && !html.contains(" style="));
    }

    #[test]
    fn a_refused_form_upload_says_why() {
        let r = respond(
            &parts("POST", "/docs/", Some(BROWSER)),
            &HttpError::Write(crate::write::WriteError::IsDirectory),
        );
        assert_eq!(r.status(), StatusCode::CONFLICT);
        let html = text(r);
        assert!(
            html.contains("<p class=\"err\">The target is a directory.</p>"),
            "{html}"
        );
        let r = respond(&parts("POST", "/", Some(BROWSER)), &HttpError::CrossSite);
        assert!(text(r).contains("Cross-site request refused."));
    }

    #[test]
    fn tools_and_scripts_keep_the_text() {
        for (method, accept) in [
            ("GET", None),
            ("GET", Some("*/*")),
            ("PUT", Some(BROWSER)),
            ("GET", Some("application/json")),
        ] {
            let r = respond(&parts(method, "/x", accept), &HttpError::NotFound);
            assert_eq!(
                r.headers()[header::CONTENT_TYPE],
                "text/plain; charset=utf-8",
                "{method} {accept:?}"
            );
        }
    }

    #[test]
    fn the_way_up_stays_on_this_site() {
        assert_eq!(folder_above("/a/b/c"), "/a/b/");
        assert_eq!(folder_above("/a/b/c/"), "/a/b/");
        assert_eq!(folder_above("/x"), "/");
        assert_eq!(folder_above("/"), "/");
        assert_eq!(folder_above("//evil.example/x"), "/");
        assert_eq!(folder_above("x"), "/");
    }

    proptest::proptest! {
        /// Whatever path a peer asks for, the way up is a path on this site.
        #[test]
        fn any_path_leads_up_on_this_site(path in "[/a-z%.:]{0,40}") {
            let up = folder_above(&path);
            proptest::prop_assert!(up.starts_with('/') && !up.starts_with("//"), "{up}");
            proptest::prop_assert!(up.ends_with('/'));
        }
    }
}
