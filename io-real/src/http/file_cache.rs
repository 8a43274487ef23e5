//! A per-worker, byte-bounded cache of small files' contents, proven fresh on every hit.
//!
//! Opening a file beneath the root, `fstat`ing it, reading it and closing it costs about
//! four times what one `statx` by path does (docs/benchmarks.md), and for small files on
//! keep-alive connections that difference is a large share of the whole request. A hit
//! therefore costs one `statx` of the requested path, compared with the identity recorded
//! when the bytes were read:
//!
//! - **Identity is (device, inode, mode, size, mtime, ctime)**, nanoseconds included. Every
//!   write, truncate, `chmod`, `chown`, rename or link count change moves ctime, and an
//!   atomic replace changes the inode, so any change to the file — or to who may read it —
//!   is a miss, and the miss takes the ordinary path (which opens the file and answers 403,
//!   404 or the new bytes).
//! - **Only settled files are cached**: the ctime must be at least [`SETTLE`] older than
//!   the wall clock when the bytes are read. A change within the same timestamp tick as
//!   the read could otherwise leave the identity unchanged while the bytes differ; a later
//!   change stamps a ctime newer than any settled one.
//! - **Containment is re-proven every [`REPROVE_AFTER`]**: the `statx` follows symlinks
//!   without the beneath-the-root rule the ordinary open enforces. Serving needs the very
//!   inode, unchanged, that was read beneath the root, so the worst a link swapped in
//!   later can do is keep serving those same bytes; and not for longer than this, after
//!   which a request goes back through the ordinary open once, whose `fstat` renews the
//!   proof ([`FileCache::reprove`]) whether or not that request reads the file.
//! - **Bounded in bytes** (`file_cache_size`), least recently used first: see
//!   [`super::lru`]. Per worker, like the encoded cache; the banner states the aggregate.
//!
//! docs/decisions/0009-small-file-cache.md records the alternatives.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use cap_std::fs::Dir;
use rustix::fs::{AtFlags, Statx, StatxFlags, StatxTimestamp};

use super::conditional::Validators;
use super::lru::ByteLru;

/// How long before now a file's ctime must be for its bytes to be cached.
pub const SETTLE: Duration = Duration::from_secs(2);

/// How long a cached file is served on `statx` alone before one request re-opens it.
pub(super) const REPROVE_AFTER: Duration = Duration::from_secs(1);

/// What must be unchanged for cached bytes to still be the file's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct FileIdentity {
    dev: u64,
    ino: u64,
    mode: u32,
    size: u64,
    mtime: (i64, u32),
    ctime: (i64, u32),
}

impl FileIdentity {
    /// The identity of an opened file, from its `fstat`.
    pub(super) fn of_metadata(meta: &std::fs::Metadata) -> Self {
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
            mode: meta.mode(),
            size: meta.size(),
            mtime: (meta.mtime(), nanos(meta.mtime_nsec())),
            ctime: (meta.ctime(), nanos(meta.ctime_nsec())),
        }
    }

    /// The identity cap-std's metadata gives (a listed entry's `statx`).
    pub(super) fn of_cap_metadata(meta: &cap_std::fs::Metadata) -> Self {
        use cap_std::fs::MetadataExt as _;
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
            mode: meta.mode(),
            size: meta.size(),
            mtime: (meta.mtime(), nanos(meta.mtime_nsec())),
            ctime: (meta.ctime(), nanos(meta.ctime_nsec())),
        }
    }

    pub(super) fn of_statx(stat: &Statx) -> Self {
        let time = |t: &StatxTimestamp| (t.tv_sec, t.tv_nsec);
        Self {
            dev: rustix::fs::makedev(stat.stx_dev_major, stat.stx_dev_minor),
            ino: stat.stx_ino,
            mode: u32::from(stat.stx_mode),
            size: stat.stx_size,
            mtime: time(&stat.stx_mtime),
            ctime: time(&stat.stx_ctime),
        }
    }

    /// This identity with its last change moved `secs` seconds back: a settled file, for
    /// tests that cannot wait for one.
    #[cfg(test)]
    pub(super) fn changed_earlier(mut self, secs: i64) -> Self {
        self.ctime.0 -= secs;
        self
    }

    /// Whether the last change was at least [`SETTLE`] before `now`.
    pub(super) fn settled(&self, now: SystemTime) -> bool {
        let (secs, nanos) = self.ctime;
        let Ok(secs) = u64::try_from(secs) else {
            return true;
        };
        let changed = UNIX_EPOCH + Duration::new(secs, nanos);
        now.duration_since(changed).is_ok_and(|age| age >= SETTLE)
    }
}

fn nanos(n: i64) -> u32 {
    u32::try_from(n).unwrap_or(0)
}

