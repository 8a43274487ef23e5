//! Step 3's private temporary file: `.servery-tmp-<worker id>-<random>` in the target
//! directory (same file system, so publishing is one `rename`), created with `O_EXCL` and
//! mode 0600, and unlinked by [`TempFile`]'s `Drop` unless it was published.
//!
//! The worker ID in the name is what lets the parent delete a killed worker's leftovers
//! ([`crate::parent::remove_worker_temp_files`]) without knowing what it was doing. The
//! random part only keeps names unpredictable; `O_EXCL` is what makes them unique.

use std::collections::hash_map::RandomState;
use std::fs::File;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};

use super::PRIVATE_PREFIX;

/// The name prefix of worker `worker`'s temporary files.
pub fn temp_prefix(worker: u64) -> String {
    format!("{PRIVATE_PREFIX}tmp-{worker}-")
}

/// 64 unpredictable bits: SipHash under the per-process random keys std draws from the
/// OS, over a counter, so no two calls in a process collide.
fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.finish()
}

/// A fresh private file in `dir`. Blocking.
pub fn create(dir: &Arc<Dir>, worker: u64) -> io::Result<(TempFile, File)> {
    let mut options = OpenOptions::new();
    options.write(true).read(true).create_new(true).mode(0o600);
    loop {
        let name = format!("{}{:016x}", temp_prefix(worker), random_u64());
        match dir.open_with(&name, &options) {
            Ok(file) => {
                let guard = TempFile {
                    dir: Arc::clone(dir),
                    name,
                    armed: true,
                };
                return Ok((guard, file.into_std()));
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Unlinks the temporary file when dropped, unless [`TempFile::disarm`] said it was
/// published (renamed away).
#[derive(Debug)]
pub struct TempFile {
    dir: Arc<Dir>,
    name: String,
    armed: bool,
}

impl TempFile {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn dir(&self) -> &Arc<Dir> {
        &self.dir
    }

    /// The file now lives under another name; nothing to remove.
    pub fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if self.armed {
            // One unlink: cheap enough to do in place, even on an async thread, and doing
            // it here means every way out of a handler (including hyper dropping it)
            // removes the file.
            match self.dir.remove_file(&self.name) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(name = %self.name, error = %e, "cannot remove a temporary upload file")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cap_std::ambient_authority;

    #[test]
    fn names_are_private_unique_and_removed_on_drop() {
        let path = std::env::temp_dir().join(format!("servery-temp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("mkdir");
        let dir = Arc::new(Dir::open_ambient_dir(&path, ambient_authority()).expect("open"));
        let (a, _fa) = create(&dir, 7).expect("create");
        let (mut b, _fb) = create(&dir, 7).expect("create");
        assert!(a.name().starts_with(".servery-tmp-7-"));
        assert_ne!(a.name(), b.name());
        let b_name = b.name().to_owned();
        b.disarm();
        drop(a);
        drop(b);
        let left: Vec<String> = std::fs::read_dir(&path)
            .expect("ls")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, [b_name]);
        std::fs::remove_dir_all(&path).expect("cleanup");
    }
}
