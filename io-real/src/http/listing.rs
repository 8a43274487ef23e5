//! Directory listings: choosing the format and order, and rendering JSON for scripts
//! (`[{"name","is_dir","size","mtime"}]`). The HTML page for people is [`super::page`].

use std::cmp::Ordering;

use serde::Serialize;

mod sort;

/// One listed entry. `mtime` is seconds since the Unix epoch.
///
/// A listing holds every entry of its folder at once (it is sorted before its first row
/// is written), so an entry is kept small: 64 bytes and its name, the name and the link
/// without spare capacity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry {
    /// File name (one segment, never hidden unless `show_hidden`).
    pub name: Box<str>,
    /// Whether the entry is a directory (symlinks are described by their target).
    pub is_dir: bool,
    /// Size in bytes (0 for directories).
    pub size: u64,
    /// Last modification, seconds since the Unix epoch.
    pub mtime: u64,
    /// The name percent-encoded from its exact bytes, present only when the name is not
    /// UTF-8: then `name` shows U+FFFD where its bytes are not text, and only this names
    /// the file in a URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub href: Option<Box<str>>,
    /// A folder's entries that the listing would show, when counted: at most
    /// [`ITEMS_COUNTED`], then `ITEMS_COUNTED + 1` for "more". Not counted (absent) for
    /// files, and for folders past the listing's counting budget.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub items: Option<u32>,
}

/// The most entries counted in one folder for its item count.
pub const ITEMS_COUNTED: u64 = 10_000;
/// The most entries read, over all of a listing's folders, to count their items: a
/// folder of many large folders shows counts for the first ones and no more, so a
/// listing costs at most about this many directory entries more than its own.
pub const ITEMS_BUDGET: u64 = 100_000;

impl Entry {
    /// The entry's name as one percent-encoded URL segment.
    pub fn url_segment(&self) -> String {
        self.href
            .as_deref()
            .map_or_else(|| super::path::encode_segment(&self.name), str::to_owned)
    }
}

/// Sort key for `?sort=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SortKey {
    /// By name (the default).
    #[default]
    Name,
    /// By size in bytes.
    Size,
    /// By modification time.
    Mtime,
}

impl SortKey {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Name => "name",
            Self::Size => "size",
            Self::Mtime => "mtime",
        }
    }
}

/// Sort direction for `?order=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    /// Ascending (the default).
    #[default]
    Asc,
    /// Descending.
    Desc,
}

impl Order {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Asc => "asc",
            Self::Desc => "desc",
        }
    }
}

/// How the peer asked for the listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ListingQuery {
    /// Sort key.
    pub sort: SortKey,
    /// Sort direction.
    pub order: Order,
    /// JSON instead of HTML.
    pub json: bool,
}

/// Reads `?sort=name|size|mtime&order=asc|desc&format=json|html` and the `Accept` header.
/// Unknown values fall back to defaults: a listing is never an error.
pub fn parse_query(query: Option<&str>, accept: Option<&str>) -> ListingQuery {
    let mut q = ListingQuery::default();
    let mut format = None;
    for pair in query.unwrap_or("").split('&') {
        match pair.split_once('=') {
            Some(("sort", "name")) => q.sort = SortKey::Name,
            Some(("sort", "size")) => q.sort = SortKey::Size,
            Some(("sort", "mtime")) => q.sort = SortKey::Mtime,
            Some(("order", "asc")) => q.order = Order::Asc,
            Some(("order", "desc")) => q.order = Order::Desc,
            Some(("format", "json")) => format = Some(true),
            Some(("format", "html")) => format = Some(false),
            _ => {}
        }
    }
    q.json = format.unwrap_or_else(|| accept.is_some_and(accepts_json_over_html));
    q
}

/// True when `Accept` lists `application/json` with q > 0 and does not list `text/html`
/// at least as highly. Browsers (which list HTML) keep HTML; `curl -H 'Accept:
/// application/json'` gets JSON; `*/*` keeps the HTML default.
fn accepts_json_over_html(accept: &str) -> bool {
    let mut json_q = 0.0f32;
    let mut html_q = 0.0f32;
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or("").trim();
        let q = parts
            .filter_map(|p| p.trim().strip_prefix("q="))
            .find_map(|v| v.trim().parse::<f32>().ok())
            .unwrap_or(1.0);
        if media.eq_ignore_ascii_case("application/json") {
            json_q = json_q.max(q);
        } else if media.eq_ignore_ascii_case("text/html") {
            html_q = html_q.max(q);
        }
    }
    json_q > 0.0 && json_q > html_q
}

