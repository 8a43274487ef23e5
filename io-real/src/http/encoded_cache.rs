//! A per-worker, byte-bounded cache of encoded small files.
//!
//! Choices, and why:
//!
//! - **Keyed by (path, ETag, coding).** The ETag changes with inode, size and nanosecond
//!   mtime, so a rewritten file can never be answered from a stale entry; the stale entry
//!   simply stops being hit and ages out. No invalidation machinery, no file watching.
//! - **Bounded in bytes, not entries** (`compression_cache_size`): memory is what the budget
//!   in the spec promises, and entries differ in size by orders of magnitude. Key bytes count
//!   too, so many tiny entries cannot exceed the bound through their keys.
//! - **Least recently used eviction**: hot assets of a site are a small working set that
//!   LRU keeps; a one-off crawl of many files cycles through without pinning anything.
//! - **One entry may use at most a quarter of the budget**, so a single large file cannot
//!   flush the whole working set.
//! - **Per worker, not shared**: workers are processes; sharing would need shared memory and
//!   cross-process locking for a cache that refills in a few requests after a recycle. The
//!   spec states the resulting aggregate bound, `(N + 1) * compression_cache_size`.
//! - **A `std::sync::Mutex`**: every operation is a hash lookup and a few pointer moves,
//!   done from the blocking pool or briefly from async code; it is never held across I/O or
//!   an await. A capacity of 0 disables the cache without taking the lock.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use bytes::Bytes;

use super::compress::Coding;

/// Identifies one encoded representation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CacheKey {
    /// The file's path relative to the served root.
    pub path: String,
    /// The identity representation's ETag (the file's validator).
    pub etag: String,
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
    capacity: usize,
    inner: Mutex<Lru>,
}

#[derive(Debug, Default)]
struct Lru {
    entries: HashMap<CacheKey, Entry>,
    /// Last use, oldest first: `tick -> key`.
    order: BTreeMap<u64, CacheKey>,
    used: usize,
    tick: u64,
}

#[derive(Debug)]
struct Entry {
    value: Bytes,
    tick: u64,
}

impl EncodedCache {
    /// A cache retaining at most `capacity` bytes; 0 disables it.
    pub fn new(capacity: u64) -> Self {
        Self {
            capacity: usize::try_from(capacity).unwrap_or(usize::MAX),
            inner: Mutex::new(Lru::default()),
        }
    }

    /// The largest value [`Self::insert`] will keep.
    pub fn max_entry(&self) -> usize {
        self.capacity / 4
    }

    /// The cached bytes for `key`, marking them recently used.
    pub fn get(&self, key: &CacheKey) -> Option<Bytes> {
        if self.capacity == 0 {
            return None;
        }
        let mut lru = self.lock();
        lru.tick += 1;
        let tick = lru.tick;
        let entry = lru.entries.get_mut(key)?;
        let old = std::mem::replace(&mut entry.tick, tick);
        let value = entry.value.clone();
        if let Some(k) = lru.order.remove(&old) {
            lru.order.insert(tick, k);
        }
        Some(value)
    }

    /// Stores `value` under `key`, evicting least recently used entries to stay within the
    /// budget. Values larger than [`Self::max_entry`] are not stored.
    pub fn insert(&self, key: CacheKey, value: Bytes) {
        let cost = key.cost() + value.len();
        if self.capacity == 0 || cost > self.max_entry() {
            return;
        }
        let mut lru = self.lock();
        if let Some(old) = lru.entries.remove(&key) {
            lru.order.remove(&old.tick);
            lru.used -= key.cost() + old.value.len();
        }
        while lru.used + cost > self.capacity {
            let Some((_, victim)) = lru.order.pop_first() else {
                break;
            };
            if let Some(entry) = lru.entries.remove(&victim) {
                lru.used -= victim.cost() + entry.value.len();
            }
        }
        lru.tick += 1;
        let tick = lru.tick;
        lru.order.insert(tick, key.clone());
        lru.entries.insert(key, Entry { value, tick });
        lru.used += cost;
    }

    /// Bytes currently charged against the budget.
    pub fn used(&self) -> usize {
        self.lock().used
    }

    /// Number of cached representations.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lru> {
        // A panic while holding the lock cannot leave the maps inconsistent in a way that
        // matters more than losing the cache would; keep serving.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(path: &str) -> CacheKey {
        CacheKey {
            path: path.into(),
            etag: "\"e\"".into(),
            coding: Coding::Gzip,
        }
    }

    fn value(n: usize) -> Bytes {
        Bytes::from(vec![7; n])
    }

    #[test]
    fn zero_capacity_disables() {
        let cache = EncodedCache::new(0);
        cache.insert(key("a"), value(1));
        assert!(cache.get(&key("a")).is_none());
        assert!(cache.is_empty());
    }

    #[test]
    fn stays_within_budget_evicting_least_recently_used() {
        let per = key("a").cost() + 100;
        let cache = EncodedCache::new((per * 4) as u64 + 3);
        for name in ["a", "b", "c", "d"] {
            cache.insert(key(name), value(100));
        }
        assert_eq!(cache.len(), 4);
        // Touch "a" so "b" is the oldest.
        assert!(cache.get(&key("a")).is_some());
        cache.insert(key("e"), value(100));
        assert!(cache.used() <= per * 4 + 3);
        assert!(
            cache.get(&key("b")).is_none(),
            "least recently used is evicted"
        );
        for name in ["a", "c", "d", "e"] {
            assert!(cache.get(&key(name)).is_some(), "{name} kept");
        }
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
        other.etag = "\"f\"".into();
        assert!(cache.get(&other).is_none());
        let mut other = key("a");
        other.coding = Coding::Zstd;
        assert!(cache.get(&other).is_none());
    }
}
