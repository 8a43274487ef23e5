//! Recursive search (`?q=` on a directory): names containing the text, case-insensitive,
//! anywhere below the directory.
//!
//! Bounded three ways, so a search over a huge tree answers promptly with what it found:
//! entries looked at, hits kept, and time. It keeps to the listing's rules: hidden names
//! only with `--show-hidden`, servery's own files never, everything resolved beneath the
//! root (cap-std), and symlinks to directories are not followed (no loops; a link out of
//! the root is refused by the resolution itself).

use std::collections::VecDeque;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, UNIX_EPOCH};

use cap_std::fs::Dir;
use percent_encoding::percent_decode_str;

use crate::http::listing::Entry;
use crate::http::long_work;
use crate::http::path::{encode_os_name, is_hidden};

/// Entries one search looks at.
pub const MAX_VISITED: usize = 100_000;
/// Hits one search returns.
pub const MAX_HITS: usize = 500;
/// How long one search may walk.
pub const MAX_TIME: Duration = Duration::from_secs(2);
/// Longest search text accepted (characters).
pub const MAX_QUERY: usize = 200;

/// One match: its path below the searched directory (`a/b/name`, as text), the same path
/// as a relative URL from each name's exact bytes (`a/b/name`, percent-encoded), and its
/// listing entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    pub path: String,
    pub href: String,
    pub entry: Entry,
}

/// What a search found, and whether it stopped at a bound before the end.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Results {
    pub hits: Vec<Hit>,
    pub cut_short: bool,
}

/// The search text of `?q=` (form encoding: `+` is a space), trimmed; `None` when absent,
/// empty or not UTF-8. Longer texts are cut to [`MAX_QUERY`] characters.
pub fn query(raw: Option<&str>) -> Option<String> {
    let value = raw?.split('&').find_map(|pair| pair.strip_prefix("q="))?;
    let value = value.replace('+', " ");
    let text = percent_decode_str(&value).decode_utf8().ok()?;
    let text: String = text.trim().chars().take(MAX_QUERY).collect();
    (!text.is_empty()).then_some(text)
}

/// The bounds of one search.
#[derive(Debug)]
pub struct Bounds {
    pub max_visited: usize,
    pub max_hits: usize,
    pub deadline: Instant,
    /// Its place among the long work that may hold a blocking thread at once
    /// ([`long_work`]); `None` when the share was full, and the search is refused.
    pub place: Option<long_work::Permit>,
}

impl Bounds {
    /// The standard bounds, with a place in the worker's share of long work if one is free.
    pub fn standard() -> Self {
        Bounds {
            max_visited: MAX_VISITED,
            max_hits: MAX_HITS,
            deadline: Instant::now() + MAX_TIME,
            place: long_work::try_start(),
        }
    }
}

