//! The directory page's HTML: breadcrumbs, the sortable table, the upload and search
//! forms. It works without JavaScript; the script (see [`super::assets`]) only adds the
//! filter box, chunked uploads and the DAV buttons on top of the same markup.
//!
//! File names are data chosen by whoever can write to the served tree. Every name is
//! HTML-escaped as text, shown with its control and bidirectional-formatting characters
//! made visible (a name cannot break a line or reverse the text around it), and
//! percent-encoded (everything but unreserved characters) as a link, prefixed with `./` so
//! no name can be read as a URL scheme. The page carries no inline script or style, and
//! its Content-Security-Policy forbids them, so an escaping bug still could not run code.

use std::fmt::Write as _;

use super::assets;
use super::row::{push_row, push_row_at};
use crate::http::listing::{Entry, ListingQuery, Order, SortKey};
use crate::http::path::RequestPath;

/// What the page offers besides browsing; each switch mirrors a flag.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Features {
    /// `--upload`: the upload form, new folder.
    pub upload: bool,
    /// `--dav` with `--upload`: rename and move buttons.
    pub dav_writes: bool,
    /// `--allow-overwrite` as well: the delete button (the server refuses deletes
    /// without it, so the page does not offer one).
    pub delete: bool,
    /// Folder archives (on unless `--no-archive`).
    pub archive: bool,
    /// The recursive search form.
    pub search: bool,
}

/// One directory page.
#[derive(Debug, Clone, Copy)]
pub struct Page<'a> {
    /// The directory's path (its segments as text, its links from the exact bytes).
    pub dir: &'a RequestPath,
    /// The entries, already sorted.
    pub entries: &'a [Entry],
    /// The sort the entries are in (drives the column headers).
    pub query: &'a ListingQuery,
    pub features: Features,
    /// The directory's README, already rendered and sanitised.
    pub readme: Option<&'a str>,
    /// `--qr`: the LAN address of the root (`http://HOST:PORT/`), the page then shows the
    /// code of this directory's address.
    pub qr_base: Option<&'a str>,
}

/// Escapes text for HTML element content and quoted attribute values.
pub fn html_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    push_escaped(&mut out, text);
    out
}

fn push_escaped(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
}

/// Whether `text` reads the same escaped as an attribute, as text and as a shown name:
/// printable ASCII without the five characters markup gives meaning to. Most file names
/// are, and a listing then copies each name as it is instead of escaping it twice.
pub(super) fn is_plain(text: &str) -> bool {
    text.bytes()
        .all(|b| (b' '..=b'~').contains(&b) && !matches!(b, b'&' | b'<' | b'>' | b'"' | b'\''))
}

/// Escapes text for a quoted attribute value, writing layout-changing characters as
/// numeric references: the script reads back the exact name, and the markup holds none of
/// them raw.
pub fn attr_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    push_attr_escaped(&mut out, text);
    out
}

pub(super) fn push_attr_escaped(out: &mut String, text: &str) {
    if is_plain(text) {
        out.push_str(text);
        return;
    }
    for c in text.chars() {
        if is_invisible_control(c) {
            out.push_str("&#x");
            push_upper_hex(out, c as u32, 1);
            out.push(';');
        } else {
            push_escaped(out, c.encode_utf8(&mut [0; 4]));
        }
    }
}

/// Appends `n` in upper-case hexadecimal, at least `width` digits (`{:0width$X}`).
fn push_upper_hex(out: &mut String, n: u32, width: usize) {
    let _ = write!(out, "{n:0width$X}");
}

/// Whether `c` would change the layout of the text around it rather than show as a glyph:
/// controls (line breaks, tabs, escape) and bidirectional formatting (right-to-left
/// overrides and isolates, the marks).
fn is_invisible_control(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{061c}')
        || ('\u{202a}'..='\u{202e}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
        || matches!(c, '\u{2028}' | '\u{2029}')
}

/// A file name as escaped HTML text, each layout-changing character shown as a marked
/// `U+XXXX` so the name reads as what it is.
pub fn display_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 8);
    push_display_name(&mut out, name);
    out
}

