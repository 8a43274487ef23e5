//! The page's stylesheet and script, compiled into the binary and served under names
//! that carry a hash of their bytes (`/.servery/app-<hash>.css`), so a browser may keep
//! them forever (`immutable`) and a new build can never be served a stale copy.
//!
//! Nothing of them is computed before it is needed (decision 0124): the hash when a page
//! first links to them, each coding's bytes when a request first accepts that coding (on
//! the blocking pool, once per process). A worker that serves no page — an application, a
//! proxy, files fetched by name — never runs the encoders nor reads the assets' bytes,
//! which at start-up cost every worker the encoders' code and tables and a heap arena.

use std::sync::OnceLock;

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderValue, Response, StatusCode, header};
use sha2::{Digest, Sha256};

use crate::http::body::{self, Body};
use crate::http::compress::{self, Coding, Level};

/// Where the assets live; no file under the served root is reachable under this prefix
/// *and* one of the hashed names, which nothing on disk can predict.
pub const PREFIX: &str = "/.servery/";

/// One embedded asset; its name and its encodings are made on first use.
#[derive(Debug)]
pub struct Asset {
    stem: &'static str,
    ext: &'static str,
    content_type: &'static str,
    identity: &'static [u8],
    named: OnceLock<Named>,
    /// Each coding's bytes, in [`Coding::ALL`] order, once asked for (`None`: the
    /// encoder failed, and identity is sent).
    encoded: [OnceLock<Option<Bytes>>; Coding::ALL.len()],
}

/// What the hash of an asset's bytes names.
#[derive(Debug)]
struct Named {
    href: String,
    etag: HeaderValue,
}

impl Asset {
    const fn new(
        stem: &'static str,
        ext: &'static str,
        content_type: &'static str,
        identity: &'static [u8],
    ) -> Asset {
        Asset {
            stem,
            ext,
            content_type,
            identity,
            named: OnceLock::new(),
            encoded: [OnceLock::new(), OnceLock::new(), OnceLock::new()],
        }
    }

    fn named(&self) -> &Named {
        self.named.get_or_init(|| {
            let digest = Sha256::digest(self.identity);
            let hash: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
            Named {
                href: format!("{PREFIX}{}-{hash}.{}", self.stem, self.ext),
                etag: HeaderValue::from_str(&format!("\"{hash}\""))
                    .unwrap_or_else(|_| HeaderValue::from_static("\"asset\"")),
            }
        })
    }

    /// The path the page links to.
    pub fn href(&self) -> &str {
        &self.named().href
    }

    fn slot(&self, coding: Coding) -> &OnceLock<Option<Bytes>> {
        let rank = Coding::ALL.iter().position(|&c| c == coding).unwrap_or(0);
        &self.encoded[rank]
    }

    /// `coding`'s bytes, encoded now if no request asked for them before.
    fn encode(&self, coding: Coding) -> Option<&Bytes> {
        self.slot(coding)
            .get_or_init(|| {
                let bytes = compress::encode_all(coding, Level::Cached, self.identity)
                    .inspect_err(|e| tracing::warn!(error = %e, "cannot encode a page asset"))
                    .ok()
                    .map(Bytes::from);
                // Once per asset, coding and process: what shows (at debug) that a worker
                // encodes only what a request asked for, and nothing at start-up.
                if let Some(b) = &bytes {
                    tracing::debug!(
                        asset = self.stem,
                        ext = self.ext,
                        coding = coding.extension(),
                        bytes = b.len(),
                        "encoded a page asset"
                    );
                }
                bytes
            })
            .as_ref()
    }

    /// `coding`'s bytes, encoded on the blocking pool if no request asked for them
    /// before (a runtime thread never runs an encoder); in place without a runtime.
    async fn encoded(&'static self, coding: Coding) -> Option<&'static Bytes> {
        if let Some(done) = self.slot(coding).get() {
            return done.as_ref();
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            // A failed task leaves the slot empty: it is encoded in place below.
            let _ = runtime
                .spawn_blocking(move || {
                    self.encode(coding);
                })
                .await;
        }
        self.encode(coding)
    }
}

/// The stylesheet.
pub static STYLE: Asset = Asset::new(
    "app",
    "css",
    "text/css; charset=utf-8",
    include_bytes!("../../../assets/app.css"),
);

/// The script.
pub static SCRIPT: Asset = Asset::new(
    "app",
    "js",
    "text/javascript; charset=utf-8",
    include_bytes!("../../../assets/app.js"),
);

/// The asset `path` names, if any.
fn find(path: &str) -> Option<&'static Asset> {
    [&STYLE, &SCRIPT]
        .into_iter()
        .find(|asset| asset.href() == path)
}

