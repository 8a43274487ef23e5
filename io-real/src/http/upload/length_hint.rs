//! The length a client announces for a body it sends without `Content-Length`: Finder and
//! davfs2 send `X-Expected-Entity-Length`, ownCloud and Nextcloud clients `OC-Total-Length`.
//! A hint only sizes the upload's first reservation (decision 0064); the body may still be
//! shorter or longer, within `--max-upload-size`. A value that is not a plain decimal
//! number is no hint at all.

use http::HeaderMap;

/// The headers read, in order of preference.
const HINTS: [&str; 2] = ["x-expected-entity-length", "oc-total-length"];

/// The first well-formed length hint in `headers`, if any.
pub(super) fn length_hint(headers: &HeaderMap) -> Option<u64> {
    HINTS
        .iter()
        .filter_map(|name| headers.get(*name))
        .find_map(|value| parse(value.as_bytes()))
}

/// A decimal number of bytes: ASCII digits only (no sign, no spaces inside), at most what
/// a `u64` holds.
fn parse(value: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(value).ok()?.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().expect("value"));
        }
        h
    }

    #[test]
    fn either_header_is_read_and_a_malformed_one_is_ignored() {
        assert_eq!(
            length_hint(&headers(&[("X-Expected-Entity-Length", "10485760")])),
            Some(10 << 20)
        );
        assert_eq!(
            length_hint(&headers(&[("OC-Total-Length", " 42 ")])),
            Some(42)
        );
        assert_eq!(
            length_hint(&headers(&[
                ("X-Expected-Entity-Length", "-1"),
                ("OC-Total-Length", "7")
            ])),
            Some(7)
        );
        for bad in ["", "+5", "1e6", "0x10", "5 5", "99999999999999999999999"] {
            assert_eq!(
                length_hint(&headers(&[("OC-Total-Length", bad)])),
                None,
                "{bad:?}"
            );
        }
        assert_eq!(length_hint(&HeaderMap::new()), None);
    }

    proptest! {
        /// Any header value: a number exactly when it is digits that fit, never a panic.
        #[test]
        fn any_value_parses_to_its_number_or_to_nothing(value in proptest::collection::vec(any::<u8>(), 0..32)) {
            let parsed = parse(&value);
            let text = String::from_utf8_lossy(&value);
            let digits = text.trim();
            let expected = (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) && std::str::from_utf8(&value).is_ok())
                .then(|| digits.parse::<u64>().ok())
                .flatten();
            prop_assert_eq!(parsed, expected);
        }
    }
}
