//! The WebDAV `If` request header (RFC 4918 §10.4): parsing and evaluation.
//!
//! Clients send `If` on write methods to prove they hold a lock (by quoting its state
//! token) and to make the request conditional on lock state and entity tags, possibly
//! of other resources than the request's own (tagged lists). The value is peer input on
//! every write, so the parser is a single pass over the bytes with hard bounds on size
//! and condition count; it never panics and reports the byte offset of the first
//! problem so that a 400 response or a log line can point at it.
//!
//! [`parse`] yields an [`IfHeader`]. [`IfHeader::evaluate`] decides whether the
//! preconditions hold, given what the server knows through [`ResourceState`].
//! [`IfHeader::submitted_tokens`] lists the lock tokens the client quoted, which is what
//! decides whether a lock *protects* a resource from this request (§6.3, §10.4.1);
//! that is independent of whether the header evaluates true.
//!
//! The grammar is applied strictly: state tokens must be absolute URIs and resource tags
//! absolute URIs or absolute paths, both in the RFC 3986 character set; whitespace means
//! spaces and tabs (obsolete line folding never reaches a modern HTTP stack). `Not` is
//! case-insensitive and, as whitespace between tokens is optional, `Not<urn:x>` and
//! `(<urn:a><urn:b>)` are accepted.

use std::collections::HashSet;
use std::fmt;

/// Longest value accepted, in bytes: far above what a real client sends, and low enough
/// that the parse of a hostile value costs nothing worth measuring.
const MAX_HEADER_LEN: usize = 16 * 1024;
/// Most conditions accepted across all lists, for the same reason.
const MAX_CONDITIONS: usize = 256;

/// A parsed `If` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfHeader {
    /// The lists in the order written; the header holds when any of them does.
    pub lists: Vec<TaggedList>,
}

/// One parenthesised list; `resource` is the tag it follows (None for a No-tag-list).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaggedList {
    /// The resource tag as written, without the angle brackets.
    pub resource: Option<String>,
    /// The conditions, all of which must hold for the list to hold; never empty once parsed.
    pub conditions: Vec<Condition>,
}

/// One condition of a list, possibly negated with `Not`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    /// Whether the condition was preceded by `Not`.
    pub negated: bool,
    /// What the condition tests.
    pub kind: ConditionKind,
}

/// What a condition tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConditionKind {
    /// A state token (lock token) URI, without the angle brackets, e.g.
    /// `opaquelocktoken:…` or `DAV:no-lock`.
    Token(String),
    /// An entity tag as written, quotes included, e.g. `"abc"` or `W/"abc"`.
    ETag(String),
}

/// Why an `If` header value was rejected; offsets are in bytes from the start of the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IfError {
    /// The value holds nothing but whitespace.
    #[error("the If header is empty")]
    Empty,
    /// The value is longer than the parser looks at.
    #[error(
        "the If header is {len} bytes long, over the limit of {}",
        MAX_HEADER_LEN
    )]
    TooLong { len: usize },
    /// The value holds more conditions than the parser accepts.
    #[error(
        "the If header has over {} conditions, the first extra at byte {offset}",
        MAX_CONDITIONS
    )]
    TooManyConditions { offset: usize },
    /// The value stops short, e.g. at an unclosed `(`, `<`, `[` or quote.
    #[error("the If header ends at byte {offset} where {expected} was expected")]
    UnexpectedEnd {
        offset: usize,
        expected: &'static str,
    },
    /// A character stands where the grammar allows something else.
    #[error("the If header has {found:?} at byte {offset} where {expected} was expected")]
    Unexpected {
        offset: usize,
        found: char,
        expected: &'static str,
    },
    /// A list `()` holds no condition.
    #[error("the If header has an empty list at byte {offset}")]
    EmptyList { offset: usize },
    /// A state token lacks a URI scheme.
    #[error("the If header's state token at byte {offset} is not an absolute URI")]
    InvalidStateToken { offset: usize },
    /// A resource tag is neither an absolute URI nor an absolute path.
    #[error("the If header's resource tag at byte {offset} is not an absolute URI or path")]
    InvalidResourceTag { offset: usize },
    /// Something in `[…]` is not an entity tag.
    #[error("the If header's entity tag at byte {offset} is malformed")]
    InvalidEntityTag { offset: usize },
    /// A resource tag follows untagged lists, which the grammar forbids.
    #[error("the If header mixes untagged and tagged lists at byte {offset}")]
    MixedLists { offset: usize },
    /// A resource tag is followed by no list.
    #[error("the If header's resource tag at byte {offset} is not followed by a list")]
    TagWithoutList { offset: usize },
}

