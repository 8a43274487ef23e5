//! Validators and conditional-request evaluation (RFC 9110 §8.8 and §13).
//!
//! The ETag is derived from `(inode, length, mtime in nanoseconds)` and is sent as a
//! *strong* tag: any write that changes the bytes changes the size or the nanosecond mtime
//! on every file system we serve from, and an atomic replace (the way servery publishes
//! uploads) changes the inode. Hashing content would be stronger still but costs a full read
//! per request; that belongs to `Repr-Digest`, not to the validator.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderValue, Method, header};

/// The validators of one representation. Both field values are built once, when the file
/// is opened (or its cache entry made), so a response clones them (a reference count)
/// instead of formatting a tag and a date each time. The default (empty) value exists only
/// so a response can move a file's validators out of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validators {
    /// The `ETag` field value: the opaque tag in quotes.
    etag: HeaderValue,
    last_modified: HeaderValue,
    modified_secs: u64,
}

impl Default for Validators {
    fn default() -> Self {
        Self {
            etag: HeaderValue::from_static("\"\""),
            last_modified: HeaderValue::from_static(""),
            modified_secs: 0,
        }
    }
}

impl Validators {
    /// Builds validators from file identity; `mtime` before the epoch counts as the epoch.
    pub fn new(inode: u64, len: u64, mtime: SystemTime) -> Self {
        let since_epoch = mtime.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
        // Built by hand rather than with `format!`: every file opened makes one, and the
        // formatting machinery (plus the string growing as it writes) showed up in profiles.
        let mut etag = String::with_capacity(1 + 16 + 1 + 16 + 1 + 32 + 1);
        etag.push('"');
        push_hex(&mut etag, u128::from(inode));
        etag.push('-');
        push_hex(&mut etag, u128::from(len));
        etag.push('-');
        push_hex(&mut etag, since_epoch.as_nanos());
        etag.push('"');
        let modified_secs = since_epoch.as_secs();
        let last_modified =
            httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(modified_secs));
        Self {
            etag: field_value(etag),
            last_modified: field_value(last_modified),
            modified_secs,
        }
    }

    /// Builds validators from an open file's metadata.
    pub fn from_metadata(meta: &std::fs::Metadata) -> Self {
        #[cfg(unix)]
        let inode = std::os::unix::fs::MetadataExt::ino(meta);
        // Elsewhere there is no cheap stable identity; length and mtime still cover writes.
        #[cfg(not(unix))]
        let inode = 0;
        Self::new(inode, meta.len(), meta.modified().unwrap_or(UNIX_EPOCH))
    }

    /// Builds validators from cap-std metadata (what the write path and WebDAV hold).
    pub fn of(meta: &cap_std::fs::Metadata) -> Self {
        use cap_std::fs::MetadataExt;
        let modified = meta.modified().map_or(UNIX_EPOCH, |t| t.into_std());
        Self::new(meta.ino(), meta.len(), modified)
    }

    /// The validators of a coded representation of the same file: the same dates, and an
    /// ETag made distinct by the coding's suffix (`"<etag>-zst"`), so `If-None-Match`
    /// matches only the representation the client actually holds.
    pub fn with_coding(&self, suffix: &str) -> Self {
        let opaque = String::from_utf8_lossy(self.opaque());
        Self {
            etag: field_value(format!("\"{opaque}-{suffix}\"")),
            last_modified: self.last_modified.clone(),
            modified_secs: self.modified_secs,
        }
    }

    /// The `ETag` field value, quoted.
    pub fn etag(&self) -> HeaderValue {
        self.etag.clone()
    }

    /// The `Last-Modified` field value.
    pub fn last_modified(&self) -> HeaderValue {
        self.last_modified.clone()
    }

    /// The tag without its quotes.
    fn opaque(&self) -> &[u8] {
        let quoted = self.etag.as_bytes();
        quoted
            .get(1..quoted.len().saturating_sub(1))
            .unwrap_or_default()
    }
}

