//! The file-system half of a request: resolving the path beneath the root, opening the
//! file, choosing its representation (identity, a precompressed sidecar, or our encoding),
//! and the reads and encodings that go with it. [`Lookup::run`] runs on the worker's async
//! thread: resolution and `fstat` touch only cached metadata in the common case, and a
//! small body is read only as far as the page cache holds it (`cached_read`); reading a
//! directory, reading what is not cached and encoding run on tokio's blocking pool. A
//! small file the worker's file cache holds costs one `statx` instead of the open and the
//! read ([`super::file_cache`]).
//! [`super::site`] decides what to send from what this finds.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use cap_std::fs::{Dir, OpenOptions};
use rustix::fs::{Mode, OFlags};

use super::cached_read::fill_cached;
use super::compress::{self, Candidates, Coding, Level};
use super::conditional::Validators;
use super::encoded_cache::{CacheKey, EncodedCache};
use super::error::HttpError;
use super::file_cache::{FileCache, FileIdentity};
use super::item_counts::{Counted, ItemCounts};
use super::listing::{Entry, ITEMS_BUDGET, ITEMS_COUNTED};
use super::mime;
use super::path::{RequestPath, is_hidden};

mod listed;
use super::site::{ENCODE_IN_MEMORY_MAX, SMALL_FILE_MAX};

/// The compression part of [`super::site::SiteConfig`], present when compression is on.
#[derive(Debug, Clone, Copy)]
pub(super) struct CompressSettings {
    pub(super) max_size: u64,
    pub(super) precompressed: bool,
}

/// Reads a whole (small) file and encodes it, keeping the result in the cache.
pub(super) fn encode_whole(
    original: OpenFile,
    coding: Coding,
    key: CacheKey,
    cache: &EncodedCache,
) -> Result<Bytes, HttpError> {
    let input = match original.content {
        Content::Read(bytes) => bytes,
        Content::Handle(file, _) => read_exact_len(&file, original.len)?,
    };
    let encoded =
        compress::encode_all(coding, Level::Cached, &input).map_err(HttpError::Internal)?;
    let encoded = Bytes::from(encoded);
    cache.insert(key, encoded.clone());
    Ok(encoded)
}

/// Reads `len` bytes from the start of `file` (positioned reads: the handle's offset is
/// shared with every other reader of the open file).
fn read_exact_len(file: &File, len: u64) -> Result<Bytes, HttpError> {
    let mut buf = vec![0u8; usize::try_from(len).map_err(|_| HttpError::Unavailable)?];
    match file.read_exact_at(&mut buf, 0) {
        Ok(()) => Ok(Bytes::from(buf)),
        // Being rewritten right now; the validators would not describe these bytes.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(HttpError::Unavailable),
        Err(e) => Err(HttpError::Internal(e)),
    }
}

/// What a request needs from the file system.
pub(super) struct Lookup<'a> {
    pub(super) root: Arc<Dir>,
    pub(super) path: &'a RequestPath,
    pub(super) read_small: bool,
    /// Serve the root `index.html` when the path does not exist (see [`super::site::SiteConfig::spa`]).
    pub(super) spa_fallback: bool,
    /// Present when compression is on.
    pub(super) negotiation: Option<Negotiation>,
    pub(super) cache: &'a EncodedCache,
    pub(super) files: &'a FileCache,
}

/// The request's side of content negotiation.
pub(super) struct Negotiation {
    pub(super) settings: CompressSettings,
    pub(super) accept_encoding: Option<String>,
    pub(super) ranged: bool,
}

pub(super) enum Found {
    File(Box<FoundFile>),
    NeedsSlash,
    /// A directory to list (below the root), read with [`list`] on the blocking pool.
    Directory(PathBuf),
}

pub(super) struct OpenFile {
    pub(super) content: Content,
    pub(super) validators: Validators,
    pub(super) len: u64,
    pub(super) modified: SystemTime,
    /// The name that decides the content type (`index.html` for directory indexes).
    pub(super) name: String,
}