/// Parses the value of an `If` header (the text after `If:`).
pub fn parse(value: &str) -> Result<IfHeader, IfError> {
    if value.len() > MAX_HEADER_LEN {
        return Err(IfError::TooLong { len: value.len() });
    }
    if value.trim_matches(is_ws).is_empty() {
        return Err(IfError::Empty);
    }
    Parser::new(value).header()
}

/// Parses the `Lock-Token` header of UNLOCK, `<Coded-URL>` with optional surrounding
/// whitespace, into the URI without brackets; None when malformed.
pub fn parse_lock_token_header(value: &str) -> Option<&str> {
    let uri = value.trim_matches(is_ws).strip_prefix('<')?;
    let uri = uri.strip_suffix('>')?;
    (uri.bytes().all(is_uri_byte) && is_absolute_uri(uri)).then_some(uri)
}

/// What the server knows about a resource the header names. `resource` is None for the
/// request's own resource, or the tag exactly as written in the header (the caller maps
/// absolute URIs and paths to its resources).
pub trait ResourceState {
    /// The resource's current ETag as the server sends it (`"…"`), None when it does not
    /// exist.
    fn etag(&self, resource: Option<&str>) -> Option<String>;
    /// Whether `token` names a lock that currently applies to the resource (held on it,
    /// or on an ancestor with Depth infinity).
    fn is_locked_with(&self, resource: Option<&str>, token: &str) -> bool;
}

impl IfHeader {
    /// RFC 4918 §10.4: true when at least one list evaluates true; a list is true when
    /// every condition in it is true (a `Not` condition is true when its inner one is
    /// false). An entity-tag condition compares with the resource's current ETag using the
    /// *strong* comparison for strong tags and weak comparison when either is weak
    /// (RFC 9110 §8.8.3.2); a missing resource matches no tag. A state-token condition is
    /// true when `is_locked_with` says so (so `<DAV:no-lock>` is never true, and
    /// `Not <DAV:no-lock>` always is).
    /// Tagged lists are evaluated against their tag's resource.
    pub fn evaluate(&self, state: &dyn ResourceState) -> bool {
        self.lists.iter().any(|list| {
            let resource = list.resource.as_deref();
            list.conditions.iter().all(|c| c.holds(resource, state))
        })
    }

    /// Every state token the client submitted: each token appearing in a non-negated
    /// condition of any list, deduplicated, in order of appearance. A lock protects a
    /// resource unless its token is among these (RFC 4918 §6.3/§10.4.1).
    pub fn submitted_tokens(&self) -> Vec<&str> {
        let mut seen = HashSet::new();
        let conditions = self.lists.iter().flat_map(|list| &list.conditions);
        let tokens = conditions.filter_map(|c| match &c.kind {
            ConditionKind::Token(token) if !c.negated => Some(token.as_str()),
            _ => None,
        });
        tokens.filter(|token| seen.insert(*token)).collect()
    }

    /// The header value that [`parse`] reads back as `self` (for any `self` it produced).
    pub fn to_header_value(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for IfHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut previous = None;
        for (i, list) in self.lists.iter().enumerate() {
            let sep = if i == 0 { "" } else { " " };
            // Consecutive lists of one resource share its tag, as clients write them.
            match list.resource.as_deref() {
                Some(tag) if previous != Some(tag) => write!(f, "{sep}<{tag}> (")?,
                _ => write!(f, "{sep}(")?,
            }
            previous = list.resource.as_deref();
            for (j, condition) in list.conditions.iter().enumerate() {
                let sep = if j == 0 { "" } else { " " };
                write!(f, "{sep}{condition}")?;
            }
            f.write_str(")")?;
        }
        Ok(())
    }
}

impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let not = if self.negated { "Not " } else { "" };
        match &self.kind {
            ConditionKind::Token(token) => write!(f, "{not}<{token}>"),
            ConditionKind::ETag(tag) => write!(f, "{not}[{tag}]"),
        }
    }
}

