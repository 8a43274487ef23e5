//! Resources as WebDAV names them: a decoded path beneath the served root, its canonical
//! form for the broker's lock table (`/a/b`, the root `/`), its `href`, and what the file
//! system says about it. Everything here that touches the disk is blocking.

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cap_std::fs::{Dir, Metadata, MetadataExt};

use super::super::conditional::Validators;
use super::super::path::{RequestPath, encode_segment, is_hidden};
use crate::write::is_private;

/// A resource's path: decoded segments beneath the root, none of them private.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DavPath {
    segments: Vec<String>,
}

impl DavPath {
    pub fn from_request(path: &RequestPath) -> Self {
        DavPath {
            segments: path.segments().to_vec(),
        }
    }

    /// The path a lock-table key names (`/a/b`, the root `/`).
    pub fn from_key(key: &str) -> Self {
        DavPath {
            segments: key
                .split('/')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
        }
    }

    pub fn segments(&self) -> &[String] {
        &self.segments
    }

    pub fn is_root(&self) -> bool {
        self.segments.is_empty()
    }

    /// The key of this resource in the broker's lock table.
    pub fn resource(&self) -> String {
        let mut key =
            String::with_capacity(1 + self.segments.iter().map(|s| s.len() + 1).sum::<usize>());
        for s in &self.segments {
            key.push('/');
            key.push_str(s);
        }
        if key.is_empty() {
            key.push('/');
        }
        key
    }

    /// The path relative to the root (`.` for the root).
    pub fn rel(&self) -> PathBuf {
        if self.segments.is_empty() {
            PathBuf::from(".")
        } else {
            self.segments.iter().collect()
        }
    }

    /// The percent-encoded URL path; collections end in `/`.
    pub fn href(&self, collection: bool) -> String {
        let mut href = String::from("/");
        for (i, s) in self.segments.iter().enumerate() {
            if i > 0 {
                href.push('/');
            }
            href.push_str(&encode_segment(s));
        }
        if collection && !self.segments.is_empty() {
            href.push('/');
        }
        href
    }

    pub fn name(&self) -> Option<&str> {
        self.segments.last().map(String::as_str)
    }

    pub fn parent(&self) -> Option<DavPath> {
        let (_, parent) = self.segments.split_last()?;
        Some(DavPath {
            segments: parent.to_vec(),
        })
    }

    pub fn child(&self, name: &str) -> DavPath {
        let mut segments = self.segments.clone();
        segments.push(name.to_owned());
        DavPath { segments }
    }

    /// Whether `self` is `other` or lies beneath it.
    pub fn within(&self, other: &DavPath) -> bool {
        self.segments.starts_with(&other.segments)
    }
}

/// Whether the lock-table key `ancestor` is `path` or one of its ancestors.
pub fn covers(ancestor: &str, path: &str) -> bool {
    ancestor == path
        || ancestor == "/"
        || (path.starts_with(ancestor) && path.as_bytes().get(ancestor.len()) == Some(&b'/'))
}

/// What is at a path, following symlinks that stay inside the root.
pub fn stat(root: &Dir, rel: &Path) -> io::Result<Metadata> {
    if rel == Path::new(".") {
        root.dir_metadata()
    } else {
        root.metadata(rel)
    }
}

