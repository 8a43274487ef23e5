//! `Range: bytes=` planning (RFC 9110 §14).
//!
//! Only a single range is answered with 206. A request for several ranges gets the whole
//! representation with 200, which RFC 9110 §14.2 allows ("a server MAY ignore the Range
//! header field"): `multipart/byteranges` costs a boundary-framed body for a feature clients
//! rarely use, and overlapping multi-range requests are a known amplification vector.
//!
//! Syntactically invalid headers and unknown units are ignored (200), as the RFC allows;
//! only a well-formed single range that starts past the end is unsatisfiable (416). Numbers
//! saturate instead of overflowing, so `bytes=99999999999999999999999-` is simply
//! unsatisfiable and `bytes=0-99999999999999999999999` is "to the end". An empty
//! representation ignores ranges altogether: no 206 can describe a slice of nothing.

/// An inclusive byte range within a representation of known length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    /// First byte offset.
    pub start: u64,
    /// Last byte offset, inclusive (as in `Content-Range`).
    pub end: u64,
}

impl ByteRange {
    /// Number of bytes in the range (never zero).
    pub fn len(&self) -> u64 {
        // Saturating so a hand-built inverted range cannot panic; `decide` never makes one.
        self.end.saturating_sub(self.start).saturating_add(1)
    }

    /// Always false: a range holds at least one byte. Present to pair with [`Self::len`].
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The `Content-Range` value for a 206 response.
    pub fn content_range(&self, complete_len: u64) -> String {
        format!("bytes {}-{}/{}", self.start, self.end, complete_len)
    }
}

/// The `Content-Range` value for a 416 response.
pub fn unsatisfied_content_range(complete_len: u64) -> String {
    format!("bytes */{complete_len}")
}

/// What to send for a GET, given its `Range` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeDecision {
    /// 200 with the whole representation (no, invalid, multiple or ignored ranges).
    Full,
    /// 206 with this slice.
    Partial(ByteRange),
    /// 416 with `Content-Range: bytes */len`.
    Unsatisfiable,
}

/// One parsed `byte-range-spec`, before it meets the representation length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spec {
    FromTo(u64, Option<u64>),
    Suffix(u64),
}

/// Decides how to answer `Range: <value>` for a representation of `len` bytes.
/// `value` is `None` when the header is absent or not visible ASCII.
pub fn decide(value: Option<&str>, len: u64) -> RangeDecision {
    let Some(value) = value else {
        return RangeDecision::Full;
    };
    if len == 0 {
        return RangeDecision::Full;
    }
    let Some(set) = strip_unit(value.trim()) else {
        return RangeDecision::Full;
    };
    // The list rule allows empty elements (`bytes=0-1,`); they carry nothing.
    let mut specs = set.split(',').map(str::trim).filter(|s| !s.is_empty());
    let (Some(first), None) = (specs.next(), specs.next()) else {
        return RangeDecision::Full;
    };
    match parse_spec(first) {
        None => RangeDecision::Full,
        Some(spec) => resolve(spec, len),
    }
}

fn strip_unit(value: &str) -> Option<&str> {
    let (unit, set) = value.split_once('=')?;
    unit.eq_ignore_ascii_case("bytes").then_some(set)
}

fn parse_spec(spec: &str) -> Option<Spec> {
    let (first, last) = spec.split_once('-')?;
    if first.is_empty() {
        return parse_pos(last).map(Spec::Suffix);
    }
    let first = parse_pos(first)?;
    if last.is_empty() {
        return Some(Spec::FromTo(first, None));
    }
    let last = parse_pos(last)?;
    // last < first is invalid syntax, not unsatisfiable (RFC 9110 §14.1.1).
    (last >= first).then_some(Spec::FromTo(first, Some(last)))
}

/// `1*DIGIT`, saturating at `u64::MAX` so peer-chosen lengths cannot overflow.
fn parse_pos(digits: &str) -> Option<u64> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(digits.bytes().fold(0u64, |acc, b| {
        acc.saturating_mul(10).saturating_add(u64::from(b - b'0'))
    }))
}

