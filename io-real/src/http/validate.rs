//! The HTTP/1.1 message rules hyper leaves to the server (RFC 9112 §3.2 and §6.1), checked
//! before a request reaches the site:
//!
//! - an HTTP/1.1 request has exactly one `Host` field, and its value is a valid
//!   `uri-host [ ":" port ]` (possibly empty); HTTP/1.0 may omit it but not repeat it or
//!   send garbage;
//! - `Transfer-Encoding` names only `chunked`, once: hyper decodes chunked framing, but a
//!   request that says `gzip, chunked` would otherwise be stored still gzip-coded, and a
//!   repeated `chunked` makes the framing ambiguous.
//!
//! A refused message is answered and its connection closed (see [`super::error`]); the body,
//! whose framing we do not trust, is never read.

use http::{HeaderMap, Request, Version, header};

/// Why a request message was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MessageError {
    /// HTTP/1.1 without `Host`: 400.
    #[error("missing Host")]
    MissingHost,
    /// More than one `Host` field line: 400.
    #[error("more than one Host")]
    DuplicateHost,
    /// A `Host` value that is not `uri-host [ ":" port ]`: 400.
    #[error("invalid Host")]
    InvalidHost,
    /// `chunked` applied more than once: 400.
    #[error("chunked applied more than once")]
    RepeatedChunked,
    /// A transfer coding other than `chunked`: 501 (RFC 9112 §6.1).
    #[error("unsupported transfer coding")]
    UnsupportedTransferCoding,
    /// A `Content-Length` too large to represent (2^64 − 2 or 2^64 − 1, which hyper keeps
    /// for itself): 413. Noticed below hyper, see `super::length_overflow`.
    #[error("Content-Length larger than the server can take")]
    ContentLengthTooLarge,
}

/// Checks one request's `Host` and `Transfer-Encoding` by the rules above. HTTP/2 carries
/// neither as a message rule (`:authority` and its own framing; the h2 layer checks them).
pub fn check<B>(req: &Request<B>) -> Result<(), MessageError> {
    let version = req.version();
    if version != Version::HTTP_11 && version != Version::HTTP_10 {
        return Ok(());
    }
    check_host(req.headers(), version == Version::HTTP_11)?;
    check_transfer_coding(req.headers())
}

fn check_host(headers: &HeaderMap, required: bool) -> Result<(), MessageError> {
    let mut values = headers.get_all(header::HOST).iter();
    let Some(host) = values.next() else {
        return if required {
            Err(MessageError::MissingHost)
        } else {
            Ok(())
        };
    };
    if values.next().is_some() {
        return Err(MessageError::DuplicateHost);
    }
    if is_valid_host(host.as_bytes()) {
        Ok(())
    } else {
        Err(MessageError::InvalidHost)
    }
}

/// `uri-host [ ":" port ]` of RFC 3986, with `uri-host` an IP literal in brackets or a
/// reg-name / IPv4 address (which reg-name's characters already cover).
fn is_valid_host(value: &[u8]) -> bool {
    let (host, port) = if let Some(rest) = value.strip_prefix(b"[") {
        let Some(close) = rest.iter().position(|&b| b == b']') else {
            return false;
        };
        let literal = &rest[..close];
        let after = &rest[close + 1..];
        let port = match after {
            [] => &[][..],
            [b':', port @ ..] => port,
            _ => return false,
        };
        if literal.is_empty() || !literal.iter().all(|&b| is_ip_literal_char(b)) {
            return false;
        }
        (&[][..], port)
    } else {
        match value.iter().rposition(|&b| b == b':') {
            Some(colon) => (&value[..colon], &value[colon + 1..]),
            None => (value, &[][..]),
        }
    };
    port.iter().all(u8::is_ascii_digit) && is_reg_name(host)
}

fn is_ip_literal_char(b: u8) -> bool {
    // IPv6 (hex digits, colons, an embedded IPv4's dots) and IPvFuture ("v" 1*HEXDIG "."
    // 1*( unreserved / sub-delims / ":" )).
    b.is_ascii_alphanumeric() || b":.-_~!$&'()*+,;=".contains(&b)
}

fn is_reg_name(host: &[u8]) -> bool {
    let mut i = 0;
    while i < host.len() {
        match host[i] {
            b'%' => {
                let hex = host.get(i + 1..i + 3);
                if !hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                    return false;
                }
                i += 3;
            }
            b if b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=".contains(&b) => i += 1,
            _ => return false,
        }
    }
    true
}