/// Sorts directories first, then by the key; ties fall back to the name (in
/// [`natural_cmp`] order), and names that read the same (two names that are not UTF-8
/// and differ only where they are not text) to their links, so the order is total and
/// the same on every request. Being total, it is sorted unstably: no buffer of half the
/// entries, as a stable sort takes. Each name is made a key once and the keys are
/// compared ([`sort`]'s module): the same order as comparing the names each time.
pub fn sort(entries: &mut [Entry], key: SortKey, order: Order) {
    sort::sort(entries, key, order);
}

/// Orders names as people read them: case-insensitively, and with each run of digits
/// compared by its value (`icon-2` before `icon-10`, `a` next to `B`). Names equal that
/// way (`File` and `file`, `a01` and `a1`) fall back to their exact text, so the order is
/// total: a listing never shuffles between requests.
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    loose_cmp(a, b).then_with(|| a.cmp(b))
}

fn loose_cmp(a: &str, b: &str) -> Ordering {
    let (ab, bb) = (a.as_bytes(), b.as_bytes());
    // The bytes both names start with read the same however they are read, so they are
    // skipped (names in one folder often share most of their length: `photo-00017.jpg`),
    // back to where the run of digits or the character they end in began.
    let mut same = ab.iter().zip(bb).take_while(|(x, y)| x == y).count();
    while same > 0 && ab[same - 1].is_ascii_digit() {
        same -= 1;
    }
    while !a.is_char_boundary(same) {
        same -= 1;
    }
    let (mut i, mut j) = (same, same);
    loop {
        let (Some(&x), Some(&y)) = (ab.get(i), bb.get(j)) else {
            // A name that is where the other one starts comes first.
            return (i < a.len()).cmp(&(j < b.len()));
        };
        if x.is_ascii_digit() && y.is_ascii_digit() {
            let end_a = i + digits(&a[i..]);
            let end_b = j + digits(&b[j..]);
            let (x, y) = (
                a[i..end_a].trim_start_matches('0'),
                b[j..end_b].trim_start_matches('0'),
            );
            // Without leading zeros, the longer number is the larger one.
            let by_value = x.len().cmp(&y.len()).then_with(|| x.cmp(y));
            if by_value != Ordering::Equal {
                return by_value;
            }
            (i, j) = (end_a, end_b);
        } else if x.is_ascii() && y.is_ascii() {
            // Most names are ASCII: their case is folded without decoding a character
            // (sorting 10,000 names compares about 140,000 pairs).
            let by_byte = x.to_ascii_lowercase().cmp(&y.to_ascii_lowercase());
            if by_byte != Ordering::Equal {
                return by_byte;
            }
            (i, j) = (i + 1, j + 1);
        } else {
            // `i` and `j` are at character boundaries: every step above is one whole
            // ASCII character or a run of them.
            let (Some(c), Some(d)) = (a[i..].chars().next(), b[j..].chars().next()) else {
                return (i < a.len()).cmp(&(j < b.len()));
            };
            let by_char = c.to_lowercase().cmp(d.to_lowercase());
            if by_char != Ordering::Equal {
                return by_char;
            }
            (i, j) = (i + c.len_utf8(), j + d.len_utf8());
        }
    }
}

/// The length of the run of ASCII digits `text` starts with.
fn digits(text: &str) -> usize {
    text.bytes().take_while(u8::is_ascii_digit).count()
}

/// Renders the JSON listing: `[{"name","is_dir","size","mtime"}]`.
pub fn render_json(entries: &[Entry]) -> String {
    let mut out = String::with_capacity(2 + entries.len() * 80);
    out.push('[');
    for (i, e) in entries.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_json(&mut out, e);
    }
    out.push(']');
    out
}

/// Appends one entry as a JSON object, byte for byte what serde_json writes for it (the
/// fields in their order, `href` and `items` only when present), without a string of its
/// own: a large folder's listing writes one per entry.
pub fn push_json(out: &mut String, e: &Entry) {
    out.push_str("{\"name\":");
    push_json_string(out, &e.name);
    out.push_str(",\"is_dir\":");
    out.push_str(if e.is_dir { "true" } else { "false" });
    out.push_str(",\"size\":");
    super::page::text::push_u64(out, e.size);
    out.push_str(",\"mtime\":");
    super::page::text::push_u64(out, e.mtime);
    if let Some(href) = &e.href {
        out.push_str(",\"href\":");
        push_json_string(out, href);
    }
    if let Some(items) = e.items {
        out.push_str(",\"items\":");
        super::page::text::push_u64(out, u64::from(items));
    }
    out.push('}');
}

