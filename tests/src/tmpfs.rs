//! A small tmpfs, for tests that need a file system to fill up (mounted only when the
//! test runs as root; otherwise the test says it is skipped).

use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs of `size` mounted over `dir` for the life of the guard.
#[derive(Debug)]
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts it, or says why not (the caller prints that it is skipped).
    pub fn mount(dir: &Path, size: &str) -> Result<Tmpfs, &'static str> {
        if !rustix::process::geteuid().is_root() {
            return Err("mounting a small tmpfs needs root");
        }
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            Ok(Tmpfs(dir.to_path_buf()))
        } else {
            Err("this machine refuses a tmpfs mount")
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}
