//! A directory's `README.md`, rendered below the listing.
//!
//! Markdown from the served tree is as untrusted as a file name. Raw HTML in it is turned
//! into text before rendering (it never passes through, not even sanitised), and the
//! rendered HTML is then cleaned by ammonia's allow-list (no script, no style, no event
//! handler, no `javascript:` link). The page's CSP would stop a script anyway; this keeps
//! the markup itself clean.

use std::io::Read;
use std::path::Path;

use cap_std::fs::Dir;
use pulldown_cmark::{Event, Options, Parser, html};

use crate::http::listing::Entry;

/// READMEs larger than this are not rendered (the link in the listing still works).
pub const MAX_README: u64 = 256 * 1024;

/// The names looked for, in order.
const NAMES: [&str; 3] = ["README.md", "readme.md", "Readme.md"];

/// The sanitised HTML of the README among `entries` in `rel`, if there is one that can be
/// read and is not too large. Blocking.
pub fn load(root: &Dir, rel: &Path, entries: &[Entry]) -> Option<String> {
    let entry = NAMES
        .iter()
        .find_map(|name| entries.iter().find(|e| !e.is_dir && &*e.name == *name))?;
    if entry.size > MAX_README {
        return None;
    }
    let mut text = String::new();
    root.open(rel.join(&*entry.name))
        .ok()?
        .take(MAX_README)
        .read_to_string(&mut text)
        .ok()?;
    Some(render(&text))
}

/// Markdown to sanitised HTML.
pub fn render(markdown: &str) -> String {
    let options = Options::ENABLE_TABLES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_FOOTNOTES;
    let events = Parser::new_ext(markdown, options).map(|event| match event {
        Event::Html(raw) | Event::InlineHtml(raw) => Event::Text(raw),
        other => other,
    });
    let mut out = String::with_capacity(markdown.len() * 3 / 2);
    html::push_html(&mut out, events);
    ammonia::Builder::default()
        .link_rel(Some("noopener noreferrer nofollow"))
        .clean(&out)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_readme_renders_as_text() {
        let hostile = "# Title\n\n<script>alert(1)</script>\n\n\
            <img src=x onerror=alert(1)>\n\n\
            [click](javascript:alert(1)) [ok](docs/a%20b.md)\n\n\
            <a href=\"https://evil.example\" style=\"x\">raw</a>\n\n\
            ![pic](data:text/html,<script>alert(1)</script>)\n\n\
            <iframe src=\"https://evil.example\"></iframe>\n\n**bold**";
        let html = render(hostile);
        assert!(html.contains("<h1>Title</h1>"), "{html}");
        assert!(html.contains("<strong>bold</strong>"), "{html}");
        assert!(!html.contains("<script"), "{html}");
        assert!(!html.contains("<img src=\"x\""), "{html}");
        assert!(!html.contains("onerror=alert(1)>"), "{html}");
        assert!(!html.contains("javascript:"), "{html}");
        assert!(!html.contains("<iframe"), "{html}");
        assert!(!html.contains(" style=\"x\">"), "{html}");
        assert!(!html.contains("<a href=\"https://evil.example\""), "{html}");
        // Raw HTML is shown as the text it is.
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
        // Ordinary relative links survive.
        assert!(html.contains("href=\"docs/a%20b.md\""), "{html}");
    }
}
