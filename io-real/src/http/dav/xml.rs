//! WebDAV (RFC 4918) XML: parsing the PROPFIND, PROPPATCH and LOCK request bodies, and (from
//! `super::xml_write`, re-exported here) writing the answers.
//!
//! Request bodies come from untrusted peers, so parsing is strict and bounded: the body must be
//! UTF-8 and namespace-well-formed (an undeclared prefix is an error, not a guess), DTDs are
//! refused outright (so no entity expansion and no external fetches), and depth, element,
//! attribute and name-length limits keep a hostile body's cost, and what it makes us keep,
//! linear in its size. quick-xml's namespace-aware [`NsReader`] builds a small tree within those
//! limits, then each DAV parser walks the tree, ignoring unknown elements as RFC 4918 §17 asks.
//!
//! Dead property values and lock owners are kept as XML fragments, to be sent back later inside
//! another document. RFC 4918 §4.3 asks servers to preserve their names, namespaces, attributes
//! and characters (whitespace included), so their text is kept verbatim and each fragment
//! carries the namespace declarations it relied on from the request.

use std::collections::HashSet;
use std::fmt;

use quick_xml::NsReader;
use quick_xml::events::{BytesStart, Event};
use quick_xml::name::ResolveResult;

use super::xml_write::fragment;
pub use super::xml_write::{
    ActiveLock, Multistatus, PropOut, error_body, lock_discovery_fragment, lock_response_body,
    reason, supported_lock_fragment,
};

/// The namespace of every element RFC 4918 defines.
pub const DAV_NS: &str = "DAV:";
/// Deepest element nesting accepted; the root is at depth 1.
pub const MAX_DEPTH: usize = 64;
/// Most elements accepted in one body.
pub const MAX_ELEMENTS: usize = 4096;
/// Most attributes, namespace declarations included, accepted in one body. quick-xml resolves a
/// prefix by scanning the declarations in scope, so both counts are capped to keep that linear.
pub const MAX_ATTRIBUTES: usize = 4096;
/// Longest namespace name or `xml:lang` value accepted, in bytes: each element in scope, and each
/// name and value returned, holds its own copy, so a long one could multiply a small body.
pub const MAX_NAME_LEN: usize = 1024;
/// The namespace of the reserved `xml` prefix (`xml:lang`), bound without a declaration.
pub(super) const XML_NS: &str = "http://www.w3.org/XML/1998/namespace";
/// Namespace declarations are keyed in this namespace only to catch duplicates.
const XMLNS_NS: &str = "http://www.w3.org/2000/xmlns/";

/// An XML element name: namespace URI ("" for no namespace) and local name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Name {
    pub namespace: String,
    pub local: String,
}

impl Name {
    pub fn new(namespace: impl Into<String>, local: impl Into<String>) -> Self {
        let (namespace, local) = (namespace.into(), local.into());
        Self { namespace, local }
    }

    /// A name in the DAV: namespace.
    pub fn dav(local: impl Into<String>) -> Self {
        Self::new(DAV_NS, local)
    }

    pub fn is_dav(&self, local: &str) -> bool {
        self.namespace == DAV_NS && self.local == local
    }
}

/// Clark notation, `{namespace}local`, so two names that print alike are alike.
impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.namespace.as_str() {
            "" => f.write_str(&self.local),
            ns => write!(f, "{{{ns}}}{}", self.local),
        }
    }
}

