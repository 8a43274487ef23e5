//! The file-system steps of MKCOL, DELETE, COPY and MOVE (decisions 0018 and 0029); the
//! order they run in is the core's tree flow, driven by [`super::tree_run`]:
//!
//! - A copy is built under a private staging name (`.servery-tmp-<worker>-copy-…`) in the
//!   destination's directory and renamed into place once complete.
//! - Whatever a DELETE, MOVE or overwriting COPY removes is first renamed away to a private
//!   trash name, in one step, then deleted.
//!
//! A worker that dies in between leaves only private names behind, which nothing serves and
//! which the parent's cleanup of that worker removes. Blocking.

use std::ffi::OsStr;
use std::io;

use cap_std::fs::Dir;
use rustix::io::Errno;

use servery_core::write_flow::Existing;

use super::props;
use super::resource::DavPath;
use crate::write::{is_own, temp};

/// Collections nested deeper than this are not copied (the walk must end).
pub const MAX_DEPTH: usize = 64;

/// A resource's parent directory, held open, and its name in it.
#[derive(Debug)]
pub struct Placed {
    pub dir: Dir,
    pub name: String,
}

/// Opens the parent directory of `path` (not the root).
pub fn place(root: &Dir, path: &DavPath) -> io::Result<Placed> {
    let (Some(parent), Some(name)) = (path.parent(), path.name()) else {
        return Err(io::Error::from(io::ErrorKind::PermissionDenied));
    };
    let dir = if parent.is_root() {
        root.try_clone()?
    } else {
        root.open_dir(parent.rel())?
    };
    Ok(Placed {
        dir,
        name: name.to_owned(),
    })
}

fn private_name(worker: u64, what: &str) -> String {
    format!(
        "{}{what}-{:016x}",
        temp::temp_prefix(worker),
        fastrand_u64()
    )
}

/// 64 unpredictable bits for a private name (collisions are retried by the callers'
/// `create_new`/rename semantics anyway).
fn fastrand_u64() -> u64 {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.finish()
}

/// What a name in a directory holds, never following a symlink there.
pub fn existing(placed: &Placed) -> io::Result<Existing> {
    match placed.dir.symlink_metadata(&placed.name) {
        Ok(meta) if meta.is_dir() => Ok(Existing::Directory),
        Ok(_) => Ok(Existing::File),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Existing::Nothing),
        Err(e) => Err(e),
    }
}

/// The private staging name of a copy of `source` beside `dest`: an empty collection, or
/// an empty file, created with `O_EXCL`.
pub fn create_staging(source: &Placed, dest: &Placed, worker: u64) -> io::Result<String> {
    let staging = private_name(worker, "copy");
    if source.dir.metadata(&source.name)?.is_dir() {
        dest.dir.create_dir(&staging)?;
    } else {
        let mut options = cap_std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        dest.dir.open_with(&staging, &options)?;
    }
    Ok(staging)
}

/// Fills the staging name with the source's content, or its members when `infinity`.
pub fn fill_staging(
    source: &Placed,
    dest: &Placed,
    staging: &str,
    infinity: bool,
) -> io::Result<()> {
    if !source.dir.metadata(&source.name)?.is_dir() {
        source.dir.copy(&source.name, &dest.dir, staging)?;
        return Ok(());
    }
    if infinity {
        let from = source.dir.open_dir(&source.name)?;
        let to = dest.dir.open_dir(staging)?;
        copy_members(&from, &to, 1)?;
    }
    Ok(())
}

/// Makes the staging copy durable before it is placed: an fsync of every file and
/// directory in it, deepest first, so that a crash after the placing rename never shows
/// part of the copy under the public name. The destination's directory, which gets the
/// placing rename, is synced after it (`publish::sync_directory`).
pub fn sync_staging(dest: &Placed, staging: &str) -> io::Result<()> {
    sync_entry(&dest.dir, OsStr::new(staging), 0)
}

fn sync_entry(dir: &Dir, name: &OsStr, depth: usize) -> io::Result<()> {
    let meta = dir.symlink_metadata(name)?;
    if meta.is_file() {
        return dir.open(name)?.sync_all();
    }
    if !meta.is_dir() {
        // A symbolic link is made with its directory entry: the directory's fsync.
        return Ok(());
    }
    if depth >= MAX_DEPTH {
        return Err(io::Error::other("collection nested too deep to sync"));
    }
    let sub = dir.open_dir(name)?;
    for entry in sub.entries()? {
        sync_entry(&sub, &entry?.file_name(), depth + 1)?;
    }
    // cap-std's directory handles are path-only (`O_PATH`), which fsync refuses.
    use rustix::fs::{Mode, OFlags};
    let readable = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    rustix::fs::fsync(&readable)?;
    Ok(())
}