/// `Ok(None)` when nothing is there.
pub fn stat_opt(root: &Dir, rel: &Path) -> io::Result<Option<Metadata>> {
    match stat(root, rel) {
        Ok(meta) => Ok(Some(meta)),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

pub fn modified(meta: &Metadata) -> SystemTime {
    meta.modified().map_or(UNIX_EPOCH, |t| t.into_std())
}

/// The validators GET sends for the same file (identity representation), so `getetag`
/// and `If` agree with `ETag`.
pub fn validators(meta: &Metadata) -> Validators {
    Validators::new(meta.ino(), meta.len(), modified(meta))
}

/// `creationdate`: the birth time where the file system keeps one, else the change time.
pub fn created(meta: &Metadata) -> SystemTime {
    meta.created().map(|t| t.into_std()).unwrap_or_else(|_| {
        UNIX_EPOCH + Duration::from_secs(u64::try_from(meta.ctime()).unwrap_or(0))
    })
}

/// A collection's members as a listing may show them, and which of them have dead
/// properties (their sidecar is in the same directory, read in the same pass).
#[derive(Debug, Default)]
pub struct Listing {
    pub members: Vec<(String, Metadata)>,
    pub with_props: HashSet<String>,
}

/// The entries of collection `dir`, as the directory gives them.
pub fn read(root: &Dir, dir: &DavPath) -> io::Result<cap_std::fs::ReadDir> {
    if dir.is_root() {
        root.entries()
    } else {
        root.read_dir(dir.rel())
    }
}

/// The members of `dir` that have dead properties (a sidecar beside them).
pub fn sidecars(root: &Dir, dir: &DavPath) -> io::Result<HashSet<String>> {
    let mut with_props = HashSet::new();
    for entry in read(root, dir)? {
        if let Ok(name) = entry?.file_name().into_string()
            && let Some(member) = name.strip_prefix(super::props::SIDECAR_PREFIX)
        {
            with_props.insert(member.to_owned());
        }
    }
    Ok(with_props)
}

/// `entry` of `dir` as a listing may show it: not servery's own files, not dot-files
/// unless those are served, UTF-8, and only files and directories (symlinks followed
/// while they stay beneath the root).
pub fn member(
    root: &Dir,
    dir: &DavPath,
    entry: &cap_std::fs::DirEntry,
    show_hidden: bool,
) -> Option<(String, Metadata)> {
    let name = entry.file_name().into_string().ok()?;
    if is_private(&name) || (!show_hidden && is_hidden(&name)) || name.contains('\\') {
        return None;
    }
    // One stat relative to the open directory; only a symlink is looked up again
    // from the root, which follows it as long as it stays beneath the root.
    let meta = match entry.metadata() {
        Ok(meta) if meta.is_symlink() => root.metadata(dir.rel().join(&name)),
        other => other,
    }
    .ok()?;
    (meta.is_dir() || meta.is_file()).then_some((name, meta))
}

/// The members a listing may show ([`member`]), sorted by name, and which of them have
/// dead properties (their sidecar is in the same directory, read in the same pass).
pub fn members(root: &Dir, dir: &DavPath, show_hidden: bool) -> io::Result<Listing> {
    let mut out = Listing::default();
    for entry in read(root, dir)? {
        let entry = entry?;
        if let Some(name) = entry.file_name().to_str()
            && let Some(member) = name.strip_prefix(super::props::SIDECAR_PREFIX)
        {
            out.with_props.insert(member.to_owned());
            continue;
        }
        if let Some(found) = member(root, dir, &entry, show_hidden) {
            out.members.push(found);
        }
    }
    out.members.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(raw: &str) -> DavPath {
        DavPath::from_request(&RequestPath::parse(raw, false).expect("path"))
    }

    #[test]
    fn keys_and_hrefs() {
        assert_eq!(p("/").resource(), "/");
        assert_eq!(DavPath::from_key("/a/b c"), p("/a/b%20c"));
        assert_eq!(DavPath::from_key("/"), p("/"));
        assert_eq!(p("/a/b%20c/").resource(), "/a/b c");
        assert_eq!(p("/a/b%20c").href(true), "/a/b%20c/");
        assert_eq!(p("/a/b%20c").href(false), "/a/b%20c");
        assert_eq!(p("/").href(true), "/");
        assert_eq!(p("/a/b").parent(), Some(p("/a")));
        assert_eq!(p("/").parent(), None);
        assert!(p("/a/b").within(&p("/a")));
        assert!(!p("/ab").within(&p("/a")));
    }

    #[test]
    fn coverage_respects_segment_boundaries() {
        assert!(covers("/a", "/a/b"));
        assert!(covers("/", "/a"));
        assert!(covers("/a", "/a"));
        assert!(!covers("/a", "/ab"));
        assert!(!covers("/a/b", "/a"));
    }

    #[test]
    fn a_listing_says_which_members_have_properties_without_showing_the_sidecars() {
        let tmp = std::env::temp_dir().join(format!("servery-listing-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(tmp.join("d")).expect("mkdir");
        for name in ["a", "b", ".servery-props.a", ".servery-tmp-1-x", ".hidden"] {
            std::fs::write(tmp.join("d").join(name), b"x").expect("write");
        }
        let root = Dir::open_ambient_dir(&tmp, cap_std::ambient_authority()).expect("root");
        let listing = members(&root, &p("/d"), false).expect("list");
        let names: Vec<&str> = listing.members.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert!(listing.with_props.contains("a") && !listing.with_props.contains("b"));
        let _ = std::fs::remove_dir_all(&tmp);
    }

    #[test]
    fn a_listing_follows_symlinks_inside_the_root_and_drops_those_leading_out() {
        let tmp = std::env::temp_dir().join(format!("servery-links-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(tmp.join("share/d/sub")).expect("mkdir");
        std::fs::write(tmp.join("share/d/file"), b"12345").expect("write");
        std::fs::write(tmp.join("outside"), b"secret").expect("write");
        let link = |target: &str, name: &str| {
            std::os::unix::fs::symlink(target, tmp.join("share/d").join(name)).expect("symlink")
        };
        link("file", "to-file");
        link("sub", "to-dir");
        link("../../outside", "to-outside");
        link("missing", "dangling");
        let root =
            Dir::open_ambient_dir(tmp.join("share"), cap_std::ambient_authority()).expect("root");
        let listing = members(&root, &p("/d"), false).expect("list");
        let seen: Vec<(&str, bool, u64)> = listing
            .members
            .iter()
            .map(|(n, m)| (n.as_str(), m.is_dir(), if m.is_dir() { 0 } else { m.len() }))
            .collect();
        assert_eq!(
            seen,
            [
                ("file", false, 5),
                ("sub", true, 0),
                ("to-dir", true, 0),
                ("to-file", false, 5)
            ]
        );
        let _ = std::fs::remove_dir_all(&tmp);
    }
}
