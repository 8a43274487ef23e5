//! A tiny simulated file system for the write flow: private temp files, atomic rename,
//! the parent's cleanup of a dead worker's temp files, and the partial and meta files of
//! resumable uploads (which belong to the client, not a worker: the cleanup leaves them).

use std::collections::BTreeMap;

use servery_core::chunk_flow::Recorded;
use servery_core::{Instant, WorkerId};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TempFile {
    pub owner: WorkerId,
    pub target: u8,
    pub writer: u64,
    pub bytes: Vec<u8>,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct SimFs {
    temps: BTreeMap<u64, TempFile>,
    next_temp: u64,
    /// Published files: target → (writer, content).
    pub files: BTreeMap<u8, (u64, Vec<u8>)>,
    pub renames: u64,
    /// Resumable uploads held for a target: `.servery-partial-…` and its `.meta`.
    pub partials: BTreeMap<u8, PartialFiles>,
}

/// The partial file and the meta file of one target's resumable upload, and when each
/// was last written (their `mtime`, which the real worker reads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PartialFiles {
    pub meta: Option<Recorded>,
    pub meta_touched: Instant,
    pub data: Option<Vec<u8>>,
    pub data_touched: Instant,
}

impl PartialFiles {
    /// How long the upload has been untouched: the partial file's age, or the meta
    /// file's when there is no partial file (as `write::partial::inspect` reads them).
    pub(crate) fn age_at(&self, now: Instant) -> core::time::Duration {
        let touched = if self.data.is_some() {
            self.data_touched
        } else {
            self.meta_touched
        };
        now.saturating_since(touched)
    }
}

impl SimFs {
    pub(crate) fn create_temp(&mut self, owner: WorkerId, target: u8, writer: u64) -> u64 {
        self.next_temp += 1;
        self.temps.insert(
            self.next_temp,
            TempFile {
                owner,
                target,
                writer,
                bytes: Vec::new(),
            },
        );
        self.next_temp
    }

    pub(crate) fn append(&mut self, temp: u64, bytes: &[u8]) -> bool {
        match self.temps.get_mut(&temp) {
            Some(t) => {
                t.bytes.extend_from_slice(bytes);
                true
            }
            None => false,
        }
    }

    /// Atomic: the target shows the old content or the whole new content, never a mix.
    pub(crate) fn rename(&mut self, temp: u64) -> bool {
        match self.temps.remove(&temp) {
            Some(t) => {
                self.files.insert(t.target, (t.writer, t.bytes));
                self.renames += 1;
                true
            }
            None => false,
        }
    }

    pub(crate) fn remove_temp(&mut self, temp: u64) {
        self.temps.remove(&temp);
    }

    pub(crate) fn remove_temps_of(&mut self, owner: WorkerId) -> usize {
        let before = self.temps.len();
        self.temps.retain(|_, t| t.owner != owner);
        before - self.temps.len()
    }

    pub(crate) fn has_temp(&self, temp: u64) -> bool {
        self.temps.contains_key(&temp)
    }

    pub(crate) fn temp_count(&self) -> usize {
        self.temps.len()
    }

    /// The owners of the private temp files there are now.
    pub(crate) fn temp_owners(&self) -> impl Iterator<Item = WorkerId> + '_ {
        self.temps.values().map(|t| t.owner)
    }

    /// The temp file (holding `meta`) goes whole over `target`'s meta file (`rename(2)`).
    pub(crate) fn rename_meta(
        &mut self,
        temp: u64,
        target: u8,
        meta: Recorded,
        now: Instant,
    ) -> bool {
        if self.temps.remove(&temp).is_none() {
            return false;
        }
        let p = self.partials.entry(target).or_insert(PartialFiles {
            meta: None,
            meta_touched: now,
            data: None,
            data_touched: now,
        });
        p.meta = Some(meta);
        p.meta_touched = now;
        true
    }
}