/// Renames `placed` away to a private trash name in its directory, in one step. `None`
/// when there was nothing there.
pub fn trash(placed: &Placed, worker: u64) -> io::Result<Option<String>> {
    let trash = private_name(worker, "trash");
    match placed.dir.rename(&placed.name, &placed.dir, &trash) {
        Ok(()) => Ok(Some(trash)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Deletes a private name (a trash or staging tree). A failure is only logged: the name is
/// out of sight already, and the parent's cleanup of this worker gets the rest.
pub fn remove_private(dir: &Dir, name: &str) {
    let removed = match dir.symlink_metadata(name) {
        Ok(meta) if meta.is_dir() => dir.remove_dir_all(name),
        Ok(_) => dir.remove_file(name),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    };
    if let Err(e) = removed {
        tracing::warn!(error = %e, "cannot finish deleting a private tree");
    }
}

/// Whether an error is `rename(2)`'s EXDEV: the two names are on different file systems.
pub fn is_cross_device(e: &io::Error) -> bool {
    e.raw_os_error() == Some(Errno::XDEV.raw_os_error())
}

fn copy_members(from: &Dir, to: &Dir, depth: usize) -> io::Result<()> {
    for entry in from.entries()? {
        let name = entry?.file_name();
        // Temporaries and partial uploads belong to their writers; property sidecars
        // describe members and go with them. A name that is not UTF-8 is copied too, and
        // so is a name the deny list hides (a copied folder keeps all it holds, as a
        // moved one does; the copy stays hidden by the same list).
        if let Some(text) = name.to_str()
            && is_own(text)
            && !props::is_sidecar(text)
        {
            continue;
        }
        copy_entry(from, &name, to, &name, depth)?;
    }
    Ok(())
}

fn copy_entry(
    from_dir: &Dir,
    from: &OsStr,
    to_dir: &Dir,
    to: &OsStr,
    depth: usize,
) -> io::Result<()> {
    let meta = from_dir.metadata(from)?;
    if !meta.is_dir() {
        from_dir.copy(from, to_dir, to)?;
        return Ok(());
    }
    if depth >= MAX_DEPTH {
        return Err(io::Error::other("collection nested too deep to copy"));
    }
    to_dir.create_dir(to)?;
    copy_members(&from_dir.open_dir(from)?, &to_dir.open_dir(to)?, depth + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::path::RequestPath;
    use std::path::Path;

    fn p(raw: &str) -> DavPath {
        DavPath::from_request(&RequestPath::parse(raw, false).expect("path"))
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .expect("ls")
            .map(|e| e.expect("e").file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn staging_copies_members_but_not_private_files_and_trash_goes() {
        let tmp = std::env::temp_dir().join(format!("servery-tree-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(tmp.join("a/b")).expect("mkdir");
        std::fs::write(tmp.join("a/b/f"), b"one").expect("write");
        std::fs::write(tmp.join("a/g"), b"two").expect("write");
        std::fs::write(tmp.join("a/.servery-tmp-9-x"), b"in flight").expect("write");
        std::fs::write(tmp.join("a/.servery-props.g"), b"{}").expect("write");
        let root = Dir::open_ambient_dir(&tmp, cap_std::ambient_authority()).expect("root");
        let (from, to) = (
            place(&root, &p("/a")).expect("a"),
            place(&root, &p("/c")).expect("c"),
        );
        assert_eq!(existing(&from).expect("a"), Existing::Directory);
        assert_eq!(existing(&to).expect("c"), Existing::Nothing);

        let staging = create_staging(&from, &to, 1).expect("staging");
        assert!(staging.starts_with(".servery-tmp-1-copy-"), "{staging}");
        fill_staging(&from, &to, &staging, true).expect("fill");
        assert_eq!(
            names(&tmp.join(&staging)),
            [".servery-props.g", "b", "g"],
            "members and sidecars, no temporaries"
        );
        assert_eq!(
            std::fs::read(tmp.join(&staging).join("b/f")).expect("f"),
            b"one"
        );
        let shallow = create_staging(&from, &to, 1).expect("staging");
        fill_staging(&from, &to, &shallow, false).expect("fill");
        assert!(names(&tmp.join(&shallow)).is_empty(), "depth 0: no members");

        let trashed = trash(&from, 1).expect("trash").expect("there");
        assert!(!tmp.join("a").exists());
        assert_eq!(trash(&from, 1).expect("again"), None);
        remove_private(&root, &trashed);
        remove_private(&root, &shallow);
        assert_eq!(names(&tmp), [staging]);
        let _ = std::fs::remove_dir_all(&tmp);
    }
}