/// Where a file's bytes come from.
pub(super) enum Content {
    /// An open handle, read when the body is sent; `identity` is what its `fstat` said.
    Handle(File, FileIdentity),
    /// The whole content, already in memory: a small file whose bytes will be needed,
    /// read while opening it or found in the file cache.
    Read(Bytes),
}

/// A file to serve and the representation chosen for it.
pub(super) struct FoundFile {
    pub(super) original: OpenFile,
    pub(super) repr: Repr,
    /// Whether the response says `Vary: Accept-Encoding`.
    pub(super) vary: bool,
    /// The file's path below the root (see [`key_path`]).
    pub(super) rel: PathBuf,
    /// The single-page-app shell, served for a path that does not exist.
    pub(super) fallback: bool,
}

/// A file's path below the root as the encoded cache and digests key it; made only when
/// one of them is asked. Exact for every name: a path that is not UTF-8 is keyed by its
/// percent-encoded bytes after a NUL, which no text path holds (a NUL is refused in a
/// request), so two names that differ only in bytes that are not text never share a key.
pub(super) fn key_path(rel: &Path) -> String {
    match rel.to_str() {
        Some(text) => text.to_owned(),
        None => format!("\0{}", super::path::encode_os_name(rel.as_os_str())),
    }
}

/// Which representation of a file is sent.
pub(super) enum Repr {
    Identity,
    /// A precompressed sidecar file, sent as is.
    Sidecar {
        coding: Coding,
        file: OpenFile,
        /// The sidecar's path below the root.
        path: PathBuf,
    },
    /// Encoded by us; `cached` holds the bytes when the cache already had them.
    Encode {
        coding: Coding,
        cached: Option<Bytes>,
    },
}

