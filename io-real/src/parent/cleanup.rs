//! A reaped worker's private temporary files. Uploads write to
//! `.servery-tmp-<worker id>-<random>` in the target's own directory (so publishing is one
//! `rename`; see [`crate::write::temp`]); once the worker is gone nothing can publish
//! them, so the parent deletes them, anywhere under the served root.
//!
//! The walk visits every directory under the root once, without following symlinks, on
//! the parent's cleanup thread ([`Cleaner`]). On a small tree that is well under the one-second bound the tests
//! hold it to; on a very large tree it costs what a `find` would, once per dead worker.
//! WebDAV's staged copies and trees being deleted are directories under the same prefix
//! (decision 0018) and go whole. Partial (resumable) uploads, `.servery-partial-*`, are not touched: they belong to
//! the client, not the worker, and another worker resumes them (decision 0004).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Sender, channel};
use std::thread::JoinHandle;

use servery_core::WorkerId;

/// The thread that deletes dead workers' temporary files: the driver hands it a worker and
/// goes on. It is started with the parent, once, because a host at its process limit
/// (`RLIMIT_NPROC`) refuses new threads exactly when workers die and cannot be replaced:
/// a thread started on demand (the runtime's blocking pool) failed there, and its panic
/// took the driver thread down with it (`tests/io_faults.rs` caught it). Dropping the
/// cleaner lets it finish what it was handed.
#[derive(Debug)]
pub(super) struct Cleaner {
    tx: Option<Sender<WorkerId>>,
    thread: Option<JoinHandle<()>>,
}

impl Cleaner {
    pub(super) fn start(root: PathBuf) -> io::Result<Cleaner> {
        let (tx, rx) = channel::<WorkerId>();
        let thread = std::thread::Builder::new()
            .name("servery-cleanup".into())
            .spawn(move || {
                for worker in rx {
                    match remove_worker_temp_files(&root, worker) {
                        Ok(0) => {}
                        Ok(n) => {
                            tracing::info!(%worker, files = n, "removed the worker's temporary files")
                        }
                        Err(e) => {
                            tracing::warn!(%worker, error = %e, "cannot remove the worker's temporary files")
                        }
                    }
                }
            })?;
        Ok(Cleaner {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Delete `worker`'s temporary files, soon.
    pub(super) fn clean(&self, worker: WorkerId) {
        if let Some(tx) = &self.tx {
            // Only fails once the thread is gone, which only dropping the cleaner does.
            let _ = tx.send(worker);
        }
    }
}

impl Drop for Cleaner {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Directories deeper than this under the root are not searched (a symlink-free tree
/// that deep is pathological, and the walk must end).
const MAX_DEPTH: usize = 64;

/// The name prefix of `worker`'s temporary files.
pub fn temp_prefix(worker: WorkerId) -> String {
    crate::write::temp::temp_prefix(worker.0)
}

/// Delete `worker`'s temporary files anywhere under `root`; returns how many went.
/// Only regular files are removed, names are unlinked without following symlinks, and
/// symlinked directories are not entered. A directory that cannot be read is skipped
/// (logged), so one unreadable corner does not stop the rest of the cleanup.
pub fn remove_worker_temp_files(root: &Path, worker: WorkerId) -> io::Result<usize> {
    let prefix = temp_prefix(worker);
    let mut removed = 0;
    let mut dirs = vec![(root.to_path_buf(), 0usize)];
    // The root itself must be readable; below it, errors are skipped.
    let mut first = true;
    while let Some((dir, depth)) = dirs.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if first => return Err(e),
            Err(e) => {
                tracing::debug!(dir = %dir.display(), error = %e, "cannot search for temporary files");
                continue;
            }
        };
        first = false;
        for entry in entries {
            let Ok(entry) = entry else { continue };
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let name = entry.file_name();
            let ours = name.as_encoded_bytes().starts_with(prefix.as_bytes());
            if kind.is_dir() && ours {
                // A WebDAV copy staged, or a tree taken out of sight to be deleted
                // (decision 0018): nothing can finish it now.
                match std::fs::remove_dir_all(entry.path()) {
                    Ok(()) => removed += 1,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
                continue;
            }
            if kind.is_dir() {
                if depth < MAX_DEPTH {
                    dirs.push((entry.path(), depth + 1));
                }
                continue;
            }
            if !kind.is_file() || !ours {
                continue;
            }
            match std::fs::remove_file(entry.path()) {
                Ok(()) => removed += 1,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut left: Vec<String> = std::fs::read_dir(dir)
            .expect("ls")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        left
    }

    #[test]
    fn only_that_workers_temp_files_go_at_any_depth() {
        let dir = std::env::temp_dir().join(format!("servery-cleanup-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("a/b")).expect("mkdir");
        for name in [
            ".servery-tmp-7-a",
            ".servery-tmp-7-b",
            ".servery-tmp-71-c",
            ".servery-tmp-8-a",
            ".servery-partial-00",
            "keep.txt",
            "a/b/.servery-tmp-7-deep",
            "a/b/.servery-partial-01",
        ] {
            std::fs::write(dir.join(name), b"x").expect("write");
        }
        std::fs::create_dir_all(dir.join(".servery-tmp-7-copy-1/sub")).expect("mkdir");
        std::fs::write(dir.join(".servery-tmp-7-copy-1/sub/f"), b"x").expect("write");
        // A symlinked directory is not entered (its target is cleaned on its own).
        let outside = dir.with_extension("outside");
        let _ = std::fs::remove_dir_all(&outside);
        std::fs::create_dir_all(&outside).expect("mkdir");
        std::fs::write(outside.join(".servery-tmp-7-out"), b"x").expect("write");
        std::os::unix::fs::symlink(&outside, dir.join("link")).expect("symlink");

        assert_eq!(remove_worker_temp_files(&dir, WorkerId(7)).expect("rm"), 4);
        assert_eq!(
            names(&dir),
            [
                ".servery-partial-00",
                ".servery-tmp-71-c",
                ".servery-tmp-8-a",
                "a",
                "keep.txt",
                "link"
            ]
        );
        assert_eq!(names(&dir.join("a/b")), [".servery-partial-01"]);
        assert_eq!(names(&outside), [".servery-tmp-7-out"]);
        std::fs::remove_dir_all(&dir).expect("cleanup");
        std::fs::remove_dir_all(&outside).expect("cleanup");
    }
}
