//! What a TFTP file name may open: the HTTP side's containment, reused. The name is
//! turned into the request path an HTTP client would send for it (each `/`-separated part
//! percent-encoded, so `%`, `\` and NUL in a name stay literal and are judged as such) and
//! goes through [`RequestPath::parse`]: `..` above the root, hidden files without
//! `--show-hidden`, and servery's own temporary files are refused there. The file is then
//! opened beneath the root with the same `openat2(RESOLVE_BENEATH)` open the HTTP lookup
//! uses, so a symlink that leaves the root is refused by the kernel, not by a check that
//! could race.
//!
//! A leading `/` names the served root (as tftpd-hpa's `--secure` has it): clients that
//! send `/boot/x` and `boot/x` get the same file, and `/etc/passwd` can only ever be
//! `ROOT/etc/passwd`.

use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use cap_std::fs::Dir;
use servery_core::tftp::packet::ErrorCode;

use crate::http::path::{PathError, RequestPath, encode_segment};

/// The served root and its hidden-file policy.
#[derive(Debug, Clone)]
pub struct ServedRoot {
    /// Followed per transfer, as the workers follow it per request.
    live: Arc<crate::served_root::LiveRoot>,
    show_hidden: bool,
}

/// Why a name was refused: the ERROR packet's code and text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    pub code: ErrorCode,
    pub message: String,
}

impl Refusal {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Refusal {
            code,
            message: message.into(),
        }
    }
}

impl ServedRoot {
    /// Opens `root`; every transfer resolves beneath the directory its path names then.
    pub fn open(root: &std::path::Path, show_hidden: bool) -> io::Result<Self> {
        Ok(ServedRoot {
            live: Arc::new(crate::served_root::LiveRoot::open(root)?),
            show_hidden,
        })
    }

    /// The directory the root's path names now.
    pub fn dir(&self) -> Arc<Dir> {
        self.live.dir()
    }

    pub fn live(&self) -> &Arc<crate::served_root::LiveRoot> {
        &self.live
    }

    /// The path beneath the root a TFTP name stands for.
    pub fn resolve(&self, name: &[u8]) -> Result<PathBuf, Refusal> {
        let name = std::str::from_utf8(name)
            .map_err(|_| Refusal::new(ErrorCode::AccessViolation, "file name is not UTF-8"))?;
        let encoded: Vec<String> = name
            .trim_start_matches('/')
            .split('/')
            .map(encode_segment)
            .collect();
        let path = RequestPath::parse(&format!("/{}", encoded.join("/")), self.show_hidden)
            .map_err(|e| match e {
                // A hidden name is not found, as over HTTP: its existence is not told.
                PathError::Hidden => Refusal::new(ErrorCode::FileNotFound, "file not found"),
                other => Refusal::new(ErrorCode::AccessViolation, other.to_string()),
            })?;
        if path.is_root() || path.trailing_slash() {
            return Err(Refusal::new(ErrorCode::AccessViolation, "not a file"));
        }
        Ok(path.relative())
    }

    /// Opens a name for reading: a regular file beneath the root, and its length.
    pub fn open_read(&self, name: &[u8]) -> Result<(File, u64), Refusal> {
        let rel = self.resolve(name)?;
        let (file, meta) =
            crate::http::lookup::open_beneath(&self.live.dir(), &rel).map_err(from_io)?;
        if !meta.is_file() {
            return Err(Refusal::new(ErrorCode::AccessViolation, "not a file"));
        }
        Ok((file, meta.len()))
    }
}

/// An open that failed, as the client is told.
pub fn from_io(e: io::Error) -> Refusal {
    match e.kind() {
        io::ErrorKind::NotFound => Refusal::new(ErrorCode::FileNotFound, "file not found"),
        // cap-std's answer to a path that would leave the root (a symlink out).
        io::ErrorKind::PermissionDenied => {
            Refusal::new(ErrorCode::AccessViolation, "access violation")
        }
        _ => Refusal::new(ErrorCode::NotDefined, format!("cannot open: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(show_hidden: bool) -> (tempdir::Dir, ServedRoot) {
        let t = tempdir::Dir::new();
        let r = ServedRoot::open(t.path(), show_hidden).expect("open root");
        (t, r)
    }

    mod tempdir {
        /// A directory removed when dropped.
        pub(super) struct Dir(std::path::PathBuf);
        impl Dir {
            pub(super) fn new() -> Self {
                static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
                let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let p = std::env::temp_dir()
                    .join(format!("servery-tftp-root-{}-{n}", std::process::id()));
                let _ = std::fs::remove_dir_all(&p);
                std::fs::create_dir_all(p.join("sub")).expect("mkdir");
                std::fs::write(p.join("sub/a.bin"), b"abc").expect("write");
                std::fs::write(p.join(".secret"), b"s").expect("write");
                std::fs::write(p.join("100%"), b"p").expect("write");
                Dir(p)
            }
            pub(super) fn path(&self) -> &std::path::Path {
                &self.0
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[test]
    fn names_resolve_beneath_the_root() {
        let (_t, r) = root(false);
        assert_eq!(r.open_read(b"sub/a.bin").expect("open").1, 3);
        assert_eq!(r.open_read(b"/sub/a.bin").expect("open").1, 3);
        assert_eq!(r.open_read(b"100%").expect("literal %").1, 1);
        assert_eq!(
            r.open_read(b"sub/../sub/a.bin").expect("inside").1,
            3,
            "a .. that stays inside is fine"
        );
    }

    #[test]
    fn escapes_and_hidden_names_are_refused() {
        let (_t, r) = root(false);
        for name in [
            &b"../etc/passwd"[..],
            b"sub/../../x",
            b"a\\..\\b",
            b"sub",
            b"/",
        ] {
            let e = r.open_read(name).expect_err("refused");
            assert_eq!(e.code, ErrorCode::AccessViolation, "{name:?}");
        }
        assert_eq!(
            r.open_read(b"/etc/passwd").expect_err("root-relative").code,
            ErrorCode::FileNotFound
        );
        assert_eq!(
            r.open_read(b".secret").expect_err("hidden").code,
            ErrorCode::FileNotFound
        );
        let (_t2, shown) = root(true);
        assert!(shown.open_read(b".secret").is_ok());
    }
}
