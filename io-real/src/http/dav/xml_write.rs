//! WebDAV (RFC 4918) XML writing: response bodies (multistatus, lock discovery, errors) and the
//! self-contained fragments that dead property values are stored as. Re-exported by
//! [`super::xml`], which callers use.
//!
//! DAV: is bound to the prefix `D` on each document's root. Any other namespace is declared on
//! the element that uses it (`<ns0:foo xmlns:ns0="http://x">`), so an element can go anywhere,
//! next to fragments that bring their own declarations, without a prefix clash. Nothing here
//! declares a default namespace, so a name in no namespace is written bare and never needs
//! `xmlns=""`. Text and attribute values are escaped; names and raw fragments are written as
//! given, trusted to be well-formed as those from [`super::xml`]'s parsers and from here are.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use super::xml::{DAV_NS, Element, Name, Node, XML_NS, XmlError};

const XML_DECL: &str = r#"<?xml version="1.0" encoding="utf-8"?>"#;

/// One property in an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PropOut {
    /// `<name/>` (propname answers and failed props)
    Empty(Name),
    /// `<name>escaped text</name>`
    Text(Name, String),
    /// `<name>` + raw, already well-formed XML (a stored dead `Value::xml`, or a fragment built
    /// with the helpers here) + `</name>`; `lang` adds `xml:lang`.
    Raw(Name, String, Option<String>),
}

/// A `207 Multi-Status` body, one `<D:response>` at a time.
#[derive(Debug, Clone)]
pub struct Multistatus {
    out: String,
}

impl Default for Multistatus {
    fn default() -> Self {
        Self::new()
    }
}

impl Multistatus {
    pub fn new() -> Self {
        let out = format!(r#"{XML_DECL}<D:multistatus xmlns:D="DAV:">"#);
        Self { out }
    }

    /// One `<D:response>` with `<D:href>` (already percent-encoded) and one `<D:propstat>` per
    /// (status, props) group, skipping empty groups. If all are empty, one empty `200` propstat
    /// is written, since RFC 4918 §14.24 wants a status or a propstat in every response.
    pub fn propstat_response(&mut self, href: &str, groups: &[(u16, &[PropOut])]) {
        let out = &mut self.out;
        out.push_str("<D:response>");
        write_href(out, href);
        let groups: Vec<_> = groups
            .iter()
            .filter(|(_, props)| !props.is_empty())
            .collect();
        for (status, props) in &groups {
            out.push_str("<D:propstat><D:prop>");
            props.iter().for_each(|prop| write_prop(out, prop));
            out.push_str("</D:prop>");
            write_status(out, *status);
            out.push_str("</D:propstat>");
        }
        if groups.is_empty() {
            out.push_str("<D:propstat><D:prop/>");
            write_status(out, 200);
            out.push_str("</D:propstat>");
        }
        out.push_str("</D:response>");
    }

    /// One `<D:response>` with `<D:href>`, `<D:status>` and, given a DAV: precondition name
    /// (such as `lock-token-submitted`) and its hrefs, `<D:error>`.
    pub fn status_response(&mut self, href: &str, status: u16, error: Option<(&str, &[&str])>) {
        let out = &mut self.out;
        out.push_str("<D:response>");
        write_href(out, href);
        write_status(out, status);
        if let Some((condition, hrefs)) = error {
            out.push_str("<D:error>");
            write_condition(out, condition, hrefs);
            out.push_str("</D:error>");
        }
        out.push_str("</D:response>");
    }

    /// The bytes written so far, leaving the builder empty: a long answer is sent a piece
    /// at a time, and [`Self::finish`] then gives only the closing tag.
    pub fn take(&mut self) -> String {
        std::mem::take(&mut self.out)
    }

    /// Bytes written since the last [`Self::take`].
    pub fn pending(&self) -> usize {
        self.out.len()
    }

    pub fn finish(mut self) -> String {
        self.out.push_str("</D:multistatus>");
        self.out
    }
}

/// One lock, as `lockdiscovery` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveLock {
    pub exclusive: bool,
    pub depth_infinity: bool,
    /// A fragment, as `LockInfo::owner`.
    pub owner: Option<String>,
    /// `None` is Infinite.
    pub timeout_secs: Option<u64>,
    /// The lock token URI.
    pub token: String,
    /// The lock root's href, already percent-encoded.
    pub root: String,
}