/// Searches below `rel` breadth first (shallow matches first). Blocking.
pub fn search(
    root: &Dir,
    rel: &Path,
    needle: &str,
    show_hidden: bool,
    bounds: Bounds,
) -> io::Result<Results> {
    // A search takes its blocking thread for up to `MAX_TIME`: past the share it is
    // refused (503, `Retry-After`) before it walks, so short work keeps its threads.
    if bounds.place.is_none() {
        return Err(long_work::busy());
    }
    let needle = needle.to_lowercase();
    let mut results = Results::default();
    let mut visited = 0usize;
    // (directory, its text prefix, its URL prefix)
    let mut pending: VecDeque<(PathBuf, String, String)> =
        VecDeque::from([(rel.to_path_buf(), String::new(), String::new())]);
    while let Some((dir, prefix, href_prefix)) = pending.pop_front() {
        let Ok(read) = root.read_dir(&dir) else {
            continue;
        };
        let mut names: Vec<(String, std::ffi::OsString)> = read
            .filter_map(|e| {
                let os = e.ok()?.file_name();
                Some((os.to_string_lossy().into_owned(), os))
            })
            .filter(|(name, _)| {
                (show_hidden || !is_hidden(name))
                    && !crate::write::is_private(name)
                    && !name.contains('\\')
            })
            .collect();
        names.sort_by(|a, b| crate::http::listing::natural_cmp(&a.0, &b.0));
        for (name, os_name) in names {
            visited += 1;
            if visited > bounds.max_visited
                || results.hits.len() >= bounds.max_hits
                || (visited.is_multiple_of(64) && Instant::now() >= bounds.deadline)
            {
                results.cut_short = true;
                return Ok(results);
            }
            let path = dir.join(&os_name);
            let Ok(link) = root.symlink_metadata(&path) else {
                continue;
            };
            let (meta, followable) = if link.file_type().is_symlink() {
                match root.metadata(&path) {
                    Ok(meta) => (meta, false),
                    Err(_) => continue,
                }
            } else {
                (link, true)
            };
            if !(meta.is_dir() || meta.is_file()) {
                continue;
            }
            let segment = encode_os_name(&os_name);
            let below = format!("{prefix}{name}");
            let href = format!("{href_prefix}{segment}");
            if meta.is_dir() && followable {
                pending.push_back((path, format!("{below}/"), format!("{href}/")));
            }
            if name.to_lowercase().contains(&needle) {
                let mtime = meta
                    .modified()
                    .ok()
                    .and_then(|t| t.into_std().duration_since(UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_secs());
                let exact = os_name.to_str().is_none().then_some(segment);
                results.hits.push(Hit {
                    path: below,
                    href,
                    entry: Entry {
                        name: name.into_boxed_str(),
                        is_dir: meta.is_dir(),
                        size: if meta.is_file() { meta.len() } else { 0 },
                        mtime,
                        href: exact.map(String::into_boxed_str),
                        items: None,
                    },
                });
            }
        }
    }
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cap_std::ambient_authority;
    use proptest::prelude::*;

    fn tree(name: &str) -> (PathBuf, Dir) {
        let p = std::env::temp_dir().join(format!("servery-search-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(p.join("top/a/deep")).expect("mkdir");
        std::fs::create_dir_all(p.join("top/.hidden")).expect("mkdir");
        std::fs::write(p.join("top/Report.txt"), b"r").expect("write");
        std::fs::write(p.join("top/a/deep/report-2.txt"), b"r2").expect("write");
        std::fs::write(p.join("top/.hidden/report-secret"), b"s").expect("write");
        std::fs::write(p.join("report-outside"), b"o").expect("write");
        std::os::unix::fs::symlink("..", p.join("top/a/up")).expect("link");
        std::os::unix::fs::symlink("/etc", p.join("top/etc")).expect("link");
        let dir = Dir::open_ambient_dir(&p, ambient_authority()).expect("open");
        (p, dir)
    }

    fn paths(r: &Results) -> Vec<&str> {
        r.hits.iter().map(|h| h.path.as_str()).collect()
    }

    #[test]
    fn finds_below_and_only_below_honouring_hidden() {
        let (p, root) = tree("below");
        let r = search(&root, Path::new("top"), "REPORT", false, Bounds::standard()).expect("io");
        assert_eq!(paths(&r), ["Report.txt", "a/deep/report-2.txt"]);
        assert!(!r.cut_short);
        let r = search(&root, Path::new("top"), "report", true, Bounds::standard()).expect("io");
        assert_eq!(
            paths(&r),
            ["Report.txt", ".hidden/report-secret", "a/deep/report-2.txt"]
        );
        let _ = std::fs::remove_dir_all(p);
    }

    #[test]
    fn bounds_cut_it_short() {
        let (p, root) = tree("bounds");
        let few = Bounds {
            max_visited: 2,
            ..Bounds::standard()
        };
        assert!(
            search(&root, Path::new("top"), "x", false, few)
                .expect("io")
                .cut_short
        );
        let one = Bounds {
            max_hits: 1,
            ..Bounds::standard()
        };
        let r = search(&root, Path::new("top"), "report", false, one).expect("io");
        assert_eq!((r.hits.len(), r.cut_short), (1, true));
        let late = Bounds {
            deadline: Instant::now(),
            max_visited: usize::MAX,
            max_hits: usize::MAX,
            place: long_work::try_start(),
        };
        // The clock is read every 64 entries: a tiny tree finishes before the first look.
        assert!(
            !search(&root, Path::new("top"), "report", false, late)
                .expect("io")
                .cut_short
        );
        let _ = std::fs::remove_dir_all(p);
    }

    #[test]
    fn names_that_are_not_utf8_are_found_by_text_and_linked_by_bytes() {
        use std::os::unix::ffi::OsStrExt;
        let (p, root) = tree("bytes");
        let dir = std::ffi::OsStr::from_bytes(b"r\xE9ports");
        std::fs::create_dir(p.join("top").join(dir)).expect("mkdir");
        let file = std::ffi::OsStr::from_bytes(b"report-caf\xE9.txt");
        std::fs::write(p.join("top").join(dir).join(file), b"c").expect("write");
        let r = search(&root, Path::new("top"), "caf", false, Bounds::standard()).expect("io");
        assert_eq!(paths(&r), ["r\u{FFFD}ports/report-caf\u{FFFD}.txt"]);
        let hit = &r.hits[0];
        assert_eq!(hit.href, "r%E9ports/report-caf%E9.txt");
        assert_eq!(hit.entry.href.as_deref(), Some("report-caf%E9.txt"));
        let r = search(&root, Path::new("top"), "report", false, Bounds::standard()).expect("io");
        let hrefs: Vec<&str> = r.hits.iter().map(|h| h.href.as_str()).collect();
        assert_eq!(
            hrefs,
            [
                "Report.txt",
                "r%E9ports/report-caf%E9.txt",
                "a/deep/report-2.txt"
            ],
            "breadth first; UTF-8 names keep their plain links"
        );
        let _ = std::fs::remove_dir_all(p);
    }

    #[test]
    fn query_text() {
        assert_eq!(query(Some("q=a+b%20c")).as_deref(), Some("a b c"));
        assert_eq!(
            query(Some("sort=name&q=%E2%80%AE")).as_deref(),
            Some("\u{202e}")
        );
        assert_eq!(query(Some("q=")), None);
        assert_eq!(query(Some("q=%FF")), None);
        assert_eq!(query(None), None);
    }

    proptest! {
        #[test]
        fn any_query_string_is_safe(raw in "[ -~]{0,300}") {
            if let Some(q) = query(Some(&raw)) {
                prop_assert!(!q.is_empty() && q.chars().count() <= MAX_QUERY);
            }
        }
    }
}