/// A field value from text this module built: hexadecimal digits, dashes, quotes, an HTTP
/// date and a coding token are all visible ASCII, so the conversion cannot fail; an empty
/// value stands in should that ever change.
fn field_value(text: String) -> HeaderValue {
    HeaderValue::from_maybe_shared(bytes::Bytes::from(text))
        .unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// Appends `value` in lower-case hexadecimal without leading zeros, as `{:x}` writes it.
fn push_hex(out: &mut String, value: u128) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut buf = [0u8; 32];
    let mut at = buf.len();
    let mut rest = value;
    loop {
        at -= 1;
        buf[at] = DIGITS[(rest & 0xf) as usize];
        rest >>= 4;
        if rest == 0 {
            break;
        }
    }
    out.extend(buf[at..].iter().map(|&b| char::from(b)));
}

pub use servery_core::precondition::Precondition;
use servery_core::precondition::{
    self as ladder, Conditions, Current, IfRange, MethodKind, TagField,
};

impl Validators {
    /// These validators as the core's ladder sees them.
    fn current(&self) -> Current<'_> {
        Current {
            opaque: self.opaque(),
            modified_secs: Some(self.modified_secs),
        }
    }
}

/// Evaluates the RFC 9110 §13.2.2 ladder (the core's [`ladder::evaluate`]) for a request
/// on an existing representation.
pub fn evaluate(method: &Method, headers: &HeaderMap, v: &Validators) -> Precondition {
    ladder::evaluate(kind(method), &conditions(headers), Some(v.current()))
}

/// Evaluates the ladder for a GET or HEAD of a representation known by its tag alone
/// (`opaque`, without quotes): a generated listing, which has no modification date, so
/// date conditions are ignored.
pub fn evaluate_tag(method: &Method, headers: &HeaderMap, opaque: &[u8]) -> Precondition {
    let current = Current {
        opaque,
        modified_secs: None,
    };
    ladder::evaluate(kind(method), &conditions(headers), Some(current))
}

/// Whether a write may go ahead: `If-Match`, `If-None-Match` and `If-Unmodified-Since`
/// against what the target is now (`None`: nothing there). Writers call this while they
/// hold the target's lease, so no other writer can change it in between.
pub fn write_allowed(conditions: &Conditions<'_>, current: Option<&Validators>) -> bool {
    ladder::evaluate(
        MethodKind::Other,
        conditions,
        current.map(Validators::current),
    ) != Precondition::Failed
}

fn kind(method: &Method) -> MethodKind {
    if method == Method::GET {
        MethodKind::Get
    } else if method == Method::HEAD {
        MethodKind::Head
    } else {
        MethodKind::Other
    }
}

/// The request's preconditions, read from its fields. A date field is heeded only when
/// it appears once and parses (RFC 9110 §13.1.3, §13.1.4). Cheap when there are none: no
/// allocation unless a tag field has more than one line.
pub fn conditions(headers: &HeaderMap) -> Conditions<'_> {
    Conditions {
        if_match: tag_field(headers, &header::IF_MATCH),
        if_none_match: tag_field(headers, &header::IF_NONE_MATCH),
        if_unmodified_since: single_date(headers, &header::IF_UNMODIFIED_SINCE),
        if_modified_since: single_date(headers, &header::IF_MODIFIED_SINCE),
        range: headers.contains_key(header::RANGE),
        if_range: if_range(headers),
    }
}

/// The lines of a tag-list field; a line that is not visible ASCII stands as one that
/// names no tag (it matches nothing).
fn tag_field<'a>(headers: &'a HeaderMap, name: &header::HeaderName) -> Option<TagField<'a>> {
    let mut lines = headers
        .get_all(name)
        .iter()
        .map(|value| value.to_str().unwrap_or(""));
    let mut field = TagField::new(lines.next()?);
    for line in lines {
        field.push(line);
    }
    Some(field)
}

/// An HTTP-date from a header that must appear exactly once; anything else is ignored,
/// as seconds since the epoch.
fn single_date(headers: &HeaderMap, name: &header::HeaderName) -> Option<u64> {
    let mut values = headers.get_all(name).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return None;
    };
    parse_date(value)
}