fn check_transfer_coding(headers: &HeaderMap) -> Result<(), MessageError> {
    let mut chunked = 0;
    for value in headers.get_all(header::TRANSFER_ENCODING) {
        let Ok(value) = value.to_str() else {
            return Err(MessageError::UnsupportedTransferCoding);
        };
        for coding in value.split(',') {
            // A coding may carry parameters (`name;param=value`); only the name matters.
            let name = coding.split(';').next().unwrap_or_default().trim();
            if name.is_empty() {
                continue; // empty list elements are allowed (RFC 9110 §5.6.1)
            }
            if !name.eq_ignore_ascii_case("chunked") {
                return Err(MessageError::UnsupportedTransferCoding);
            }
            chunked += 1;
        }
    }
    if chunked > 1 {
        return Err(MessageError::RepeatedChunked);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn request(version: Version, headers: &[(&str, &[u8])]) -> Request<()> {
        let mut req = Request::builder().version(version).uri("/");
        for (name, value) in headers {
            req = req.header(*name, http::HeaderValue::from_bytes(value).expect("value"));
        }
        req.body(()).expect("request")
    }

    #[test]
    fn host_is_required_once_and_well_formed_in_http_1_1() {
        let ok = |h: &[u8]| check(&request(Version::HTTP_11, &[("host", h)]));
        for good in [
            &b"example.com"[..],
            b"example.com:8080",
            b"127.0.0.1:8000",
            b"[::1]:8000",
            b"[::1]",
            b"[v1.fe80::a+en1]",
            b"xn--bcher-kva.example",
            b"a%20b",
            b"",
            b"localhost:",
        ] {
            assert_eq!(ok(good), Ok(()), "{}", String::from_utf8_lossy(good));
        }
        for bad in [
            &b"a b/c"[..],
            b"a/b",
            b"user@host",
            b"host:80a",
            b"[::1",
            b"[::1]x",
            b"[]",
            b"%zz",
            b"a\tb",
        ] {
            assert_eq!(
                ok(bad),
                Err(MessageError::InvalidHost),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(
            check(&request(Version::HTTP_11, &[])),
            Err(MessageError::MissingHost)
        );
        assert_eq!(
            check(&request(
                Version::HTTP_11,
                &[("host", b"a"), ("host", b"a")]
            )),
            Err(MessageError::DuplicateHost)
        );
        assert_eq!(check(&request(Version::HTTP_10, &[])), Ok(()));
        assert_eq!(
            check(&request(Version::HTTP_10, &[("host", b"a b")])),
            Err(MessageError::InvalidHost)
        );
        assert_eq!(check(&request(Version::HTTP_2, &[])), Ok(()));
    }

    #[test]
    fn only_a_single_chunked_transfer_coding_is_accepted() {
        let te = |values: &[&[u8]]| {
            let mut headers: Vec<(&str, &[u8])> = vec![("host", b"h")];
            headers.extend(values.iter().map(|v| ("transfer-encoding", *v)));
            check(&request(Version::HTTP_11, &headers))
        };
        assert_eq!(te(&[]), Ok(()));
        assert_eq!(te(&[b"chunked"]), Ok(()));
        assert_eq!(te(&[b"Chunked"]), Ok(()));
        assert_eq!(te(&[b" , chunked"]), Ok(()));
        assert_eq!(
            te(&[b"gzip, chunked"]),
            Err(MessageError::UnsupportedTransferCoding)
        );
        assert_eq!(
            te(&[b"identity"]),
            Err(MessageError::UnsupportedTransferCoding)
        );
        assert_eq!(
            te(&[b"chunked", b"chunked"]),
            Err(MessageError::RepeatedChunked)
        );
        assert_eq!(
            te(&[b"chunked, chunked"]),
            Err(MessageError::RepeatedChunked)
        );
    }

    proptest! {
        /// Arbitrary field values never panic, and whatever is accepted as a Host is made
        /// only of the characters the grammar allows.
        #[test]
        fn arbitrary_field_values_never_panic(host in proptest::collection::vec(0x20u8..0x7f, 0..40),
                                              te in proptest::collection::vec(0x20u8..0x7f, 0..40)) {
            let _ = check(&request(Version::HTTP_11, &[("host", &host), ("transfer-encoding", &te)]));
            let forbidden: &[u8] = b" /?#@\"<>\\^`{|}";
            if is_valid_host(&host) {
                let clean = !host.iter().any(|b| forbidden.contains(b));
                prop_assert!(clean, "accepted {:?}", String::from_utf8_lossy(&host));
            }
        }
    }
}
