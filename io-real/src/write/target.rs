//! Step 1: the target's parent directory, resolved beneath the root, and the lease key.
//!
//! The directory is opened through the root's cap-std handle, so no `..`, absolute
//! symlink or symlink that leaves the root can take us outside (cap-std fails such a walk
//! with `PermissionDenied`). Symlinked directories that stay inside the root are allowed,
//! like for reads. The target's own final component is never opened or followed: the
//! upload is created under a private name with `O_EXCL` and renamed onto the basename,
//! and `rename` replaces a symlink rather than writing through it.
//!
//! The lease key is the directory's (device, inode) plus the basename: stable before the
//! target exists, and the same for every path (through a symlinked directory or not) that
//! reaches the same directory, which is what makes two workers agree on it.

use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cap_std::fs::Dir;
use servery_core::proto::TargetKey;

use super::{WriteError, is_private};
use crate::http::conditional::{Validators, write_allowed};
use servery_core::precondition::Conditions;

/// The longest basename accepted (the usual `NAME_MAX`).
pub const MAX_NAME: usize = 255;

/// A resolved write target.
#[derive(Debug, Clone)]
pub struct Target {
    /// The parent directory, held open: everything below happens relative to it.
    pub dir: Arc<Dir>,
    /// The parent directory's path relative to the root (`.` for the root), to check
    /// again before publishing that the path still leads to `dir`.
    pub rel_dir: PathBuf,
    /// The basename.
    pub name: String,
    /// The broker's key for this target.
    pub key: TargetKey,
}

/// Whether `name` may be written: one path component, not `.`/`..`, no separator or NUL,
/// not one of servery's private names, and not a dot-file unless those are served.
pub fn check_name(name: &str, show_hidden: bool) -> Result<(), WriteError> {
    if name.is_empty()
        || name == "."
        || name == ".."
        || name.len() > MAX_NAME
        || name.contains(['/', '\\', '\0'])
    {
        return Err(WriteError::BadRequest("invalid file name"));
    }
    if is_private(name) || (!show_hidden && name.starts_with('.')) {
        return Err(WriteError::Forbidden);
    }
    Ok(())
}

/// The (device, inode) of an open directory.
pub fn identity(dir: &impl AsFd) -> io::Result<(u64, u64)> {
    let st = rustix::fs::fstat(dir)?;
    Ok((st.st_dev, st.st_ino))
}

/// Opens `rel_dir` beneath `root` (the root itself for `.`).
pub fn open_dir(root: &Dir, rel_dir: &Path) -> Result<Dir, WriteError> {
    let dir = if rel_dir.as_os_str().is_empty() || rel_dir == Path::new(".") {
        root.try_clone()
    } else {
        root.open_dir(rel_dir)
    };
    dir.map_err(WriteError::from_resolve)
}

/// Resolves `name` in `rel_dir` beneath `root`. Blocking.
pub fn resolve(root: &Dir, rel_dir: &Path, name: &str) -> Result<Target, WriteError> {
    let dir = open_dir(root, rel_dir)?;
    let (dir_device, dir_inode) = identity(&dir)?;
    Ok(Target {
        dir: Arc::new(dir),
        rel_dir: rel_dir.to_path_buf(),
        name: name.to_owned(),
        key: TargetKey {
            dir_device,
            dir_inode,
            name: name.to_owned(),
        },
    })
}

/// What a writer found at its target under the lease.
#[derive(Debug, Clone)]
pub struct Looked {
    pub existing: Existing,
    /// Present when the request has preconditions and the target is not a directory
    /// (a write onto a directory is refused whatever they say): the inner `None` means
    /// nothing is there.
    validators: Option<Option<Validators>>,
}

impl Looked {
    /// What is there, once the request's preconditions hold for it (the core's ladder:
    /// [`write_allowed`]); [`WriteError::ConditionFalse`] otherwise.
    pub fn judge(self, conditions: &Conditions<'_>) -> Result<Existing, WriteError> {
        match &self.validators {
            Some(current) if !write_allowed(conditions, current.as_ref()) => {
                Err(WriteError::ConditionFalse)
            }
            _ => Ok(self.existing),
        }
    }
}

/// What is at the target now, looked at without following a symlink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    Nothing,
    /// A file, or a symlink (which an overwrite replaces, never writes through).
    File,
    Directory,
}

impl Target {
    /// What the basename names right now. Blocking.
    pub fn existing(&self) -> Result<Existing, WriteError> {
        match self.dir.symlink_metadata(&self.name) {
            Ok(meta) if meta.is_dir() => Ok(Existing::Directory),
            Ok(_) => Ok(Existing::File),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Existing::Nothing),
            Err(e) => Err(WriteError::Io(e)),
        }
    }

    /// The validators of what the basename names now, following a symlink as GET does
    /// (`None`: nothing there). Blocking.
    pub fn validators(&self) -> Result<Option<Validators>, WriteError> {
        match self.dir.metadata(&self.name) {
            Ok(meta) => Ok(Some(Validators::of(&meta))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(WriteError::Io(e)),
        }
    }

    /// What the basename names now and, when the request is `conditional`, its
    /// validators, for [`Looked::judge`]. Called under the target's lease. Blocking.
    pub fn look(&self, conditional: bool) -> Result<Looked, WriteError> {
        let existing = self.existing()?;
        let validators = if conditional && existing != Existing::Directory {
            Some(self.validators()?)
        } else {
            None
        };
        Ok(Looked {
            existing,
            validators,
        })
    }

    /// Step 4's containment check: the path still leads, beneath the root, to the very
    /// directory we hold. A directory moved or swapped for a symlink while the body was
    /// streaming fails this, and nothing is published. Blocking.
    pub fn revalidate(&self, root: &Dir) -> Result<(), WriteError> {
        let again = open_dir(root, &self.rel_dir).map_err(|_| WriteError::Moved)?;
        let now = identity(&again)?;
        let held = identity(&*self.dir)?;
        if now != (self.key.dir_device, self.key.dir_inode) || held != now {
            return Err(WriteError::Moved);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_may_not_be_written() {
        for bad in ["", ".", "..", "a/b", "a\\b", "a\0b"] {
            assert!(
                matches!(check_name(bad, true), Err(WriteError::BadRequest(_))),
                "{bad:?}"
            );
        }
        assert!(matches!(
            check_name(&"x".repeat(256), true),
            Err(WriteError::BadRequest(_))
        ));
        assert!(matches!(
            check_name(".servery-tmp-1-x", true),
            Err(WriteError::Forbidden)
        ));
        assert!(matches!(
            check_name(".env", false),
            Err(WriteError::Forbidden)
        ));
        assert!(check_name(".env", true).is_ok());
        assert!(check_name("report final (2).pdf", false).is_ok());
    }
}