/// Why a request body was refused: each is the client's fault (400, or as noted).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum XmlError {
    #[error("request body is not UTF-8")]
    NotUtf8,
    #[error("XML declares encoding {0:?}; only UTF-8 is accepted")]
    UnsupportedEncoding(String),
    #[error("malformed XML at byte {position}: {detail}")]
    Malformed { position: u64, detail: String },
    #[error("DTDs and entity declarations are not accepted")]
    Dtd,
    #[error("namespace prefix {0:?} is not declared")]
    UndeclaredPrefix(String),
    #[error("elements nest deeper than {}", MAX_DEPTH)]
    TooDeep,
    #[error("more than {} elements", MAX_ELEMENTS)]
    TooManyElements,
    #[error("more than {} attributes", MAX_ATTRIBUTES)]
    TooManyAttributes,
    #[error("{0} longer than {max} bytes", max = MAX_NAME_LEN)]
    TooLong(&'static str),
    /// Namespace declarations copied into fragments would outgrow the body many times over (a
    /// URI declared once and used by thousands of elements): 413 fits.
    #[error("namespace declarations copied into property values are too large")]
    FragmentTooLarge,
    #[error("root element is {found}, expected DAV:{expected}")]
    WrongRoot { expected: &'static str, found: Name },
    #[error("DAV:{element} must contain {expected}")]
    Missing {
        element: &'static str,
        expected: &'static str,
    },
    #[error("DAV:{element} may contain only one {expected}")]
    Duplicate {
        element: &'static str,
        expected: &'static str,
    },
    #[error("unexpected text inside {0}")]
    UnexpectedText(Name),
    /// A `locktype` other than `write` (RFC 4918 defines no other): 422 fits.
    #[error("unsupported lock type {0}; only DAV:write is")]
    UnsupportedLockType(Name),
}

fn malformed(position: u64, detail: impl fmt::Display) -> XmlError {
    let detail = detail.to_string();
    XmlError::Malformed { position, detail }
}

fn missing(element: &'static str, expected: &'static str) -> XmlError {
    XmlError::Missing { element, expected }
}

fn duplicate(element: &'static str, expected: &'static str) -> XmlError {
    XmlError::Duplicate { element, expected }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Propfind {
    /// `<allprop/>` (with the names in an optional `<include>`), or an empty body.
    AllProp {
        include: Vec<Name>,
    },
    PropName,
    Prop(Vec<Name>),
}

/// A dead property's value, kept so it can be sent back exactly: `xml` is the element's content
/// (text and child elements) as a self-contained fragment, each top-level element carrying the
/// `xmlns`/`xmlns:p` declarations its subtree took from the request (an unprefixed one with no
/// default namespace in scope gets `xmlns=""`, so no embedding document can capture it); text
/// is escaped; `lang` is the `xml:lang` in scope on the property element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Value {
    pub xml: String,
    pub lang: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatchOp {
    Set(Name, Value),
    Remove(Name),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockInfo {
    /// `lockscope`: exclusive (true) or shared.
    pub exclusive: bool,
    /// The `owner` element's content as a self-contained fragment (as [`Value::xml`]), if present.
    pub owner: Option<String>,
}

/// Parses a PROPFIND body. An empty (or whitespace-only) body means allprop (RFC 4918 §9.1).
/// Duplicate names in `prop` or `include` are dropped; `include` without `allprop` is ignored.
pub fn parse_propfind(body: &[u8]) -> Result<Propfind, XmlError> {
    const ONE_OF: &str = "DAV:prop, DAV:allprop or DAV:propname";
    if body.iter().all(|&b| is_space(b.into())) {
        return Ok(Propfind::AllProp { include: vec![] });
    }
    let root = parse_root(body, "propfind")?;
    let (mut selected, mut include) = (None, vec![]);
    for child in root.elements()? {
        let choice = match child.dav_local() {
            Some("allprop") => Propfind::AllProp { include: vec![] },
            Some("propname") => Propfind::PropName,
            Some("prop") => Propfind::Prop(names(child)?),
            Some("include") => {
                include.extend(names(child)?);
                continue;
            }
            _ => continue,
        };
        if selected.replace(choice).is_some() {
            return Err(duplicate("propfind", ONE_OF));
        }
    }
    match selected.ok_or(missing("propfind", ONE_OF))? {
        Propfind::AllProp { .. } => {
            let mut seen = HashSet::new();
            include.retain(|name| seen.insert(name.clone()));
            Ok(Propfind::AllProp { include })
        }
        other => Ok(other),
    }
}

/// Parses a PROPPATCH `propertyupdate`: its `set`/`remove` children, each holding `prop` with one
/// or more properties, flattened in document order (RFC 4918 §9.2: they apply in order).
pub fn parse_proppatch(body: &[u8]) -> Result<Vec<PatchOp>, XmlError> {
    let root = parse_root(body, "propertyupdate")?;
    let mut budget = copy_budget(body.len());
    let mut ops = Vec::new();
    for action in root.elements()? {
        let (set, element) = match action.dav_local() {
            Some("set") => (true, "set"),
            Some("remove") => (false, "remove"),
            _ => continue,
        };
        let children = action.elements()?;
        let props: Vec<_> = children
            .into_iter()
            .filter(|e| e.name.is_dav("prop"))
            .collect();
        if props.is_empty() {
            return Err(missing(element, "DAV:prop"));
        }
        for prop in props {
            let properties = prop.elements()?;
            if properties.is_empty() {
                return Err(missing("prop", "a property"));
            }
            for property in properties {
                let name = property.name.clone();
                ops.push(if set {
                    let xml = fragment(&[&root, action, prop, property], &mut budget)?;
                    let lang = property.lang.clone();
                    PatchOp::Set(name, Value { xml, lang })
                } else {
                    PatchOp::Remove(name)
                });
            }
        }
    }
    if ops.is_empty() {
        return Err(missing("propertyupdate", "DAV:set or DAV:remove"));
    }
    Ok(ops)
}

/// Parses a LOCK `lockinfo`. An empty body (a refresh) is the caller's to recognise.
pub fn parse_lockinfo(body: &[u8]) -> Result<LockInfo, XmlError> {
    const SCOPES: &str = "DAV:exclusive or DAV:shared";
    let root = parse_root(body, "lockinfo")?;
    let children = root.elements()?;
    let only = |local: &'static str| {
        let mut found = children.iter().filter(|e| e.name.is_dav(local));
        match (found.next(), found.next()) {
            (_, Some(_)) => Err(duplicate("lockinfo", local)),
            (first, None) => Ok(first.copied()),
        }
    };
    let scope = only("lockscope")?.ok_or(missing("lockinfo", "DAV:lockscope"))?;
    let mut exclusive = None;
    for choice in scope.elements()? {
        let this = match choice.dav_local() {
            Some("exclusive") => true,
            Some("shared") => false,
            _ => continue,
        };
        if exclusive.replace(this).is_some() {
            return Err(duplicate("lockscope", SCOPES));
        }
    }
    let exclusive = exclusive.ok_or(missing("lockscope", SCOPES))?;
    let locktype = only("locktype")?.ok_or(missing("lockinfo", "DAV:locktype"))?;
    let types = locktype.elements()?;
    if let Some(other) = types.iter().find(|t| !t.name.is_dav("write")) {
        return Err(XmlError::UnsupportedLockType(other.name.clone()));
    }
    if types.is_empty() {
        return Err(missing("locktype", "DAV:write"));
    }
    let owner = match only("owner")? {
        Some(owner) => Some(fragment(&[&root, owner], &mut copy_budget(body.len()))?),
        None => None,
    };
    Ok(LockInfo { exclusive, owner })
}

/// The distinct names listed in a `prop` or `include`; any content they have is irrelevant.
fn names(list: &Element) -> Result<Vec<Name>, XmlError> {
    let mut seen = HashSet::new();
    let children = list
        .elements()?
        .into_iter()
        .filter(|e| seen.insert(&e.name));
    Ok(children.map(|e| e.name.clone()).collect())
}

fn parse_root(body: &[u8], expected: &'static str) -> Result<Element, XmlError> {
    let root = parse_tree(body)?;
    if !root.name.is_dav(expected) {
        let found = root.name;
        return Err(XmlError::WrongRoot { expected, found });
    }
    Ok(root)
}

/// How many bytes of declarations copied into fragments a body may cause: four per body byte,
/// at least 64 KiB. Real bodies need a fraction of that; the cap only stops amplification.
fn copy_budget(body_len: usize) -> usize {
    body_len.saturating_mul(4).max(64 * 1024)
}

/// A parsed element. Its name is kept both resolved, for matching, and as written, so that a
/// fragment goes back with the client's own prefixes.
#[derive(Debug)]
pub(super) struct Element {
    pub(super) name: Name,
    pub(super) qname: String,
    /// Namespace declarations made on this element: (prefix, "" for the default; URI).
    pub(super) decls: Vec<(String, String)>,
    /// The other attributes: (name as written, value).
    pub(super) attrs: Vec<(String, String)>,
    /// The `xml:lang` in scope: inherited unless overridden; `xml:lang=""` clears it.
    pub(super) lang: Option<String>,
    pub(super) children: Vec<Node>,
}

#[derive(Debug)]
pub(super) enum Node {
    Element(Element),
    /// Character data with references resolved; adjacent pieces (CDATA included) are merged.
    Text(String),
}

impl Element {
    fn dav_local(&self) -> Option<&str> {
        (self.name.namespace == DAV_NS).then_some(self.name.local.as_str())
    }

    /// The child elements of an element that holds only elements: whitespace between them is
    /// formatting, other text is an error.
    fn elements(&self) -> Result<Vec<&Element>, XmlError> {
        let mut out = Vec::new();
        for child in &self.children {
            match child {
                Node::Element(e) => out.push(e),
                Node::Text(t) if t.chars().all(is_space) => {}
                Node::Text(_) => return Err(XmlError::UnexpectedText(self.name.clone())),
            }
        }
        Ok(out)
    }
}

/// Parses a whole document into its root element, enforcing every limit on the way.
fn parse_tree(body: &[u8]) -> Result<Element, XmlError> {
    let text = std::str::from_utf8(body).map_err(|_| XmlError::NotUtf8)?;
    // quick-xml does not check characters; one that XML forbids (say U+0001) would make every
    // document we later embed it in unparseable, so refuse it here.
    if let Some(at) = text.find(|c| !is_xml_char(c)) {
        return Err(malformed(at as u64, "character not allowed in XML"));
    }
    let mut reader = NsReader::from_str(text);
    let mut stack: Vec<Element> = Vec::new();
    let mut root = None;
    let mut pending = String::new();
    let (mut elements, mut attributes) = (0, 0);
    let mut first = true;
    loop {
        let at = reader.buffer_position();
        let (resolved, event) = reader.read_resolved_event().map_err(|e| malformed(at, e))?;
        let namespace = namespace_of(resolved, at);
        let was_first = std::mem::replace(&mut first, false);
        let empty = matches!(event, Event::Empty(_));
        match event {
            Event::Start(start) | Event::Empty(start) => {
                if root.is_some() {
                    return Err(malformed(at, "content after the root element"));
                }
                elements += 1;
                if elements > MAX_ELEMENTS {
                    return Err(XmlError::TooManyElements);
                }
                if stack.len() >= MAX_DEPTH {
                    return Err(XmlError::TooDeep);
                }
                flush(&mut stack, &mut pending);
                let lang = stack.last().and_then(|parent| parent.lang.clone());
                let element = open(&reader, &start, namespace, lang, &mut attributes, at)?;
                if empty {
                    close(element, &mut stack, &mut root);
                } else {
                    stack.push(element);
                }
            }
            Event::End(_) => {
                flush(&mut stack, &mut pending);
                let element = stack
                    .pop()
                    .ok_or_else(|| malformed(at, "unmatched end tag"))?;
                close(element, &mut stack, &mut root);
            }
            Event::Text(t) => {
                let t = t.xml10_content().map_err(|e| malformed(at, e))?;
                add_text(&stack, &mut pending, &t, at)?;
            }
            Event::CData(t) => {
                let t = t.xml10_content().map_err(|e| malformed(at, e))?;
                add_text(&stack, &mut pending, &t, at)?;
            }
            Event::GeneralRef(r) if !stack.is_empty() => {
                push_reference(&mut pending, &r.decode().map_err(|e| malformed(at, e))?, at)?;
            }
            Event::GeneralRef(_) => {
                return Err(malformed(at, "reference outside the root element"));
            }
            // Comments and processing instructions mean nothing to DAV.
            Event::Comment(_) | Event::PI(_) => {}
            Event::Decl(decl) => {
                if !was_first {
                    return Err(malformed(at, "XML declaration not at the start"));
                }
                if let Some(encoding) = decl.encoding() {
                    let encoding = encoding.map_err(|e| malformed(at, e))?;
                    if !encoding.eq_ignore_ascii_case(b"utf-8") {
                        let name = String::from_utf8_lossy(&encoding).into_owned();
                        return Err(XmlError::UnsupportedEncoding(name));
                    }
                }
            }
            Event::DocType(_) => return Err(XmlError::Dtd),
            Event::Eof if stack.is_empty() => {
                return root.ok_or_else(|| malformed(at, "no root element"));
            }
            Event::Eof => return Err(malformed(at, "unclosed element")),
        }
    }
}

fn namespace_of(resolved: ResolveResult<'_>, at: u64) -> Result<String, XmlError> {
    match resolved {
        ResolveResult::Unbound => Ok(String::new()),
        // quick-xml keeps the declaration's raw attribute value: decode it as an attribute.
        ResolveResult::Bound(ns) => decode_attr(utf8(ns.into_inner(), at)?, at),
        ResolveResult::Unknown(prefix) => Err(XmlError::UndeclaredPrefix(
            String::from_utf8_lossy(&prefix).into_owned(),
        )),
    }
}

fn utf8(bytes: &[u8], at: u64) -> Result<&str, XmlError> {
    std::str::from_utf8(bytes).map_err(|e| malformed(at, e))
}

/// Builds an element from its start tag; the reader has already resolved its namespace, but a
/// bad declaration is the better error, so that result is looked at after the attributes.
fn open(
    reader: &NsReader<&[u8]>,
    start: &BytesStart<'_>,
    namespace: Result<String, XmlError>,
    lang: Option<String>,
    attributes: &mut usize,
    at: u64,
) -> Result<Element, XmlError> {
    let qname = utf8(start.name().into_inner(), at)?;
    let (prefix, local) = split_qname(qname, at)?;
    if prefix == Some("xmlns") {
        return Err(malformed(at, "element name with the xmlns prefix"));
    }
    let mut element = Element {
        name: Name::new("", local),
        qname: qname.to_owned(),
        decls: Vec::new(),
        attrs: Vec::new(),
        lang,
        children: Vec::new(),
    };
    let mut seen = HashSet::new();
    // quick-xml's own duplicate check is quadratic in the attribute count; ours hashes.
    for attr in start.attributes().with_checks(false) {
        let attr = attr.map_err(|e| malformed(at, e))?;
        *attributes += 1;
        if *attributes > MAX_ATTRIBUTES {
            return Err(XmlError::TooManyAttributes);
        }
        let qname = utf8(attr.key.into_inner(), at)?;
        let value = decode_attr(utf8(&attr.value, at)?, at)?;
        let (prefix, local) = split_qname(qname, at)?;
        let long = value.len() > MAX_NAME_LEN;
        let name = match (prefix, local) {
            (None, "xmlns") | (Some("xmlns"), _) if long => {
                return Err(XmlError::TooLong("namespace name"));
            }
            (Some("xml"), "lang") if long => return Err(XmlError::TooLong("xml:lang")),
            (None, "xmlns") => {
                element.decls.push((String::new(), value));
                Name::new(XMLNS_NS, "")
            }
            (Some("xmlns"), prefix) => {
                if value.is_empty() {
                    return Err(malformed(at, "a prefix cannot be undeclared in XML 1.0"));
                }
                element.decls.push((prefix.to_owned(), value));
                Name::new(XMLNS_NS, prefix)
            }
            (_, local) => {
                let resolved = reader.resolver().resolve_attribute(attr.key).0;
                let name = Name::new(namespace_of(resolved, at)?, local);
                if name.namespace == XML_NS && local == "lang" {
                    element.lang = (!value.is_empty()).then(|| value.clone());
                }
                element.attrs.push((qname.to_owned(), value));
                name
            }
        };
        if !seen.insert(name) {
            return Err(malformed(at, format_args!("duplicate attribute {qname}")));
        }
    }
    element.name.namespace = namespace?;
    Ok(element)
}

/// Hands a finished element to its parent, or makes it the root.
fn close(element: Element, stack: &mut [Element], root: &mut Option<Element>) {
    match stack.last_mut() {
        Some(parent) => parent.children.push(Node::Element(element)),
        None => *root = Some(element),
    }
}

fn flush(stack: &mut [Element], pending: &mut String) {
    if let Some(parent) = stack.last_mut()
        && !pending.is_empty()
    {
        parent.children.push(Node::Text(std::mem::take(pending)));
    }
    pending.clear();
}

fn add_text(stack: &[Element], pending: &mut String, text: &str, at: u64) -> Result<(), XmlError> {
    if stack.is_empty() && !text.chars().all(is_space) {
        return Err(malformed(at, "text outside the root element"));
    }
    pending.push_str(text);
    Ok(())
}

/// Resolves `&name;`: the five predefined entities or a character reference. With DTDs refused,
/// no other entity can be declared, so any other name is a well-formedness error.
fn push_reference(out: &mut String, name: &str, at: u64) -> Result<(), XmlError> {
    out.push(match name {
        "lt" => '<',
        "gt" => '>',
        "amp" => '&',
        "apos" => '\'',
        "quot" => '"',
        _ => {
            let (digits, radix) = match name.strip_prefix("#x") {
                Some(hex) => (hex, 16),
                None => (name.strip_prefix('#').unwrap_or(""), 10),
            };
            // from_str_radix would also take a sign, which XML does not.
            let valid = !digits.is_empty() && digits.chars().all(|c| c.is_digit(radix));
            u32::from_str_radix(digits, radix)
                .ok()
                .filter(|_| valid)
                .and_then(char::from_u32)
                .filter(|&c| is_xml_char(c))
                .ok_or_else(|| {
                    malformed(at, format_args!("bad or undeclared reference &{name};"))
                })?
        }
    });
    Ok(())
}

/// An attribute value as XML 1.0 §3.3.3 defines it: references resolved, and each literal
/// tab, newline or CR (CRLF counting once) becoming a space. quick-xml does neither.
fn decode_attr(raw: &str, at: u64) -> Result<String, XmlError> {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(i) = rest.find(['&', '<', '\t', '\n', '\r']) {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        rest = match tail.as_bytes()[0] {
            b'&' => {
                let end = tail
                    .find(';')
                    .ok_or_else(|| malformed(at, "unterminated reference"))?;
                push_reference(&mut out, &tail[1..end], at)?;
                &tail[end + 1..]
            }
            b'<' => return Err(malformed(at, "`<` in an attribute value")),
            _ => {
                out.push(' ');
                tail.strip_prefix("\r\n").unwrap_or(&tail[1..])
            }
        };
    }
    out.push_str(rest);
    Ok(out)
}

/// Splits `prefix:local`, checking both parts are NCNames, since quick-xml takes any bytes as a
/// name and a bad one would make every document we later write it into malformed.
fn split_qname(qname: &str, at: u64) -> Result<(Option<&str>, &str), XmlError> {
    let (prefix, local) = match qname.split_once(':') {
        Some((prefix, local)) => (Some(prefix), local),
        None => (None, qname),
    };
    if prefix.is_some_and(|p| !is_ncname(p)) || !is_ncname(local) {
        return Err(malformed(at, format_args!("invalid name {qname:?}")));
    }
    Ok((prefix, local))
}

fn is_ncname(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(is_name_start) && chars.all(|c| is_name_start(c) || is_name_char(c))
}

/// XML 1.0 (fifth edition) NameStartChar, less the colon.
fn is_name_start(c: char) -> bool {
    matches!(c,
        'A'..='Z' | '_' | 'a'..='z' | '\u{C0}'..='\u{D6}' | '\u{D8}'..='\u{F6}'
        | '\u{F8}'..='\u{2FF}' | '\u{370}'..='\u{37D}' | '\u{37F}'..='\u{1FFF}'
        | '\u{200C}'..='\u{200D}' | '\u{2070}'..='\u{218F}' | '\u{2C00}'..='\u{2FEF}'
        | '\u{3001}'..='\u{D7FF}' | '\u{F900}'..='\u{FDCF}' | '\u{FDF0}'..='\u{FFFD}'
        | '\u{10000}'..='\u{EFFFF}')
}

fn is_name_char(c: char) -> bool {
    matches!(c, '-' | '.' | '0'..='9' | '\u{B7}' | '\u{300}'..='\u{36F}' | '\u{203F}'..='\u{2040}')
}

/// XML 1.0 `Char` (Rust's `char` already excludes surrogates).
fn is_xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | ' '..='\u{FFFD}' | '\u{10000}'..) && c != '\u{FFFE}'
}

