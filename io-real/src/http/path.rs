//! Request-path decoding and containment.
//!
//! Containment happens in two layers, and both are needed:
//!
//! 1. **Lexically, here.** The request path is split on `/` *before* percent-decoding, each
//!    segment is decoded on its own, and a decoded segment that still contains a separator
//!    (`%2F`, `%5C`) or NUL is refused. Dot-segments are resolved on the decoded form, so
//!    `%2e%2e` is a `..` like any other, and a `..` above the root is an error rather than
//!    being clamped: a request that tries to climb out is a bad request, not a request for
//!    the root. What leaves this module is a relative path with no `.`/`..`, no separators
//!    inside a name and (unless `show_hidden`) no dot-files anywhere along it.
//! 2. **Against the file system, in [`super::site`].** A lexically clean path can still
//!    leave the root through a symlink. The site resolves every path with a `cap_std::fs::Dir`
//!    opened once on the root. We chose that over `canonicalize` + prefix check because the
//!    check-then-open pair is a race (a symlink swapped in between the two calls is
//!    followed), whereas cap-std resolves inside the open call itself (`openat2` with
//!    `RESOLVE_BENEATH` on Linux, a component-by-component walk elsewhere) and fails with
//!    `PermissionDenied` on any escape. Symlinks that stay inside the root keep working;
//!    absolute symlinks are refused even when they point back inside, which is the price of
//!    not trusting the link text.
//!
//! Names must be UTF-8: a name that is not can neither be requested nor listed.

use std::path::PathBuf;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

/// Why a request path was refused before touching the file system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PathError {
    /// The request target is not an origin-form path (`*`, or garbage).
    #[error("request target is not an absolute path")]
    NotAbsolute,
    /// A segment decoded to something containing `/` or `\`.
    #[error("encoded path separator in request path")]
    EncodedSeparator,
    /// A segment decoded to something containing NUL.
    #[error("NUL byte in request path")]
    Nul,
    /// A segment is not UTF-8 once decoded.
    #[error("request path is not UTF-8")]
    NotUtf8,
    /// `..` would climb above the served root.
    #[error("request path climbs above the served root")]
    EscapesRoot,
    /// A segment names a dot-file and hidden files are not shown.
    #[error("request path names a hidden file")]
    Hidden,
}

/// A decoded, normalised request path, relative to the served root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestPath {
    segments: Vec<String>,
    trailing_slash: bool,
}

/// Everything except RFC 3986 unreserved characters is encoded, so a name can never be read
/// as a scheme (`javascript:`), a query, a fragment or a separator when used in a link.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes one path segment (a file name) for use in a URL.
pub fn encode_segment(name: &str) -> String {
    utf8_percent_encode(name, SEGMENT).to_string()
}

/// Whether a file name is hidden by default.
pub fn is_hidden(name: &str) -> bool {
    name.starts_with('.')
}

impl RequestPath {
    /// Decodes and normalises the path component of a request target.
    pub fn parse(raw: &str, show_hidden: bool) -> Result<Self, PathError> {
        let rest = raw.strip_prefix('/').ok_or(PathError::NotAbsolute)?;
        let mut segments: Vec<String> = Vec::new();
        let mut trailing_slash = true;
        for raw_segment in rest.split('/') {
            let bytes: Vec<u8> = percent_decode_str(raw_segment).collect();
            if bytes.iter().any(|&b| b == b'/' || b == b'\\') {
                return Err(PathError::EncodedSeparator);
            }
            if bytes.contains(&0) {
                return Err(PathError::Nul);
            }
            let segment = String::from_utf8(bytes).map_err(|_| PathError::NotUtf8)?;
            // A path ending in `.`/`..` names a directory just like one ending in `/`.
            trailing_slash = matches!(segment.as_str(), "" | "." | "..");
            match segment.as_str() {
                "" | "." => {}
                ".." => {
                    segments.pop().ok_or(PathError::EscapesRoot)?;
                }
                _ => segments.push(segment),
            }
        }
        // Checked after normalisation: `/.git/../a` never touches `.git`, while
        // `/a/../.git` does and must be refused.
        if !show_hidden && segments.iter().any(|s| is_hidden(s)) {
            return Err(PathError::Hidden);
        }
        // servery's own files (upload temporaries, partial uploads) are never reachable,
        // even with hidden files shown.
        if segments.iter().any(|s| crate::write::is_private(s)) {
            return Err(PathError::Hidden);
        }
        Ok(Self {
            segments,
            trailing_slash,
        })
    }

    /// The decoded, normalised segments; empty for the root.
    pub fn segments(&self) -> &[String] {
        &self.segments
    }

    /// Whether the request named a directory form (`/dir/`).
    pub fn trailing_slash(&self) -> bool {
        self.trailing_slash
    }

    /// Whether this is the served root itself.
    pub fn is_root(&self) -> bool {
        self.segments.is_empty()
    }

