//! Content types and the security headers every response carries.
//!
//! A small built-in table instead of `mime_guess`: browsers only act on a handful of types
//! (HTML, CSS, scripts, images, media, fonts, wasm), `nosniff` makes a wrong guess fail safe
//! (as a download), and a table we own cannot change behaviour under a dependency update.
//! Text and source code are served as text so a click shows them (decision 0066): every
//! common source and configuration extension is `text/plain; charset=utf-8` unless it has
//! a text type of its own, and a file of any other name whose first bytes are UTF-8 text
//! ([`sniff_text`]) is text too. Anything else is `application/octet-stream`.

use std::sync::OnceLock;

use http::{HeaderMap, HeaderValue, header};

const OCTET_STREAM: &str = "application/octet-stream";

/// Source code, configuration and logs: shown by a browser as they are.
pub const PLAIN_TEXT: &str = "text/plain; charset=utf-8";

/// Types by extension (lower case). Extensions of well-known binary formats are here as
/// downloads, so their files are never sniffed: a sniff costs a read of the file's head on
/// every request that is not served from memory.
const TABLE: &[(&str, &[&str])] = &[
    ("text/html; charset=utf-8", &["html", "htm"]),
    ("text/css; charset=utf-8", &["css"]),
    ("text/javascript; charset=utf-8", &["js", "mjs"]),
    ("application/json", &["json", "map"]),
    ("application/manifest+json", &["webmanifest"]),
    (
        PLAIN_TEXT,
        &[
            "txt",
            "text",
            "log",
            "conf",
            "cfg",
            "ini",
            "toml",
            "yaml",
            "yml",
            "env",
            "properties",
            "lock",
            "py",
            "pyi",
            "rs",
            "go",
            "c",
            "h",
            "cc",
            "cpp",
            "cxx",
            "hh",
            "hpp",
            "hxx",
            "java",
            "kt",
            "kts",
            "scala",
            "swift",
            "m",
            "cs",
            "fs",
            "vb",
            "rb",
            "pl",
            "pm",
            "php",
            "lua",
            "r",
            "jl",
            "dart",
            "zig",
            "nim",
            "hs",
            "ml",
            "mli",
            "ex",
            "exs",
            "erl",
            "hrl",
            "clj",
            "cljs",
            "el",
            "lisp",
            "scm",
            "rkt",
            "vim",
            "sh",
            "bash",
            "zsh",
            "fish",
            "ps1",
            "bat",
            "cmd",
            "sql",
            "tsx",
            "jsx",
            "vue",
            "svelte",
            "scss",
            "sass",
            "less",
            "graphql",
            "proto",
            "tf",
            "nix",
            "cmake",
            "mk",
            "gradle",
            "diff",
            "patch",
            "rst",
            "adoc",
            "tex",
            "bib",
            "srt",
            "vtt",
            "dockerfile",
        ],
    ),
    ("text/markdown; charset=utf-8", &["md", "markdown"]),
    ("text/csv; charset=utf-8", &["csv"]),
    ("application/xml", &["xml"]),
    ("image/svg+xml", &["svg"]),
    ("image/png", &["png"]),
    ("image/jpeg", &["jpg", "jpeg"]),
    ("image/gif", &["gif"]),
    ("image/webp", &["webp"]),
    ("image/avif", &["avif"]),
    ("image/vnd.microsoft.icon", &["ico"]),
    ("image/bmp", &["bmp"]),
    ("application/pdf", &["pdf"]),
    ("application/wasm", &["wasm"]),
    ("font/woff", &["woff"]),
    ("font/woff2", &["woff2"]),
    ("font/ttf", &["ttf"]),
    ("font/otf", &["otf"]),
    ("video/mp4", &["mp4"]),
    ("video/webm", &["webm"]),
    ("audio/mpeg", &["mp3"]),
    ("audio/ogg", &["ogg"]),
    ("audio/wav", &["wav"]),
    ("audio/flac", &["flac"]),
    ("application/zip", &["zip"]),
    ("application/gzip", &["gz"]),
    ("application/x-tar", &["tar"]),
    ("application/zstd", &["zst"]),
    (
        OCTET_STREAM,
        &[
            "bin", "exe", "dll", "so", "o", "a", "lib", "iso", "img", "dmg", "deb", "rpm", "apk",
            "msi", "jar", "class", "pyc", "whl", "db", "sqlite", "7z", "xz", "bz2", "rar", "lz4",
            "qcow2", "vmdk", "vdi", "raw",
        ],
    ),
];