/// XML white space, which (unlike `char::is_whitespace`) is exactly these four.
fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const Z39: &str = "http://ns.example.com/standards/z39.50/";

    /// The variant's name, so a table can say which error a body must get.
    fn kind(error: &XmlError) -> String {
        let debug = format!("{error:?}");
        let end = debug.find([' ', '(', '{']).unwrap_or(debug.len());
        debug[..end].to_owned()
    }

    #[test]
    fn rfc_9_1_3_named_properties() {
        let body = br#"<?xml version="1.0" encoding="utf-8" ?>
            <D:propfind xmlns:D="DAV:">
              <D:prop xmlns:R="http://ns.example.com/boxschema/">
                <R:bigbox/> <R:author/> <R:DingALing/> <R:Random/>
              </D:prop>
            </D:propfind>"#;
        let r = |l| Name::new("http://ns.example.com/boxschema/", l);
        let want = vec![r("bigbox"), r("author"), r("DingALing"), r("Random")];
        assert_eq!(parse_propfind(body).expect("parses"), Propfind::Prop(want));
    }

    #[test]
    fn rfc_9_1_4_to_9_1_6_propname_allprop_include() {
        let propname = br#"<?xml version="1.0" encoding="utf-8" ?>
            <propfind xmlns="DAV:"><propname/></propfind>"#;
        let got = parse_propfind(propname).expect("parses");
        assert_eq!(got, Propfind::PropName);
        let allprop = br#"<D:propfind xmlns:D="DAV:"><D:allprop/></D:propfind>"#;
        let all = Propfind::AllProp { include: vec![] };
        assert_eq!(parse_propfind(allprop).expect("parses"), all);
        let include = br#"<?xml version="1.0" encoding="utf-8" ?>
            <D:propfind xmlns:D="DAV:">
              <D:allprop/>
              <D:include>
                <D:supported-live-property-set/>
                <D:supported-report-set/>
              </D:include>
              <D:include><D:supported-report-set/></D:include>
            </D:propfind>"#;
        let names = ["supported-live-property-set", "supported-report-set"];
        let include = parse_propfind(include).expect("parses");
        assert_eq!(
            include,
            Propfind::AllProp {
                include: names.map(Name::dav).into()
            }
        );
        // An empty body is allprop too; include beside propname means nothing.
        assert_eq!(parse_propfind(b"").expect("empty"), all);
        assert_eq!(parse_propfind(b" \r\n\t").expect("blank"), all);
        let odd = br#"<propfind xmlns="DAV:"><include><x/></include><propname/></propfind>"#;
        assert_eq!(parse_propfind(odd).expect("parses"), Propfind::PropName);
    }

    #[test]
    fn dav_elements_by_namespace_not_prefix() {
        // The default namespace, an unusual prefix, and unknown elements that must be skipped
        // (a `prop` in another namespace is not DAV:prop); duplicate names are dropped.
        let body = br#"<A:propfind xmlns:A="DAV:" xmlns:X="urn:x">
              <X:prop><A:allprop/></X:prop>
              <prop xmlns="DAV:"><getetag/><X:color/><plain xmlns=""/><getetag/></prop>
              <A:unknown-extension/>
            </A:propfind>"#;
        let color = Name::new("urn:x", "color");
        let want = vec![Name::dav("getetag"), color, Name::new("", "plain")];
        assert_eq!(parse_propfind(body).expect("parses"), Propfind::Prop(want));
        let not_dav = br#"<propfind xmlns="urn:not-dav"><allprop/></propfind>"#;
        let (err, want) = (
            parse_propfind(not_dav),
            Name::new("urn:not-dav", "propfind"),
        );
        assert!(
            matches!(err, Err(XmlError::WrongRoot { expected: "propfind", found }) if found == want)
        );
    }

    #[test]
    fn rfc_9_2_2_proppatch() {
        let body = br#"<?xml version="1.0" encoding="utf-8" ?>
            <D:propertyupdate xmlns:D="DAV:"
                    xmlns:Z="http://ns.example.com/standards/z39.50/">
              <D:set>
                <D:prop>
                  <Z:Authors>
                    <Z:Author>Jim Whitehead</Z:Author>
                    <Z:Author>Roy Fielding</Z:Author>
                  </Z:Authors>
                </D:prop>
              </D:set>
              <D:remove>
                <D:prop><Z:Copyright-Owner/></D:prop>
              </D:remove>
            </D:propertyupdate>"#;
        let author = |who| format!(r#"<Z:Author xmlns:Z="{Z39}">{who}</Z:Author>"#);
        let (jim, roy) = (author("Jim Whitehead"), author("Roy Fielding"));
        // The value keeps its whitespace (RFC 4918 §4.3) and the `Z` declaration it relied on.
        let pad = "\n                    ";
        let xml = format!("{pad}{jim}{pad}{roy}\n                  ");
        let want = vec![
            PatchOp::Set(Name::new(Z39, "Authors"), Value { xml, lang: None }),
            PatchOp::Remove(Name::new(Z39, "Copyright-Owner")),
        ];
        assert_eq!(parse_proppatch(body).expect("parses"), want);
    }

    #[test]
    fn rfc_9_10_7_lockinfo() {
        let body = br#"<?xml version="1.0" encoding="utf-8" ?>
            <D:lockinfo xmlns:D='DAV:'>
              <D:lockscope><D:exclusive/></D:lockscope>
              <D:locktype><D:write/></D:locktype>
              <D:owner>
                <D:href>http://example.org/~ejw/contact.html</D:href>
              </D:owner>
            </D:lockinfo>"#;
        let href = r#"<D:href xmlns:D="DAV:">http://example.org/~ejw/contact.html</D:href>"#;
        let owner = format!("\n                {href}\n              ");
        let info = parse_lockinfo(body).expect("parses");
        assert_eq!((info.exclusive, info.owner), (true, Some(owner)));

        let shared = br#"<lockinfo xmlns="DAV:"><x:hint xmlns:x="urn:x"/><lockscope><shared/>
            </lockscope><locktype><write/></locktype><owner>Jim &amp; co</owner></lockinfo>"#;
        let info = parse_lockinfo(shared).expect("parses");
        assert_eq!(
            (info.exclusive, info.owner),
            (false, Some("Jim &amp; co".into()))
        );
        let no_owner = br#"<lockinfo xmlns="DAV:"><lockscope><exclusive/></lockscope>
            <locktype><write/></locktype></lockinfo>"#;
        assert_eq!(parse_lockinfo(no_owner).expect("parses").owner, None);
    }

    #[test]
    fn limits() {
        // propfind > prop > Z:x > `a` nested until the document is `depth` deep.
        let deep = |depth: usize| {
            let (open, close) = ("<a>".repeat(depth - 3), "</a>".repeat(depth - 3));
            let prop = format!(r#"<D:prop><Z:x xmlns:Z="urn:z">{open}{close}</Z:x></D:prop>"#);
            format!(r#"<D:propfind xmlns:D="DAV:">{prop}</D:propfind>"#)
        };
        assert!(parse_propfind(deep(64).as_bytes()).is_ok());
        assert!(matches!(
            parse_propfind(deep(65).as_bytes()),
            Err(XmlError::TooDeep)
        ));
        let many = |n: usize| {
            let props = "<a/>".repeat(n - 2);
            format!(r#"<propfind xmlns="DAV:"><prop>{props}</prop></propfind>"#)
        };
        assert!(parse_propfind(many(MAX_ELEMENTS).as_bytes()).is_ok());
        let err = parse_propfind(many(MAX_ELEMENTS + 1).as_bytes());
        assert!(matches!(err, Err(XmlError::TooManyElements)));
        let attrs: String = (0..=MAX_ATTRIBUTES).map(|i| format!(" a{i}=''")).collect();
        let body = format!(r#"<propfind xmlns="DAV:"{attrs}><allprop/></propfind>"#);
        let err = parse_propfind(body.as_bytes());
        assert!(matches!(err, Err(XmlError::TooManyAttributes)));
        let long = "x".repeat(MAX_NAME_LEN + 1);
        for (attr, what) in [("xmlns:Z", "namespace name"), ("xml:lang", "xml:lang")] {
            let body = format!(r#"<propfind xmlns="DAV:" {attr}="{long}"><allprop/></propfind>"#);
            let err = parse_propfind(body.as_bytes());
            assert!(
                matches!(err, Err(XmlError::TooLong(w)) if w == what),
                "{err:?}"
            );
        }
    }

    #[test]
    #[rustfmt::skip]
    fn refused_propfind_bodies() {
        let cases: &[(&[u8], &str)] = &[
            (b"<D:propfind><D:allprop/></D:propfind>", "UndeclaredPrefix"),
            (br#"<propfind xmlns="DAV:"><prop><Q:a/></prop></propfind>"#, "UndeclaredPrefix"),
            (br#"<propfind xmlns="DAV:" Q:a="1"><allprop/></propfind>"#, "UndeclaredPrefix"),
            (br#"<!DOCTYPE propfind><propfind xmlns="DAV:"><allprop/></propfind>"#, "Dtd"),
            (br#"<!DOCTYPE p [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;">]><p>&b;</p>"#, "Dtd"),
            (b"<propfind xmlns='DAV:'><prop><x>\xff</x></prop></propfind>", "NotUtf8"),
            (br#"<?xml version="1.0" encoding="ISO-8859-1"?><propfind/>"#, "UnsupportedEncoding"),
            (br#"<propertyupdate xmlns="DAV:"><allprop/></propertyupdate>"#, "WrongRoot"),
            (br#"<propfind xmlns="DAV:">text<allprop/></propfind>"#, "UnexpectedText"),
            (br#"<propfind xmlns="DAV:"><x/></propfind>"#, "Missing"),
            (br#"<propfind xmlns="DAV:"><allprop/><prop/></propfind>"#, "Duplicate"),
            (b"<propfind xmlns='DAV:'><allprop/>", "Malformed"),
            (b"<propfind xmlns='DAV:'><allprop></prop></propfind>", "Malformed"),
            (b"<propfind xmlns='DAV:'/><propfind xmlns='DAV:'/>", "Malformed"),
            (b"<propfind xmlns='DAV:'/>trailing", "Malformed"),
            (b"<propfind xmlns='DAV:'/>&amp;", "Malformed"),
            (b"<propfind xmlns='DAV:'><prop><x>&bogus;</x></prop></propfind>", "Malformed"),
            (b"<propfind xmlns='DAV:'><prop><x>&#0;</x></prop></propfind>", "Malformed"),
            (b"<propfind xmlns='DAV:'><prop><x>&#xFFFE;</x></prop></propfind>", "Malformed"),
            (b"<propfind xmlns='DAV:'><prop><x>&#+65;</x></prop></propfind>", "Malformed"),
            (b"<propfind xmlns='DAV:'><prop><x>\x01</x></prop></propfind>", "Malformed"),
            (b"<propfind xmlns='DAV:'><prop><x a='<'/></prop></propfind>", "Malformed"),
            (b"<propfind xmlns='DAV:'><prop><x a='1' a='2'/></prop></propfind>", "Malformed"),
            (b"<propfind xmlns='DAV:' xmlns:p='u' xmlns:q='u'><prop p:a='' q:a=''/></propfind>", "Malformed"),
            (b"<propfind xmlns='DAV:'><prop><p:x xmlns:p=''/></prop></propfind>", "Malformed"),
            (b"<propfind xmlns='DAV:'><prop><1x/></prop></propfind>", "Malformed"),
            (b"<propfind xmlns='DAV:'><prop><a:b:c xmlns:a='u'/></prop></propfind>", "Malformed"),
            (b"<propfind xmlns='DAV:'><allprop/><?xml version='1.0'?></propfind>", "Malformed"),
            (b"<!-- just a comment -->", "Malformed"),
        ];
        for (body, want) in cases {
            let err = parse_propfind(body).expect_err(&String::from_utf8_lossy(body));
            assert_eq!(&kind(&err), want, "{}: {err}", String::from_utf8_lossy(body));
        }
    }

    #[test]
    #[rustfmt::skip]
    fn refused_proppatch_and_lockinfo_bodies() {
        let patches = [
            ("", "Missing"),
            ("<set/>", "Missing"),
            ("<remove><prop/></remove>", "Missing"),
            ("<set><prop>x<Z:a/></prop></set>", "UnexpectedText"),
        ];
        for (inner, want) in patches {
            let body = format!(r#"<propertyupdate xmlns="DAV:" xmlns:Z="urn:z">{inner}</propertyupdate>"#);
            assert_eq!(kind(&parse_proppatch(body.as_bytes()).expect_err(inner)), want, "{inner}");
        }
        let (shared, write) = ("<lockscope><shared/></lockscope>", "<locktype><write/></locktype>");
        let locks = [
            (format!("{shared}<locktype><read/></locktype>"), "UnsupportedLockType"),
            (format!("{shared}<locktype><X:write/></locktype>"), "UnsupportedLockType"),
            (format!("{shared}<locktype/>"), "Missing"),
            (shared.to_owned(), "Missing"),
            (write.to_owned(), "Missing"),
            (format!("<lockscope><shared/><exclusive/></lockscope>{write}"), "Duplicate"),
            (format!("{shared}{write}{write}"), "Duplicate"),
        ];
        for (inner, want) in locks {
            let body = format!(r#"<lockinfo xmlns="DAV:" xmlns:X="urn:x">{inner}</lockinfo>"#);
            assert_eq!(kind(&parse_lockinfo(body.as_bytes()).expect_err(&inner)), want, "{inner}");
        }
        let read = format!(r#"<lockinfo xmlns="DAV:">{shared}<locktype><read/></locktype></lockinfo>"#);
        let err = parse_lockinfo(read.as_bytes());
        assert!(matches!(err, Err(XmlError::UnsupportedLockType(n)) if n == Name::dav("read")));
        let wrong = parse_lockinfo(br#"<propfind xmlns="DAV:"><allprop/></propfind>"#);
        assert!(matches!(wrong, Err(XmlError::WrongRoot { expected: "lockinfo", .. })));
        assert!(matches!(parse_lockinfo(b""), Err(XmlError::Malformed { .. })));
    }

    /// Fragments of DAV bodies, so that random sequences reach past the root element.
    const XMLISH: &str = r#"(<[/?!]?[DaZ]?:?[a-z]{0,3}( [a-z:]{1,7}=['"][a-z:&#;x0-9<]{0,6}['"])?/?>|&[a-z#0-9]{0,4};?|[ a-z\u{10000}\]]{0,3}|<!\[CDATA\[|\]\]>|<!--|-->){0,24}"#;

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(body in prop::collection::vec(any::<u8>(), 0..256)) {
            let _ = parse_propfind(&body);
            let _ = parse_proppatch(&body);
            let _ = parse_lockinfo(&body);
        }

        #[test]
        fn xml_like_text_never_panics(body in XMLISH) {
            let wrapped = format!(r#"<D:propertyupdate xmlns:D="DAV:"><D:set><D:prop>{body}"#);
            for body in [body.as_bytes(), wrapped.as_bytes()] {
                let _ = parse_propfind(body);
                let _ = parse_proppatch(body);
                let _ = parse_lockinfo(body);
            }
        }
    }
}
