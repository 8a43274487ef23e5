//! Content types and the security headers every response carries.
//!
//! A small built-in table instead of `mime_guess`: browsers only act on a handful of types
//! (HTML, CSS, scripts, images, media, fonts, wasm), `nosniff` makes a wrong guess fail safe
//! (as a download), and a table we own cannot change behaviour under a dependency update.
//! Anything unknown is `application/octet-stream`.

use http::{HeaderMap, HeaderValue, header};

const TABLE: &[(&str, &str)] = &[
    ("html", "text/html; charset=utf-8"),
    ("htm", "text/html; charset=utf-8"),
    ("css", "text/css; charset=utf-8"),
    ("js", "text/javascript; charset=utf-8"),
    ("mjs", "text/javascript; charset=utf-8"),
    ("json", "application/json"),
    ("map", "application/json"),
    ("webmanifest", "application/manifest+json"),
    ("txt", "text/plain; charset=utf-8"),
    ("md", "text/markdown; charset=utf-8"),
    ("csv", "text/csv; charset=utf-8"),
    ("xml", "application/xml"),
    ("svg", "image/svg+xml"),
    ("png", "image/png"),
    ("jpg", "image/jpeg"),
    ("jpeg", "image/jpeg"),
    ("gif", "image/gif"),
    ("webp", "image/webp"),
    ("avif", "image/avif"),
    ("ico", "image/vnd.microsoft.icon"),
    ("bmp", "image/bmp"),
    ("pdf", "application/pdf"),
    ("wasm", "application/wasm"),
    ("woff", "font/woff"),
    ("woff2", "font/woff2"),
    ("ttf", "font/ttf"),
    ("otf", "font/otf"),
    ("mp4", "video/mp4"),
    ("webm", "video/webm"),
    ("mp3", "audio/mpeg"),
    ("ogg", "audio/ogg"),
    ("wav", "audio/wav"),
    ("flac", "audio/flac"),
    ("zip", "application/zip"),
    ("gz", "application/gzip"),
    ("tar", "application/x-tar"),
    ("zst", "application/zstd"),
];

/// The `Content-Type` for a file name, by extension (case-insensitive).
pub fn content_type(file_name: &str) -> &'static str {
    let ext = match file_name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => ext,
        _ => return "application/octet-stream",
    };
    TABLE
        .iter()
        .find(|(known, _)| known.eq_ignore_ascii_case(ext))
        .map_or("application/octet-stream", |(_, ty)| ty)
}

/// Headers on every response. `nosniff` stops browsers from promoting a served file to a
/// script or a page; the others limit framing and referrer leakage of served URLs.
pub fn add_security_headers(headers: &mut HeaderMap) {
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::X_FRAME_OPTIONS,
        HeaderValue::from_static("SAMEORIGIN"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
}

/// The CSP for pages servery generates itself (listings, errors): no scripts at all, so an
/// escaping bug in a listing still cannot run anything. Served files do not get it, since it
/// would break the user's own pages.
pub const GENERATED_PAGE_CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src data:";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_extension() {
        assert_eq!(content_type("index.html"), "text/html; charset=utf-8");
        assert_eq!(content_type("A.PNG"), "image/png");
        assert_eq!(content_type("archive.tar.gz"), "application/gzip");
        assert_eq!(content_type("noext"), "application/octet-stream");
        assert_eq!(content_type(".bashrc"), "application/octet-stream");
        assert_eq!(content_type("x.unknown"), "application/octet-stream");
        assert_eq!(content_type("trailing."), "application/octet-stream");
    }

    #[test]
    fn security_headers() {
        let mut headers = HeaderMap::new();
        add_security_headers(&mut headers);
        assert_eq!(
            headers
                .get(header::X_CONTENT_TYPE_OPTIONS)
                .map(|v| v.as_bytes()),
            Some(&b"nosniff"[..])
        );
        assert!(headers.contains_key(header::X_FRAME_OPTIONS));
    }
}