/// The longest extension the table can hold as a key.
const LONGEST_EXTENSION: usize = 16;

/// An extension as a number: its lower-cased bytes, zero-padded (a file name holds no
/// NUL, so two extensions never share a key). `None` when longer than any in the table.
fn key(ext: &[u8]) -> Option<u128> {
    let mut buf = [0u8; LONGEST_EXTENSION];
    let lower = buf.get_mut(..ext.len())?;
    lower.copy_from_slice(ext);
    lower.make_ascii_lowercase();
    Some(u128::from_le_bytes(buf))
}

/// [`TABLE`] by key, sorted once: every response for a file asks, and a binary search over
/// integers costs a few dozen instructions where a `match` over 130 byte strings compared
/// them one after another (about a thousand per lookup).
fn index() -> &'static [(u128, &'static str)] {
    static INDEX: OnceLock<Vec<(u128, &'static str)>> = OnceLock::new();
    INDEX.get_or_init(|| {
        let mut index: Vec<(u128, &'static str)> = TABLE
            .iter()
            .flat_map(|(ty, exts)| {
                exts.iter()
                    .filter_map(move |ext| Some((key(ext.as_bytes())?, *ty)))
            })
            .collect();
        index.sort_unstable_by_key(|(k, _)| *k);
        index
    })
}

/// The `Content-Type` for a file name, by extension (case-insensitive).
pub fn content_type(file_name: &str) -> &'static str {
    by_extension(file_name).unwrap_or(OCTET_STREAM)
}

/// The type the name's extension gives, or `None` when the name says nothing (no
/// extension, or one not in the table).
pub(super) fn by_extension(file_name: &str) -> Option<&'static str> {
    let bytes = file_name.as_bytes();
    let dot = bytes.iter().rposition(|&b| b == b'.')?;
    if dot == 0 {
        return None;
    }
    let key = key(&bytes[dot + 1..])?;
    let index = index();
    index
        .binary_search_by_key(&key, |(k, _)| *k)
        .ok()
        .map(|i| index[i].1)
}

/// How many leading bytes [`sniff_text`] looks at.
pub const SNIFF_LEN: usize = 1024;

/// Whether a file whose name says nothing (no extension, or one not in the table) is
/// text, judged from its first bytes (up to [`SNIFF_LEN`]): UTF-8 (a character cut at the
/// end of the sample is allowed), no NUL, and no control character but tab, line breaks,
/// form feed and escape (used by coloured logs). An empty file is text.
pub fn sniff_text(head: &[u8]) -> bool {
    let head = &head[..head.len().min(SNIFF_LEN)];
    let text = match std::str::from_utf8(head) {
        Ok(text) => text,
        // Cut inside a character at the end of the sample: what comes before is judged.
        Err(e) if e.error_len().is_none() && head.len() == SNIFF_LEN => {
            std::str::from_utf8(&head[..e.valid_up_to()]).unwrap_or_default()
        }
        Err(_) => return false,
    };
    // Byte by byte rather than by `char`: it runs on every response for such a file. In
    // valid UTF-8 the controls are the ASCII ones and U+0080..U+009F, which is 0xC2
    // followed by 0x80..=0x9F (0xC2 is always a lead byte there).
    let bytes = text.as_bytes();
    !bytes.iter().enumerate().any(|(i, &b)| {
        (b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r' | 0x0c | 0x1b))
            || b == 0x7f
            || (b == 0xc2 && bytes.get(i + 1).is_some_and(|n| (0x80..=0x9f).contains(n)))
    })
}

/// The type of a file named `file_name`, looking at its first bytes only when the name
/// says nothing: [`content_type`], or [`PLAIN_TEXT`] for a file that [`sniff_text`] finds
/// to be text.
pub fn content_type_sniffed(file_name: &str, head: &[u8]) -> &'static str {
    match content_type(file_name) {
        OCTET_STREAM if sniff_text(head) => PLAIN_TEXT,
        known => known,
    }
}

