//! The precondition ladder of RFC 9110 §13.2.2, as a pure decision.
//!
//! The driver reads the request's fields into [`Conditions`] (dates already parsed, since
//! an HTTP-date is a protocol detail of its HTTP library) and the target's validators into
//! [`Current`]; [`evaluate`] decides. The same function answers a GET (304 or the
//! representation, with or without its `Range`) and every write (proceed or 412), so a
//! write is judged by exactly the rules a read is. Writers call it while they hold the
//! target's lease, which makes the check and the write one step across workers.

use std::time::Duration;

/// The least time a conditional write waits for a target another writer holds.
pub const CONDITIONAL_LEASE_WAIT: Duration = Duration::from_secs(5);

/// How long a write waits for a busy target: the configured `--write-lock-timeout`, but at
/// least [`CONDITIONAL_LEASE_WAIT`] when the request has preconditions. Such a write's
/// answer depends on how the other write ends (it changes the entity tag the client
/// named, or fails and leaves it), so refusing it at once as busy (409) would tell the
/// client nothing it can act on; waiting lets it get the 412 (or the success) that is
/// true. Two clients racing with one `If-Match` thus get one 2xx and one 412.
pub fn lease_wait(configured: Duration, conditional: bool) -> Duration {
    if conditional {
        configured.max(CONDITIONAL_LEASE_WAIT)
    } else {
        configured
    }
}

/// What kind of request the conditions guard: GET and HEAD turn a matching
/// `If-None-Match` into 304 and honour `If-Modified-Since`; every other method gets 412
/// (RFC 9110 §13.1.2) and ignores `If-Modified-Since` (§13.1.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MethodKind {
    Get,
    Head,
    /// Any other method; for a state-changing one a true `If-None-Match` means 412.
    Other,
}

/// The outcome of the ladder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precondition {
    /// Carry on; `range_applies` says whether a `Range` may be honoured.
    Proceed {
        /// False when the method is not GET, or `If-Range` did not match.
        range_applies: bool,
    },
    /// 304 Not Modified (GET and HEAD only).
    NotModified,
    /// 412 Precondition Failed.
    Failed,
}

/// The target's current representation, as its validators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Current<'a> {
    /// The entity tag's opaque part, without quotes. Servery's own tags are strong.
    pub opaque: &'a [u8],
    /// `Last-Modified`, in whole seconds since the epoch; `None` for a representation
    /// that has no modification date (a generated directory listing), whose date
    /// conditions are then ignored (RFC 9110 §13.1.3, §13.1.4) and whose `If-Range` must
    /// name its tag.
    pub modified_secs: Option<u64>,
}

/// The field lines of `If-Match` or `If-None-Match`, as received: a list split over
/// several lines is one list (RFC 9110 §5.3). The first line is held without allocating.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagField<'a> {
    first: &'a str,
    more: Vec<&'a str>,
}

impl<'a> TagField<'a> {
    pub fn new(first: &'a str) -> Self {
        TagField {
            first,
            more: Vec::new(),
        }
    }

    /// Another field line of the same field.
    pub fn push(&mut self, line: &'a str) {
        self.more.push(line);
    }

    fn lines(&self) -> impl Iterator<Item = &'a str> + '_ {
        std::iter::once(self.first).chain(self.more.iter().copied())
    }

    /// Whether any member of the list matches `current`. A line that does not parse
    /// matches nothing: that fails closed for `If-Match` and open for `If-None-Match`.
    /// `*` matches any current representation and nothing when there is none.
    fn matches(&self, current: Option<Current<'_>>, how: Compare) -> bool {
        let Some(current) = current else {
            return false;
        };
        self.lines().any(|line| {
            if line.trim_matches([' ', '\t']) == "*" {
                return true;
            }
            parse_tag_list(line).is_some_and(|tags| tags.iter().any(|t| t.matches(current, how)))
        })
    }
}

/// `If-Range`, when the request carries one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IfRange<'a> {
    /// An entity tag (the field's text, parsed when evaluated).
    Tag(&'a str),
    /// An HTTP-date, in seconds since the epoch.
    Date(u64),
    /// Anything else (more than one line, not a tag nor a date): the whole
    /// representation is sent.
    Invalid,
}

/// The request's preconditions. `Default` is a request without any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Conditions<'a> {
    pub if_match: Option<TagField<'a>>,
    pub if_none_match: Option<TagField<'a>>,
    /// A single valid HTTP-date; anything else is ignored (§13.1.4), so `None`.
    pub if_unmodified_since: Option<u64>,
    /// A single valid HTTP-date; anything else is ignored (§13.1.3), so `None`.
    pub if_modified_since: Option<u64>,
    /// The request carries `Range`.
    pub range: bool,
    pub if_range: Option<IfRange<'a>>,
}

