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
//! File names are bytes on Unix, and a name that is not UTF-8 (a file written by an older
//! system in Latin-1, say) can still be read: [`RequestPath::parse_any`] keeps such a segment's
//! bytes for the file system and shows it with U+FFFD in place of what is not text, and its
//! links percent-encode the bytes themselves. Everything that writes or speaks a UTF-8
//! protocol (uploads, WebDAV, TFTP) uses [`RequestPath::parse`], which refuses such a path.

use std::ffi::OsString;
use std::path::PathBuf;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, percent_encode};

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
    /// Each segment as text: exact when it is UTF-8, with U+FFFD for what is not.
    segments: Vec<String>,
    /// The exact bytes of every segment, kept only when one of them is not UTF-8 (the
    /// common path allocates nothing more).
    raw: Option<Vec<OsString>>,
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
    encode_segment_bytes(name.as_bytes())
}

/// Appends `name` percent-encoded as [`encode_segment`] writes it, without a string of
/// its own (a listing writes one per entry).
pub fn push_encoded_segment(out: &mut String, name: &str) {
    out.extend(percent_encode(name.as_bytes(), SEGMENT));
}

/// Percent-encodes a file name's exact bytes, UTF-8 or not, for use in a URL.
pub fn encode_segment_bytes(name: &[u8]) -> String {
    percent_encode(name, SEGMENT).to_string()
}

/// A file name's bytes (Unix keeps names as bytes; elsewhere they are text).
fn name_bytes(name: &std::ffi::OsStr) -> std::borrow::Cow<'_, [u8]> {
    #[cfg(unix)]
    {
        std::borrow::Cow::Borrowed(std::os::unix::ffi::OsStrExt::as_bytes(name))
    }
    #[cfg(not(unix))]
    {
        match name.to_string_lossy() {
            std::borrow::Cow::Borrowed(s) => std::borrow::Cow::Borrowed(s.as_bytes()),
            std::borrow::Cow::Owned(s) => std::borrow::Cow::Owned(s.into_bytes()),
        }
    }
}

/// Percent-encodes a file name as the file system gave it.
pub fn encode_os_name(name: &std::ffi::OsStr) -> String {
    encode_segment_bytes(&name_bytes(name))
}

/// The file name for decoded bytes; `None` where names must be text (not Unix).
fn os_name(bytes: Vec<u8>) -> Option<OsString> {
    #[cfg(unix)]
    {
        Some(std::os::unix::ffi::OsStringExt::from_vec(bytes))
    }
    #[cfg(not(unix))]
    {
        String::from_utf8(bytes).ok().map(OsString::from)
    }
}

/// Whether a file name is hidden by default.
pub fn is_hidden(name: &str) -> bool {
    name.starts_with('.')
}

/// Whether dot-files are served, listed and accepted as names to write: when the
/// operator asks (`--show-hidden`), and always on a writable WebDAV share (`--dav
/// --upload`), whose clients (rclone, davfs2 with rsync, Finder) store them and must find
/// them again (decision 0063). servery's own `.servery-*` names stay private either way.
pub fn dot_files_shown(show_hidden: bool, dav: bool, upload: bool) -> bool {
    show_hidden || (dav && upload)
}

impl RequestPath {
    /// Decodes and normalises the path component of a request target; every segment must
    /// be UTF-8 ([`PathError::NotUtf8`] otherwise). For whatever writes or names a resource
    /// in a text protocol.
    pub fn parse(raw: &str, show_hidden: bool) -> Result<Self, PathError> {
        let path = Self::parse_any(raw, show_hidden)?;
        if path.raw.is_some() {
            return Err(PathError::NotUtf8);
        }
        Ok(path)
    }