impl Lookup<'_> {
    pub(super) fn run(self) -> Result<Found, HttpError> {
        match self.resolve() {
            Err(HttpError::NotFound) if self.spa_fallback => {
                let index = PathBuf::from("index.html");
                if !self.root.metadata(&index).is_ok_and(|m| m.is_file()) {
                    return Err(HttpError::NotFound);
                }
                let found = self.file(index, "index.html".to_owned())?;
                Ok(match found {
                    Found::File(mut file) => {
                        file.fallback = true;
                        Found::File(file)
                    }
                    other => other,
                })
            }
            other => other,
        }
    }

    fn resolve(&self) -> Result<Found, HttpError> {
        let rel = self.path.relative();
        if !self.path.trailing_slash()
            && let Some(original) = self.cached(&rel, self.path.file_name().unwrap_or_default())
        {
            return self.represent(rel, original);
        }
        // Most requests name a regular file: open it at once (one resolution beneath the
        // root) and let `fstat` on the open file say what it is. A directory we may
        // search but not read cannot be opened; `metadata` still tells it is one.
        let opened = match open_beneath(&self.root, &rel) {
            Ok(opened) => Some(opened),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => None,
            Err(e) => return Err(HttpError::from_io(e)),
        };
        let is_dir = match &opened {
            Some((_, meta)) => meta.is_dir(),
            None => self
                .root
                .metadata(&rel)
                .map_err(HttpError::from_io)?
                .is_dir(),
        };
        if is_dir {
            drop(opened);
            if !self.path.trailing_slash() {
                return Ok(Found::NeedsSlash);
            }
            // Only a regular file counts as an index; anything else (absent, a directory,
            // a link out of the root) leaves the directory to be listed.
            let index = rel.join("index.html");
            if self.root.metadata(&index).is_ok_and(|m| m.is_file()) {
                return self.file(index, "index.html".to_owned());
            }
            return Ok(Found::Directory(rel));
        }
        // `/file.txt/` names a directory that does not exist.
        if self.path.trailing_slash() {
            return Err(HttpError::NotFound);
        }
        let name = self.path.file_name().unwrap_or_default().to_owned();
        match opened {
            Some((file, meta)) => {
                let original = self.renew(&rel, OpenFile::regular(file, &meta, name)?);
                self.represent(rel, original)
            }
            None => self.file(rel, name),
        }
    }

    /// Opens a file and chooses its representation: a sidecar for the best acceptable
    /// coding that has one (free to serve, so it beats encoding a better coding ourselves),
    /// else encoding on the fly with the best coding (within `max_compress_size`), else
    /// identity.
    fn file(&self, rel: PathBuf, name: String) -> Result<Found, HttpError> {
        let original = self.open(&rel, &name)?;
        self.represent(rel, original)
    }

    /// Opens a regular file, from the file cache when it holds the file unchanged.
    fn open(&self, rel: &Path, name: &str) -> Result<OpenFile, HttpError> {
        match self.cached(rel, name) {
            Some(file) => Ok(file),
            None => Ok(self.renew(rel, open_regular(&self.root, rel, name)?)),
        }
    }

    /// A file just opened beneath the root, with the cached bytes in place of the handle
    /// when they are this very file's (which renews their proof; see the file cache).
    fn renew(&self, rel: &Path, mut file: OpenFile) -> OpenFile {
        if let Content::Handle(_, identity) = &file.content
            && let Some(cached) = self.files.reprove(rel, *identity)
        {
            file.content = Content::Read(cached.bytes.clone());
        }
        file
    }

    /// The file cache's copy of `rel`, if it is still the file's content.
    fn cached(&self, rel: &Path, name: &str) -> Option<OpenFile> {
        let cached = self.files.get(&self.root, rel, Instant::now())?;
        Some(OpenFile {
            content: Content::Read(cached.bytes.clone()),
            validators: cached.validators.clone(),
            len: cached.bytes.len() as u64,
            modified: cached.modified,
            name: name.to_owned(),
        })
    }

    fn represent(&self, rel: PathBuf, mut original: OpenFile) -> Result<Found, HttpError> {
        let candidates = match &self.negotiation {
            Some(n) => compress::plan(
                n.accept_encoding.as_deref(),
                n.ranged,
                mime::content_type(&original.name),
                original.len,
            ),
            None => Candidates {
                vary: false,
                codings: Vec::new(),
            },
        };
        let mut repr = Repr::Identity;
        if let Some(n) = &self.negotiation {
            if n.settings.precompressed {
                repr = candidates
                    .codings
                    .iter()
                    .find_map(|&coding| {
                        self.sidecar(&rel, &original, coding)
                            .map(|(file, path)| Repr::Sidecar { coding, file, path })
                    })
                    .unwrap_or(Repr::Identity);
            }
            if let (Repr::Identity, Some(&coding)) = (&repr, candidates.codings.first())
                && original.len <= n.settings.max_size
            {
                let key = CacheKey {
                    path: key_path(&rel),
                    etag: original.validators.etag(),
                    coding,
                };
                // Files encoded while streaming are never cached: no point looking.
                let cached = if original.len <= ENCODE_IN_MEMORY_MAX {
                    self.cache.get(&key)
                } else {
                    None
                };
                repr = Repr::Encode { coding, cached };
            }
        }
        // Read small bodies now if the page cache has them, and only the bytes that will
        // be needed: those sent, or those about to be encoded.
        match &mut repr {
            Repr::Identity => self.read_small(&mut original, &rel, self.read_small)?,
            Repr::Sidecar { file, path, .. } => self.read_small(file, path, self.read_small)?,
            Repr::Encode { cached: None, .. } => self.read_small(&mut original, &rel, true)?,
            Repr::Encode { .. } => {}
        }
        Ok(Found::File(Box::new(FoundFile {
            original,
            repr,
            vary: candidates.vary,
            rel,
            fallback: false,
        })))
    }

    /// The precompressed sidecar of `rel` for `coding`, if it is a regular file at least as
    /// new as the original (an older one is stale: the original was edited after it was
    /// compressed). Any problem with the sidecar just means "no sidecar".
    fn sidecar(
        &self,
        rel: &Path,
        original: &OpenFile,
        coding: Coding,
    ) -> Option<(OpenFile, PathBuf)> {
        let mut name = rel.file_name()?.to_owned();
        name.push(".");
        name.push(coding.extension());
        let path = rel.with_file_name(name);
        let file = self.open(&path, &original.name).ok()?;
        (file.modified >= original.modified).then_some((file, path))
    }

    /// Reads the whole file into memory when it is small, `wanted` and all in the page
    /// cache, and offers what was read to the file cache. Otherwise the handle stays and
    /// the body is read on the blocking pool instead (streamed, or read whole for
    /// encoding), which reads exactly `len` bytes or fails.
    fn read_small(&self, file: &mut OpenFile, rel: &Path, wanted: bool) -> Result<(), HttpError> {
        let Content::Handle(handle, identity) = &file.content else {
            return Ok(());
        };
        if !wanted || file.len > SMALL_FILE_MAX {
            return Ok(());
        }
        let len = usize::try_from(file.len).map_err(|_| HttpError::Unavailable)?;
        let mut buf = vec![0u8; len];
        if fill_cached(handle, 0, &mut buf) == len {
            let bytes = Bytes::from(buf);
            self.files
                .offer(rel, *identity, &bytes, &file.validators, file.modified);
            file.content = Content::Read(bytes);
        }
        Ok(())
    }
}