pub(super) fn push_display_name(out: &mut String, name: &str) {
    if is_plain(name) {
        out.push_str(name);
        return;
    }
    for c in name.chars() {
        if is_invisible_control(c) {
            out.push_str("<span class=\"cc\">U+");
            push_upper_hex(out, c as u32, 4);
            out.push_str("</span>");
        } else {
            push_escaped(out, c.encode_utf8(&mut [0; 4]));
        }
    }
}

/// The decoded path shown to the reader (`/a/b/`), made safe for HTML.
fn dir_title(segments: &[String]) -> String {
    let mut shown = String::from("/");
    for segment in segments {
        shown.push_str(segment);
        shown.push('/');
    }
    display_name(&shown)
}

/// The page's head and the header bar (breadcrumbs, search), up to the opened `<main>`.
/// `searched` is the text of the search this page shows, kept in the search box.
pub fn push_head(
    html: &mut String,
    dir: &RequestPath,
    title: &str,
    features: Features,
    searched: Option<&str>,
) {
    let segments = dir.segments();
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <meta name=\"color-scheme\" content=\"light dark\">\
         <link rel=\"icon\" href=\"data:,\">\
         <title>{title}</title>\
         <link rel=\"stylesheet\" href=\"{css}\">\
         <script src=\"{js}\" defer></script></head>\n\
         <body data-dir=\"{dir}\"{upload}{dav}{delete}{edit}>\
         <a class=\"skip\" href=\"#main\">Skip to content</a>\n\
         <header class=\"top\"><nav class=\"crumbs\" aria-label=\"Breadcrumb\"><ol>",
        css = assets::STYLE.href(),
        js = assets::SCRIPT.href(),
        dir = html_escape(&dir.dir_href()),
        upload = if features.upload { " data-upload" } else { "" },
        dav = if features.dav_writes { " data-dav" } else { "" },
        delete = if features.dav_writes && features.delete {
            " data-delete"
        } else {
            ""
        },
        // A PUT over an existing file needs uploads and overwrites both.
        edit = if features.upload && features.delete {
            " data-edit"
        } else {
            ""
        },
    );
    let last = segments.len();
    if last == 0 {
        html.push_str("<li aria-current=\"page\">Home</li>");
    } else {
        html.push_str("<li><a href=\"/\">Home</a></li>");
    }
    for (i, segment) in segments.iter().enumerate() {
        if i + 1 == last {
            let _ = write!(
                html,
                "<li aria-current=\"page\">{}</li>",
                display_name(segment)
            );
        } else {
            let _ = write!(
                html,
                "<li><a href=\"{}\">{}</a></li>",
                dir.href_through(i + 1),
                display_name(segment)
            );
        }
    }
    html.push_str("</ol></nav>");
    if features.search {
        let _ = write!(
            html,
            "<form class=\"search\" role=\"search\" method=\"get\" action=\"./\">\
             <label class=\"vh\" for=\"q\">Search in this folder and below</label>\
             <input type=\"search\" id=\"q\" name=\"q\" placeholder=\"Search below here\" \
             maxlength=\"200\"{value}><button type=\"submit\">Search</button></form>",
            value = searched.map_or_else(String::new, |q| format!(" value=\"{}\"", attr_escape(q))),
        );
    }
    html.push_str("</header>\n<main id=\"main\">");
}

/// Closes what [`push_head`] opened.
pub fn push_tail(html: &mut String) {
    html.push_str("</main>\n</body></html>\n");
}

/// Renders the directory page.
pub fn render(page: &Page<'_>) -> String {
    let mut html = String::with_capacity(2048 + page.entries.len() * 330);
    html.push_str(&render_head(page));
    for e in page.entries {
        push_row(&mut html, e);
    }
    html.push_str(&render_tail(page));
    html
}

fn page_title(page: &Page<'_>) -> String {
    format!("Index of {}", dir_title(page.dir.segments()))
}