    /// As [`Self::parse`], but a segment that is not UTF-8 names the file with those exact
    /// bytes (for reading: GET, HEAD and listings).
    pub fn parse_any(raw: &str, show_hidden: bool) -> Result<Self, PathError> {
        let rest = raw.strip_prefix('/').ok_or(PathError::NotAbsolute)?;
        let mut segments: Vec<String> = Vec::new();
        // Filled (with every segment so far) at the first segment that is not UTF-8.
        let mut raw_names: Option<Vec<OsString>> = None;
        let mut trailing_slash = true;
        for raw_segment in rest.split('/') {
            let bytes: Vec<u8> = percent_decode_str(raw_segment).collect();
            if bytes.iter().any(|&b| b == b'/' || b == b'\\') {
                return Err(PathError::EncodedSeparator);
            }
            if bytes.contains(&0) {
                return Err(PathError::Nul);
            }
            let (segment, exact) = match String::from_utf8(bytes) {
                Ok(text) => (text, None),
                Err(e) => {
                    let bytes = e.into_bytes();
                    let shown = String::from_utf8_lossy(&bytes).into_owned();
                    (shown, Some(os_name(bytes).ok_or(PathError::NotUtf8)?))
                }
            };
            if exact.is_some() && raw_names.is_none() {
                raw_names = Some(segments.iter().map(OsString::from).collect());
            }
            // A path ending in `.`/`..` names a directory just like one ending in `/`.
            trailing_slash = matches!(segment.as_str(), "" | "." | "..");
            match segment.as_str() {
                "" | "." => {}
                ".." => {
                    segments.pop().ok_or(PathError::EscapesRoot)?;
                    if let Some(names) = &mut raw_names {
                        names.pop();
                    }
                }
                _ => {
                    if let Some(names) = &mut raw_names {
                        names.push(exact.unwrap_or_else(|| OsString::from(&segment)));
                    }
                    segments.push(segment);
                }
            }
        }
        // Checked after normalisation: `/.git/../a` never touches `.git`, while
        // `/a/../.git` does and must be refused. (U+FFFD never makes a name hidden or
        // private: both tests look at leading ASCII.)
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
            raw: raw_names,
            trailing_slash,
        })
    }

    /// The decoded, normalised segments as text (U+FFFD for bytes that are not UTF-8,
    /// only from [`Self::parse_any`]); empty for the root.
    pub fn segments(&self) -> &[String] {
        &self.segments
    }

    /// Segment `i` percent-encoded from its exact bytes, for a link.
    pub fn encoded_segment(&self, i: usize) -> String {
        match &self.raw {
            Some(names) => encode_os_name(&names[i]),
            None => encode_segment(&self.segments[i]),
        }
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
        match &self.raw {
            Some(names) => names.iter().collect(),
            None => self.segments.iter().collect(),
        }
    }

    /// The last segment, used for content-type lookup.
    pub fn file_name(&self) -> Option<&str> {
        self.segments.last().map(String::as_str)
    }

    /// The canonical directory URL (`/a/b/`), percent-encoded and always starting with a
    /// single `/`, so a redirect can never become protocol-relative (`//host/`).
    pub fn dir_href(&self) -> String {
        self.href_through(self.segments.len())
    }

    /// The directory URL of the first `n` segments (`/` for none), percent-encoded from
    /// their exact bytes.
    pub fn href_through(&self, n: usize) -> String {
        let mut href = String::from("/");
        for i in 0..n {
            href.push_str(&self.encoded_segment(i));
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

    #[cfg(unix)]
    #[test]
    fn names_that_are_not_utf8_are_read_by_their_bytes() {
        use std::os::unix::ffi::OsStrExt;
        let p = RequestPath::parse_any("/d%C3%A9j%C3%A0/caf%E9.txt", false).expect("parses");
        assert_eq!(p.segments(), ["déjà", "caf\u{FFFD}.txt"]);
        assert_eq!(
            p.relative().as_os_str().as_bytes(),
            b"d\xC3\xA9j\xC3\xA0/caf\xE9.txt"
        );
        assert_eq!(p.dir_href(), "/d%C3%A9j%C3%A0/caf%E9.txt/");
        assert_eq!(p.href_through(1), "/d%C3%A9j%C3%A0/");
        // `..` drops the exact bytes with the text.
        let up = RequestPath::parse_any("/%FF/../a/%FE%FD/", false).expect("parses");
        assert_eq!(up.relative().as_os_str().as_bytes(), b"a/\xFE\xFD");
        assert_eq!(up.dir_href(), "/a/%FE%FD/");
        // The same rules as any name: hidden, separators, NUL.
        assert_eq!(
            RequestPath::parse_any("/.%FF", false),
            Err(PathError::Hidden)
        );
        assert_eq!(
            RequestPath::parse_any("/%FF%2F", false),
            Err(PathError::EncodedSeparator)
        );
        assert_eq!(
            RequestPath::parse_any("/%FF%00", false),
            Err(PathError::Nul)
        );
        // Writers and text protocols still refuse them; UTF-8 paths are the same either way.
        assert_eq!(parse("/a/%FF"), Err(PathError::NotUtf8));
        assert_eq!(RequestPath::parse_any("/a%20b/c", false), parse("/a%20b/c"));
    }

    #[cfg(unix)]
    mod any_bytes {
        use super::*;
        use proptest::prelude::*;
        use std::os::unix::ffi::OsStrExt;

        /// A file name Unix allows: any bytes but `/` and NUL (and not `\\`, which servery
        /// refuses everywhere), not hidden, not `.`/`..`.
        fn name() -> impl Strategy<Value = Vec<u8>> {
            proptest::collection::vec(any::<u8>(), 1..12).prop_filter("a plain name", |n| {
                !n.iter().any(|&b| b == b'/' || b == 0 || b == b'\\') && n[0] != b'.'
            })
        }

        proptest! {
            /// Whatever the bytes, the link servery writes for a path names those bytes.
            #[test]
            fn links_name_the_exact_bytes(names in proptest::collection::vec(name(), 0..5)) {
                let href: String = names
                    .iter()
                    .map(|n| format!("/{}", encode_segment_bytes(n)))
                    .collect();
                let href = if href.is_empty() { "/".to_owned() } else { href };
                let Ok(path) = RequestPath::parse_any(&href, false) else {
                    // Only a servery-private name may be refused.
                    let private = names.iter().any(|n| {
                        crate::write::is_private(&String::from_utf8_lossy(n))
                    });
                    prop_assert!(private, "{href} refused");
                    return Ok(());
                };
                let joined = names.join(&b'/');
                let exact = if names.is_empty() { b".".to_vec() } else { joined };
                let relative = path.relative();
                prop_assert_eq!(relative.as_os_str().as_bytes(), &exact[..]);
                let again = RequestPath::parse_any(&path.dir_href(), false).expect("own link");
                prop_assert_eq!(again.relative(), path.relative());
                prop_assert_eq!(
                    RequestPath::parse(&href, false).is_ok(),
                    names.iter().all(|n| std::str::from_utf8(n).is_ok())
                );
            }

            /// Any request target at all: an answer, never a panic.
            #[test]
            fn any_target_is_answered(raw in "/[%0-9A-Fa-f./\\\\a-z\u{80}-\u{10FFFF}]{0,40}") {
                let _ = RequestPath::parse_any(&raw, true);
            }
        }
    }

    #[test]
    fn dot_files_are_shown_when_asked_or_on_a_writable_webdav_share() {
        assert!(!dot_files_shown(false, false, false));
        assert!(
            !dot_files_shown(false, true, false),
            "a read-only share hides them"
        );
        assert!(
            !dot_files_shown(false, false, true),
            "uploads alone hide them"
        );
        assert!(dot_files_shown(false, true, true));
        assert!(dot_files_shown(true, false, false));
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