/// Opens `rel` for reading, following symlinks only beneath `root`, and `fstat`s what was
/// opened: the validators then describe exactly what is served.
pub(crate) fn open_beneath(root: &Dir, rel: &Path) -> std::io::Result<(File, std::fs::Metadata)> {
    let mut options = OpenOptions::new();
    options.read(true);
    // A FIFO would block open() until a writer came; with O_NONBLOCK it opens at once and
    // is refused as not a regular file. Regular files and directories ignore the flag.
    #[cfg(unix)]
    cap_std::fs::OpenOptionsExt::custom_flags(
        &mut options,
        rustix::fs::OFlags::NONBLOCK.bits() as i32,
    );
    let file = root
        .open_with(rel, &options)
        .map_err(not_openable)?
        .into_std();
    let meta = file.metadata()?;
    Ok((file, meta))
}

/// `open` of a Unix socket (or of a device with no driver behind it) fails with ENXIO:
/// like a FIFO, it is something in the tree that is not a file to serve, so it is refused
/// (403), not reported as a server error.
fn not_openable(e: std::io::Error) -> std::io::Error {
    #[cfg(unix)]
    if e.raw_os_error() == Some(rustix::io::Errno::NXIO.raw_os_error()) {
        return std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "not a file that can be served (a socket or a device)",
        );
    }
    e
}

fn open_regular(root: &Dir, rel: &Path, name: &str) -> Result<OpenFile, HttpError> {
    let (file, meta) = open_beneath(root, rel).map_err(HttpError::from_io)?;
    OpenFile::regular(file, &meta, name.to_owned())
}

impl OpenFile {
    /// An opened file to serve, if it is a regular file (403 otherwise).
    fn regular(file: File, meta: &std::fs::Metadata, name: String) -> Result<Self, HttpError> {
        if !meta.is_file() {
            return Err(HttpError::Forbidden);
        }
        Ok(OpenFile {
            content: Content::Handle(file, FileIdentity::of_metadata(meta)),
            validators: Validators::from_metadata(meta),
            len: meta.len(),
            modified: meta.modified().unwrap_or(UNIX_EPOCH),
            name,
        })
    }
}

