//! Comma-separated token lists in header fields (`Connection`, `Upgrade`; RFC 9110 §5.6.1):
//! any number of fields, each a list, tokens compared without regard to case.

use hyper::header::{HeaderMap, HeaderName};

/// Whether any `name` field of `headers` lists `token`.
pub(crate) fn has_token(headers: &HeaderMap, name: HeaderName, token: &str) -> bool {
    headers.get_all(name).iter().any(|value| {
        value
            .to_str()
            .is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::CONNECTION;

    #[test]
    fn a_token_is_found_in_any_field_and_any_place_of_its_list() {
        let mut h = HeaderMap::new();
        assert!(!has_token(&h, CONNECTION, "close"));
        h.append(CONNECTION, "keep-alive".parse().expect("value"));
        h.append(CONNECTION, "TE ,  Close".parse().expect("value"));
        assert!(has_token(&h, CONNECTION, "close"));
        assert!(has_token(&h, CONNECTION, "te"));
        assert!(!has_token(&h, CONNECTION, "upgrade"));
        assert!(!has_token(&h, CONNECTION, "clos"));
    }
}