/// The directory page up to its first entry's row (the parent folder's row included):
/// with [`push_row`] for each entry and [`render_tail`], the page, which a large folder's
/// answer sends a piece at a time.
pub fn render_head(page: &Page<'_>) -> String {
    let Page {
        dir,
        entries,
        query,
        features,
        ..
    } = *page;
    let title = page_title(page);
    let mut html = String::with_capacity(4096);
    push_head(&mut html, dir, &title, features, None);
    let _ = write!(html, "<h1>{title}</h1>\n<div class=\"tools\">");
    html.push_str(
        "<div class=\"filter\" hidden><label for=\"filter\">Filter</label> \
         <input type=\"search\" id=\"filter\" placeholder=\"Names containing…\" \
         aria-controls=\"list\"></div>",
    );
    if features.archive {
        html.push_str(
            "<p>Download this folder: <a href=\"?archive=zip\" download>zip</a> · \
             <a href=\"?archive=tar.gz\" download>tar.gz</a></p>",
        );
    }
    html.push_str("</div>\n");
    if features.upload {
        push_upload(&mut html, features);
    }
    let dirs = entries.iter().filter(|e| e.is_dir).count();
    let _ = write!(
        html,
        "<table id=\"list\"><caption class=\"vh\">{title}: {dirs} folders, {} files</caption>\n\
         <thead><tr>{}{}{}</tr></thead>\n<tbody>\n",
        entries.len() - dirs,
        header_cell("Name", "name", SortKey::Name, query),
        header_cell("Size", "size", SortKey::Size, query),
        header_cell("Modified", "time", SortKey::Mtime, query),
    );
    if !dir.is_root() {
        html.push_str(
            "<tr class=\"k-up\"><td class=\"name\"><a href=\"../\">Parent folder</a></td>\
             <td class=\"size\"></td><td class=\"time\"></td></tr>\n",
        );
    }
    html
}

/// The directory page after its last entry's row.
pub fn render_tail(page: &Page<'_>) -> String {
    let mut html = String::from("</tbody></table>\n");
    if page.entries.is_empty() {
        html.push_str("<p class=\"note\">This folder is empty.</p>\n");
    }
    if let Some(readme) = page.readme {
        let _ = writeln!(
            html,
            "<article class=\"readme card\" aria-label=\"README\">{readme}</article>"
        );
    }
    if let Some(base) = page.qr_base {
        let url = format!("{}{}", base.trim_end_matches('/'), page.dir.dir_href());
        html.push_str(&super::qr::aside(&url).unwrap_or_default());
    }
    push_tail(&mut html);
    html
}

/// Renders the results of a recursive search below the directory.
pub fn render_search(
    dir: &RequestPath,
    needle: &str,
    results: &super::search::Results,
    features: Features,
) -> String {
    let title = format!(
        "Search for “{}” in {}",
        display_name(needle),
        dir_title(dir.segments())
    );
    let mut html = String::with_capacity(2048 + results.hits.len() * 360);
    push_head(&mut html, dir, &title, features, Some(needle));
    let _ = write!(
        html,
        "<h1>{title}</h1>\n<div class=\"tools\"><p><a href=\"./\">Back to the folder</a></p>\
         <p role=\"status\">{} found{}</p><p class=\"err\" id=\"msg\" role=\"alert\"></p>\
         </div>\n",
        results.hits.len(),
        if results.cut_short {
            " (the search stopped early: narrow it down)"
        } else {
            ""
        }
    );
    let _ = write!(
        html,
        "<table id=\"list\" class=\"hits\"><caption class=\"vh\">{title}</caption>\n\
         <thead><tr><th scope=\"col\" class=\"name\">Name</th><th scope=\"col\" class=\"size\">Size</th>\
         <th scope=\"col\" class=\"time\">Modified</th></tr></thead>\n<tbody>\n"
    );
    for hit in &results.hits {
        let href = format!("./{}", hit.href);
        push_row_at(&mut html, &hit.entry, &href, &hit.path);
    }
    html.push_str("</tbody></table>\n");
    push_tail(&mut html);
    html
}