/// The `<D:activelock>` elements for `locks`, to go inside `<D:lockdiscovery>`.
pub fn lock_discovery_fragment(locks: &[ActiveLock]) -> String {
    let mut out = String::new();
    for lock in locks {
        // Children in the order of RFC 4918 §14.1's DTD.
        out.push_str("<D:activelock><D:lockscope>");
        out.push_str(if lock.exclusive {
            "<D:exclusive/>"
        } else {
            "<D:shared/>"
        });
        out.push_str("</D:lockscope><D:locktype><D:write/></D:locktype><D:depth>");
        out.push_str(if lock.depth_infinity { "infinity" } else { "0" });
        out.push_str("</D:depth>");
        if let Some(owner) = &lock.owner {
            out.push_str(&format!("<D:owner>{owner}</D:owner>"));
        }
        // RFC 4918 §10.7 caps `Second-n` at 2^32 - 1.
        let timeout = match lock.timeout_secs {
            Some(secs) => format!("Second-{}", secs.min(u32::MAX.into())),
            None => "Infinite".to_owned(),
        };
        out.push_str(&format!("<D:timeout>{timeout}</D:timeout><D:locktoken>"));
        write_href(&mut out, &lock.token);
        out.push_str("</D:locktoken><D:lockroot>");
        write_href(&mut out, &lock.root);
        out.push_str("</D:lockroot></D:activelock>");
    }
    out
}

/// The `supportedlock` content: exclusive and shared write locks.
pub fn supported_lock_fragment() -> &'static str {
    concat!(
        "<D:lockentry><D:lockscope><D:exclusive/></D:lockscope>",
        "<D:locktype><D:write/></D:locktype></D:lockentry>",
        "<D:lockentry><D:lockscope><D:shared/></D:lockscope>",
        "<D:locktype><D:write/></D:locktype></D:lockentry>",
    )
}

/// The body of a LOCK 200/201 answer: `<D:prop><D:lockdiscovery>` with `locks`.
pub fn lock_response_body(locks: &[ActiveLock]) -> String {
    let locks = lock_discovery_fragment(locks);
    let root = r#"<D:prop xmlns:D="DAV:"><D:lockdiscovery>"#;
    format!("{XML_DECL}{root}{locks}</D:lockdiscovery></D:prop>")
}

/// An error body naming a DAV: precondition and its hrefs, e.g. `<D:error xmlns:D="DAV:">
/// <D:lock-token-submitted><D:href>/x</D:href></D:lock-token-submitted></D:error>`.
pub fn error_body(condition: &str, hrefs: &[&str]) -> String {
    let mut out = format!(r#"{XML_DECL}<D:error xmlns:D="DAV:">"#);
    write_condition(&mut out, condition, hrefs);
    out.push_str("</D:error>");
    out
}

/// The reason phrase for a status code (RFC 9110 and RFC 4918 wording); "" if unknown, which a
/// status line allows.
pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        207 => "Multi-Status",
        301 => "Moved Permanently",
        302 => "Found",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Content",
        423 => "Locked",
        424 => "Failed Dependency",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        507 => "Insufficient Storage",
        508 => "Loop Detected",
        _ => "",
    }
}

/// Serialises the content of the last element of `path` (its ancestors from the root, in order)
/// as a self-contained fragment: each top-level element declares the prefixes its subtree uses
/// but does not declare, bound as on the request. Declarations copied cost `budget` bytes.
pub(super) fn fragment(path: &[&Element], budget: &mut usize) -> Result<String, XmlError> {
    let mut out = String::new();
    let Some(owner) = path.last() else {
        return Ok(out);
    };
    let scope: Vec<_> = path.iter().flat_map(|e| &e.decls).collect();
    for child in &owner.children {
        let element = match child {
            Node::Text(text) => {
                escape_text(&mut out, text);
                continue;
            }
            Node::Element(element) => element,
        };
        let mut free = BTreeSet::new();
        free_prefixes(element, &mut Vec::new(), &mut free);
        let mut copied = Vec::new();
        // `xml` is bound everywhere already. Any other free prefix resolved when parsed, so it
        // is in scope, except the default, which then is copied as "" (no namespace).
        for prefix in free.into_iter().filter(|&p| p != "xml") {
            let bound = scope.iter().rev().find(|(p, _)| p == prefix);
            let uri = bound.map_or("", |(_, uri)| uri.as_str());
            let cost = prefix.len() + uri.len() + 10;
            *budget = budget.checked_sub(cost).ok_or(XmlError::FragmentTooLarge)?;
            copied.push((prefix, uri));
        }
        write_element(&mut out, element, &copied);
    }
    Ok(out)
}