/// A JSON string as serde_json escapes it: the quote, the backslash and the control
/// characters below U+0020 (`\b \t \n \f \r` short, the others as `\u00XX`), nothing
/// else.
fn push_json_string(out: &mut String, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    let mut plain = 0;
    for (at, b) in text.bytes().enumerate() {
        let escape = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            0x08 => "\\b",
            0x09 => "\\t",
            0x0a => "\\n",
            0x0c => "\\f",
            0x0d => "\\r",
            0x00..=0x1f => "",
            _ => continue,
        };
        out.push_str(&text[plain..at]);
        if escape.is_empty() {
            out.push_str("\\u00");
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        } else {
            out.push_str(escape);
        }
        plain = at + 1;
    }
    out.push_str(&text[plain..]);
    out.push('"');
}

/// A listed entry with no link of its own and no item count: the shape the rendering
/// modules' tests build their listings from.
#[cfg(test)]
pub(crate) fn test_entry(name: &str, is_dir: bool, size: u64, mtime: u64) -> Entry {
    Entry {
        name: name.into(),
        is_dir,
        size,
        mtime,
        href: None,
        items: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::test_entry as entry;

    #[test]
    fn json_shape() {
        let json = render_json(&[entry("a\"b", true, 0, 5)]);
        assert_eq!(
            json,
            r#"[{"name":"a\"b","is_dir":true,"size":0,"mtime":5}]"#
        );
    }

    #[test]
    fn sorting() {
        let mut v = vec![
            entry("b", false, 1, 30),
            entry("a", false, 3, 10),
            entry("z", true, 0, 20),
            entry("c", false, 2, 20),
        ];
        let names = |v: &[Entry]| v.iter().map(|e| e.name.to_string()).collect::<Vec<_>>();
        sort(&mut v, SortKey::Name, Order::Asc);
        assert_eq!(names(&v), ["z", "a", "b", "c"]);
        sort(&mut v, SortKey::Name, Order::Desc);
        assert_eq!(names(&v), ["z", "c", "b", "a"]);
        sort(&mut v, SortKey::Size, Order::Asc);
        assert_eq!(names(&v), ["z", "b", "c", "a"]);
        sort(&mut v, SortKey::Mtime, Order::Desc);
        assert_eq!(names(&v), ["z", "b", "c", "a"]);
        sort(&mut v, SortKey::Mtime, Order::Asc);
        assert_eq!(names(&v), ["z", "a", "c", "b"]);
    }

    #[test]
    fn names_sort_naturally_and_ignoring_case() {
        let mut v: Vec<Entry> = [
            "icon-10.png",
            "icon-2.png",
            "Icon-1.png",
            "b",
            "A",
            "a",
            "icon-02.png",
            "icon-",
            "x9",
            "x10",
            "x09",
            "éa",
        ]
        .iter()
        .map(|n| entry(n, false, 0, 0))
        .collect();
        v.push(entry("Zeta", true, 0, 0));
        v.push(entry("alpha", true, 0, 0));
        sort(&mut v, SortKey::Name, Order::Asc);
        let names: Vec<&str> = v.iter().map(|e| &*e.name).collect();
        assert_eq!(
            names,
            [
                "alpha",
                "Zeta",
                "A",
                "a",
                "b",
                "icon-",
                "Icon-1.png",
                "icon-02.png",
                "icon-2.png",
                "icon-10.png",
                "x09",
                "x9",
                "x10",
                "éa",
            ]
        );
        assert_eq!(natural_cmp("a2b", "a10a"), Ordering::Less);
        assert_eq!(natural_cmp("a", "a"), Ordering::Equal);
        assert_eq!(
            natural_cmp("99999999999999999999999", "100000000000000000000000"),
            Ordering::Less,
            "numbers longer than any integer type"
        );
    }

    /// The order as it was first written, a character at a time: the oracle of the
    /// byte-wise fast path.
    fn loose_cmp_by_chars(a: &str, b: &str) -> Ordering {
        let (mut i, mut j) = (0, 0);
        loop {
            let (Some(c), Some(d)) = (a[i..].chars().next(), b[j..].chars().next()) else {
                return (i < a.len()).cmp(&(j < b.len()));
            };
            if c.is_ascii_digit() && d.is_ascii_digit() {
                let end_a = i + digits(&a[i..]);
                let end_b = j + digits(&b[j..]);
                let (x, y) = (
                    a[i..end_a].trim_start_matches('0'),
                    b[j..end_b].trim_start_matches('0'),
                );
                let by_value = x.len().cmp(&y.len()).then_with(|| x.cmp(y));
                if by_value != Ordering::Equal {
                    return by_value;
                }
                (i, j) = (end_a, end_b);
            } else {
                let by_char = c.to_lowercase().cmp(d.to_lowercase());
                if by_char != Ordering::Equal {
                    return by_char;
                }
                (i, j) = (i + c.len_utf8(), j + d.len_utf8());
            }
        }
    }

    proptest::proptest! {
        /// The byte-wise comparison orders every pair as the character-wise one did,
        /// ASCII or not (`K`, the Kelvin sign, folds to an ASCII `k`; `İ` to two
        /// characters).
        #[test]
        fn natural_order_is_the_character_order(
            a in "[aAbBkK0-9é\u{212a}\u{130}i._-]{0,8}",
            b in "[aAbBkK0-9é\u{212a}\u{130}i._-]{0,8}",
            prefix in "[a0-9é\u{130}-]{0,5}",
        ) {
            proptest::prop_assert_eq!(loose_cmp(&a, &b), loose_cmp_by_chars(&a, &b), "{:?} {:?}", a, b);
            let (a, b) = (format!("{prefix}{a}"), format!("{prefix}{b}"));
            proptest::prop_assert_eq!(loose_cmp(&a, &b), loose_cmp_by_chars(&a, &b), "{:?} {:?}", a, b);
        }

        /// The JSON written by hand is serde_json's, for any name, link and count.
        #[test]
        fn json_is_what_serde_writes(
            name in "\\PC{0,12}|[\"\\\\\u{0}-\u{1f}\u{7f}a\u{2028}]{0,12}",
            href in proptest::option::of("[%A-F0-9a-z\"\\\\]{0,8}"),
            items in proptest::option::of(proptest::prelude::any::<u32>()),
            is_dir in proptest::prelude::any::<bool>(),
            size in proptest::prelude::any::<u64>(),
            mtime in proptest::prelude::any::<u64>(),
        ) {
            let e = Entry {
                name: name.into(),
                is_dir,
                size,
                mtime,
                href: href.map(Into::into),
                items,
            };
            let serde = serde_json::to_string(&[&e, &e]).expect("serde_json");
            proptest::prop_assert_eq!(render_json(&[e.clone(), e]), serde);
        }

        /// A total order: antisymmetric, transitive, equal only for equal names, so
        /// `sort_by` is well defined and a listing's order never depends on the input's.
        #[test]
        fn natural_order_is_total(
            a in "[aAbB0-9é._-]{0,6}",
            b in "[aAbB0-9é._-]{0,6}",
            c in "[aAbB0-9é._-]{0,6}",
        ) {
            proptest::prop_assert_eq!(natural_cmp(&a, &b), natural_cmp(&b, &a).reverse());
            proptest::prop_assert_eq!(natural_cmp(&a, &b) == Ordering::Equal, a == b);
            if natural_cmp(&a, &b) != Ordering::Greater && natural_cmp(&b, &c) != Ordering::Greater {
                proptest::prop_assert_ne!(natural_cmp(&a, &c), Ordering::Greater);
            }
        }
    }

    #[test]
    fn query_and_accept() {
        let q = parse_query(Some("sort=size&order=desc"), None);
        assert_eq!(
            (q.sort, q.order, q.json),
            (SortKey::Size, Order::Desc, false)
        );
        assert!(parse_query(Some("format=json"), None).json);
        assert_eq!(
            parse_query(Some("sort=%3Cx&order=up&&=&x"), None),
            ListingQuery::default()
        );
        assert!(parse_query(None, Some("application/json")).json);
        assert!(
            !parse_query(
                None,
                Some("text/html,application/xhtml+xml,application/json;q=0.9")
            )
            .json
        );
        assert!(!parse_query(None, Some("*/*")).json);
        assert!(!parse_query(None, Some("application/json;q=0")).json);
        assert!(!parse_query(Some("format=html"), Some("application/json")).json);
    }
}
