//! A tiny simulated file system for the write flow: private temp files, atomic rename,
//! and the parent's cleanup of a dead worker's temp files.

use std::collections::BTreeMap;

use servery_core::WorkerId;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TempFile {
    pub owner: WorkerId,
    pub target: u8,
    pub writer: u64,
    pub bytes: Vec<u8>,
}

#[derive(Debug, Clone, Default)]
pub struct SimFs {
    temps: BTreeMap<u64, TempFile>,
    next_temp: u64,
    /// Published files: target → (writer, content).
    pub files: BTreeMap<u8, (u64, Vec<u8>)>,
    pub renames: u64,
}

impl SimFs {
    pub fn create_temp(&mut self, owner: WorkerId, target: u8, writer: u64) -> u64 {
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

    pub fn append(&mut self, temp: u64, bytes: &[u8]) -> bool {
        match self.temps.get_mut(&temp) {
            Some(t) => {
                t.bytes.extend_from_slice(bytes);
                true
            }
            None => false,
        }
    }

    /// Atomic: the target shows the old content or the whole new content, never a mix.
    pub fn rename(&mut self, temp: u64) -> bool {
        match self.temps.remove(&temp) {
            Some(t) => {
                self.files.insert(t.target, (t.writer, t.bytes));
                self.renames += 1;
                true
            }
            None => false,
        }
    }

    pub fn remove_temp(&mut self, temp: u64) {
        self.temps.remove(&temp);
    }

    pub fn remove_temps_of(&mut self, owner: WorkerId) -> usize {
        let before = self.temps.len();
        self.temps.retain(|_, t| t.owner != owner);
        before - self.temps.len()
    }

    pub fn has_temp(&self, temp: u64) -> bool {
        self.temps.contains_key(&temp)
    }

    pub fn temp_count(&self) -> usize {
        self.temps.len()
    }
}
