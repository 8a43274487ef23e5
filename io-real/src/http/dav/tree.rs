//! MKCOL, DELETE, COPY and MOVE on the file system, so that no client ever sees half of
//! one (decision 0018):
//!
//! - A copy is built under a private staging name (`.servery-tmp-<worker>-…`) in the
//!   destination's directory and renamed into place once complete.
//! - Whatever a DELETE, MOVE or overwriting COPY removes is first renamed away to a private
//!   name, in one step, then deleted.
//!
//! A worker that dies in between leaves only private names behind, which nothing serves and
//! which the parent's cleanup of that worker removes. Blocking.

use std::ffi::OsStr;
use std::io;

use cap_std::fs::Dir;
use rustix::io::Errno;

use super::props;
use super::resource::DavPath;
use crate::write::{is_private, temp};

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

/// `MKCOL`: a new empty collection.
pub fn make_collection(root: &Dir, path: &DavPath) -> io::Result<()> {
    let placed = place(root, path)?;
    placed.dir.create_dir(&placed.name)
}

/// Renames `name` in `dir` away to a private name and deletes it there. Returns whether
/// there was anything to remove.
fn discard(dir: &Dir, name: &str, worker: u64) -> io::Result<bool> {
    let trash = private_name(worker, "trash");
    match dir.rename(name, dir, &trash) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    }
    let removed = match dir.symlink_metadata(&trash) {
        Ok(meta) if meta.is_dir() => dir.remove_dir_all(&trash),
        _ => dir.remove_file(&trash),
    };
    if let Err(e) = removed {
        // Out of sight already; the parent's cleanup of this worker gets the rest.
        tracing::warn!(error = %e, "cannot finish deleting a removed resource");
    }
    Ok(true)
}

/// `DELETE`: the resource (a whole collection at once) and its dead properties.
pub fn delete(root: &Dir, path: &DavPath, worker: u64) -> io::Result<()> {
    let placed = place(root, path)?;
    if !discard(&placed.dir, &placed.name, worker)? {
        return Err(io::Error::from(io::ErrorKind::NotFound));
    }
    props::remove(root, path)
}

/// Whether a destination existed (and was replaced).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Created,
    Replaced,
}

/// `COPY`: `from` to `to` (whose parent exists), the collection's members too when
/// `infinity`. The caller has checked `Overwrite`; an existing `to` is replaced.
pub fn copy(
    root: &Dir,
    from: &DavPath,
    to: &DavPath,
    infinity: bool,
    worker: u64,
) -> io::Result<Outcome> {
    let source = place(root, from)?;
    let dest = place(root, to)?;
    let staging = private_name(worker, "copy");
    let built = copy_entry(
        &source.dir,
        source.name.as_ref(),
        &dest.dir,
        staging.as_ref(),
        infinity,
        0,
    );
    if let Err(e) = built {
        let _ = discard(&dest.dir, &staging, worker);
        return Err(e);
    }
    let replaced = discard(&dest.dir, &dest.name, worker)?;
    dest.dir.rename(&staging, &dest.dir, &dest.name)?;
    props::copy(root, from, to, worker)?;
    Ok(if replaced {
        Outcome::Replaced
    } else {
        Outcome::Created
    })
}

/// `MOVE`: one rename (a copy and a delete across file systems); an existing `to` is
/// replaced. Dead properties go along.
pub fn rename(root: &Dir, from: &DavPath, to: &DavPath, worker: u64) -> io::Result<Outcome> {
    let source = place(root, from)?;
    let dest = place(root, to)?;
    // The source must exist before anything at the destination is given up.
    source.dir.symlink_metadata(&source.name)?;
    let replaced = discard(&dest.dir, &dest.name, worker)?;
    match source.dir.rename(&source.name, &dest.dir, &dest.name) {
        Ok(()) => props::rename(root, from, to)?,
        Err(e) if e.raw_os_error() == Some(Errno::XDEV.raw_os_error()) => {
            copy(root, from, to, true, worker)?;
            discard(&source.dir, &source.name, worker)?;
            props::remove(root, from)?;
        }
        Err(e) => return Err(e),
    }
    Ok(if replaced {
        Outcome::Replaced
    } else {
        Outcome::Created
    })
}

fn copy_entry(
    from_dir: &Dir,
    from: &OsStr,
    to_dir: &Dir,
    to: &OsStr,
    infinity: bool,
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
    if !infinity {
        return Ok(());
    }
    let sub_from = from_dir.open_dir(from)?;
    let sub_to = to_dir.open_dir(to)?;
    for entry in sub_from.entries()? {
        let name = entry?.file_name();
        // Temporaries and partial uploads belong to their writers; property sidecars
        // describe members and go with them. A name that is not UTF-8 is copied too.
        if let Some(text) = name.to_str()
            && is_private(text)
            && !props::is_sidecar(text)
        {
            continue;
        }
        copy_entry(&sub_from, &name, &sub_to, &name, true, depth + 1)?;
    }
    Ok(())
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
    fn copy_move_delete_leave_nothing_private_behind() {
        let tmp = std::env::temp_dir().join(format!("servery-tree-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(tmp.join("a/b")).expect("mkdir");
        std::fs::write(tmp.join("a/b/f"), b"one").expect("write");
        std::fs::write(tmp.join("a/g"), b"two").expect("write");
        std::fs::write(tmp.join("a/.servery-tmp-9-x"), b"in flight").expect("write");
        let root = Dir::open_ambient_dir(&tmp, cap_std::ambient_authority()).expect("root");
        props::save(
            &root,
            &p("/a/g"),
            &[props::Stored {
                namespace: "urn:x".into(),
                local: "p".into(),
                xml: "v".into(),
                lang: None,
            }],
            1,
        )
        .expect("props");

        assert_eq!(
            copy(&root, &p("/a"), &p("/c"), true, 1).expect("copy"),
            Outcome::Created
        );
        assert_eq!(std::fs::read(tmp.join("c/b/f")).expect("copied"), b"one");
        assert_eq!(names(&tmp.join("c")), [".servery-props.g", "b", "g"]);
        assert_eq!(
            copy(&root, &p("/a"), &p("/c"), false, 1).expect("copy"),
            Outcome::Replaced
        );
        assert!(
            names(&tmp.join("c")).is_empty(),
            "depth 0 copies the collection alone"
        );

        assert_eq!(
            rename(&root, &p("/a/g"), &p("/c/h"), 1).expect("move"),
            Outcome::Created
        );
        assert_eq!(names(&tmp.join("c")), [".servery-props.h", "h"]);
        assert!(rename(&root, &p("/nope"), &p("/c/h"), 1).is_err());
        assert!(tmp.join("c/h").exists(), "a failed move gives nothing up");

        delete(&root, &p("/a"), 1).expect("delete");
        assert!(delete(&root, &p("/a"), 1).is_err());
        make_collection(&root, &p("/m")).expect("mkcol");
        assert!(make_collection(&root, &p("/m")).is_err());
        assert_eq!(names(&tmp), ["c", "m"]);
        let _ = std::fs::remove_dir_all(&tmp);
    }
}