fn push_upload(html: &mut String, features: Features) {
    html.push_str(
        "<section class=\"card upload\" aria-labelledby=\"up-h\"><h2 id=\"up-h\">Upload</h2>\
         <div class=\"drop\" id=\"drop\" hidden>Drop files or folders here</div>\
         <form id=\"up-form\" method=\"post\" enctype=\"multipart/form-data\" action=\"./\">\
         <div class=\"pick\"><label>Files <input type=\"file\" name=\"file\" id=\"up-files\" \
         multiple></label>\
         <label id=\"up-dir-l\" hidden>Folder <input type=\"file\" id=\"up-dir\" webkitdirectory \
         multiple></label>\
         <button type=\"submit\" id=\"up-go\">Upload</button></div></form>\
         <div class=\"overall\" id=\"overall\" hidden><label for=\"up-all\">All files</label> \
         <progress id=\"up-all\" max=\"1\" value=\"0\"></progress> <span id=\"up-all-t\" \
         aria-live=\"polite\"></span></div>\
         <ul class=\"queue\" id=\"queue\" aria-label=\"Uploads\"></ul>\
         <form id=\"mkdir\" class=\"pick\" hidden><label for=\"mkdir-n\">New folder</label> \
         <input type=\"text\" id=\"mkdir-n\" required maxlength=\"255\">\
         <button type=\"submit\">Create</button></form>\
         <p class=\"err\" id=\"msg\" role=\"alert\"></p>",
    );
    if features.dav_writes && !features.delete {
        html.push_str(
            "<p class=\"note\" id=\"no-delete\">Deleting and replacing files is turned off \
             on this server; files can be added, renamed and moved.</p>",
        );
    }
    html.push_str("</section>\n");
}