impl Conditions<'_> {
    /// Whether any of the four preconditions a write heeds is present.
    pub fn any_for_write(&self) -> bool {
        self.if_match.is_some()
            || self.if_none_match.is_some()
            || self.if_unmodified_since.is_some()
    }
}

/// Evaluates RFC 9110 §13.2.2 in its order: `If-Match`, else `If-Unmodified-Since`; then
/// `If-None-Match`, else (GET and HEAD) `If-Modified-Since`; then `If-Range` for a GET
/// carrying `Range`. `current` is `None` when the target has no representation (a PUT
/// that would create it): `If-Match` is then false, `If-None-Match` true, and the dates
/// are ignored, since there is no modification date to compare.
pub fn evaluate(
    method: MethodKind,
    conditions: &Conditions<'_>,
    current: Option<Current<'_>>,
) -> Precondition {
    let safe = method != MethodKind::Other;
    let modified = current.and_then(|c| c.modified_secs);

    if let Some(field) = &conditions.if_match {
        if !field.matches(current, Compare::Strong) {
            return Precondition::Failed;
        }
    } else if let (Some(since), Some(modified)) = (conditions.if_unmodified_since, modified)
        && modified > since
    {
        return Precondition::Failed;
    }

    if let Some(field) = &conditions.if_none_match {
        if field.matches(current, Compare::Weak) {
            return if safe {
                Precondition::NotModified
            } else {
                Precondition::Failed
            };
        }
    } else if safe
        && let (Some(since), Some(modified)) = (conditions.if_modified_since, modified)
        && modified <= since
    {
        return Precondition::NotModified;
    }

    let range_applies = method == MethodKind::Get
        && (!conditions.range || if_range_matches(conditions.if_range, current));
    Precondition::Proceed { range_applies }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Compare {
    Strong,
    Weak,
}

/// A parsed `entity-tag`: weakness and the opaque part without quotes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntityTag<'a> {
    pub weak: bool,
    pub opaque: &'a str,
}

impl EntityTag<'_> {
    fn matches(&self, current: Current<'_>, how: Compare) -> bool {
        // Servery's tags are strong, so only the peer's weakness matters when comparing
        // strongly.
        (how == Compare::Weak || !self.weak) && self.opaque.as_bytes() == current.opaque
    }
}

/// `#entity-tag`: comma-separated, optional whitespace, empty elements allowed; `None`
/// when the text is not such a list.
pub fn parse_tag_list(text: &str) -> Option<Vec<EntityTag<'_>>> {
    let mut tags = Vec::new();
    let mut rest = text.trim_start_matches([' ', '\t', ',']);
    while !rest.is_empty() {
        let (tag, after) = parse_tag(rest)?;
        tags.push(tag);
        let after = after.trim_start_matches([' ', '\t']);
        if !(after.is_empty() || after.starts_with(',')) {
            return None;
        }
        rest = after.trim_start_matches([' ', '\t', ',']);
    }
    Some(tags)
}

/// One `entity-tag` at the start of `s`, and the rest of `s` after it.
pub fn parse_tag(s: &str) -> Option<(EntityTag<'_>, &str)> {
    let (weak, quoted) = match s.strip_prefix("W/") {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let inner = quoted.strip_prefix('"')?;
    let close = inner.find('"')?;
    let opaque = &inner[..close];
    // etagc = %x21 / %x23-7E / obs-text; obs-text is refused (servery's tags are ASCII).
    if !opaque
        .bytes()
        .all(|b| b == 0x21 || (0x23..=0x7e).contains(&b))
    {
        return None;
    }
    Some((EntityTag { weak, opaque }, &inner[close + 1..]))
}

/// `If-Range`: absent means no condition; a strong tag must match exactly, a date must
/// equal `Last-Modified`; anything else sends the whole representation.
fn if_range_matches(if_range: Option<IfRange<'_>>, current: Option<Current<'_>>) -> bool {
    let Some(if_range) = if_range else {
        return true;
    };
    let Some(current) = current else {
        return false;
    };
    match if_range {
        IfRange::Tag(text) => match parse_tag(text.trim_matches([' ', '\t'])) {
            Some((tag, rest)) if rest.trim_matches([' ', '\t']).is_empty() => {
                tag.matches(current, Compare::Strong)
            }
            _ => false,
        },
        IfRange::Date(date) => current.modified_secs == Some(date),
        IfRange::Invalid => false,
    }
}

#[cfg(test)]
#[path = "precondition_tests.rs"]
mod tests;