/// Lists a directory. Entries whose target cannot be resolved inside the root (dangling
/// links, links that escape) and entries that are neither files nor directories are left
/// out, since they could not be served anyway. A name that is not UTF-8 is listed with
/// U+FFFD for what is not text and linked by its exact bytes.
///
/// The folder is opened once, and each entry costs one `statx` by its name relative to
/// it, not following links: the size and time the page shows need it, and a resolution
/// beneath the root per entry (an `openat2`, an `fstat`, a `close`) cost three system
/// calls where one does. Only a symbolic link is resolved beneath the root, since its
/// target may be anywhere inside the root and nowhere outside it.
pub(super) fn list(
    root: &Dir,
    rel: &Path,
    show_hidden: bool,
    counts: &ItemCounts,
) -> Result<Vec<Entry>, HttpError> {
    let dir = root.open_dir(rel).map_err(HttpError::from_io)?;
    // Read through a descriptor of its own, opened for reading (cap-std's may be a path
    // descriptor, which cannot be read).
    let stream = rustix::fs::openat(
        &dir,
        c".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .and_then(rustix::fs::Dir::new)
    .map_err(|e| HttpError::from_io(e.into()))?;
    let mut entries = Vec::new();
    // Each folder's place among the entries and its identity, for its item count.
    let mut folders = Vec::new();
    for dir_entry in stream {
        let dir_entry = dir_entry.map_err(|e| HttpError::Internal(e.into()))?;
        let c_name = dir_entry.file_name();
        let bytes = c_name.to_bytes();
        if bytes == b"." || bytes == b".." {
            continue;
        }
        let exact = std::os::unix::ffi::OsStrExt::from_bytes(bytes);
        // A name that is not UTF-8 is shown with U+FFFD and linked by its exact bytes.
        let (name, href) = match std::str::from_utf8(bytes) {
            Ok(text) => (text.to_owned(), None),
            Err(_) => (
                String::from_utf8_lossy(bytes).into_owned(),
                Some(super::path::encode_os_name(exact)),
            ),
        };
        if (!show_hidden && is_hidden(&name))
            || crate::write::is_private(&name)
            || name.contains('\\')
        {
            continue;
        }
        let Some(mut meta) = listed::stat(&dir, c_name, exact) else {
            continue;
        };
        if meta.kind == listed::Kind::Symlink {
            let Ok(target) = root.metadata(rel.join(exact)) else {
                continue;
            };
            meta = listed::of_metadata(&target);
        }
        let is_dir = match meta.kind {
            listed::Kind::Dir => true,
            listed::Kind::File => false,
            listed::Kind::Symlink | listed::Kind::Other => continue,
        };
        if is_dir && href.is_none() {
            folders.push((entries.len(), Some(meta.identity)));
        }
        entries.push(Entry {
            name: name.into_boxed_str(),
            is_dir,
            size: if is_dir { 0 } else { meta.size },
            mtime: meta.mtime,
            href: href.map(String::into_boxed_str),
            items: None,
        });
    }
    let counting = Counting {
        root,
        rel,
        listed: Some(&dir),
        show_hidden,
        counts,
    };
    counting.count(&mut entries, &folders, ITEMS_BUDGET);
    Ok(entries)
}

/// What counting a listing's folders' items needs.
struct Counting<'a> {
    root: &'a Dir,
    rel: &'a Path,
    /// The listed folder, opened: each folder is opened by its name relative to it.
    listed: Option<&'a Dir>,
    show_hidden: bool,
    counts: &'a ItemCounts,
}