fn resolve(spec: Spec, len: u64) -> RangeDecision {
    let last_byte = len - 1;
    match spec {
        Spec::FromTo(first, _) if first >= len => RangeDecision::Unsatisfiable,
        Spec::FromTo(first, last) => RangeDecision::Partial(ByteRange {
            start: first,
            end: last.map_or(last_byte, |l| l.min(last_byte)),
        }),
        Spec::Suffix(0) => RangeDecision::Unsatisfiable,
        Spec::Suffix(n) => RangeDecision::Partial(ByteRange {
            start: len.saturating_sub(n),
            end: last_byte,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(start: u64, end: u64) -> RangeDecision {
        RangeDecision::Partial(ByteRange { start, end })
    }

    #[test]
    fn single_ranges() {
        assert_eq!(decide(Some("bytes=0-4"), 10), part(0, 4));
        assert_eq!(decide(Some("bytes=3-"), 10), part(3, 9));
        assert_eq!(decide(Some("bytes=-3"), 10), part(7, 9));
        assert_eq!(decide(Some("bytes=9-9"), 10), part(9, 9));
        assert_eq!(decide(Some("BYTES = 2-3 "), 10), RangeDecision::Full);
        assert_eq!(decide(Some("Bytes=2-3"), 10), part(2, 3));
        assert_eq!(decide(Some("bytes= 2-3 ,"), 10), part(2, 3));
    }

    #[test]
    fn ends_are_clamped_and_suffixes_capped() {
        assert_eq!(decide(Some("bytes=5-100"), 10), part(5, 9));
        assert_eq!(decide(Some("bytes=-100"), 10), part(0, 9));
    }

    #[test]
    fn unsatisfiable() {
        assert_eq!(decide(Some("bytes=10-"), 10), RangeDecision::Unsatisfiable);
        assert_eq!(
            decide(Some("bytes=10-20"), 10),
            RangeDecision::Unsatisfiable
        );
        assert_eq!(decide(Some("bytes=-0"), 10), RangeDecision::Unsatisfiable);
    }

    #[test]
    fn overflow_saturates() {
        let huge = "99999999999999999999999999";
        assert_eq!(
            decide(Some(&format!("bytes={huge}-")), 10),
            RangeDecision::Unsatisfiable
        );
        assert_eq!(decide(Some(&format!("bytes=0-{huge}")), 10), part(0, 9));
        assert_eq!(decide(Some(&format!("bytes=-{huge}")), 10), part(0, 9));
        assert_eq!(
            decide(Some("bytes=0-18446744073709551615"), u64::MAX),
            part(0, u64::MAX - 1)
        );
        assert_eq!(
            ByteRange {
                start: 0,
                end: u64::MAX - 1
            }
            .len(),
            u64::MAX
        );
    }

    #[test]
    fn garbage_and_other_units_are_ignored() {
        for value in [
            "",
            "bytes",
            "bytes=",
            "bytes=-",
            "bytes=a-b",
            "bytes=1-a",
            "bytes=5-2",
            "bytes=+1-2",
            "bytes=1--2",
            "bytes=0x1-2",
            "items=0-1",
            "bytes=1 2-3",
            "bytes=,",
            "bytes=-1-2",
        ] {
            assert_eq!(decide(Some(value), 10), RangeDecision::Full, "{value:?}");
        }
        assert_eq!(decide(None, 10), RangeDecision::Full);
    }

    #[test]
    fn multiple_ranges_get_the_full_body() {
        assert_eq!(decide(Some("bytes=0-1,3-4"), 10), RangeDecision::Full);
        assert_eq!(decide(Some("bytes=0-1, -2"), 10), RangeDecision::Full);
    }

    #[test]
    fn empty_representation_ignores_ranges() {
        assert_eq!(decide(Some("bytes=0-"), 0), RangeDecision::Full);
        assert_eq!(decide(Some("bytes=-5"), 0), RangeDecision::Full);
    }

    #[test]
    fn header_values() {
        assert_eq!(
            ByteRange { start: 2, end: 5 }.content_range(10),
            "bytes 2-5/10"
        );
        assert_eq!(unsatisfied_content_range(10), "bytes */10");
    }
}