impl Condition {
    fn holds(&self, resource: Option<&str>, state: &dyn ResourceState) -> bool {
        let inner = match &self.kind {
            // No lock can carry `DAV:no-lock`; deciding it here keeps a lax lock table
            // from turning the "always false" idiom into a pass.
            ConditionKind::Token(token) => {
                !is_no_lock(token) && state.is_locked_with(resource, token)
            }
            ConditionKind::ETag(tag) => {
                let current = state.etag(resource);
                current.is_some_and(|current| etags_match(tag, &current))
            }
        };
        inner != self.negated
    }
}

fn is_no_lock(token: &str) -> bool {
    // URI schemes are case-insensitive (RFC 3986 §3.1), the rest is not.
    let parts = token.split_once(':');
    parts.is_some_and(|(scheme, rest)| scheme.eq_ignore_ascii_case("DAV") && rest == "no-lock")
}

/// Strong comparison when both tags are strong, weak comparison when either is weak
/// (RFC 9110 §8.8.3.2). Both come down to comparing the opaque-tags once a `W/` is set
/// aside: two strong tags are equal exactly when their opaque-tags are.
fn etags_match(a: &str, b: &str) -> bool {
    fn opaque(tag: &str) -> &str {
        tag.strip_prefix("W/").unwrap_or(tag)
    }
    opaque(a) == opaque(b)
}

fn is_ws(c: char) -> bool {
    c == ' ' || c == '\t'
}

/// RFC 3986 unreserved, reserved and `%`, less `#`: absolute-URI has no fragment.
fn is_uri_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~:/?[]@!$&'()*+,;=%".contains(&b)
}

/// RFC 9110 etagc (VCHAR but `"`, and obs-text: here the bytes of non-ASCII chars), plus
/// the blanks of RFC 2616's quoted-string, which RFC 4918 cites and its own examples
/// (`["I am an ETag"]`) use.
fn is_etag_byte(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | 0x21 | 0x23..=0x7e | 0x80..)
}

fn is_absolute_uri(s: &str) -> bool {
    s.split_once(':').is_some_and(|(scheme, _)| {
        let mut bytes = scheme.bytes();
        bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
            && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
    })
}

fn is_resource_ref(s: &str) -> bool {
    is_absolute_uri(s) || s.starts_with('/')
}

/// Cursor over the value. `pos` only ever stops after an ASCII byte or at the end, so
/// it is always a char boundary.
#[derive(Debug)]
struct Parser<'a> {
    src: &'a str,
    pos: usize,
    conditions: usize,
}

impl<'a> Parser<'a> {
    fn new(src: &'a str) -> Self {
        Parser {
            src,
            pos: 0,
            conditions: 0,
        }
    }

    fn rest(&self) -> &[u8] {
        self.src.as_bytes().get(self.pos..).unwrap_or_default()
    }

