//! Directory listings: choosing the format and order, and rendering JSON for scripts
//! (`[{"name","is_dir","size","mtime"}]`). The HTML page for people is [`super::page`].

use serde::Serialize;

/// One listed entry. `mtime` is seconds since the Unix epoch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry {
    /// File name (one segment, never hidden unless `show_hidden`).
    pub name: String,
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
    pub href: Option<String>,
}

impl Entry {
    /// The entry's name as one percent-encoded URL segment.
    pub fn url_segment(&self) -> String {
        self.href
            .clone()
            .unwrap_or_else(|| super::path::encode_segment(&self.name))
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

/// Sorts directories first, then by the key; ties fall back to the name so the order is
/// total and stable across requests.
pub fn sort(entries: &mut [Entry], key: SortKey, order: Order) {
    entries.sort_by(|a, b| {
        let by_key = match key {
            SortKey::Name => a.name.cmp(&b.name),
            SortKey::Size => a.size.cmp(&b.size).then_with(|| a.name.cmp(&b.name)),
            SortKey::Mtime => a.mtime.cmp(&b.mtime).then_with(|| a.name.cmp(&b.name)),
        };
        let by_key = match order {
            Order::Asc => by_key,
            Order::Desc => by_key.reverse(),
        };
        b.is_dir.cmp(&a.is_dir).then(by_key)
    });
}

/// Renders the JSON listing: `[{"name","is_dir","size","mtime"}]`.
pub fn render_json(entries: &[Entry]) -> Result<String, serde_json::Error> {
    serde_json::to_string(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, is_dir: bool, size: u64, mtime: u64) -> Entry {
        Entry {
            name: name.into(),
            is_dir,
            size,
            mtime,
            href: None,
        }
    }

    #[test]
    fn json_shape() {
        let json = render_json(&[entry("a\"b", true, 0, 5)]).expect("json");
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
        let names = |v: &[Entry]| v.iter().map(|e| e.name.clone()).collect::<Vec<_>>();
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
