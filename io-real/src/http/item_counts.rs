//! A per-worker cache of the item counts a listing shows for its folders (decision 0121).
//!
//! Counting a folder's items opens and reads it: for a listing of 10,000 entries of which
//! 1,000 are folders, that is 1,000 opens and reads per request, whatever changed. A
//! folder's entries change only by a link, unlink or rename inside it, and each of those
//! moves the folder's mtime and ctime; so a count is kept under the folder's identity as
//! the listing's `statx` gave it (device, inode, mode, size, mtime, ctime, nanoseconds
//! included: [`FileIdentity`]), and a folder whose identity is unchanged has the same
//! entries and the same count.
//!
//! As in the file cache, only settled folders are kept (ctime at least
//! [`super::file_cache::SETTLE`] before now), so a change within the timestamp tick of
//! the count cannot leave the identity unchanged. A count also remembers how many entries
//! it read, so a listing's reading budget ([`super::listing::ITEMS_BUDGET`]) is charged the
//! same whether the count was read or remembered: the page is the same either way.
//!
//! Bounded in bytes ([`ITEM_COUNTS_BYTES`]), least recently used first ([`super::lru`]).

use std::time::SystemTime;

use super::file_cache::FileIdentity;
use super::lru::ByteLru;

/// The most memory the cache holds per worker: about 2,000 folders.
pub(super) const ITEM_COUNTS_BYTES: u64 = 256 * 1024;

/// What one entry costs, its key, its value and the map's own bookkeeping included.
const ENTRY_COST: usize = 128;

/// A folder's count as the listing computed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Counted {
    /// The entries the listing shows, at most `ITEMS_COUNTED + 1`.
    pub(super) items: u64,
    /// The entries read to count them (the budget's charge).
    pub(super) read: u64,
}

/// The cache; one per site, shared by its requests.
#[derive(Debug)]
pub(super) struct ItemCounts {
    lru: ByteLru<FileIdentity, Counted>,
}

impl ItemCounts {
    pub(super) fn new(capacity: u64) -> Self {
        Self {
            lru: ByteLru::new(capacity),
        }
    }

    /// The count of the folder whose `statx` gave `identity`, if it was counted with
    /// that identity.
    pub(super) fn get(&self, identity: &FileIdentity) -> Option<Counted> {
        self.lru.get(identity)
    }

    /// Keeps a complete count of the folder `identity` names, if it has settled.
    pub(super) fn insert(&self, identity: FileIdentity, counted: Counted, now: SystemTime) {
        if self.lru.enabled() && identity.settled(now) {
            self.lru.insert(identity, counted, ENTRY_COST);
        }
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.lru.len()
    }
}
