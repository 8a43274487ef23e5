//! A tiny simulated file system for the write flow: private temp files, atomic rename,
//! the parent's cleanup of a dead worker's temp files, and the partial and meta files of
//! resumable uploads (which belong to the client, not a worker: the cleanup leaves them).
//!
//! Durability is modelled where a crash of the machine would show it (decision 0131): a
//! temp or partial file's bytes are durable once fsynced and until written again, and a
//! publishing rename is durable once its directory is fsynced. A power loss between the
//! rename and that fsync ([`SimFs::power_loss`]) keeps the rename or undoes it, as the seed
//! draws; if it keeps it, the name shows only what was durable.

use std::collections::BTreeMap;

use servery_core::chunk_flow::Recorded;
use servery_core::{Instant, WorkerId};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TempFile {
    pub owner: WorkerId,
    pub target: u8,
    pub writer: u64,
    pub bytes: Vec<u8>,
    /// Every byte is on the disk (fsynced since the last write).
    pub synced: bool,
}

/// A publishing rename whose directory is not yet fsynced: what the name showed before
/// (`None`: nothing), and whether the bytes renamed there were durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PendingRename {
    pub previous: Option<(u64, Vec<u8>)>,
    pub durable: bool,
}

/// What a power loss did to one name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AfterPowerLoss {
    /// The rename was lost: the name shows what it showed before.
    Undone,
    /// The rename survived and shows the whole new file.
    Kept,
    /// The rename survived, and the file's bytes, never made durable, did not: the name
    /// shows `len` bytes of the `of` renamed there (a partial file under a public name).
    Torn { len: usize, of: usize },
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
    /// Renames into place not yet made durable, by target.
    pub pending: BTreeMap<u8, PendingRename>,
}

/// The partial file and the meta file of one target's resumable upload, and when each
/// was last written (their `mtime`, which the real worker reads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PartialFiles {
    pub meta: Option<Recorded>,
    pub meta_touched: Instant,
    pub data: Option<Vec<u8>>,
    pub data_touched: Instant,
    /// The partial file's bytes are on the disk (fsynced since the last write).
    pub data_synced: bool,
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
                synced: false,
            },
        );
        self.next_temp
    }

    pub(crate) fn append(&mut self, temp: u64, bytes: &[u8]) -> bool {
        match self.temps.get_mut(&temp) {
            Some(t) => {
                t.bytes.extend_from_slice(bytes);
                t.synced = false;
                true
            }
            None => false,
        }
    }

    /// Whether the temp file's bytes are all durable.
    pub(crate) fn temp_synced(&self, temp: u64) -> bool {
        self.temps.get(&temp).is_some_and(|t| t.synced)
    }

    /// fsync of a temp file.
    pub(crate) fn sync_temp(&mut self, temp: u64) -> bool {
        match self.temps.get_mut(&temp) {
            Some(t) => {
                t.synced = true;
                true
            }
            None => false,
        }
    }

    /// Atomic: the target shows the old content or the whole new content, never a mix.
    /// Durable once the directory is synced ([`SimFs::sync_dir`]).
    pub(crate) fn rename(&mut self, temp: u64) -> bool {
        match self.temps.remove(&temp) {
            Some(t) => {
                self.publish(t.target, t.writer, t.bytes, t.synced);
                true
            }
            None => false,
        }
    }

    /// `bytes` (durable or not) renamed over `target`.
    pub(crate) fn publish(&mut self, target: u8, writer: u64, bytes: Vec<u8>, durable: bool) {
        let previous = self.files.insert(target, (writer, bytes));
        // A name renamed over twice before its directory's fsync goes back, in a crash,
        // to what was durable: the first one's previous.
        let previous = match self.pending.remove(&target) {
            Some(p) => p.previous,
            None => previous,
        };
        self.pending
            .insert(target, PendingRename { previous, durable });
        self.renames += 1;
    }

    /// fsync of the directory: the renames into it are durable.
    pub(crate) fn sync_dir(&mut self, target: u8) {
        self.pending.remove(&target);
    }

    /// The power goes while `target`'s rename is not durable: it survives if `keep`. What
    /// the name shows then (`None` when nothing was pending).
    pub(crate) fn power_loss(&mut self, target: u8, keep: bool) -> Option<AfterPowerLoss> {
        let pending = self.pending.remove(&target)?;
        if !keep {
            match pending.previous {
                Some(previous) => self.files.insert(target, previous),
                None => self.files.remove(&target),
            };
            return Some(AfterPowerLoss::Undone);
        }
        if pending.durable {
            return Some(AfterPowerLoss::Kept);
        }
        // Delayed allocation: the name made it to the disk, the bytes did not.
        let of = self.files.get(&target).map_or(0, |(_, b)| b.len());
        if let Some((_, bytes)) = self.files.get_mut(&target) {
            bytes.clear();
        }
        Some(AfterPowerLoss::Torn { len: 0, of })
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
            data_synced: false,
        });
        p.meta = Some(meta);
        p.meta_touched = now;
        true
    }
}
