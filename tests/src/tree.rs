//! A temporary tree to serve.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::*;

/// A temporary directory with a few files; removed on drop.
#[derive(Debug)]
pub struct Tree {
    pub dir: PathBuf,
}

impl Tree {
    pub fn new(name: &str) -> Tree {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        // Short: the control socket lives here and Unix socket paths are limited.
        let dir = std::env::temp_dir().join(format!("sv-{}-{n}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("root/sub")).expect("mkdir");
        std::fs::write(dir.join("root/hello.txt"), HELLO).expect("write");
        std::fs::write(dir.join("root/sub/big.bin"), big_body()).expect("write");
        Tree { dir }
    }

    pub fn root(&self) -> PathBuf {
        self.dir.join("root")
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.join("ctl.sock")
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The body of `sub/big.bin`: large enough to take several writes.
pub fn big_body() -> Vec<u8> {
    (0..256 * 1024u32).map(|i| (i % 251) as u8).collect()
}
