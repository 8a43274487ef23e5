//! The opening handshake (RFC 6455 §4.2): checked before the application sees it.

use base64::Engine as _;
use bytes::Bytes;
use http::request::Parts;
use http::{HeaderValue, Method, Response, StatusCode, header};

use crate::http::body::{self, Body};
pub(super) use crate::http::has_token;

/// The key RFC 6455 §1.3 appends to `Sec-WebSocket-Key` for the accept value.
const ACCEPT_GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// Why a handshake is refused before the application sees it.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// 400: not a WebSocket opening handshake (RFC 6455 §4.2.1).
    Malformed(&'static str),
    /// 426 with `Sec-WebSocket-Version: 13`: a version this server does not speak.
    Version,
}

/// The `Sec-WebSocket-Accept` value for a valid opening handshake.
pub(super) fn check_handshake(parts: &Parts) -> Result<String, Refusal> {
    if parts.method != Method::GET {
        return Err(Refusal::Malformed("a WebSocket opens with GET"));
    }
    if !has_token(&parts.headers, header::CONNECTION, "upgrade") {
        return Err(Refusal::Malformed("Connection does not name upgrade"));
    }
    let version = parts.headers.get(header::SEC_WEBSOCKET_VERSION);
    if version.is_none_or(|v| v.as_bytes().trim_ascii() != b"13") {
        return Err(Refusal::Version);
    }
    let mut keys = parts.headers.get_all(header::SEC_WEBSOCKET_KEY).iter();
    let (Some(key), None) = (keys.next(), keys.next()) else {
        return Err(Refusal::Malformed("one Sec-WebSocket-Key is required"));
    };
    let key = key.as_bytes().trim_ascii();
    let decoded = base64::engine::general_purpose::STANDARD.decode(key);
    if decoded.map(|k| k.len()) != Ok(16) {
        return Err(Refusal::Malformed(
            "Sec-WebSocket-Key is not 16 bytes in base64",
        ));
    }
    Ok(accept_key(key))
}

/// RFC 6455 §4.2.2: base64 of the SHA-1 of the key and the GUID.
fn accept_key(key: &[u8]) -> String {
    let mut input = Vec::with_capacity(key.len() + ACCEPT_GUID.len());
    input.extend_from_slice(key);
    input.extend_from_slice(ACCEPT_GUID.as_bytes());
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, &input);
    base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
}

pub(super) fn refused(refusal: &Refusal) -> Response<Body> {
    let (status, text) = match refusal {
        Refusal::Malformed(why) => (StatusCode::BAD_REQUEST, *why),
        Refusal::Version => (StatusCode::UPGRADE_REQUIRED, "WebSocket version 13 only"),
    };
    let mut response = Response::new(body::full(Bytes::from(format!("{text}\n"))));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if *refusal == Refusal::Version {
        headers.insert(
            header::SEC_WEBSOCKET_VERSION,
            HeaderValue::from_static("13"),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Version;

    #[test]
    fn the_accept_key_is_rfc_6455s_example() {
        // RFC 6455 §1.3.
        assert_eq!(
            accept_key(b"dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    fn request(headers: &[(&str, &str)]) -> Parts {
        let mut builder = http::Request::get("/ws").version(Version::HTTP_11);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(()).expect("a request").into_parts().0
    }

    const GOOD: [(&str, &str); 4] = [
        ("upgrade", "websocket"),
        ("connection", "keep-alive, Upgrade"),
        ("sec-websocket-version", "13"),
        ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ];

    #[test]
    fn a_valid_handshake_is_answered_with_its_key() {
        assert_eq!(
            check_handshake(&request(&GOOD)),
            Ok("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=".into())
        );
    }

    #[test]
    fn a_handshake_missing_any_part_is_refused() {
        for skip in 1..GOOD.len() {
            let headers: Vec<_> = GOOD
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != skip)
                .map(|(_, h)| *h)
                .collect();
            assert!(
                check_handshake(&request(&headers)).is_err(),
                "without {skip}"
            );
        }
        let mut old = GOOD;
        old[2] = ("sec-websocket-version", "8");
        assert_eq!(check_handshake(&request(&old)), Err(Refusal::Version));
        let mut short = GOOD;
        short[3] = ("sec-websocket-key", "c2hvcnQ=");
        assert!(matches!(
            check_handshake(&request(&short)),
            Err(Refusal::Malformed(_))
        ));
        let mut post = request(&GOOD);
        post.method = Method::POST;
        assert!(check_handshake(&post).is_err());
    }

    proptest::proptest! {
        /// Whatever a peer puts in the handshake's headers, the check answers (never
        /// panics), and it accepts exactly the keys that are 16 bytes in base64.
        #[test]
        fn any_handshake_headers_get_an_answer(
            upgrade in "[ -~]{0,40}",
            connection in "[ -~]{0,40}",
            version in "[ -~]{0,6}",
            key in "[ -~]{0,40}",
            nonce in proptest::array::uniform16(proptest::num::u8::ANY),
        ) {
            let _ = check_handshake(&request(&[
                ("upgrade", &upgrade),
                ("connection", &connection),
                ("sec-websocket-version", &version),
                ("sec-websocket-key", &key),
            ]));
            let good = base64::engine::general_purpose::STANDARD.encode(nonce);
            let mut headers = GOOD;
            headers[3] = ("sec-websocket-key", &good);
            proptest::prop_assert_eq!(
                check_handshake(&request(&headers)),
                Ok(accept_key(good.as_bytes()))
            );
        }
    }
}