/// One cached file: its bytes and what was true of it when they were read.
#[derive(Debug)]
pub(super) struct CachedFile {
    identity: FileIdentity,
    pub(super) bytes: Bytes,
    pub(super) validators: Validators,
    pub(super) modified: SystemTime,
    proven: Instant,
}

/// The cache; one per site (worker).
#[derive(Debug)]
pub(super) struct FileCache {
    lru: ByteLru<String, Arc<CachedFile>>,
}

/// What one entry costs besides its key and bytes: the entry itself, and the heap behind
/// it — the `Arc`'s counts and the validators' two field values (a quoted tag of up to 70
/// bytes and a 29-byte date, each with its shared-buffer header).
const ENTRY_OVERHEAD: usize = std::mem::size_of::<CachedFile>() + 192;

impl FileCache {
    /// A cache retaining at most `capacity` bytes; 0 disables it.
    pub(super) fn new(capacity: u64) -> Self {
        Self {
            lru: ByteLru::new(capacity),
        }
    }

    /// The cached bytes of `rel` if they are still the file's bytes: the path (resolved
    /// now, from `root`) names the same unchanged file, proven beneath the root less than
    /// [`REPROVE_AFTER`] before `now`. `None` sends the caller down the ordinary path.
    pub(super) fn get(&self, root: &Dir, rel: &Path, now: Instant) -> Option<Arc<CachedFile>> {
        if !self.lru.enabled() {
            return None;
        }
        let key = rel.to_str()?;
        let cached = self.lru.get(key)?;
        if now.saturating_duration_since(cached.proven) >= REPROVE_AFTER {
            return None;
        }
        let stat = rustix::fs::statx(root, rel, AtFlags::empty(), StatxFlags::BASIC_STATS).ok()?;
        if FileIdentity::of_statx(&stat) != cached.identity {
            // Changed or gone; the ordinary path answers, and caches the new version.
            self.lru.remove(key);
            return None;
        }
        Some(cached)
    }

    /// The cached bytes of `rel` if `identity` — the `fstat` of a handle just opened beneath
    /// the root — is the cached file's; the entry then counts as proven again from now.
    pub(super) fn reprove(&self, rel: &Path, identity: FileIdentity) -> Option<Arc<CachedFile>> {
        if !self.lru.enabled() {
            return None;
        }
        let key = rel.to_str()?;
        let cached = self.lru.get(key)?;
        if cached.identity != identity {
            return None;
        }
        Some(self.keep(
            key,
            identity,
            cached.bytes.clone(),
            cached.validators.clone(),
            cached.modified,
        ))
    }

    /// Offers the whole content of `rel`, just read beneath the root through a handle
    /// whose `fstat` gave `identity`; kept if the file has settled (see [`SETTLE`]).
    pub(super) fn offer(
        &self,
        rel: &Path,
        identity: FileIdentity,
        bytes: &Bytes,
        validators: &Validators,
        modified: SystemTime,
    ) {
        if !self.lru.enabled() || !identity.settled(SystemTime::now()) {
            return;
        }
        let Some(key) = rel.to_str() else {
            return;
        };
        self.keep(key, identity, bytes.clone(), validators.clone(), modified);
    }

    /// Stores an entry proven as of now, charged for its key, bytes and bookkeeping.
    fn keep(
        &self,
        key: &str,
        identity: FileIdentity,
        bytes: Bytes,
        validators: Validators,
        modified: SystemTime,
    ) -> Arc<CachedFile> {
        let cost = key.len() + bytes.len() + ENTRY_OVERHEAD;
        let entry = Arc::new(CachedFile {
            identity,
            bytes,
            validators,
            modified,
            proven: Instant::now(),
        });
        self.lru.insert(key.to_owned(), Arc::clone(&entry), cost);
        entry
    }

    /// Bytes currently charged against the budget.
    pub(super) fn used(&self) -> usize {
        self.lru.used()
    }