    /// The file-system path relative to the root (`.` for the root).
    pub fn relative(&self) -> PathBuf {
        if self.segments.is_empty() {
            return PathBuf::from(".");
        }
        self.segments.iter().collect()
    }

    /// The last segment, used for content-type lookup.
    pub fn file_name(&self) -> Option<&str> {
        self.segments.last().map(String::as_str)
    }

    /// The canonical directory URL (`/a/b/`), percent-encoded and always starting with a
    /// single `/`, so a redirect can never become protocol-relative (`//host/`).
    pub fn dir_href(&self) -> String {
        let mut href = String::from("/");
        for segment in &self.segments {
            href.push_str(&encode_segment(segment));
            href.push('/');
        }
        href
    }

    /// The decoded directory path for display (`/a/b/`); must be escaped before use in HTML.
    pub fn dir_display(&self) -> String {
        let mut shown = String::from("/");
        for segment in &self.segments {
            shown.push_str(segment);
            shown.push('/');
        }
        shown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(raw: &str) -> Result<RequestPath, PathError> {
        RequestPath::parse(raw, false)
    }

    fn segs(raw: &str) -> Vec<String> {
        match parse(raw) {
            Ok(p) => p.segments().to_vec(),
            Err(e) => panic!("{raw}: {e}"),
        }
    }

    #[test]
    fn root_and_plain_paths() {
        assert!(segs("/").is_empty());
        assert_eq!(segs("/a/b.txt"), ["a", "b.txt"]);
        assert_eq!(segs("//a///b"), ["a", "b"]);
        assert_eq!(segs("/a%20b/%C3%A9"), ["a b", "é"]);
        assert_eq!(parse("/").map(|p| p.relative()), Ok(PathBuf::from(".")));
    }

    #[test]
    fn dot_segments_normalise_inside_root() {
        assert_eq!(segs("/a/./b/../c"), ["a", "c"]);
        assert_eq!(segs("/a/%2e%2E/c"), ["c"]);
        assert_eq!(segs("/a/.."), Vec::<String>::new());
        assert!(parse("/a/..").is_ok_and(|p| p.trailing_slash()));
    }

    #[test]
    fn climbing_above_root_is_refused() {
        for raw in [
            "/..",
            "/../etc/passwd",
            "/a/../../b",
            "/%2e%2e/x",
            "/.%2E/x",
            "/a/%2e%2e/%2e%2e",
        ] {
            assert_eq!(parse(raw), Err(PathError::EscapesRoot), "{raw}");
        }
    }

    #[test]
    fn encoded_separators_and_nul_are_refused() {
        assert_eq!(parse("/a%2Fb"), Err(PathError::EncodedSeparator));
        assert_eq!(parse("/a%2fb"), Err(PathError::EncodedSeparator));
        assert_eq!(parse("/..%2F..%2Fetc"), Err(PathError::EncodedSeparator));
        assert_eq!(parse("/a%5Cb"), Err(PathError::EncodedSeparator));
        assert_eq!(parse("/a\\b"), Err(PathError::EncodedSeparator));
        assert_eq!(parse("/a%00b"), Err(PathError::Nul));
        assert_eq!(parse("/%FF"), Err(PathError::NotUtf8));
        assert_eq!(parse("*"), Err(PathError::NotAbsolute));
        assert_eq!(parse(""), Err(PathError::NotAbsolute));
    }

    #[test]
    fn dotfiles_are_hidden_unless_shown() {
        assert_eq!(parse("/.git/config"), Err(PathError::Hidden));
        assert_eq!(parse("/a/.env"), Err(PathError::Hidden));
        assert_eq!(parse("/a/%2eenv"), Err(PathError::Hidden));
        assert_eq!(parse("/a/../.env"), Err(PathError::Hidden));
        // Visited and left again: never reaches the file system.
        assert_eq!(segs("/.git/../a"), ["a"]);
        assert!(RequestPath::parse("/.env", true).is_ok());
        assert_eq!(
            RequestPath::parse("/a/.servery-partial-00", true),
            Err(PathError::Hidden)
        );
    }

    #[test]
    fn trailing_slash_is_tracked() {
        assert!(parse("/a/").is_ok_and(|p| p.trailing_slash()));
        assert!(parse("/a/.").is_ok_and(|p| p.trailing_slash()));
        assert!(parse("/a").is_ok_and(|p| !p.trailing_slash()));
        assert!(parse("/").is_ok_and(|p| p.trailing_slash()));
    }

    #[test]
    fn hrefs_are_encoded_and_never_protocol_relative() {
        let p = parse("//evil.example/x y").ok();
        assert_eq!(
            p.map(|p| p.dir_href()).as_deref(),
            Some("/evil.example/x%20y/")
        );
        assert_eq!(
            encode_segment("javascript:alert(1)"),
            "javascript%3Aalert%281%29"
        );
        assert_eq!(encode_segment("<b>&\"x\""), "%3Cb%3E%26%22x%22");
        assert_eq!(encode_segment("a-b_c.d~"), "a-b_c.d~");
    }
}
