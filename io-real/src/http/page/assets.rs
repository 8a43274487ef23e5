//! The page's stylesheet and script, compiled into the binary and served under names
//! that carry a hash of their bytes (`/.servery/app-<hash>.css`), so a browser may keep
//! them forever (`immutable`) and a new build can never be served a stale copy. The hash
//! and the compressed forms are computed once per process, on first use.

use std::sync::LazyLock;

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderValue, Response, StatusCode, header};
use sha2::{Digest, Sha256};

use crate::http::body::{self, Body};
use crate::http::compress::{self, Coding, Level};

/// Where the assets live; no file under the served root is reachable under this prefix
/// *and* one of the hashed names, which nothing on disk can predict.
pub const PREFIX: &str = "/.servery/";

/// One embedded asset and its precomputed representations.
#[derive(Debug)]
pub struct Asset {
    href: String,
    etag: HeaderValue,
    content_type: &'static str,
    identity: Bytes,
    /// Each coding's bytes, in [`Coding::ALL`] order, when encoding succeeded.
    encoded: Vec<(Coding, Bytes)>,
}

impl Asset {
    fn new(stem: &str, ext: &str, content_type: &'static str, bytes: &'static [u8]) -> Asset {
        let digest = Sha256::digest(bytes);
        let hash: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        let encoded = Coding::ALL
            .into_iter()
            .filter_map(|coding| {
                compress::encode_all(coding, Level::Cached, bytes)
                    .inspect_err(|e| tracing::warn!(error = %e, "cannot encode a page asset"))
                    .ok()
                    .map(|b| (coding, Bytes::from(b)))
            })
            .collect();
        Asset {
            href: format!("{PREFIX}{stem}-{hash}.{ext}"),
            etag: HeaderValue::from_str(&format!("\"{hash}\""))
                .unwrap_or_else(|_| HeaderValue::from_static("\"asset\"")),
            content_type,
            identity: Bytes::from_static(bytes),
            encoded,
        }
    }

    /// The path the page links to.
    pub fn href(&self) -> &str {
        &self.href
    }

    /// The bytes sent for `coding` (identity when `None`).
    pub fn bytes(&self, coding: Option<Coding>) -> Option<&Bytes> {
        match coding {
            None => Some(&self.identity),
            Some(c) => self.encoded.iter().find(|(e, _)| *e == c).map(|(_, b)| b),
        }
    }
}

/// The stylesheet.
pub static STYLE: LazyLock<Asset> = LazyLock::new(|| {
    Asset::new(
        "app",
        "css",
        "text/css; charset=utf-8",
        include_bytes!("../../../assets/app.css"),
    )
});

/// The script.
pub static SCRIPT: LazyLock<Asset> = LazyLock::new(|| {
    Asset::new(
        "app",
        "js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../../assets/app.js"),
    )
});

/// Computes every asset's hash and encodings now, so no request pays for it.
pub fn warm() {
    LazyLock::force(&STYLE);
    LazyLock::force(&SCRIPT);
}

/// The asset `path` names, if any.
fn find(path: &str) -> Option<&'static Asset> {
    [&*STYLE, &*SCRIPT]
        .into_iter()
        .find(|asset| asset.href == path)
}

/// The response for a request of an asset's path, or `None` when the path is no asset's
/// (the request then goes on to the file system like any other).
pub fn respond(parts: &Parts, compress: bool) -> Option<Response<Body>> {
    let asset = find(parts.uri.path())?;
    let mut response = Response::new(body::empty());
    let headers = response.headers_mut();
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=31536000, immutable"),
    );
    headers.insert(header::ETAG, asset.etag.clone());
    if compress {
        headers.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    }
    let matches = parts
        .headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|tag| tag.trim().trim_start_matches("W/") == asset.etag);
    if matches {
        *response.status_mut() = StatusCode::NOT_MODIFIED;
        return Some(response);
    }
    let accepted = if compress {
        let joined: Vec<&str> = parts
            .headers
            .get_all(header::ACCEPT_ENCODING)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        compress::negotiate((!joined.is_empty()).then(|| joined.join(",")).as_deref())
    } else {
        Vec::new()
    };
    let (coding, bytes) = accepted
        .into_iter()
        .find_map(|c| asset.bytes(Some(c)).map(|b| (Some(c), b)))
        .unwrap_or((None, &asset.identity));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type),
    );
    if let Some(coding) = coding {
        headers.insert(
            header::CONTENT_ENCODING,
            HeaderValue::from_static(coding.token()),
        );
    }
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
    *response.body_mut() = body::full(bytes.clone());
    Some(response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Request;

    fn parts(path: &str, headers: &[(&str, &str)]) -> Parts {
        let mut req = Request::get(path);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.body(()).map(|r| r.into_parts().0).expect("request")
    }

    #[test]
    fn names_carry_the_hash_of_the_bytes() {
        let css = STYLE.href();
        assert!(
            css.starts_with("/.servery/app-") && css.ends_with(".css"),
            "{css}"
        );
        let hash = &css["/.servery/app-".len()..css.len() - 4];
        let digest = Sha256::digest(include_bytes!("../../../assets/app.css"));
        assert_eq!(hash.len(), 16);
        assert_eq!(
            hash,
            &digest[..8]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        );
        assert_ne!(STYLE.href(), SCRIPT.href());
    }

    #[test]
    fn served_immutable_and_compressed_when_accepted() {
        let response =
            respond(&parts(SCRIPT.href(), &[("accept-encoding", "gzip")]), true).expect("asset");
        assert_eq!(response.status(), StatusCode::OK);
        let h = response.headers();
        assert_eq!(
            h[header::CACHE_CONTROL],
            "public, max-age=31536000, immutable"
        );
        assert_eq!(h[header::CONTENT_ENCODING], "gzip");
        assert_eq!(h[header::CONTENT_TYPE], "text/javascript; charset=utf-8");
        let plain = respond(&parts(STYLE.href(), &[]), true).expect("asset");
        assert!(!plain.headers().contains_key(header::CONTENT_ENCODING));
        assert_eq!(
            plain.headers()[header::CONTENT_LENGTH],
            include_bytes!("../../../assets/app.css")
                .len()
                .to_string()
                .as_str()
        );
        let etag = plain.headers()[header::ETAG]
            .to_str()
            .expect("etag")
            .to_owned();
        let again = respond(&parts(STYLE.href(), &[("if-none-match", &etag)]), true);
        assert_eq!(again.map(|r| r.status()), Some(StatusCode::NOT_MODIFIED));
    }

    #[test]
    fn other_paths_are_not_assets() {
        assert!(respond(&parts("/.servery/app.css", &[]), true).is_none());
        assert!(respond(&parts("/.servery/app-0000000000000000.js", &[]), true).is_none());
        assert!(respond(&parts("/", &[]), true).is_none());
    }

    /// The page's weight budget: both assets together, compressed, stay well below 30 KiB.
    #[test]
    fn assets_stay_small() {
        let gz = |a: &Asset| a.bytes(Some(Coding::Gzip)).map_or(usize::MAX, Bytes::len);
        let total = gz(&STYLE) + gz(&SCRIPT);
        assert!(total < 24 * 1024, "assets weigh {total} bytes gzipped");
    }
}