/// Collects the prefixes (`""` for the default) that `element`'s subtree uses in element or
/// attribute names without declaring them on the way down.
fn free_prefixes<'a>(element: &'a Element, bound: &mut Vec<&'a str>, free: &mut BTreeSet<&'a str>) {
    let mark = bound.len();
    bound.extend(element.decls.iter().map(|(p, _)| p.as_str()));
    let prefix = |qname: &'a str| qname.split_once(':').map(|(p, _)| p);
    // An unprefixed element is in the default namespace; an unprefixed attribute is in none.
    let attrs = element.attrs.iter().filter_map(|(qname, _)| prefix(qname));
    for p in attrs.chain([prefix(&element.qname).unwrap_or("")]) {
        if !bound.contains(&p) {
            free.insert(p);
        }
    }
    for child in &element.children {
        if let Node::Element(child) = child {
            free_prefixes(child, bound, free);
        }
    }
    bound.truncate(mark);
}

fn write_element(out: &mut String, element: &Element, copied: &[(&str, &str)]) {
    out.push('<');
    out.push_str(&element.qname);
    let own = element
        .decls
        .iter()
        .map(|(p, uri)| (p.as_str(), uri.as_str()));
    for (prefix, uri) in copied.iter().copied().chain(own) {
        out.push_str(if prefix.is_empty() {
            " xmlns"
        } else {
            " xmlns:"
        });
        out.push_str(prefix);
        write_value(out, uri);
    }
    for (qname, value) in &element.attrs {
        out.push(' ');
        out.push_str(qname);
        write_value(out, value);
    }
    if element.children.is_empty() {
        return out.push_str("/>");
    }
    out.push('>');
    for child in &element.children {
        match child {
            Node::Text(text) => escape_text(out, text),
            Node::Element(child) => write_element(out, child, &[]),
        }
    }
    out.push_str(&format!("</{}>", element.qname));
}

fn write_status(out: &mut String, status: u16) {
    out.push_str("<D:status>HTTP/1.1 ");
    // Writing into a String cannot fail.
    let _ = write!(out, "{status}");
    out.push(' ');
    out.push_str(reason(status));
    out.push_str("</D:status>");
}

fn write_href(out: &mut String, href: &str) {
    out.push_str("<D:href>");
    escape_text(out, href);
    out.push_str("</D:href>");
}

fn write_condition(out: &mut String, condition: &str, hrefs: &[&str]) {
    // Callers pass RFC 4918 precondition names: ASCII words and hyphens, safe as they are.
    debug_assert!(
        !condition.is_empty()
            && condition
                .bytes()
                .all(|b| b.is_ascii_alphabetic() || b == b'-'),
        "not a DAV: precondition name: {condition:?}"
    );
    if hrefs.is_empty() {
        return out.push_str(&format!("<D:{condition}/>"));
    }
    out.push_str(&format!("<D:{condition}>"));
    hrefs.iter().for_each(|href| write_href(out, href));
    out.push_str(&format!("</D:{condition}>"));
}

fn write_prop(out: &mut String, prop: &PropOut) {
    let (PropOut::Empty(name) | PropOut::Text(name, _) | PropOut::Raw(name, ..)) = prop;
    out.push('<');
    write_qname(out, name);
    if !matches!(name.namespace.as_str(), DAV_NS | XML_NS | "") {
        out.push_str(" xmlns:ns0");
        write_value(out, &name.namespace);
    }
    match prop {
        PropOut::Empty(_) => return out.push_str("/>"),
        PropOut::Text(_, text) => {
            out.push('>');
            escape_text(out, text);
        }
        PropOut::Raw(_, xml, lang) => {
            if let Some(lang) = lang {
                out.push_str(" xml:lang");
                write_value(out, lang);
            }
            out.push('>');
            out.push_str(xml);
        }
    }
    out.push_str("</");
    write_qname(out, name);
    out.push('>');
}

fn write_qname(out: &mut String, name: &Name) {
    out.push_str(match name.namespace.as_str() {
        DAV_NS => "D:",
        // The `xml` namespace may only be written with its own, undeclared prefix.
        XML_NS => "xml:",
        "" => "",
        _ => "ns0:",
    });
    out.push_str(&name.local);
}

/// `="value"`, escaped. Tab, LF and CR become references because a reader would turn the
/// literal characters into spaces (XML 1.0 §3.3.3).
fn write_value(out: &mut String, value: &str) {
    out.push_str("=\"");
    for c in value.chars() {
        match c {
            '"' => out.push_str("&quot;"),
            '\t' => out.push_str("&#x9;"),
            '\n' => out.push_str("&#xA;"),
            c => escape_char(out, c),
        }
    }
    out.push('"');
}

