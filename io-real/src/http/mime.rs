//! Content types and the security headers every response carries.
//!
//! A small built-in table instead of `mime_guess`: browsers only act on a handful of types
//! (HTML, CSS, scripts, images, media, fonts, wasm), `nosniff` makes a wrong guess fail safe
//! (as a download), and a table we own cannot change behaviour under a dependency update.
//! Anything unknown is `application/octet-stream`.

use http::{HeaderMap, HeaderValue, header};

const OCTET_STREAM: &str = "application/octet-stream";

/// The longest extension [`content_type`] knows ("webmanifest").
const LONGEST_EXTENSION: usize = 11;

/// The `Content-Type` for a file name, by extension (case-insensitive). Every response
/// for a file asks, so this is a `match` on a lower-cased copy on the stack rather than a
/// scan of a table.
pub fn content_type(file_name: &str) -> &'static str {
    let ext = match file_name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => ext,
        _ => return OCTET_STREAM,
    };
    let mut buf = [0u8; LONGEST_EXTENSION];
    let Some(lower) = buf.get_mut(..ext.len()) else {
        return OCTET_STREAM;
    };
    lower.copy_from_slice(ext.as_bytes());
    lower.make_ascii_lowercase();
    match &*lower {
        b"html" | b"htm" => "text/html; charset=utf-8",
        b"css" => "text/css; charset=utf-8",
        b"js" | b"mjs" => "text/javascript; charset=utf-8",
        b"json" | b"map" => "application/json",
        b"webmanifest" => "application/manifest+json",
        b"txt" => "text/plain; charset=utf-8",
        b"md" => "text/markdown; charset=utf-8",
        b"csv" => "text/csv; charset=utf-8",
        b"xml" => "application/xml",
        b"svg" => "image/svg+xml",
        b"png" => "image/png",
        b"jpg" | b"jpeg" => "image/jpeg",
        b"gif" => "image/gif",
        b"webp" => "image/webp",
        b"avif" => "image/avif",
        b"ico" => "image/vnd.microsoft.icon",
        b"bmp" => "image/bmp",
        b"pdf" => "application/pdf",
        b"wasm" => "application/wasm",
        b"woff" => "font/woff",
        b"woff2" => "font/woff2",
        b"ttf" => "font/ttf",
        b"otf" => "font/otf",
        b"mp4" => "video/mp4",
        b"webm" => "video/webm",
        b"mp3" => "audio/mpeg",
        b"ogg" => "audio/ogg",
        b"wav" => "audio/wav",
        b"flac" => "audio/flac",
        b"zip" => "application/zip",
        b"gz" => "application/gzip",
        b"tar" => "application/x-tar",
        b"zst" => "application/zstd",
        _ => OCTET_STREAM,
    }
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

/// The policy of a user's file a browser would run, on a site others can write
/// (decision 0047): rendered, but with no script, form, plugin, pop-up or navigation of
/// the page that opened it, and in an origin of its own (no `allow-same-origin`), so it
/// can neither read the site nor write to it as the site.
pub const SANDBOX_CSP: &str = "sandbox";

/// Whether a browser runs content of this type when it opens it: HTML, and every XML
/// type (XHTML and SVG run scripts; any XML document can pull in XSLT that makes HTML).
/// Other types are shown inert (images, media, text), handed to a viewer without the
/// site's origin (PDF), or, under `nosniff`, downloaded.
pub fn is_active(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence == "text/html"
        || essence.ends_with("/xml")
        || essence.ends_with("+xml")
        || essence == "text/xsl"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_types_a_browser_runs_are_active() {
        for (name, active) in [
            ("evil.html", true),
            ("evil.HTM", true),
            ("evil.svg", true),
            ("feed.xml", true),
            ("a.txt", false),
            ("a.js", false),
            ("a.css", false),
            ("a.png", false),
            ("a.pdf", false),
            ("a.json", false),
            ("a.unknown", false),
        ] {
            assert_eq!(is_active(content_type(name)), active, "{name}");
        }
        assert!(is_active("application/XHTML+XML; charset=utf-8"));
        assert!(is_active("text/xsl"));
        assert!(!is_active("application/manifest+json"));
    }

    #[test]
    fn by_extension() {
        assert_eq!(content_type("index.html"), "text/html; charset=utf-8");
        assert_eq!(content_type("A.PNG"), "image/png");
        assert_eq!(content_type("archive.tar.gz"), "application/gzip");
        assert_eq!(content_type("noext"), "application/octet-stream");
        assert_eq!(content_type(".bashrc"), "application/octet-stream");
        assert_eq!(content_type("x.unknown"), "application/octet-stream");
        assert_eq!(content_type("trailing."), "application/octet-stream");
        assert_eq!(content_type("app.WebManifest"), "application/manifest+json");
        assert_eq!(content_type("x.webmanifests"), "application/octet-stream");
        assert_eq!(content_type("x.é"), "application/octet-stream");
    }

    #[test]
    fn every_known_type_is_a_valid_header_value() {
        // Responses build the header with `HeaderValue::from_static`, which panics on a
        // byte a header may not hold.
        let names = [
            "a.html",
            "a.css",
            "a.js",
            "a.json",
            "a.webmanifest",
            "a.txt",
            "a.md",
            "a.csv",
            "a.xml",
            "a.svg",
            "a.png",
            "a.jpg",
            "a.gif",
            "a.webp",
            "a.avif",
            "a.ico",
            "a.bmp",
            "a.pdf",
            "a.wasm",
            "a.woff",
            "a.woff2",
            "a.ttf",
            "a.otf",
            "a.mp4",
            "a.webm",
            "a.mp3",
            "a.ogg",
            "a.wav",
            "a.flac",
            "a.zip",
            "a.gz",
            "a.tar",
            "a.zst",
            "a",
        ];
        for name in names {
            let ty = content_type(name);
            assert!(HeaderValue::from_str(ty).is_ok(), "{name}: {ty}");
            assert!(name == "a" || ty != OCTET_STREAM, "{name} is not known");
        }
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