impl Counting<'_> {
    /// Counts each folder's entries as its own listing would show them (by name: hidden
    /// and private names left out), up to [`ITEMS_COUNTED`] a folder and `budget`
    /// entries read in all ([`ITEMS_BUDGET`]); a folder that cannot be read, or past the
    /// budget, is left uncounted. `folders` are the folders' places among `entries`, in
    /// the order they are counted, with the identity their count is remembered under
    /// ([`ItemCounts`]; `None`: not remembered). A folder is opened by its name relative
    /// to the listed one (beneath it); one that cannot be opened so (a link to elsewhere
    /// in the root) is opened beneath the root.
    fn count(&self, entries: &mut [Entry], folders: &[(usize, Option<FileIdentity>)], budget: u64) {
        let mut budget = budget;
        let now = SystemTime::now();
        for &(at, identity) in folders {
            if budget == 0 {
                break;
            }
            let Some(e) = entries.get_mut(at) else {
                continue;
            };
            // A remembered count stands for a read of the same folder: charged and judged
            // as that read would be, so the page is the same either way.
            let remembered = identity.and_then(|id| self.counts.get(&id));
            let counted = match remembered {
                Some(counted) if counted.read <= budget => counted,
                _ => {
                    let Some((counted, complete)) = self.read(&e.name, budget) else {
                        continue;
                    };
                    if let Some(id) = identity.filter(|_| complete) {
                        self.counts.insert(id, counted, now);
                    }
                    counted
                }
            };
            budget -= counted.read;
            if budget > 0 || counted.items > ITEMS_COUNTED {
                e.items = u32::try_from(counted.items.min(ITEMS_COUNTED + 1)).ok();
            }
        }
    }

    /// Reads the folder `name` of the listed one, at most `budget` entries: its count,
    /// and whether the count is the whole folder's (not cut by the budget, no entry that
    /// could not be read). `None` when it cannot be opened.
    fn read(&self, name: &str, budget: u64) -> Option<(Counted, bool)> {
        let members = self
            .listed
            .and_then(|dir| dir.read_dir(name).ok())
            .or_else(|| self.root.read_dir(self.rel.join(name)).ok())?;
        let (mut items, mut read, mut complete) = (0, 0, true);
        for member in members {
            if items > ITEMS_COUNTED {
                break;
            }
            if read == budget {
                complete = false;
                break;
            }
            read += 1;
            let Ok(member) = member else {
                complete = false;
                continue;
            };
            let name = member.file_name();
            let name = name.to_string_lossy();
            if (self.show_hidden || !is_hidden(&name)) && !crate::write::is_private(&name) {
                items += 1;
            }
        }
        Some((Counted { items, read }, complete))
    }
}

#[cfg(test)]
mod item_count_tests {
    use super::*;