/// Headers on every response. `nosniff` stops browsers from promoting a served file to a
/// script or a page; the others limit framing and referrer leakage of served URLs.
pub fn add_security_headers(headers: &mut HeaderMap) {
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::X_FRAME_OPTIONS,
        HeaderValue::from_static("SAMEORIGIN"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
}

/// The CSP for pages servery generates itself (listings, errors): no scripts at all, so an
/// escaping bug in a listing still cannot run anything. Served files do not get it, since it
/// would break the user's own pages.
pub const GENERATED_PAGE_CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src data:";

/// The policy of a user's file a browser would run, on a site others can write
/// (decision 0047): rendered, but with no script, form, plugin, pop-up or navigation of
/// the page that opened it, and in an origin of its own (no `allow-same-origin`), so it
/// can neither read the site nor write to it as the site.
pub const SANDBOX_CSP: &str = "sandbox";

/// Whether a browser runs content of this type when it opens it: HTML, and every XML
/// type (XHTML and SVG run scripts; any XML document can pull in XSLT that makes HTML).
/// Other types are shown inert (images, media, text), handed to a viewer without the
/// site's origin (PDF), or, under `nosniff`, downloaded.
pub fn is_active(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence == "text/html"
        || essence.ends_with("/xml")
        || essence.ends_with("+xml")
        || essence == "text/xsl"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_types_a_browser_runs_are_active() {
        for (name, active) in [
            ("evil.html", true),
            ("evil.HTM", true),
            ("evil.svg", true),
            ("feed.xml", true),
            ("a.txt", false),
            ("a.js", false),
            ("a.css", false),
            ("a.png", false),
            ("a.pdf", false),
            ("a.json", false),
            ("a.unknown", false),
        ] {
            assert_eq!(is_active(content_type(name)), active, "{name}");
        }
        assert!(is_active("application/XHTML+XML; charset=utf-8"));
        assert!(is_active("text/xsl"));
        assert!(!is_active("application/manifest+json"));
    }

    #[test]
    fn types_by_extension() {
        assert_eq!(content_type("index.html"), "text/html; charset=utf-8");
        assert_eq!(content_type("A.PNG"), "image/png");
        assert_eq!(content_type("archive.tar.gz"), "application/gzip");
        assert_eq!(content_type("noext"), "application/octet-stream");
        for code in [
            "a.py",
            "b.rs",
            "Cargo.toml",
            "run.sh",
            "main.go",
            "x.c",
            "x.h",
            "c.yaml",
            "c.YML",
            "notes.log",
            "q.sql",
            "App.tsx",
            "x.patch",
            "a.ini",
        ] {
            assert_eq!(content_type(code), PLAIN_TEXT, "{code}");
        }
        assert_eq!(content_type("README.md"), "text/markdown; charset=utf-8");
        assert_eq!(content_type("data.json"), "application/json");
        assert_eq!(content_type(".bashrc"), "application/octet-stream");
        assert_eq!(content_type("x.unknown"), "application/octet-stream");
        assert_eq!(content_type("trailing."), "application/octet-stream");
        assert_eq!(content_type("app.WebManifest"), "application/manifest+json");
        assert_eq!(content_type("x.webmanifests"), "application/octet-stream");
        assert_eq!(content_type("x.é"), "application/octet-stream");
    }

    #[test]
    fn every_known_type_is_a_valid_header_value() {
        // Responses build the header with `HeaderValue::from_static`, which panics on a
        // byte a header may not hold.
        let names = [
            "a.html",
            "a.css",
            "a.js",
            "a.json",
            "a.webmanifest",
            "a.txt",
            "a.md",
            "a.csv",
            "a.xml",
            "a.svg",
            "a.png",
            "a.jpg",
            "a.gif",
            "a.webp",
            "a.avif",
            "a.ico",
            "a.bmp",
            "a.pdf",
            "a.wasm",
            "a.woff",
            "a.woff2",
            "a.ttf",
            "a.otf",
            "a.mp4",
            "a.webm",
            "a.mp3",
            "a.ogg",
            "a.wav",
            "a.flac",
            "a.zip",
            "a.gz",
            "a.tar",
            "a.zst",
            "a",
        ];
        for name in names {
            let ty = content_type(name);
            assert!(HeaderValue::from_str(ty).is_ok(), "{name}: {ty}");
            assert!(name == "a" || ty != OCTET_STREAM, "{name} is not known");
        }
    }

    #[test]
    fn text_is_sniffed_only_when_the_name_says_nothing() {
        assert_eq!(
            content_type_sniffed("Makefile", b"all:\n\tcc a.c\n"),
            PLAIN_TEXT
        );
        assert_eq!(
            content_type_sniffed("LICENSE", "Ünïcode — ok\r\n".as_bytes()),
            PLAIN_TEXT
        );
        assert_eq!(content_type_sniffed("empty", b""), PLAIN_TEXT);
        assert_eq!(
            content_type_sniffed("log", b"\x1b[31mred\x1b[0m"),
            PLAIN_TEXT
        );
        assert_eq!(content_type_sniffed("blob", b"ab\0cd"), OCTET_STREAM);
        assert_eq!(
            content_type_sniffed("blob", b"\x89PNG\r\n\x1a\n"),
            OCTET_STREAM
        );
        assert_eq!(
            content_type_sniffed("latin1", b"caf\xe9 au lait"),
            OCTET_STREAM
        );
        assert_eq!(content_type_sniffed("bell", b"ding\x07"), OCTET_STREAM);
        // The name decides when it can: a .png of text is still an image.
        assert_eq!(content_type_sniffed("a.png", b"text"), "image/png");
        assert_eq!(content_type_sniffed("a.weird", b"text"), PLAIN_TEXT);
        // A character cut by the end of the sample is not a reason to call it binary...
        let mut long = "a".repeat(SNIFF_LEN - 1).into_bytes();
        long.extend_from_slice("é".as_bytes());
        assert!(sniff_text(&long));
        // ...but a broken one inside it is.
        let mut short = b"abc".to_vec();
        short.push(0xc3);
        assert!(!sniff_text(&short));
    }

    proptest::proptest! {
        /// Any bytes get an answer, and text stays text wherever the sample is cut.
        #[test]
        fn sniffing_any_bytes_is_safe(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..2048),
                                      text in "[a-zé€😀\t\n ]{0,1500}") {
            let _ = sniff_text(&bytes);
            proptest::prop_assert!(sniff_text(text.as_bytes()));
        }

        /// The byte loop says what the rule says of characters: text is UTF-8 with no
        /// control but tab, line breaks, form feed and escape.
        #[test]
        fn the_byte_loop_follows_the_rule_on_characters(
            chars in proptest::collection::vec(proptest::char::any(), 0..300)
        ) {
            let text: String = chars.into_iter().collect();
            let head = &text.as_bytes()[..text.len().min(SNIFF_LEN)];
            let cut = std::str::from_utf8(head)
                .unwrap_or_else(|e| std::str::from_utf8(&head[..e.valid_up_to()]).unwrap_or_default());
            let by_rule = cut
                .chars()
                .all(|c| !c.is_control() || matches!(c, '\t' | '\n' | '\r' | '\x0c' | '\x1b'));
            proptest::prop_assert_eq!(sniff_text(text.as_bytes()), by_rule);
        }
    }

    #[test]
    fn every_extension_is_in_the_table_once_and_found_in_any_case() {
        let mut seen = std::collections::BTreeSet::new();
        for (ty, exts) in TABLE {
            for ext in *exts {
                assert!(seen.insert(*ext), "{ext} twice in the table");
                assert!(key(ext.as_bytes()).is_some(), "{ext} too long for a key");
                assert_eq!(by_extension(&format!("a.{ext}")), Some(*ty), "{ext}");
                let upper = format!("NAME.{}", ext.to_ascii_uppercase());
                assert_eq!(by_extension(&upper), Some(*ty), "{upper}");
            }
        }
        assert_eq!(index().len(), seen.len());
        for name in [".bashrc", "noext", "a.", "a.unknownextension", "a.b.nope"] {
            assert_eq!(by_extension(name), None, "{name}");
        }
        assert_eq!(by_extension("archive.tar.gz"), Some("application/gzip"));
    }

    #[test]
    fn binary_formats_are_downloads_without_a_look() {
        for name in ["disk.img", "firmware.BIN", "a.so", "x.7z", "app.exe"] {
            assert!(by_extension(name).is_some(), "{name}");
            assert_eq!(content_type(name), OCTET_STREAM, "{name}");
        }
        assert!(by_extension("Makefile").is_none() && by_extension("notes.unknownext").is_none());
    }

    #[test]
    fn security_headers() {
        let mut headers = HeaderMap::new();
        add_security_headers(&mut headers);
        assert_eq!(
            headers
                .get(header::X_CONTENT_TYPE_OPTIONS)
                .map(|v| v.as_bytes()),
            Some(&b"nosniff"[..])
        );
        assert!(headers.contains_key(header::X_FRAME_OPTIONS));
    }
}