/// The response for a request of an asset's path, or `None` when the path is no asset's
/// (the request then goes on to the file system like any other).
pub async fn respond(parts: &Parts, compress: bool) -> Option<Response<Body>> {
    let asset = find(parts.uri.path())?;
    let etag = &asset.named().etag;
    let mut response = Response::new(body::empty());
    let headers = response.headers_mut();
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=31536000, immutable"),
    );
    headers.insert(header::ETAG, etag.clone());
    if compress {
        headers.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    }
    let matches = parts
        .headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|tag| tag.trim().trim_start_matches("W/") == etag);
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
    let mut chosen = None;
    for coding in accepted {
        if let Some(bytes) = asset.encoded(coding).await {
            chosen = Some((coding, bytes.clone()));
            break;
        }
    }
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type),
    );
    let bytes = match chosen {
        Some((coding, bytes)) => {
            headers.insert(
                header::CONTENT_ENCODING,
                HeaderValue::from_static(coding.token()),
            );
            bytes
        }
        None => Bytes::from_static(asset.identity),
    };
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
    *response.body_mut() = body::full(bytes);
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

    #[tokio::test]
    async fn served_immutable_and_compressed_when_accepted() {
        let response = respond(&parts(SCRIPT.href(), &[("accept-encoding", "gzip")]), true)
            .await
            .expect("asset");
        assert_eq!(response.status(), StatusCode::OK);
        let h = response.headers();
        assert_eq!(
            h[header::CACHE_CONTROL],
            "public, max-age=31536000, immutable"
        );
        assert_eq!(h[header::CONTENT_ENCODING], "gzip");
        assert_eq!(h[header::CONTENT_TYPE], "text/javascript; charset=utf-8");
        let plain = respond(&parts(STYLE.href(), &[]), true)
            .await
            .expect("asset");
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
        let again = respond(&parts(STYLE.href(), &[("if-none-match", &etag)]), true).await;
        assert_eq!(again.map(|r| r.status()), Some(StatusCode::NOT_MODIFIED));
    }

    #[tokio::test]
    async fn other_paths_are_not_assets() {
        assert!(
            respond(&parts("/.servery/app.css", &[]), true)
                .await
                .is_none()
        );
        assert!(
            respond(&parts("/.servery/app-0000000000000000.js", &[]), true)
                .await
                .is_none()
        );
        assert!(respond(&parts("/", &[]), true).await.is_none());
    }

    /// Memory a feature needs appears when it is used (decision 0124): naming an asset
    /// encodes nothing, and a request encodes the one coding it accepts.
    #[tokio::test]
    async fn encodings_are_made_when_first_accepted_and_only_those() {
        static FRESH: Asset = Asset::new(
            "fresh",
            "css",
            "text/css; charset=utf-8",
            include_bytes!("../../../assets/app.css"),
        );
        let made = |coding| FRESH.slot(coding).get().is_some();
        assert!(FRESH.href().starts_with("/.servery/fresh-"));
        assert!(
            Coding::ALL.into_iter().all(|c| !made(c)),
            "naming the asset encoded it"
        );
        let bytes = FRESH.encoded(Coding::Brotli).await.expect("encoded");
        assert_eq!(
            decode_brotli(bytes),
            include_bytes!("../../../assets/app.css")
        );
        assert!(made(Coding::Brotli), "the accepted coding is kept");
        assert!(
            !made(Coding::Gzip) && !made(Coding::Zstd),
            "a coding no request accepted was encoded"
        );
    }

    fn decode_brotli(bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        brotli::BrotliDecompress(&mut &bytes[..], &mut out).expect("brotli");
        out
    }

    /// The page's weight budget: both assets together, compressed, stay well below 30 KiB.
    #[test]
    fn assets_stay_small() {
        let gz = |a: &Asset| a.encode(Coding::Gzip).map_or(usize::MAX, Bytes::len);
        let total = gz(&STYLE) + gz(&SCRIPT);
        assert!(total < 24 * 1024, "assets weigh {total} bytes gzipped");
    }
}