    fn tree(name: &str) -> (std::path::PathBuf, Dir) {
        let dir = std::env::temp_dir().join(format!("sv-items-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
        let root = Dir::open_ambient_dir(&dir, cap_std::ambient_authority()).expect("open");
        (dir, root)
    }

    fn fill(dir: &std::path::Path, names: &[&str]) {
        std::fs::create_dir_all(dir).expect("mkdir");
        for n in names {
            std::fs::write(dir.join(n), b"x").expect("write");
        }
    }

    #[test]
    fn folders_count_what_their_listing_would_show_within_the_budget() {
        let (path, root) = tree("count");
        fill(
            &path.join("a"),
            &["1", "2", "3", ".hidden", ".servery-tmp-1-x"],
        );
        fill(&path.join("b"), &[]);
        fill(&path.join("c"), &["1", "2", "3", "4", "5", "6"]);
        std::fs::write(path.join("file"), b"x").expect("write");
        let off = ItemCounts::new(0);
        let items = |budget: u64, show_hidden: bool| {
            let mut entries = list(&root, Path::new("."), show_hidden, &off).expect("list");
            for e in &mut entries {
                e.items = None;
            }
            entries.sort_by(|a, b| a.name.cmp(&b.name));
            let folders: Vec<(usize, Option<FileIdentity>)> = entries
                .iter()
                .enumerate()
                .filter(|(_, e)| e.is_dir)
                .map(|(at, _)| (at, None))
                .collect();
            counting(&root, show_hidden, &off).count(&mut entries, &folders, budget);
            entries
                .iter()
                .map(|e| (e.name.to_string(), e.items))
                .collect::<Vec<_>>()
        };
        let all = items(ITEMS_BUDGET, false);
        assert_eq!(
            all,
            [
                ("a".to_owned(), Some(3)),
                ("b".to_owned(), Some(0)),
                ("c".to_owned(), Some(6)),
                ("file".to_owned(), None),
            ],
            "hidden and servery's own names are not counted; files have no count"
        );
        assert_eq!(
            items(ITEMS_BUDGET, true)[0].1,
            Some(4),
            "--show-hidden counts them"
        );
        // A budget of 7 entries read: `a` (5 read) and `b` are counted, `c` is cut short
        // and left uncounted rather than shown too small.
        let cut = items(7, false);
        assert_eq!(cut[0].1, Some(3));
        assert_eq!(cut[1].1, Some(0));
        assert_eq!(cut[2].1, None, "a folder the budget cut is not counted");
        let _ = std::fs::remove_dir_all(&path);
    }

    fn counting<'a>(root: &'a Dir, show_hidden: bool, counts: &'a ItemCounts) -> Counting<'a> {
        Counting {
            root,
            rel: Path::new("."),
            listed: None,
            show_hidden,
            counts,
        }
    }

    fn folder(name: &str) -> Entry {
        Entry {
            name: name.into(),
            is_dir: true,
            size: 0,
            mtime: 0,
            href: None,
            items: None,
        }
    }

    /// A count remembered under a settled folder's identity is used while the identity
    /// holds, charged to the budget as the read it stands for; a new identity (the folder
    /// changed) is read again, and an unsettled one is not remembered.
    #[test]
    fn a_remembered_count_is_the_count_a_read_would_give() {
        let (path, root) = tree("remember");
        fill(&path.join("a"), &["1", "2", "3"]);
        fill(&path.join("b"), &[]);
        fill(&path.join("c"), &["1", "2", "3", "4", "5", "6"]);
        let identity =
            |name: &str| FileIdentity::of_cap_metadata(&root.metadata(name).expect("metadata"));
        let settled = ["a", "b", "c"].map(|n| Some(identity(n).changed_earlier(10)));
        let counts = ItemCounts::new(crate::http::item_counts::ITEM_COUNTS_BYTES);
        let run = |budget: u64, identities: &[Option<FileIdentity>; 3]| {
            let mut entries = vec![folder("a"), folder("b"), folder("c")];
            let folders: Vec<_> = identities.iter().copied().enumerate().collect();
            counting(&root, false, &counts).count(&mut entries, &folders, budget);
            entries.iter().map(|e| e.items).collect::<Vec<_>>()
        };
        assert_eq!(run(ITEMS_BUDGET, &settled), [Some(3), Some(0), Some(6)]);
        assert_eq!(counts.len(), 3, "settled folders are remembered");

        std::fs::remove_file(path.join("c/6")).expect("remove");
        assert_eq!(
            run(ITEMS_BUDGET, &settled),
            [Some(3), Some(0), Some(6)],
            "the identity given is unchanged, so the remembered count is used (not read)"
        );
        // A budget of 7: `a` (3) and `b` (0) remembered, `c` remembered as 6 reads when
        // 4 are left, so read again and cut: uncounted, as a read would leave it.
        assert_eq!(
            run(7, &settled),
            [Some(3), Some(0), None],
            "item counts: a remembered count is charged the entries its read took"
        );
        let fresh = [
            Some(identity("a")),
            Some(identity("b")),
            Some(identity("c")),
        ];
        assert_eq!(
            run(ITEMS_BUDGET, &fresh),
            [Some(3), Some(0), Some(5)],
            "a changed folder (another identity) is read again"
        );
        assert_eq!(
            counts.len(),
            3,
            "folders changed just now are not remembered"
        );
        let _ = std::fs::remove_dir_all(&path);
    }
}