/// Escapes character data, copying the runs between characters that need escaping whole.
fn escape_text(out: &mut String, text: &str) {
    let mut rest = text;
    while let Some(at) = rest.find(['&', '<', '>', '\r']) {
        out.push_str(&rest[..at]);
        let c = rest[at..].chars().next().unwrap_or_default();
        escape_char(out, c);
        rest = &rest[at + c.len_utf8()..];
    }
    out.push_str(rest);
}

/// `>` is escaped so that `]]>` cannot appear, CR because a reader would take a literal CR for
/// a line end and turn it into LF (XML 1.0 §2.11).
fn escape_char(out: &mut String, c: char) {
    match c {
        '&' => out.push_str("&amp;"),
        '<' => out.push_str("&lt;"),
        '>' => out.push_str("&gt;"),
        '\r' => out.push_str("&#xD;"),
        c => out.push(c),
    }
}

#[cfg(test)]
mod tests {
    use super::super::xml::{MAX_NAME_LEN, PatchOp, Value, parse_proppatch};
    use super::*;
    use proptest::prelude::*;
    use quick_xml::NsReader;
    use quick_xml::escape::{resolve_predefined_entity, unescape};
    use quick_xml::events::Event;
    use quick_xml::name::ResolveResult;

    /// Reads `doc` with quick-xml's namespace-aware reader into a flat list: `<{ns}local` for
    /// each element, `@{ns}local=value` for each attribute but declarations, `>` for each end,
    /// and `"text` for text. Panics on malformed XML or an unknown prefix.
    fn read(doc: &str) -> Vec<String> {
        let ns = |r: ResolveResult<'_>| match r {
            ResolveResult::Bound(n) => {
                let raw = String::from_utf8_lossy(n.into_inner()).into_owned();
                unescape(&raw).expect("namespace").into_owned()
            }
            ResolveResult::Unbound => String::new(),
            ResolveResult::Unknown(p) => panic!("unknown prefix {p:?} in {doc}"),
        };
        let text = |out: &mut Vec<String>, t: &str| match out.last_mut() {
            Some(last) if last.starts_with('"') => last.push_str(t),
            _ => out.push(format!("\"{t}")),
        };
        let mut reader = NsReader::from_str(doc);
        let mut out = Vec::new();
        loop {
            let (resolved, event) = reader.read_resolved_event().expect(doc);
            let space = ns(resolved);
            match event {
                Event::Start(ref e) | Event::Empty(ref e) => {
                    let local = String::from_utf8_lossy(e.local_name().into_inner()).into_owned();
                    out.push(format!("<{{{space}}}{local}"));
                    for a in e.attributes() {
                        let a = a.expect("attribute");
                        if a.key.as_namespace_binding().is_none() {
                            let (n, local) = reader.resolver().resolve_attribute(a.key);
                            let local = String::from_utf8_lossy(local.into_inner()).into_owned();
                            let value = a.unescape_value().expect("value");
                            out.push(format!("@{{{}}}{local}={value}", ns(n)));
                        }
                    }
                    if matches!(event, Event::Empty(_)) {
                        out.push(">".into());
                    }
                }
                Event::End(_) => out.push(">".into()),
                Event::Text(t) => text(&mut out, &t.xml10_content().expect("text")),
                Event::CData(t) => text(&mut out, &t.xml10_content().expect("cdata")),
                Event::GeneralRef(r) => match r.resolve_char_ref().expect("reference") {
                    Some(c) => text(&mut out, &c.to_string()),
                    None => {
                        let name = r.decode().expect("utf-8");
                        text(&mut out, resolve_predefined_entity(&name).expect("entity"));
                    }
                },
                Event::Eof => return out,
                _ => {}
            }
        }
    }

    /// The content (attributes, then children) of the first element after the first `after`.
    fn content<'a>(events: &'a [String], after: &str) -> &'a [String] {
        let after = events.iter().position(|e| e == after).expect(after);
        let start = after
            + 2
            + events[after + 1..]
                .iter()
                .position(|e| e.starts_with('<'))
                .expect("element");
        let mut depth = 1;
        for (i, e) in events.iter().enumerate().skip(start) {
            depth += usize::from(e.starts_with('<'));
            depth -= usize::from(e == ">");
            if depth == 0 {
                return &events[start..i];
            }
        }
        panic!("unclosed element after {after}")
    }

    fn strs(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn multistatus_propstat() {
        let found = [
            PropOut::Empty(Name::dav("resourcetype")),
            PropOut::Text(Name::new("http://x/?a&b", "n"), "1 < 2 & \"3\"\r".into()),
            PropOut::Raw(
                Name::new("", "bare"),
                "<D:collection/>".into(),
                Some("en\"".into()),
            ),
        ];
        let missing = vec![PropOut::Empty(Name::new("urn:z", "gone"))];
        let mut answer = Multistatus::default();
        answer.propstat_response("/a&b/", &[(200, &found), (403, &[]), (404, &missing)]);
        let doc = answer.finish();
        let want = concat!(
            r#"<?xml version="1.0" encoding="utf-8"?><D:multistatus xmlns:D="DAV:"><D:response>"#,
            r#"<D:href>/a&amp;b/</D:href><D:propstat><D:prop><D:resourcetype/>"#,
            r#"<ns0:n xmlns:ns0="http://x/?a&amp;b">1 &lt; 2 &amp; "3"&#xD;</ns0:n>"#,
            r#"<bare xml:lang="en&quot;"><D:collection/></bare></D:prop>"#,
            r#"<D:status>HTTP/1.1 200 OK</D:status></D:propstat><D:propstat><D:prop>"#,
            r#"<ns0:gone xmlns:ns0="urn:z"/></D:prop><D:status>HTTP/1.1 404 Not Found</D:status>"#,
            r#"</D:propstat></D:response></D:multistatus>"#,
        );
        assert_eq!(doc, want);
        #[rustfmt::skip]
        let events = strs(&[
            "<{DAV:}multistatus", "<{DAV:}response", "<{DAV:}href", "\"/a&b/", ">",
            "<{DAV:}propstat", "<{DAV:}prop", "<{DAV:}resourcetype", ">",
            "<{http://x/?a&b}n", "\"1 < 2 & \"3\"\r", ">",
            "<{}bare", &format!("@{{{XML_NS}}}lang=en\""), "<{DAV:}collection", ">", ">", ">",
            "<{DAV:}status", "\"HTTP/1.1 200 OK", ">", ">",
            "<{DAV:}propstat", "<{DAV:}prop", "<{urn:z}gone", ">", ">",
            "<{DAV:}status", "\"HTTP/1.1 404 Not Found", ">", ">", ">", ">",
        ]);
        assert_eq!(read(&doc), events);
    }

    #[test]
    fn multistatus_status_and_empty_responses() {
        let mut answer = Multistatus::new();
        answer.status_response("/locked", 423, Some(("lock-token-submitted", &["/", "/x"])));
        answer.status_response("/dep", 424, None);
        answer.propstat_response("/none", &[(404, &[])]);
        let doc = answer.finish();
        #[rustfmt::skip]
        let want = strs(&[
            "<{DAV:}multistatus", "<{DAV:}response", "<{DAV:}href", "\"/locked", ">",
            "<{DAV:}status", "\"HTTP/1.1 423 Locked", ">", "<{DAV:}error",
            "<{DAV:}lock-token-submitted", "<{DAV:}href", "\"/", ">", "<{DAV:}href", "\"/x", ">",
            ">", ">", ">",
            "<{DAV:}response", "<{DAV:}href", "\"/dep", ">",
            "<{DAV:}status", "\"HTTP/1.1 424 Failed Dependency", ">", ">",
            "<{DAV:}response", "<{DAV:}href", "\"/none", ">", "<{DAV:}propstat", "<{DAV:}prop",
            ">", "<{DAV:}status", "\"HTTP/1.1 200 OK", ">", ">", ">", ">",
        ]);
        assert_eq!(read(&doc), want);
    }

    #[test]
    fn rfc_9_10_7_lock_answer_and_more_locks() {
        let lock = |exclusive, depth_infinity, owner: Option<&str>, timeout_secs| ActiveLock {
            exclusive,
            depth_infinity,
            owner: owner.map(str::to_owned),
            timeout_secs,
            token: "urn:uuid:e71d4fae-5dec-22d6-fea5-00a0c91e6be4".into(),
            root: "http://example.com/workspace/webdav/proposal.doc".into(),
        };
        let owner = r#"<D:href xmlns:D="DAV:">http://example.org/~ejw/contact.html</D:href>"#;
        let rfc = lock(true, true, Some(owner), Some(604_800));
        let locks = [
            rfc,
            lock(false, false, None, None),
            lock(false, true, None, Some(1 << 40)),
        ];
        #[rustfmt::skip]
        let one = |scope: &str, depth: &str, owner: &[&str], timeout: &str| {
            let mut e = strs(&["<{DAV:}activelock", "<{DAV:}lockscope", scope, ">", ">",
                "<{DAV:}locktype", "<{DAV:}write", ">", ">", "<{DAV:}depth", depth, ">"]);
            e.extend(strs(owner));
            e.extend(strs(&["<{DAV:}timeout", timeout, ">", "<{DAV:}locktoken", "<{DAV:}href",
                "\"urn:uuid:e71d4fae-5dec-22d6-fea5-00a0c91e6be4", ">", ">", "<{DAV:}lockroot",
                "<{DAV:}href", "\"http://example.com/workspace/webdav/proposal.doc", ">", ">",
                ">"]));
            e
        };
        let owner = [
            "<{DAV:}owner",
            "<{DAV:}href",
            "\"http://example.org/~ejw/contact.html",
        ];
        let owner = [&owner[..], &[">", ">"]].concat();
        let mut want = strs(&["<{DAV:}prop", "<{DAV:}lockdiscovery"]);
        want.extend(one(
            "<{DAV:}exclusive",
            "\"infinity",
            &owner,
            "\"Second-604800",
        ));
        want.extend(one("<{DAV:}shared", "\"0", &[], "\"Infinite"));
        // RFC 4918 §10.7 caps the seconds at 2^32 - 1.
        want.extend(one(
            "<{DAV:}shared",
            "\"infinity",
            &[],
            "\"Second-4294967295",
        ));
        want.extend(strs(&[">", ">"]));
        assert_eq!(read(&lock_response_body(&locks)), want);
        assert_eq!(lock_discovery_fragment(&[]), "");
    }

    #[test]
    fn supported_lock_and_error_bodies() {
        let mut answer = Multistatus::new();
        let supported = Name::dav("supportedlock");
        let raw = PropOut::Raw(supported, supported_lock_fragment().into(), None);
        answer.propstat_response("/", &[(200, &[raw])]);
        let events = read(&answer.finish());
        #[rustfmt::skip]
        let want = strs(&[
            "<{DAV:}lockentry", "<{DAV:}lockscope", "<{DAV:}exclusive", ">", ">",
            "<{DAV:}locktype", "<{DAV:}write", ">", ">", ">",
            "<{DAV:}lockentry", "<{DAV:}lockscope", "<{DAV:}shared", ">", ">",
            "<{DAV:}locktype", "<{DAV:}write", ">", ">", ">",
        ]);
        assert_eq!(content(&events, "<{DAV:}prop"), want);

        let doc = error_body("lock-token-submitted", &["/a<b"]);
        let head = r#"<?xml version="1.0" encoding="utf-8"?><D:error xmlns:D="DAV:">"#;
        let tail = "<D:href>/a&lt;b</D:href></D:lock-token-submitted></D:error>";
        assert_eq!(doc, format!("{head}<D:lock-token-submitted>{tail}"));
        let doc = error_body("cannot-modify-protected-property", &[]);
        let want = [
            "<{DAV:}error",
            "<{DAV:}cannot-modify-protected-property",
            ">",
            ">",
        ];
        assert_eq!(read(&doc), strs(&want));
    }

    #[test]
    fn names_in_no_namespace_and_in_xml() {
        let mut answer = Multistatus::new();
        let props = [
            PropOut::Text(Name::new("", "plain"), "\t\n".into()),
            PropOut::Empty(Name::new(XML_NS, "odd")),
        ];
        answer.propstat_response("/", &[(200, &props)]);
        let events = read(&answer.finish());
        let odd = format!("<{{{XML_NS}}}odd");
        let want = strs(&["<{}plain", "\"\t\n", ">", &odd, ">"]);
        assert_eq!(content(&events, "<{DAV:}propstat"), want);
    }

    #[test]
    fn reasons() {
        let cases = [
            (200, "OK"),
            (207, "Multi-Status"),
            (404, "Not Found"),
            (423, "Locked"),
        ];
        let more = [
            (424, "Failed Dependency"),
            (507, "Insufficient Storage"),
            (599, ""),
        ];
        for (code, phrase) in cases.into_iter().chain(more) {
            assert_eq!(reason(code), phrase);
        }
    }

    /// Parses a PROPPATCH with one set, embeds the value in a multistatus as PROPFIND will, and
    /// checks quick-xml reads the same content (names, namespaces, attributes, text) in both.
    fn round_trip(body: &str) -> Value {
        let ops = parse_proppatch(body.as_bytes()).expect(body);
        let [PatchOp::Set(name, value)] = ops.as_slice() else {
            panic!("one set: {ops:?}")
        };
        let raw = PropOut::Raw(name.clone(), value.xml.clone(), value.lang.clone());
        let mut answer = Multistatus::new();
        answer.propstat_response("/", &[(200, &[raw])]);
        let (sent, answer) = (read(body), read(&answer.finish()));
        let sent = content(&sent, "<{DAV:}prop");
        let got = content(&answer, "<{DAV:}prop");
        // The property's own attributes are not kept, bar the xml:lang in scope.
        let lang = value.lang.iter().map(|l| format!("@{{{XML_NS}}}lang={l}"));
        let own = |c: &[String]| c.iter().take_while(|e| e.starts_with('@')).count();
        assert_eq!(got[..own(got)], lang.collect::<Vec<_>>(), "{body}");
        assert_eq!(sent[own(sent)..], got[own(got)..], "{body}\n{}", value.xml);
        value.clone()
    }

    #[test]
    fn value_with_namespaces_and_mixed_content_round_trips() {
        let value = round_trip(
            r#"<D:propertyupdate xmlns:D="DAV:" xmlns="http://example.com/default"
                xmlns:x="http://example.com/x"><D:set><D:prop xml:lang="en-GB">
            <x:meta>before <title x:kind="a&amp;b&#9;c" plain='q"'>Hi &lt;there&gt;</title> mid
            <!-- a comment --><y:z xmlns:y="urn:y"><deep/><![CDATA[<cdata & stuff>]]></y:z>
            𐀀&#x10001; after</x:meta></D:prop></D:set></D:propertyupdate>"#,
        );
        assert_eq!(value.lang.as_deref(), Some("en-GB"));
        // Declarations in scope are copied down onto the top-level elements that need them;
        // the default namespace too, while `y` stays where it was declared.
        let decls = r#"xmlns="http://example.com/default" xmlns:x="http://example.com/x""#;
        let title = format!(r#"<title {decls} x:kind="a&amp;b&#x9;c" plain="q&quot;">"#);
        let z = r#"<y:z xmlns="http://example.com/default" xmlns:y="urn:y"><deep/>"#;
        let want = format!(
            "before {title}Hi &lt;there&gt;</title> mid\n            {z}&lt;cdata &amp; \
             stuff&gt;</y:z>\n            𐀀\u{10001} after"
        );
        assert_eq!(value.xml, want);
    }

    #[test]
    fn values_keep_text_exactly_and_lang_scopes() {
        let body = "<D:propertyupdate xmlns:D='DAV:' xmlns:Z='urn:z' xml:lang='fr'><D:set><D:prop>\
            <Z:a>  two\r\nlines&#13;<?pi?></Z:a><Z:b xml:lang=''>  </Z:b><Z:c/>\
            <Z:d><plain a='x&#10;y\r\nz'/></Z:d></D:prop></D:set></D:propertyupdate>";
        let ops = parse_proppatch(body.as_bytes()).expect("parses");
        let values: Vec<_> = ops
            .iter()
            .filter_map(|op| match op {
                PatchOp::Set(_, v) => Some((v.xml.as_str(), v.lang.as_deref())),
                PatchOp::Remove(_) => None,
            })
            .collect();
        // A literal CRLF is a line end, so LF; a CR reference is a CR and must stay one. In an
        // attribute a literal line end is a space, a referenced one stays.
        let want = [
            ("  two\nlines&#xD;", Some("fr")),
            ("  ", None),
            ("", Some("fr")),
            (r#"<plain xmlns="" a="x&#xA;y z"/>"#, Some("fr")),
        ];
        assert_eq!(values, want);
    }

    #[test]
    fn copied_declarations_cannot_amplify() {
        let patch = |uri: &str, n: usize| {
            let props = format!("<D:prop><Z:p>{}</Z:p></D:prop>", "<Z:v/>".repeat(n));
            let root = format!(r#"<D:propertyupdate xmlns:D="DAV:" xmlns:Z="{uri}">"#);
            parse_proppatch(format!("{root}<D:set>{props}</D:set></D:propertyupdate>").as_bytes())
        };
        let z39 = "http://ns.example.com/standards/z39.50/";
        let ops = patch(z39, 1000).expect("an ordinary body");
        let [PatchOp::Set(_, value)] = ops.as_slice() else {
            panic!("one set: {ops:?}")
        };
        assert_eq!(value.xml.matches(z39).count(), 1000);
        // The longest URI allowed, declared once and used by thousands of elements.
        let uri = format!("urn:{}", "x".repeat(MAX_NAME_LEN - 4));
        assert!(matches!(patch(&uri, 4000), Err(XmlError::FragmentTooLarge)));
    }

    const NAMESPACES: [&str; 5] = [
        "",
        "DAV:",
        "urn:a",
        "http://b/?q=1&r=<2>\"",
        "urn:\u{10000}",
    ];
    const LOCALS: [&str; 4] = ["p", "x-y.z", "\u{e9}t\u{e9}", "n\u{10000}"];
    const TEXT: &str = "[a-c <>&\"'\\]\r\n\t\u{e9}\u{10000}]{1,6}";

    /// A random element: prefix, namespace and local name (as indices), attributes (whether
    /// prefixed, local name, value), children.
    #[derive(Debug, Clone)]
    enum Gen {
        E(usize, usize, usize, Vec<(bool, usize, String)>, Vec<Gen>),
        X(String),
    }

    fn element(children: impl Strategy<Value = Vec<Gen>>) -> impl Strategy<Value = Gen> {
        let attrs = prop::collection::vec((any::<bool>(), 0..LOCALS.len(), TEXT), 0..3);
        (
            0..3usize,
            0..NAMESPACES.len(),
            0..LOCALS.len(),
            attrs,
            children,
        )
            .prop_map(|(p, n, l, a, c)| Gen::E(p, n, l, a, c))
    }

    fn tree() -> impl Strategy<Value = Gen> {
        let leaf = prop_oneof![TEXT.prop_map(Gen::X), element(Just(vec![]))];
        let tree = leaf.prop_recursive(4, 32, 4, |inner| {
            element(prop::collection::vec(inner, 0..4))
        });
        element(prop::collection::vec(tree, 0..4))
    }

    /// Writes `node`, declaring its prefix only where the scope does not bind it as needed, so
    /// that many elements lean on declarations made further up, to be copied down.
    fn render(node: &Gen, scope: &mut Vec<(String, String)>, out: &mut String) {
        let (prefix, namespace, local, attrs, children) = match node {
            Gen::X(text) => return escape_text(out, text),
            Gen::E(p, n, l, a, c) => (["", "a", "D"][*p], NAMESPACES[*n], LOCALS[*l], a, c),
        };
        // A prefix cannot be bound to no namespace.
        let prefix = if namespace.is_empty() { "" } else { prefix };
        let qname = if prefix.is_empty() {
            local.to_owned()
        } else {
            format!("{prefix}:{local}")
        };
        out.push_str(&format!("<{qname}"));
        let mark = scope.len();
        let bound = scope.iter().rev().find(|(p, _)| p == prefix);
        if bound.is_none_or(|(_, uri)| uri != namespace) {
            out.push_str(if prefix.is_empty() {
                " xmlns"
            } else {
                " xmlns:"
            });
            out.push_str(prefix);
            write_value(out, namespace);
            scope.push((prefix.to_owned(), namespace.to_owned()));
        }
        let mut seen = BTreeSet::new();
        for (prefixed, local, value) in attrs {
            // `at` is bound on the document root only.
            let name = if *prefixed { "at:" } else { "" }.to_owned() + LOCALS[*local];
            if seen.insert(name.clone()) {
                out.push_str(&format!(" {name}"));
                write_value(out, value);
            }
        }
        out.push('>');
        children.iter().for_each(|child| render(child, scope, out));
        out.push_str(&format!("</{qname}>"));
        scope.truncate(mark);
    }

    proptest! {
        #[test]
        fn random_values_round_trip(
            property in tree(),
            default in 0..NAMESPACES.len(),
            a in 2..NAMESPACES.len(),
            lang in prop::option::of("[a-z]{2}(-[A-Z]{2})?"),
        ) {
            let mut scope: Vec<_> = [("D", DAV_NS), ("a", NAMESPACES[a]), ("", NAMESPACES[default])]
                .map(|(p, uri)| (p.to_owned(), uri.to_owned()))
                .into();
            let mut body = r#"<D:propertyupdate xmlns:D="DAV:" xmlns:at="urn:at" xmlns:a"#.to_owned();
            write_value(&mut body, NAMESPACES[a]);
            body.push_str(" xmlns");
            write_value(&mut body, NAMESPACES[default]);
            if let Some(lang) = &lang {
                body.push_str(&format!(" xml:lang=\"{lang}\""));
            }
            body.push_str("><D:set><D:prop>");
            render(&property, &mut scope, &mut body);
            body.push_str("</D:prop></D:set></D:propertyupdate>");
            prop_assert_eq!(round_trip(&body).lang, lang);
        }
    }
}