/// A column header linking to this column's sort, toggling direction when already active.
fn header_cell(label: &str, class: &str, key: SortKey, q: &ListingQuery) -> String {
    let active = q.sort == key;
    let next = if active && q.order == Order::Asc {
        Order::Desc
    } else {
        Order::Asc
    };
    let sort = match (active, q.order) {
        (false, _) => "",
        (true, Order::Asc) => " aria-sort=\"ascending\"",
        (true, Order::Desc) => " aria-sort=\"descending\"",
    };
    format!(
        "<th scope=\"col\" class=\"{class}\"{sort}><a href=\"?sort={}&amp;order={}\">{label}</a></th>",
        key.as_str(),
        next.as_str()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::path::encode_segment;

    use crate::http::listing::test_entry as entry;

    /// The request path of a directory with these (decoded) segments.
    fn dir_of(segments: &[String]) -> RequestPath {
        let encoded: Vec<String> = segments.iter().map(|s| encode_segment(s)).collect();
        RequestPath::parse_any(&format!("/{}", encoded.join("/")), true).expect("a path")
    }

    fn page(segments: &[String], entries: &[Entry], features: Features) -> String {
        render(&Page {
            dir: &dir_of(segments),
            entries,
            query: &ListingQuery::default(),
            features,
            readme: None,
            qr_base: None,
        })
    }

    #[test]
    fn hostile_names_are_text_and_links_are_encoded() {
        let hostile = [
            entry("<script>alert(1)</script>", false, 3, 0),
            entry("\"onmouseover=\"x", false, 1, 0),
            entry("it's", true, 0, 0),
            entry("100%25 done%", false, 1, 0),
            entry("line\nbreak", false, 1, 0),
            entry("evil\u{202e}gpj.exe", false, 1, 0),
            entry("javascript:alert(1)", false, 1, 0),
        ];
        let html = page(&["<d>".to_owned()], &hostile, Features::default());
        // One script element (the page's own), one row per entry plus the header and `..`.
        assert_eq!(html.matches("<script").count(), 1);
        assert_eq!(html.matches("<tr").count(), hostile.len() + 2);
        assert_eq!(
            html.matches("<a ").count(),
            page(&["d".to_owned()], &[], Features::default())
                .matches("<a ")
                .count()
                + hostile.len()
        );
        assert!(!html.contains("<script>alert"));
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(html.contains("href=\"./%3Cscript%3Ealert%281%29%3C%2Fscript%3E\""));
        assert!(html.contains("data-name=\"&quot;onmouseover=&quot;x\""));
        assert!(html.contains("href=\"./%22onmouseover%3D%22x\""));
        assert!(html.contains("href=\"./it%27s/\">it&#39;s/</a>"));
        assert!(html.contains("href=\"./100%2525%20done%25\">100%25 done%</a>"));
        assert!(html.contains(">line<span class=\"cc\">U+000A</span>break</a>"));
        assert!(html.contains("href=\"./line%0Abreak\""));
        assert!(html.contains("data-name=\"line&#xA;break\""));
        assert!(html.contains("data-name=\"evil&#x202E;gpj.exe\""));
        assert!(html.contains(">evil<span class=\"cc\">U+202E</span>gpj.exe</a>"));
        assert!(!html.contains("\u{202e}gpj"));
        assert!(html.contains("href=\"./javascript%3Aalert%281%29\""));
        assert!(html.contains("<title>Index of /&lt;d&gt;/</title>"));
        assert!(html.contains("<li aria-current=\"page\">&lt;d&gt;</li>"));
    }

    #[cfg(unix)]
    #[test]
    fn names_that_are_not_utf8_show_as_text_and_link_by_their_bytes() {
        let dir = RequestPath::parse_any("/caf%E9/sub", true).expect("a path");
        let mut file = entry("r\u{FFFD}sum\u{FFFD}.txt", false, 1, 0);
        file.href = Some("r%E9sum%E9.txt".into());
        let html = render(&Page {
            dir: &dir,
            entries: &[file],
            query: &ListingQuery::default(),
            features: Features::default(),
            readme: None,
            qr_base: None,
        });
        assert!(
            html.contains("href=\"./r%E9sum%E9.txt\">r\u{FFFD}sum\u{FFFD}.txt</a>"),
            "{html}"
        );
        assert!(
            html.contains("<li><a href=\"/caf%E9/\">caf\u{FFFD}</a></li>"),
            "{html}"
        );
        assert!(html.contains("data-dir=\"/caf%E9/sub/\""), "{html}");
    }

    /// The escapes as first written, a character at a time: the oracle of the fast
    /// path for plain names.
    fn attr_escape_by_chars(text: &str) -> String {
        let mut out = String::new();
        for c in text.chars() {
            if is_invisible_control(c) {
                let _ = write!(out, "&#x{:X};", c as u32);
            } else {
                push_escaped(&mut out, c.encode_utf8(&mut [0; 4]));
            }
        }
        out
    }

    fn display_name_by_chars(name: &str) -> String {
        let mut out = String::new();
        for c in name.chars() {
            if is_invisible_control(c) {
                let _ = write!(out, "<span class=\"cc\">U+{:04X}</span>", c as u32);
            } else {
                push_escaped(&mut out, c.encode_utf8(&mut [0; 4]));
            }
        }
        out
    }

    proptest::proptest! {
        /// A name copied as it is (the fast path) reads exactly as the escaped one.
        #[test]
        fn plain_names_need_no_escaping(name in "[ -~]{0,12}|\\PC{0,6}|[a\u{0}-\u{1f}\u{7f}-\u{9f}\u{202e}&<>\"']{0,6}") {
            proptest::prop_assert_eq!(attr_escape(&name), attr_escape_by_chars(&name));
            proptest::prop_assert_eq!(display_name(&name), display_name_by_chars(&name));
        }
    }

    #[test]
    fn search_results_link_below_the_folder() {
        let results = crate::http::page::search::Results {
            hits: vec![crate::http::page::search::Hit {
                path: "a b/<x>.txt".into(),
                href: "a%20b/%3Cx%3E.txt".into(),
                entry: entry("<x>.txt", false, 1, 0),
            }],
            cut_short: true,
        };
        let html = render_search(
            &dir_of(&["d".to_owned()]),
            "<x>",
            &results,
            Features::default(),
        );
        assert!(
            html.contains("href=\"./a%20b/%3Cx%3E.txt\">a b/&lt;x&gt;.txt</a>"),
            "{html}"
        );
        assert!(html.contains("Search for “&lt;x&gt;” in /d/"));
        assert!(html.contains("stopped early"));
        assert!(!html.contains("<x>"));
    }

    #[test]
    fn page_uses_hashed_assets_and_nothing_inline() {
        let html = page(&[], &[entry("a", false, 1, 0)], Features::default());
        assert!(html.contains(&format!("href=\"{}\"", assets::STYLE.href())));
        assert!(html.contains(&format!("src=\"{}\"", assets::SCRIPT.href())));
        assert!(!html.contains("<style"));
        assert!(!html.contains(" style="));
        assert!(!html.contains("<script>"));
        assert!(!html.contains(" on"), "no inline event handlers");
    }

    #[test]
    fn breadcrumbs_link_every_ancestor() {
        let segments = ["a b".to_owned(), "c?".to_owned(), "d".to_owned()];
        let html = page(&segments, &[], Features::default());
        assert!(html.contains("<li><a href=\"/\">Home</a></li>"));
        assert!(html.contains("<li><a href=\"/a%20b/\">a b</a></li>"));
        assert!(html.contains("<li><a href=\"/a%20b/c%3F/\">c?</a></li>"));
        assert!(html.contains("<li aria-current=\"page\">d</li>"));
        assert!(html.contains("href=\"../\""));
        let root = page(&[], &[], Features::default());
        assert!(root.contains("<li aria-current=\"page\">Home</li>"));
        assert!(!root.contains("href=\"../\""));
    }

    #[test]
    fn sizes_and_dates_are_human_with_exact_titles() {
        let html = page(
            &[],
            &[entry("f", false, 1536, 1_700_000_000)],
            Features::default(),
        );
        assert!(html.contains("title=\"1536 bytes\">1.5 KiB</td>"));
        assert!(html.contains(
            "<time datetime=\"2023-11-14T22:13:20Z\" title=\"2023-11-14 22:13:20 UTC\">2023-11-14 22:13</time>"
        ));
    }

    #[test]
    fn features_switch_their_parts() {
        let none = page(&[], &[], Features::default());
        assert!(
            !none.contains("up-form") && !none.contains("archive=") && !none.contains("name=\"q\"")
        );
        let all = page(
            &[],
            &[],
            Features {
                upload: true,
                dav_writes: true,
                delete: true,
                archive: true,
                search: true,
            },
        );
        assert!(all.contains("id=\"up-form\" method=\"post\" enctype=\"multipart/form-data\""));
        assert!(all.contains("data-upload data-dav data-delete data-edit>"));
        assert!(all.contains("href=\"?archive=zip\"") && all.contains("href=\"?archive=tar.gz\""));
        assert!(all.contains("name=\"q\""));
    }

    #[test]
    fn the_editor_is_offered_only_where_an_overwrite_would_be_taken() {
        let features = |upload, dav_writes, delete| Features {
            upload,
            dav_writes,
            delete,
            archive: false,
            search: false,
        };
        for (upload, dav, overwrite) in [(true, false, false), (true, true, false)] {
            let html = page(&[], &[], features(upload, dav, overwrite));
            assert!(!html.contains("data-edit"), "{upload} {dav} {overwrite}");
        }
        for dav in [false, true] {
            let html = page(&[], &[], features(true, dav, true));
            assert!(
                html.contains(" data-edit>"),
                "uploads with overwrites: {html}"
            );
        }
    }

    #[test]
    fn sort_links_toggle_and_mark_the_active_column() {
        let q = ListingQuery {
            sort: SortKey::Size,
            order: Order::Asc,
            json: false,
        };
        let html = render(&Page {
            dir: &dir_of(&[]),
            entries: &[],
            query: &q,
            features: Features::default(),
            readme: None,
            qr_base: None,
        });
        assert!(html.contains("aria-sort=\"ascending\"><a href=\"?sort=size&amp;order=desc\""));
        assert!(html.contains("<a href=\"?sort=name&amp;order=asc\""));
        assert_eq!(html.matches("aria-sort").count(), 1);
    }
}
