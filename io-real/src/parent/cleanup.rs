//! A reaped worker's private temporary files. Workers name them
//! `.servery-tmp-<worker id>-<anything>` in the served root; once the worker is gone nothing
//! can publish them, so the parent deletes them. Today no worker writes any (uploads come
//! later), so this normally finds nothing.

use std::io;
use std::path::Path;

use servery_core::WorkerId;

/// The name prefix of `worker`'s temporary files.
pub fn temp_prefix(worker: WorkerId) -> String {
    format!(".servery-tmp-{}-", worker.0)
}

/// Delete `worker`'s temporary files directly under `root`; returns how many went.
/// Only regular files are removed, and names are unlinked without following symlinks.
pub fn remove_worker_temp_files(root: &Path, worker: WorkerId) -> io::Result<usize> {
    let prefix = temp_prefix(worker);
    let mut removed = 0;
    for entry in std::fs::read_dir(root)? {
        let entry = entry?;
        let name = entry.file_name();
        if !name.as_encoded_bytes().starts_with(prefix.as_bytes()) {
            continue;
        }
        if entry.file_type()?.is_file() {
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

    #[test]
    fn only_that_workers_temp_files_go() {
        let dir = std::env::temp_dir().join(format!("servery-cleanup-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
        for name in [
            ".servery-tmp-7-a",
            ".servery-tmp-7-b",
            ".servery-tmp-71-c",
            ".servery-tmp-8-a",
            "keep.txt",
        ] {
            std::fs::write(dir.join(name), b"x").expect("write");
        }
        std::fs::create_dir(dir.join(".servery-tmp-7-dir")).expect("mkdir");
        assert_eq!(remove_worker_temp_files(&dir, WorkerId(7)).expect("rm"), 2);
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .expect("ls")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                ".servery-tmp-7-dir",
                ".servery-tmp-71-c",
                ".servery-tmp-8-a",
                "keep.txt"
            ]
        );
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