    fn peek(&self) -> Option<u8> {
        self.rest().first().copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.pos += 1;
        }
    }

    fn eat(&mut self, byte: u8) -> bool {
        let found = self.peek() == Some(byte);
        self.pos += usize::from(found);
        found
    }

    /// The error for whatever sits at the cursor where `expected` should be.
    fn unexpected(&self, expected: &'static str) -> IfError {
        let offset = self.pos;
        match self.src.get(offset..).and_then(|rest| rest.chars().next()) {
            Some(found) => IfError::Unexpected {
                offset,
                found,
                expected,
            },
            None => IfError::UnexpectedEnd { offset, expected },
        }
    }

    fn expect(&mut self, byte: u8, expected: &'static str) -> Result<(), IfError> {
        if self.eat(byte) {
            Ok(())
        } else {
            Err(self.unexpected(expected))
        }
    }

    fn header(mut self) -> Result<IfHeader, IfError> {
        let (mut lists, mut resource) = (Vec::new(), None);
        loop {
            self.skip_ws();
            let offset = self.pos;
            match self.peek() {
                None => return Ok(IfHeader { lists }),
                Some(b'(') => {
                    let conditions = self.list()?;
                    let resource = resource.clone();
                    lists.push(TaggedList {
                        resource,
                        conditions,
                    });
                }
                Some(b'<') if resource.is_none() && !lists.is_empty() => {
                    return Err(IfError::MixedLists { offset });
                }
                Some(b'<') => {
                    let invalid = |offset| IfError::InvalidResourceTag { offset };
                    resource = Some(self.angle_bracketed(is_resource_ref, invalid)?);
                    self.skip_ws();
                    match self.peek() {
                        Some(b'(') => {}
                        None | Some(b'<') => return Err(IfError::TagWithoutList { offset }),
                        Some(_) => return Err(self.unexpected("`(`")),
                    }
                }
                Some(_) => return Err(self.unexpected("`(` or `<`")),
            }
        }
    }

    fn list(&mut self) -> Result<Vec<Condition>, IfError> {
        let open = self.pos;
        self.pos += 1;
        let mut conditions = Vec::new();
        loop {
            self.skip_ws();
            match self.peek() {
                Some(b')') if conditions.is_empty() => {
                    return Err(IfError::EmptyList { offset: open });
                }
                Some(b')') => {
                    self.pos += 1;
                    return Ok(conditions);
                }
                None => return Err(self.unexpected("a condition or `)`")),
                Some(_) => conditions.push(self.condition()?),
            }
        }
    }

    fn condition(&mut self) -> Result<Condition, IfError> {
        self.conditions += 1;
        if self.conditions > MAX_CONDITIONS {
            return Err(IfError::TooManyConditions { offset: self.pos });
        }
        let negated = matches!(self.rest(), [b'N' | b'n', b'O' | b'o', b'T' | b't', ..]);
        if negated {
            self.pos += 3;
            self.skip_ws();
        }
        let kind = match self.peek() {
            Some(b'<') => {
                let invalid = |offset| IfError::InvalidStateToken { offset };
                ConditionKind::Token(self.angle_bracketed(is_absolute_uri, invalid)?)
            }
            Some(b'[') => ConditionKind::ETag(self.entity_tag()?),
            _ if negated => return Err(self.unexpected("`<` or `[`")),
            _ => return Err(self.unexpected("`Not`, `<` or `[`")),
        };
        Ok(Condition { negated, kind })
    }

    /// Reads `<…>` at the cursor and returns the text inside once `valid` accepts it.
    fn angle_bracketed(
        &mut self,
        valid: fn(&str) -> bool,
        invalid: fn(usize) -> IfError,
    ) -> Result<String, IfError> {
        let open = self.pos;
        self.pos += 1;
        while self.peek().is_some_and(is_uri_byte) {
            self.pos += 1;
        }
        let text = self.src.get(open + 1..self.pos).unwrap_or_default();
        self.expect(b'>', "`>`")?;
        valid(text).then(|| text.to_owned()).ok_or(invalid(open))
    }

    /// Reads `[entity-tag]` at the cursor and returns the tag as written.
    fn entity_tag(&mut self) -> Result<String, IfError> {
        self.pos += 1;
        self.skip_ws();
        let start = self.pos;
        let invalid = IfError::InvalidEntityTag { offset: start };
        if self.rest().starts_with(b"W/") {
            self.pos += 2;
        }
        if !self.eat(b'"') {
            return Err(invalid);
        }
        while self.peek().is_some_and(is_etag_byte) {
            self.pos += 1;
        }
        if self.peek().is_some_and(|b| b != b'"') {
            return Err(invalid);
        }
        self.expect(b'"', "a closing `\"`")?;
        let tag = self.src.get(start..self.pos).unwrap_or_default().to_owned();
        self.skip_ws();
        self.expect(b']', "`]`")?;
        Ok(tag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    const U1: &str = "urn:uuid:181d4fae-7d8c-11d0-a765-00a0c91e6bf2";
    const U2: &str = "urn:uuid:58f202ac-22cf-11d1-b12d-002035b29092";

    fn ok(value: &str) -> IfHeader {
        parse(value).expect("header should parse")
    }
    fn token(t: &str) -> Condition {
        Condition {
            negated: false,
            kind: ConditionKind::Token(t.to_owned()),
        }
    }
    fn etag(e: &str) -> Condition {
        Condition {
            negated: false,
            kind: ConditionKind::ETag(e.to_owned()),
        }
    }
    fn not(c: Condition) -> Condition {
        Condition { negated: true, ..c }
    }
    fn list(tag: Option<&str>, conditions: Vec<Condition>) -> TaggedList {
        TaggedList {
            resource: tag.map(str::to_owned),
            conditions,
        }
    }

    /// Resources by tag (None for the request's own), each with its ETag and lock tokens.
    #[derive(Debug, Default)]
    struct State(Vec<(Option<&'static str>, &'static str, &'static [&'static str])>);

    fn st(resource: Option<&'static str>, etag: &'static str, locks: &'static [&str]) -> State {
        State(vec![(resource, etag, locks)])
    }

    impl ResourceState for State {
        fn etag(&self, resource: Option<&str>) -> Option<String> {
            let found = self.0.iter().find(|(r, _, _)| *r == resource);
            found.map(|(_, etag, _)| (*etag).to_owned())
        }
        fn is_locked_with(&self, resource: Option<&str>, token: &str) -> bool {
            let mut held = self.0.iter().filter(|(r, _, _)| *r == resource);
            held.any(|(_, _, locks)| locks.contains(&token))
        }
    }

    #[test]
    fn rfc_10_4_6_no_tag_lists() {
        let h = ok(&format!(
            "(<{U1}> [\"I am an ETag\"]) ([\"I am another ETag\"])"
        ));
        let first = list(None, vec![token(U1), etag("\"I am an ETag\"")]);
        let second = list(None, vec![etag("\"I am another ETag\"")]);
        assert_eq!(h.lists, vec![first, second]);
        assert!(h.evaluate(&st(None, "\"I am an ETag\"", &[U1])));
        assert!(h.evaluate(&st(None, "\"I am another ETag\"", &[])));
        assert!(!h.evaluate(&st(None, "\"I am an ETag\"", &[])));
        assert!(!h.evaluate(&State::default()));
    }

    #[test]
    fn rfc_10_4_7_not_with_no_tag_list() {
        let h = ok(&format!("(Not <{U1}> <{U2}>)"));
        assert_eq!(h.lists, vec![list(None, vec![not(token(U1)), token(U2)])]);
        assert!(h.evaluate(&st(None, "\"x\"", &[U2])));
        assert!(!h.evaluate(&st(None, "\"x\"", &[U1, U2])));
        assert_eq!(h.submitted_tokens(), vec![U2]);
    }

    #[test]
    fn rfc_10_4_8_always_true_still_submits_the_token() {
        let h = ok(&format!("(<{U1}>) (Not <DAV:no-lock>)"));
        assert!(h.evaluate(&State::default()));
        assert_eq!(h.submitted_tokens(), vec![U1]);
    }

    #[test]
    fn rfc_10_4_9_tagged_lists_use_the_tagged_resource() {
        let r1 = Some("/resource1");
        let h = ok(&format!(
            "</resource1> (<{U1}> [W/\"A weak ETag\"]) ([\"strong ETag\"])"
        ));
        let first = list(r1, vec![token(U1), etag("W/\"A weak ETag\"")]);
        let second = list(r1, vec![etag("\"strong ETag\"")]);
        assert_eq!(h.lists, vec![first, second]);
        assert!(h.evaluate(&st(r1, "\"strong ETag\"", &[])));
        assert!(h.evaluate(&st(r1, "W/\"A weak ETag\"", &[U1])));
        // The request's own resource matching proves nothing about /resource1.
        assert!(!h.evaluate(&st(None, "\"strong ETag\"", &[])));
    }

    #[test]
    fn rfc_10_4_10_to_12_tags_and_unmapped_urls() {
        let specs = Some("http://www.example.com/specs/");
        let h = ok(&format!("<http://www.example.com/specs/> (<{U1}>)"));
        assert_eq!(h.lists, vec![list(specs, vec![token(U1)])]);
        assert!(h.evaluate(&st(specs, "\"s\"", &[U1])));
        assert!(!h.evaluate(&st(None, "\"s\"", &[U1])));
        // A resource that does not exist matches no entity tag, so only `Not` holds.
        let unmapped = st(None, "\"4217\"", &[]);
        assert!(!ok("</specs/rfc2518.doc> ([\"4217\"])").evaluate(&unmapped));
        assert!(ok("</specs/rfc2518.doc> (Not [\"4217\"])").evaluate(&unmapped));
    }

    #[test]
    fn litmus_headers() {
        const LOCK: &str = "opaquelocktoken:abc";
        let h = ok("(<opaquelocktoken:abc> [\"etag\"])");
        assert_eq!(
            h.lists,
            vec![list(None, vec![token(LOCK), etag("\"etag\"")])]
        );
        assert!(h.evaluate(&st(None, "\"etag\"", &[LOCK])));
        assert!(!h.evaluate(&st(None, "\"other\"", &[LOCK])));

        assert!(ok("(Not <DAV:no-lock>)").evaluate(&State::default()));

        let (a, h) = (Some("http://h/a"), ok("<http://h/a> (<urn:x>) ([\"e\"])"));
        let lists = vec![list(a, vec![token("urn:x")]), list(a, vec![etag("\"e\"")])];
        assert_eq!(h.lists, lists);
        assert!(h.evaluate(&st(a, "\"e\"", &[])));
        assert!(!h.evaluate(&st(None, "\"e\"", &["urn:x"])));

        let h = ok("(<urn:a>) (Not <DAV:no-lock> [\"e\"])");
        let second = list(None, vec![not(token("DAV:no-lock")), etag("\"e\"")]);
        assert_eq!(h.lists, vec![list(None, vec![token("urn:a")]), second]);
        assert!(h.evaluate(&st(None, "\"e\"", &[])));
        assert!(!h.evaluate(&st(None, "\"f\"", &[])));
        assert!(h.evaluate(&st(None, "\"f\"", &["urn:a"])));
    }

    #[test]
    fn no_lock_is_never_held_even_if_the_lock_table_claims_it() {
        let lax = st(None, "\"e\"", &["DAV:no-lock", "dav:no-lock"]);
        assert!(!ok("(<DAV:no-lock>)").evaluate(&lax));
        assert!(!ok("(<dav:no-lock>)").evaluate(&lax));
        assert!(ok("(Not <DAV:no-lock>)").evaluate(&lax));
    }

    #[test]
    fn entity_tag_comparison() {
        let cases = [
            ("\"a\"", "\"a\"", true),
            ("\"a\"", "\"b\"", false),
            ("W/\"a\"", "\"a\"", true),
            ("\"a\"", "W/\"a\"", true),
            ("W/\"a\"", "W/\"a\"", true),
            ("W/\"a\"", "W/\"b\"", false),
            ("\"W/a\"", "\"a\"", false),
            ("\"\"", "\"\"", true),
        ];
        for (written, current, expected) in cases {
            let got = ok(&format!("([{written}])")).evaluate(&st(None, current, &[]));
            assert_eq!(got, expected, "{written} against {current}");
        }
    }

    #[test]
    fn missing_resource_matches_no_tag() {
        assert!(!ok("([\"x\"])").evaluate(&State::default()));
        assert!(ok("(Not [\"x\"])").evaluate(&State::default()));
        assert!(ok("(Not <urn:a>)").evaluate(&State::default()));
    }

    #[test]
    fn whitespace_and_case_are_flexible() {
        let conditions = vec![not(token("urn:a")), etag("\"e\""), token("urn:b")];
        let expected = vec![list(None, conditions)];
        assert_eq!(ok("\t( nOT\t<urn:a>[ \"e\" ]  <urn:b> )  ").lists, expected);
        assert_eq!(ok("(Not<urn:a>[\"e\"]<urn:b>)").lists, expected);
    }

    #[test]
    fn submitted_tokens_are_unique_non_negated_and_ordered() {
        let h = ok("<http://h/x> (<urn:b> [\"e\"] Not <urn:c>) (<urn:a>) </y> (<urn:b> <urn:c>)");
        assert_eq!(h.submitted_tokens(), vec!["urn:b", "urn:a", "urn:c"]);
        assert!(ok("([\"e\"] Not <urn:a>)").submitted_tokens().is_empty());
    }

    #[test]
    fn serialisation_groups_lists_by_tag() {
        let value = "</a> (<urn:x> [W/\"e\"]) (Not [\"f\"]) <http://h/b> (<urn:y>)";
        assert_eq!(ok(value).to_header_value(), value);
        let loose = ok(" (  <urn:x>)(Not<urn:y>)").to_header_value();
        assert_eq!(loose, "(<urn:x>) (Not <urn:y>)");
    }

    #[test]
    fn each_error_class() {
        use IfError::*;
        let end = |offset, expected| UnexpectedEnd { offset, expected };
        let at = |offset, found, expected| Unexpected {
            offset,
            found,
            expected,
        };
        let cases = [
            ("", Empty),
            (" \t ", Empty),
            ("(<urn:a>", end(8, "a condition or `)`")),
            ("(<urn:a", end(7, "`>`")),
            ("([\"e\"", end(5, "`]`")),
            ("([\"e", end(4, "a closing `\"`")),
            ("(<urn:a>))", at(9, ')', "`(` or `<`")),
            ("(<urn:a>) x (<urn:b>)", at(10, 'x', "`(` or `<`")),
            ("(<urn:a b>)", at(7, ' ', "`>`")),
            ("(<urn:é>)", at(6, 'é', "`>`")),
            ("(Not)", at(4, ')', "`<` or `[`")),
            ("(urn:a)", at(1, 'u', "`Not`, `<` or `[`")),
            ("</a> x", at(5, 'x', "`(`")),
            ("(<urn:a>) ()", EmptyList { offset: 10 }),
            ("(<no-scheme>)", InvalidStateToken { offset: 1 }),
            ("(<1x:y>)", InvalidStateToken { offset: 1 }),
            ("(<>)", InvalidStateToken { offset: 1 }),
            ("<rel/path> (<urn:a>)", InvalidResourceTag { offset: 0 }),
            ("([abc])", InvalidEntityTag { offset: 2 }),
            ("([w/\"a\"])", InvalidEntityTag { offset: 2 }),
            ("([\"a\u{1}b\"])", InvalidEntityTag { offset: 2 }),
            ("(<urn:a>) </b> (<urn:c>)", MixedLists { offset: 10 }),
            ("</a>", TagWithoutList { offset: 0 }),
            ("</a> </b> (<urn:a>)", TagWithoutList { offset: 0 }),
        ];
        for (value, expected) in cases {
            assert_eq!(parse(value), Err(expected), "{value:?}");
        }
    }

    #[test]
    fn limits_are_exact() {
        let fits = format!("(<urn:{}>)", "a".repeat(MAX_HEADER_LEN - 8));
        assert_eq!(ok(&fits).lists.len(), 1);
        let len = MAX_HEADER_LEN + 1;
        assert_eq!(parse(&format!("{fits} ")), Err(IfError::TooLong { len }));

        let many = "(<urn:a>)".repeat(MAX_CONDITIONS);
        assert_eq!(ok(&many).lists.len(), MAX_CONDITIONS);
        let too_many = IfError::TooManyConditions {
            offset: many.len() + 1,
        };
        assert_eq!(parse(&format!("{many}(<urn:a>)")), Err(too_many));
    }

    #[test]
    fn errors_read_as_one_sentence() {
        let message = |value: &str| parse(value).expect_err("invalid").to_string();
        let junk = "the If header has 'x' at byte 10 where `(` or `<` was expected";
        assert_eq!(message("(<urn:a>) x"), junk);
        let long = "the If header is 16385 bytes long, over the limit of 16384";
        assert_eq!(message(&" ".repeat(MAX_HEADER_LEN + 1)), long);
    }

    #[test]
    fn lock_token_header() {
        let lock = parse_lock_token_header("<opaquelocktoken:a-b>");
        assert_eq!(lock, Some("opaquelocktoken:a-b"));
        assert_eq!(
            parse_lock_token_header(" \t<urn:uuid:1> "),
            Some("urn:uuid:1")
        );
        for bad in "|urn:a|<urn:a|urn:a>|<no-scheme>|<urn:a b>|<<urn:a>>|<>|<urn:a#f>".split('|') {
            assert_eq!(parse_lock_token_header(bad), None, "{bad:?}");
        }
    }

    fn offset_of(e: &IfError) -> Option<usize> {
        use IfError::*;
        match *e {
            Empty | TooLong { .. } => None,
            TooManyConditions { offset }
            | UnexpectedEnd { offset, .. }
            | Unexpected { offset, .. }
            | EmptyList { offset }
            | InvalidStateToken { offset }
            | InvalidResourceTag { offset }
            | InvalidEntityTag { offset }
            | MixedLists { offset }
            | TagWithoutList { offset } => Some(offset),
        }
    }

    /// Whatever the input, parsing ends (without a panic), an accepted header round-trips,
    /// and a rejection points inside the input at a char boundary.
    fn check_any(value: &str) -> Result<(), TestCaseError> {
        match parse(value) {
            Ok(h) => prop_assert_eq!(parse(&h.to_header_value()), Ok(h)),
            Err(e) => {
                let offset = offset_of(&e).unwrap_or_default();
                prop_assert!(offset <= value.len() && value.is_char_boundary(offset));
            }
        }
        Ok(())
    }

    fn piece() -> impl Strategy<Value = &'static str> {
        let pieces = "(|)|<|>|[|]|\"|W/|Not| |\t|urn:a|/p|DAV:no-lock|é|x|#|\"e\"";
        prop::sample::select(pieces.split('|').collect::<Vec<_>>())
    }

    fn uri() -> impl Strategy<Value = String> {
        "[a-zA-Z][a-zA-Z0-9+.-]{0,6}:[A-Za-z0-9._~:/?@!$&'()*+,;=%-]{0,16}"
    }

    fn header() -> impl Strategy<Value = IfHeader> {
        let kind = prop_oneof![
            uri().prop_map(ConditionKind::Token),
            "(W/)?\"[ \t!#-~é€]{0,10}\"".prop_map(ConditionKind::ETag),
        ];
        let condition =
            (any::<bool>(), kind).prop_map(|(negated, kind)| Condition { negated, kind });
        let conditions = vec(condition, 1..4);
        let tag = prop_oneof!["/[A-Za-z0-9._~/%-]{0,12}", uri()];
        let untagged = vec(conditions.clone(), 1..4)
            .prop_map(|lists| lists.into_iter().map(|c| list(None, c)).collect());
        let tagged = vec((tag, vec(conditions, 1..3)), 1..3).prop_map(|groups| {
            let lists = groups
                .into_iter()
                .flat_map(|(tag, lists)| lists.into_iter().map(move |c| list(Some(&tag), c)));
            lists.collect()
        });
        prop_oneof![untagged, tagged].prop_map(|lists| IfHeader { lists })
    }

    /// Writes `h` with `sep` wherever the grammar allows whitespace, and `not` for `Not`.
    fn render_loosely(h: &IfHeader, sep: &str, not: &str) -> String {
        let mut out = String::from(sep);
        for l in &h.lists {
            if let Some(tag) = &l.resource {
                out += &format!("<{tag}>{sep}");
            }
            out += &format!("({sep}");
            for c in &l.conditions {
                let not = if c.negated {
                    format!("{not}{sep}")
                } else {
                    String::new()
                };
                out += &match &c.kind {
                    ConditionKind::Token(t) => format!("{not}<{t}>{sep}"),
                    ConditionKind::ETag(e) => format!("{not}[{sep}{e}{sep}]{sep}"),
                };
            }
            out += &format!("){sep}");
        }
        out
    }

    proptest! {
        #[test]
        fn arbitrary_text_is_handled(value in ".{0,300}") {
            check_any(&value)?;
        }

        #[test]
        fn arbitrary_bytes_are_handled(bytes in vec(any::<u8>(), 0..300)) {
            check_any(&String::from_utf8_lossy(&bytes))?;
        }

        #[test]
        fn grammar_soup_is_handled(pieces in vec(piece(), 0..80)) {
            check_any(&pieces.concat())?;
        }

        #[test]
        fn long_inputs_are_bounded(p in piece(), n in 0..MAX_HEADER_LEN + 64) {
            let value = p.repeat(n / p.len() + 1);
            let value = value.get(..n).unwrap_or(&value);
            if value.len() > MAX_HEADER_LEN {
                prop_assert_eq!(parse(value), Err(IfError::TooLong { len: value.len() }));
            }
            check_any(value)?;
        }

        #[test]
        fn valid_headers_round_trip(h in header()) {
            prop_assert_eq!(parse(&h.to_header_value()), Ok(h));
        }

        #[test]
        fn whitespace_and_not_spelling_do_not_change_the_value(
            h in header(),
            sep in prop::sample::select(vec!["", " ", "\t", " \t  "]),
            not in prop::sample::select(vec!["Not", "not", "NOT", "nOt"]),
        ) {
            prop_assert_eq!(parse(&render_loosely(&h, sep, not)), Ok(h));
        }
    }
}