    /// Number of cached files.
    pub(super) fn len(&self) -> usize {
        self.lru.len()
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use cap_std::ambient_authority;

    use super::*;

    struct Fixture {
        path: std::path::PathBuf,
        root: Dir,
    }

    impl Fixture {
        fn new(name: &str) -> Self {
            let path = std::env::temp_dir()
                .join(format!("servery-file-cache-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir_all(&path).expect("dir");
            let root = Dir::open_ambient_dir(&path, ambient_authority()).expect("open root");
            Self { path, root }
        }

        fn write(&self, name: &str, content: &[u8]) {
            std::fs::File::create(self.path.join(name))
                .and_then(|mut f| f.write_all(content))
                .expect("write");
        }

        fn identity(&self, name: &str) -> FileIdentity {
            let meta = std::fs::File::open(self.path.join(name))
                .and_then(|f| f.metadata())
                .expect("fstat");
            FileIdentity::of_metadata(&meta)
        }

        /// Caches `name` as it is now, skipping the settle rule (tested on its own).
        fn offer_settled(&self, cache: &FileCache, name: &str, content: &[u8]) {
            let bytes = Bytes::copy_from_slice(content);
            cache.keep(
                name,
                self.identity(name),
                bytes,
                Validators::default(),
                UNIX_EPOCH,
            );
        }

        /// A root holding `a` with `content`, and a cache holding `a` as it is now.
        fn with_cached(name: &str, content: &[u8]) -> (Self, FileCache) {
            let f = Self::new(name);
            f.write("a", content);
            let cache = FileCache::new(1 << 20);
            f.offer_settled(&cache, "a", content);
            (f, cache)
        }
    }

    /// Offers `name` through the cache's own rule, with placeholder bytes and validators.
    fn offer(cache: &FileCache, name: &str, identity: FileIdentity) {
        let bytes = Bytes::from_static(b"bytes");
        cache.offer(
            Path::new(name),
            identity,
            &bytes,
            &Validators::default(),
            UNIX_EPOCH,
        );
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }

    #[test]
    fn statx_and_fstat_agree_on_identity() {
        let f = Fixture::new("agree");
        f.write("a", b"hello");
        let stat = rustix::fs::statx(&f.root, "a", AtFlags::empty(), StatxFlags::BASIC_STATS)
            .expect("statx");
        assert_eq!(FileIdentity::of_statx(&stat), f.identity("a"));
    }

    #[test]
    fn a_recently_changed_file_is_not_cached() {
        let f = Fixture::new("recent");
        f.write("a", b"fresh");
        let cache = FileCache::new(1 << 20);
        offer(&cache, "a", f.identity("a"));
        assert_eq!(cache.len(), 0, "ctime within SETTLE of now");
        let mut old = f.identity("a");
        old.ctime.0 -= 10;
        offer(&cache, "a", old);
        assert_eq!(cache.len(), 1, "a settled file is kept");
    }

    #[test]
    fn a_hit_needs_the_same_unchanged_file() {
        let (f, cache) = Fixture::with_cached("hit", b"one");
        let now = Instant::now();
        let hit = cache.get(&f.root, Path::new("a"), now);
        assert_eq!(hit.map(|c| c.bytes.clone()).as_deref(), Some(&b"one"[..]));

        // Same size, rewritten in place. Within one timestamp tick the times may not move
        // (the settle rule covers that in service); here the mtime is set apart by hand.
        f.write("a", b"two");
        std::fs::File::options()
            .write(true)
            .open(f.path.join("a"))
            .and_then(|file| file.set_modified(UNIX_EPOCH + Duration::from_secs(12_345)))
            .expect("set mtime");
        assert!(cache.get(&f.root, Path::new("a"), now).is_none());
        assert_eq!(cache.len(), 0, "a changed file's entry is dropped");

        f.offer_settled(&cache, "a", b"two");
        std::fs::remove_file(f.path.join("a")).expect("rm");
        assert!(cache.get(&f.root, Path::new("a"), now).is_none(), "gone");
    }

    #[test]
    fn permission_changes_are_misses() {
        use std::os::unix::fs::PermissionsExt;
        let (f, cache) = Fixture::with_cached("chmod", b"secret");
        std::fs::set_permissions(f.path.join("a"), std::fs::Permissions::from_mode(0o000))
            .expect("chmod");
        assert!(cache.get(&f.root, Path::new("a"), Instant::now()).is_none());
    }

    #[test]
    fn entries_are_reproven_after_a_while() {
        let (f, cache) = Fixture::with_cached("reprove", b"x");
        let later = Instant::now() + REPROVE_AFTER;
        assert!(cache.get(&f.root, Path::new("a"), later).is_none());
        // An open beneath the root whose fstat finds the same file renews the proof;
        // one that finds another file does not.
        let mut other = f.identity("a");
        other.ino += 1;
        assert!(cache.reprove(Path::new("a"), other).is_none());
        let renewed = cache.reprove(Path::new("a"), f.identity("a"));
        assert_eq!(renewed.map(|c| c.bytes.clone()).as_deref(), Some(&b"x"[..]));
        let after = Instant::now() + REPROVE_AFTER / 2;
        assert!(
            cache.get(&f.root, Path::new("a"), after).is_some(),
            "proven again"
        );
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn zero_capacity_disables() {
        let f = Fixture::new("off");
        f.write("a", b"x");
        let cache = FileCache::new(0);
        let mut old = f.identity("a");
        old.ctime.0 -= 10;
        offer(&cache, "a", old);
        assert_eq!(cache.len(), 0);
        assert!(cache.get(&f.root, Path::new("a"), Instant::now()).is_none());
    }
}
