//! The type of a file whose name says nothing, from its first bytes (decision 0066): text
//! is shown as text, anything else stays a download.
//!
//! A file too large to be held in memory is sniffed by a read of its head on the blocking
//! pool; what that read found is remembered by the file's identity ([`SniffedTypes`]), so
//! a file downloaded again and again (a `Makefile`, a log, a firmware image without an
//! extension) is read for its type once, not on every request.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::SystemTime;

use tokio::runtime::Handle;

use super::file_cache::FileIdentity;
use super::lookup::{Content, OpenFile};
use super::mime;

/// How many files' sniffed types a worker remembers. Past it the memo starts afresh: a
/// type costs one read of a file's head to find again, and 4,096 entries are ~200 KiB.
const REMEMBERED: usize = 4096;

/// Sniffed types of files read through a handle, by the identity their `fstat` gave
/// (device, inode, mode, size, mtime, ctime: any change to the file is a new identity).
/// Only settled files are remembered (see [`super::file_cache::SETTLE`]): a rewrite in
/// the same timestamp tick as the sniff could otherwise keep the identity.
#[derive(Debug, Default)]
pub(super) struct SniffedTypes {
    types: Mutex<HashMap<FileIdentity, &'static str>>,
}

impl SniffedTypes {
    fn get(&self, identity: &FileIdentity) -> Option<&'static str> {
        self.types.lock().ok()?.get(identity).copied()
    }

    fn remember(&self, identity: FileIdentity, ty: &'static str) {
        if !identity.settled(SystemTime::now()) {
            return;
        }
        if let Ok(mut types) = self.types.lock() {
            if types.len() >= REMEMBERED {
                types.clear();
            }
            types.insert(identity, ty);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.types.lock().map_or(0, |t| t.len())
    }
}

/// The `Content-Type` of `file`: by its name, or, when the name says nothing, by its
/// first [`mime::SNIFF_LEN`] bytes (read on the blocking pool unless already in memory or
/// remembered in `known`). A read that fails leaves it a download.
pub(super) async fn content_type(
    file: &OpenFile,
    runtime: &Handle,
    known: &SniffedTypes,
) -> &'static str {
    if let Some(named) = mime::by_extension(&file.name) {
        return named;
    }
    match &file.content {
        Content::Read(bytes) => mime::content_type_sniffed(&file.name, bytes),
        Content::Handle(handle, identity) => {
            if let Some(ty) = known.get(identity) {
                return ty;
            }
            let (Ok(handle), Ok(len)) = (handle.try_clone(), usize::try_from(file.len)) else {
                return mime::content_type(&file.name);
            };
            let name = file.name.clone();
            let sniffed = runtime.spawn_blocking(move || {
                let mut head = vec![0u8; len.min(mime::SNIFF_LEN)];
                let read = read_head(&handle, &mut head).ok()?;
                Some(mime::content_type_sniffed(&name, &head[..read]))
            });
            match sniffed.await {
                Ok(Some(ty)) => {
                    known.remember(*identity, ty);
                    ty
                }
                _ => mime::content_type(&file.name),
            }
        }
    }
}

/// Fills `buf` from the start of the file, or as much of it as the file holds.
#[cfg(unix)]
fn read_head(file: &std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    use std::os::unix::fs::FileExt as _;
    let mut filled = 0;
    while filled < buf.len() {
        match file.read_at(&mut buf[filled..], filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(not(unix))]
fn read_head(_: &std::fs::File, _: &mut [u8]) -> std::io::Result<usize> {
    Err(std::io::Error::other("not sniffed on this platform"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    /// A file without a telling name, opened as the lookup opens one too large to hold.
    fn opened(path: &std::path::Path, settled: bool) -> OpenFile {
        let file = std::fs::File::open(path).expect("open");
        let meta = file.metadata().expect("fstat");
        let identity = FileIdentity::of_metadata(&meta);
        let identity = if settled {
            identity.changed_earlier(10)
        } else {
            identity
        };
        OpenFile {
            content: Content::Handle(file, identity),
            validators: Default::default(),
            len: meta.len(),
            modified: meta.modified().expect("mtime"),
            name: "NOTES".into(),
        }
    }

    #[tokio::test]
    async fn a_settled_files_type_is_read_once_and_a_changed_file_read_again() {
        let path = std::env::temp_dir().join(format!("servery-sniff-{}", std::process::id()));
        std::fs::write(&path, b"plain words\n").expect("write");
        let runtime = Handle::current();
        let known = SniffedTypes::default();

        let fresh = opened(&path, false);
        assert_eq!(
            content_type(&fresh, &runtime, &known).await,
            mime::PLAIN_TEXT
        );
        assert_eq!(
            known.len(),
            0,
            "a file changed within SETTLE is not remembered"
        );

        let settled = opened(&path, true);
        assert_eq!(
            content_type(&settled, &runtime, &known).await,
            mime::PLAIN_TEXT
        );
        assert_eq!(known.len(), 1);
        // The bytes change under an identity that (by hand) did not: the remembered type
        // answers, so the head was not read again.
        std::fs::File::options()
            .write(true)
            .open(&path)
            .and_then(|mut f| f.write_all(b"\0\x01binary"))
            .expect("rewrite");
        assert_eq!(
            content_type(&settled, &runtime, &known).await,
            mime::PLAIN_TEXT
        );

        // A real change is a new identity: sniffed again. (Within one timestamp tick the
        // times may not move, which is why only settled files are remembered; here the
        // mtime is set apart by hand.)
        std::fs::File::options()
            .write(true)
            .open(&path)
            .and_then(|f| {
                f.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(12_345))
            })
            .expect("set the mtime");
        let changed = opened(&path, true);
        assert_eq!(
            content_type(&changed, &runtime, &known).await,
            "application/octet-stream"
        );
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn the_memo_starts_afresh_when_full() {
        let path = std::env::temp_dir().join(format!("servery-sniff-full-{}", std::process::id()));
        std::fs::write(&path, b"x").expect("write");
        let meta = std::fs::metadata(&path).expect("stat");
        let known = SniffedTypes::default();
        for secs in 0..=REMEMBERED as i64 {
            known.remember(
                FileIdentity::of_metadata(&meta).changed_earlier(10 + secs),
                mime::PLAIN_TEXT,
            );
        }
        assert_eq!(
            known.len(),
            1,
            "bounded: cleared at {REMEMBERED}, then one more"
        );
        let _ = std::fs::remove_file(&path);
    }
}