fn parse_date(value: &HeaderValue) -> Option<u64> {
    let date = httpdate::parse_http_date(value.to_str().ok()?.trim()).ok()?;
    Some(date.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()))
}

/// `If-Range`: a tag (parsed by the ladder), a date, or something unusable.
fn if_range(headers: &HeaderMap) -> Option<IfRange<'_>> {
    let mut values = headers.get_all(header::IF_RANGE).iter();
    let value = match (values.next(), values.next()) {
        (None, _) => return None,
        (Some(value), None) => value,
        (Some(_), Some(_)) => return Some(IfRange::Invalid),
    };
    let Ok(text) = value.to_str() else {
        return Some(IfRange::Invalid);
    };
    let trimmed = text.trim();
    if trimmed.starts_with('"') || trimmed.starts_with("W/") {
        return Some(IfRange::Tag(trimmed));
    }
    Some(parse_date(value).map_or(IfRange::Invalid, IfRange::Date))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MTIME_SECS: u64 = 1_700_000_000;

    fn validators() -> Validators {
        Validators::new(0x2a, 100, UNIX_EPOCH + Duration::new(MTIME_SECS, 123))
    }

    fn text(value: &HeaderValue) -> &str {
        value.to_str().expect("visible ASCII")
    }

    fn date(secs: u64) -> String {
        httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs))
    }

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                name.clone(),
                HeaderValue::from_str(value).expect("test header"),
            );
        }
        map
    }

    fn get(pairs: &[(header::HeaderName, &str)]) -> Precondition {
        evaluate(&Method::GET, &headers(pairs), &validators())
    }

    const PROCEED: Precondition = Precondition::Proceed {
        range_applies: true,
    };
    const NO_RANGE: Precondition = Precondition::Proceed {
        range_applies: false,
    };

    #[test]
    fn etag_shape() {
        let v = validators();
        assert_eq!(
            v.etag(),
            format!(
                "\"2a-64-{:x}\"",
                u128::from(MTIME_SECS) * 1_000_000_000 + 123
            )
        );
        assert_eq!(v.last_modified(), date(MTIME_SECS));
        assert_ne!(
            v.etag(),
            Validators::new(0x2a, 100, UNIX_EPOCH + Duration::new(MTIME_SECS, 124)).etag()
        );
    }

    #[test]
    fn hex_is_what_the_formatter_writes() {
        let mut values = vec![0u128, 1, 0xf, 0x10, 0xff, u128::from(u64::MAX), u128::MAX];
        values.extend((0..128).map(|shift| (1u128 << shift) - 1));
        values.extend((0..128).map(|shift| 1u128 << shift));
        for value in values {
            let mut out = String::from("x");
            push_hex(&mut out, value);
            assert_eq!(out, format!("x{value:x}"));
        }
    }

    #[test]
    fn coded_representations_have_their_own_tag() {
        let v = validators();
        let zst = v.with_coding("zst");
        assert_eq!(
            zst.etag(),
            format!("{}-zst\"", text(&v.etag()).trim_end_matches('"'))
        );
        assert_eq!(zst.last_modified(), v.last_modified());
        let inm = |tag: &str, v: &Validators| {
            evaluate(&Method::GET, &headers(&[(header::IF_NONE_MATCH, tag)]), v)
        };
        assert_eq!(inm(text(&zst.etag()), &zst), Precondition::NotModified);
        assert_eq!(
            inm(text(&v.etag()), &zst),
            PROCEED,
            "identity tag does not match coded"
        );
        assert_eq!(
            inm(text(&zst.etag()), &v),
            PROCEED,
            "coded tag does not match identity"
        );
    }

    #[test]
    fn no_conditions_proceed() {
        assert_eq!(get(&[]), PROCEED);
    }

    #[test]
    fn if_match() {
        let etag = text(&validators().etag()).to_owned();
        assert_eq!(get(&[(header::IF_MATCH, &etag)]), PROCEED);
        assert_eq!(get(&[(header::IF_MATCH, "*")]), PROCEED);
        assert_eq!(
            get(&[(header::IF_MATCH, &format!("\"x\", {etag}"))]),
            PROCEED
        );
        assert_eq!(get(&[(header::IF_MATCH, "\"x\"")]), Precondition::Failed);
        // Strong comparison: a weak tag never satisfies If-Match.
        assert_eq!(
            get(&[(header::IF_MATCH, &format!("W/{etag}"))]),
            Precondition::Failed
        );
        assert_eq!(get(&[(header::IF_MATCH, "garbage")]), Precondition::Failed);
        // Second field line is part of the same list.
        assert_eq!(
            get(&[(header::IF_MATCH, "\"x\""), (header::IF_MATCH, &etag)]),
            PROCEED
        );
    }

    #[test]
    fn if_match_takes_precedence_over_if_unmodified_since() {
        let etag = text(&validators().etag()).to_owned();
        let old = date(MTIME_SECS - 10);
        // IUS alone would fail; If-Match present means IUS is not evaluated.
        assert_eq!(
            get(&[(header::IF_UNMODIFIED_SINCE, &old)]),
            Precondition::Failed
        );
        assert_eq!(
            get(&[
                (header::IF_MATCH, &etag),
                (header::IF_UNMODIFIED_SINCE, &old)
            ]),
            PROCEED
        );
        assert_eq!(
            get(&[(header::IF_UNMODIFIED_SINCE, &date(MTIME_SECS))]),
            PROCEED
        );
        assert_eq!(get(&[(header::IF_UNMODIFIED_SINCE, "not a date")]), PROCEED);
    }

    #[test]
    fn if_none_match() {
        let etag = text(&validators().etag()).to_owned();
        assert_eq!(
            get(&[(header::IF_NONE_MATCH, &etag)]),
            Precondition::NotModified
        );
        // Weak comparison: a weak form of our tag matches.
        assert_eq!(
            get(&[(header::IF_NONE_MATCH, &format!("W/{etag}"))]),
            Precondition::NotModified
        );
        assert_eq!(
            get(&[(header::IF_NONE_MATCH, "*")]),
            Precondition::NotModified
        );
        assert_eq!(get(&[(header::IF_NONE_MATCH, "\"other\"")]), PROCEED);
        assert_eq!(get(&[(header::IF_NONE_MATCH, "garbage")]), PROCEED);
        let head = evaluate(
            &Method::HEAD,
            &headers(&[(header::IF_NONE_MATCH, &etag)]),
            &validators(),
        );
        assert_eq!(head, Precondition::NotModified);
        let delete = evaluate(
            &Method::DELETE,
            &headers(&[(header::IF_NONE_MATCH, &etag)]),
            &validators(),
        );
        assert_eq!(delete, Precondition::Failed);
    }

    #[test]
    fn if_match_failure_beats_if_none_match() {
        let etag = text(&validators().etag()).to_owned();
        let h = [
            (header::IF_MATCH, "\"x\""),
            (header::IF_NONE_MATCH, etag.as_str()),
        ];
        assert_eq!(get(&h), Precondition::Failed);
    }

    #[test]
    fn if_none_match_takes_precedence_over_if_modified_since() {
        let future = date(MTIME_SECS + 10);
        assert_eq!(
            get(&[(header::IF_MODIFIED_SINCE, &future)]),
            Precondition::NotModified
        );
        // A non-matching INM means IMS is ignored: the representation is sent.
        assert_eq!(
            get(&[
                (header::IF_NONE_MATCH, "\"x\""),
                (header::IF_MODIFIED_SINCE, &future)
            ]),
            PROCEED
        );
    }

    #[test]
    fn if_modified_since() {
        assert_eq!(
            get(&[(header::IF_MODIFIED_SINCE, &date(MTIME_SECS))]),
            Precondition::NotModified
        );
        assert_eq!(
            get(&[(header::IF_MODIFIED_SINCE, &date(MTIME_SECS - 1))]),
            PROCEED
        );
        assert_eq!(get(&[(header::IF_MODIFIED_SINCE, "yesterday")]), PROCEED);
        let two = [
            (header::IF_MODIFIED_SINCE, date(MTIME_SECS)),
            (header::IF_MODIFIED_SINCE, date(MTIME_SECS)),
        ];
        let two: Vec<_> = two.iter().map(|(n, v)| (n.clone(), v.as_str())).collect();
        assert_eq!(get(&two), PROCEED, "more than one member is ignored");
        let post = evaluate(
            &Method::POST,
            &headers(&[(header::IF_MODIFIED_SINCE, &date(MTIME_SECS))]),
            &validators(),
        );
        assert_eq!(post, NO_RANGE, "IMS only applies to GET/HEAD");
    }

    #[test]
    fn if_range() {
        let etag = text(&validators().etag()).to_owned();
        let with = |value: &str| get(&[(header::RANGE, "bytes=0-1"), (header::IF_RANGE, value)]);
        assert_eq!(get(&[(header::RANGE, "bytes=0-1")]), PROCEED);
        assert_eq!(with(&etag), PROCEED);
        assert_eq!(
            with(&format!("W/{etag}")),
            NO_RANGE,
            "weak tags never match If-Range"
        );
        assert_eq!(with("\"other\""), NO_RANGE);
        assert_eq!(with(&date(MTIME_SECS)), PROCEED);
        assert_eq!(
            with(&date(MTIME_SECS + 1)),
            NO_RANGE,
            "dates must match exactly"
        );
        assert_eq!(with("garbage"), NO_RANGE);
        let head = evaluate(
            &Method::HEAD,
            &headers(&[(header::RANGE, "bytes=0-1")]),
            &validators(),
        );
        assert_eq!(head, NO_RANGE, "Range is defined for GET only");
    }

    #[test]
    fn conditions_run_before_if_range() {
        let etag = text(&validators().etag()).to_owned();
        let h = [
            (header::RANGE, "bytes=0-1"),
            (header::IF_RANGE, etag.as_str()),
            (header::IF_NONE_MATCH, etag.as_str()),
        ];
        assert_eq!(get(&h), Precondition::NotModified);
    }

    #[test]
    fn tag_lists() {
        use ladder::parse_tag_list;
        assert_eq!(parse_tag_list("").map(|t| t.len()), Some(0));
        assert_eq!(
            parse_tag_list(" \"a\" , W/\"b\",,\"c\"").map(|t| t.len()),
            Some(3)
        );
        assert!(parse_tag_list("\"a\" \"b\"").is_none());
        assert!(parse_tag_list("\"a").is_none());
        assert!(parse_tag_list("\"a b\"").is_none());
    }

    #[test]
    fn writes() {
        let etag = text(&validators().etag()).to_owned();
        let allowed = |pairs: &[(header::HeaderName, &str)], current: Option<&Validators>| {
            write_allowed(&conditions(&headers(pairs)), current)
        };
        let v = validators();
        assert!(allowed(&[], Some(&v)));
        assert!(allowed(&[(header::IF_MATCH, &etag)], Some(&v)));
        assert!(!allowed(&[(header::IF_MATCH, "\"x\"")], Some(&v)));
        assert!(!allowed(&[(header::IF_MATCH, &etag)], None));
        assert!(!allowed(&[(header::IF_NONE_MATCH, &etag)], Some(&v)));
        assert!(!allowed(&[(header::IF_NONE_MATCH, "*")], Some(&v)));
        assert!(allowed(&[(header::IF_NONE_MATCH, "*")], None));
        assert!(!allowed(
            &[(header::IF_UNMODIFIED_SINCE, &date(MTIME_SECS - 1))],
            Some(&v)
        ));
        assert!(allowed(
            &[(header::IF_UNMODIFIED_SINCE, &date(MTIME_SECS))],
            Some(&v)
        ));
    }
}
