//! A per-worker, byte-bounded cache of encoded small files.
//!
//! - **Keyed by (path, ETag, coding).** The ETag changes with inode, size and nanosecond
//!   mtime, so a rewritten file can never be answered from a stale entry; the stale entry
//!   simply stops being hit and ages out. No invalidation machinery, no file watching.
//! - **Bounded in bytes** (`compression_cache_size`), least recently used first, one entry
//!   at most a quarter of the budget: see [`super::lru`]. Key bytes count too.
//! - **Per worker, not shared**: workers are processes; sharing would need shared memory and
//!   cross-process locking for a cache that refills in a few requests after a recycle. The
//!   spec states the resulting aggregate bound, `(N + 1) * compression_cache_size`.

use bytes::Bytes;
use http::HeaderValue;

use super::compress::Coding;
use super::lru::ByteLru;

/// Identifies one encoded representation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CacheKey {
    /// The file's path relative to the served root.
    pub path: String,
    /// The identity representation's ETag (the file's validator).
    pub etag: HeaderValue,
    /// The coding of the cached bytes.
    pub coding: Coding,
}

impl CacheKey {
    /// What the key costs against the budget, besides its value.
    fn cost(&self) -> usize {
        self.path.len() + self.etag.len() + std::mem::size_of::<Self>()
    }
}

/// The cache; share it behind the site's `Arc`.
#[derive(Debug)]
pub struct EncodedCache {
    lru: ByteLru<CacheKey, Bytes>,
}

impl EncodedCache {
    /// A cache retaining at most `capacity` bytes; 0 disables it.
    pub fn new(capacity: u64) -> Self {
        Self {
            lru: ByteLru::new(capacity),
        }
    }

    /// The largest entry (key and value) [`Self::insert`] will keep.
    pub fn max_entry(&self) -> usize {
        self.lru.max_entry()
    }

    /// The cached bytes for `key`, marking them recently used.
    pub fn get(&self, key: &CacheKey) -> Option<Bytes> {
        self.lru.get(key)
    }

    /// Stores `value` under `key`, evicting least recently used entries to stay within the
    /// budget. Entries larger than [`Self::max_entry`] are not stored.
    pub fn insert(&self, key: CacheKey, value: Bytes) {
        let cost = key.cost() + value.len();
        self.lru.insert(key, value, cost);
    }

    /// Bytes currently charged against the budget.
    pub fn used(&self) -> usize {
        self.lru.used()
    }

    /// Number of cached representations.
    pub fn len(&self) -> usize {
        self.lru.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(path: &str) -> CacheKey {
        CacheKey {
            path: path.into(),
            etag: HeaderValue::from_static("\"e\""),
            coding: Coding::Gzip,
        }
    }

    fn value(n: usize) -> Bytes {
        Bytes::from(vec![7; n])
    }

    #[test]
    fn keys_are_charged_with_their_values() {
        let per = key("a").cost() + 100;
        let cache = EncodedCache::new((per * 4) as u64 + 3);
        for name in ["a", "b", "c", "d", "e"] {
            cache.insert(key(name), value(100));
        }
        assert_eq!(cache.len(), 4, "four entries fit, a fifth evicts one");
        assert_eq!(cache.used(), per * 4);
    }

    #[test]
    fn oversized_values_are_not_kept() {
        let cache = EncodedCache::new(1000);
        cache.insert(key("big"), value(cache.max_entry()));
        assert!(cache.is_empty());
        assert_eq!(cache.used(), 0);
    }

    #[test]
    fn replacing_an_entry_recharges_it() {
        let cache = EncodedCache::new(10_000);
        cache.insert(key("a"), value(100));
        cache.insert(key("a"), value(50));
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.used(), key("a").cost() + 50);
        assert_eq!(cache.get(&key("a")).map(|b| b.len()), Some(50));
    }

    #[test]
    fn keys_distinguish_etag_and_coding() {
        let cache = EncodedCache::new(10_000);
        cache.insert(key("a"), value(10));
        let mut other = key("a");
        other.etag = HeaderValue::from_static("\"f\"");
        assert!(cache.get(&other).is_none());
        let mut other = key("a");
        other.coding = Coding::Zstd;
        assert!(cache.get(&other).is_none());
    }
}
