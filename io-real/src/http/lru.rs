//! The byte-bounded, least-recently-used map under both per-worker caches
//! ([`super::encoded_cache`] and [`super::file_cache`]).
//!
//! Choices, and why:
//!
//! - **Bounded in bytes, not entries**: memory is what a budget promises, and entries differ
//!   in size by orders of magnitude. The caller states each entry's cost, key included, so
//!   many tiny entries cannot exceed the bound through their keys.
//! - **Least recently used eviction**: the hot assets of a site are a small working set that
//!   LRU keeps; a one-off crawl of many files cycles through without pinning anything.
//! - **One entry may cost at most a quarter of the budget**, so a single large value cannot
//!   flush the whole working set.
//! - **A `std::sync::Mutex`**: every operation is a hash lookup and a few pointer moves,
//!   done from the blocking pool or briefly from async code; it is never held across I/O or
//!   an await. A capacity of 0 disables the map without taking the lock.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::Mutex;

/// A map retaining at most `capacity` bytes of entries, by the costs their inserts state.
#[derive(Debug)]
pub(super) struct ByteLru<K, V> {
    capacity: usize,
    inner: Mutex<Inner<K, V>>,
}

#[derive(Debug)]
struct Inner<K, V> {
    entries: HashMap<K, Entry<V>>,
    /// Last use, oldest first: `tick -> key`.
    order: BTreeMap<u64, K>,
    used: usize,
    tick: u64,
}

#[derive(Debug)]
struct Entry<V> {
    value: V,
    cost: usize,
    tick: u64,
}

impl<K: Hash + Eq + Clone, V: Clone> ByteLru<K, V> {
    /// A map retaining at most `capacity` bytes; 0 disables it.
    pub(super) fn new(capacity: u64) -> Self {
        Self {
            capacity: usize::try_from(capacity).unwrap_or(usize::MAX),
            inner: Mutex::new(Inner {
                entries: HashMap::new(),
                order: BTreeMap::new(),
                used: 0,
                tick: 0,
            }),
        }
    }

    /// The largest cost [`Self::insert`] will keep.
    pub(super) fn max_entry(&self) -> usize {
        self.capacity / 4
    }

    /// Whether the map can hold anything at all.
    pub(super) fn enabled(&self) -> bool {
        self.capacity > 0
    }

    /// A copy of the value under `key`, marking it recently used.
    pub(super) fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if !self.enabled() {
            return None;
        }
        let mut inner = self.lock();
        inner.tick += 1;
        let tick = inner.tick;
        let entry = inner.entries.get_mut(key)?;
        let old = std::mem::replace(&mut entry.tick, tick);
        let value = entry.value.clone();
        if let Some(k) = inner.order.remove(&old) {
            inner.order.insert(tick, k);
        }
        Some(value)
    }

    /// Stores `value` under `key` at `cost` bytes, evicting least recently used entries to
    /// stay within the budget. Entries costing more than [`Self::max_entry`] are not stored.
    pub(super) fn insert(&self, key: K, value: V, cost: usize) {
        if !self.enabled() || cost > self.max_entry() {
            return;
        }
        let mut inner = self.lock();
        inner.remove(&key);
        while inner.used + cost > self.capacity {
            let Some((_, victim)) = inner.order.pop_first() else {
                break;
            };
            if let Some(entry) = inner.entries.remove(&victim) {
                inner.used -= entry.cost;
            }
        }
        inner.tick += 1;
        let tick = inner.tick;
        inner.order.insert(tick, key.clone());
        inner.entries.insert(key, Entry { value, cost, tick });
        inner.used += cost;
    }

    /// Drops the entry under `key`, if any.
    pub(super) fn remove<Q>(&self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if self.enabled() {
            self.lock().remove(key);
        }
    }

    /// Bytes currently charged against the budget.
    pub(super) fn used(&self) -> usize {
        self.lock().used
    }

    /// Number of entries.
    pub(super) fn len(&self) -> usize {
        self.lock().entries.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<K, V>> {
        // A panic while holding the lock cannot leave the maps inconsistent in a way that
        // matters more than losing the cache would; keep serving.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl<K: Hash + Eq, V> Inner<K, V> {
    fn remove<Q>(&mut self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if let Some(old) = self.entries.remove(key) {
            self.order.remove(&old.tick);
            self.used -= old.cost;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_capacity_disables() {
        let lru = ByteLru::new(0);
        lru.insert("a", 1, 1);
        assert!(lru.get("a").is_none());
        assert_eq!(lru.len(), 0);
    }

    #[test]
    fn stays_within_budget_evicting_least_recently_used() {
        let lru = ByteLru::new(403);
        for name in ["a", "b", "c", "d"] {
            lru.insert(name, name.len(), 100);
        }
        assert_eq!(lru.len(), 4);
        // Touch "a" so "b" is the oldest.
        assert!(lru.get("a").is_some());
        lru.insert("e", 1, 100);
        assert!(lru.used() <= 403);
        assert!(lru.get("b").is_none(), "least recently used is evicted");
        for name in ["a", "c", "d", "e"] {
            assert!(lru.get(name).is_some(), "{name} kept");
        }
    }

    #[test]
    fn oversized_entries_are_not_kept() {
        let lru = ByteLru::new(1000);
        lru.insert("big", (), lru.max_entry() + 1);
        assert_eq!(lru.len(), 0);
        assert_eq!(lru.used(), 0);
        lru.insert("fits", (), lru.max_entry());
        assert_eq!(lru.used(), lru.max_entry());
    }

    #[test]
    fn replacing_and_removing_recharge() {
        let lru = ByteLru::new(10_000);
        lru.insert("a".to_owned(), 1, 100);
        lru.insert("a".to_owned(), 2, 50);
        assert_eq!(lru.len(), 1);
        assert_eq!(lru.used(), 50);
        assert_eq!(lru.get("a"), Some(2), "looked up by &str");
        lru.remove("a");
        assert_eq!((lru.len(), lru.used()), (0, 0));
        // The order map forgot it too: filling the budget evicts nothing that is gone.
        lru.insert("b".to_owned(), 3, 2_500);
        assert_eq!(lru.get("b"), Some(3));
    }
}
