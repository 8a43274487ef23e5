//! Step 4: make the written file the target, atomically, inside the directory we hold.

use std::fs::File;
use std::io;

use cap_std::fs::Dir;
use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags};
use rustix::io::Errno;

use super::WriteError;
use super::target::{Existing, Target};

/// Mode of a published file: readable by everyone, like a file copied into a served
/// directory (the temporary file was 0600 while private).
const PUBLISHED_MODE: u32 = 0o644;

/// What publishing did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    Created,
    Replaced,
}

/// A file a write published: what publishing did, and the file's metadata read from the
/// written file once in place (the rename changes neither its inode nor its times, so
/// validators made from it are those of the stored bytes; `None` when it could not be read).
#[derive(Debug)]
pub struct Stored {
    pub published: Published,
    pub meta: Option<std::fs::Metadata>,
}

/// Makes `from` (a private name in `target.dir`) the target: checks containment again,
/// then renames within the held directory, with `RENAME_NOREPLACE` unless `overwrite`, so
/// a file that appeared meanwhile (created by anything, not only servery) is never
/// clobbered. The flows make the file's bytes durable before (`SyncTemp`, a chunk's
/// `Sync`) and the rename durable after ([`sync_directory`]), and decide what a failure of
/// either means. Blocking.
pub fn publish(
    root: &Dir,
    target: &Target,
    file: &File,
    from: &str,
    overwrite: bool,
) -> Result<Published, WriteError> {
    rustix::fs::fchmod(file, Mode::from_raw_mode(PUBLISHED_MODE)).map_err(io::Error::from)?;
    target.revalidate(root)?;
    let existed = match target.existing()? {
        Existing::Directory => return Err(WriteError::IsDirectory),
        Existing::File => true,
        Existing::Nothing => false,
    };
    let dir = &*target.dir;
    if overwrite {
        rustix::fs::renameat(dir, from, dir, &target.name).map_err(rename_error)?;
    } else {
        no_replace(dir, from, &target.name)?;
    }
    Ok(if existed {
        Published::Replaced
    } else {
        Published::Created
    })
}

fn rename_error(e: Errno) -> WriteError {
    match e {
        Errno::EXIST | Errno::NOTEMPTY => WriteError::Exists,
        Errno::ISDIR => WriteError::IsDirectory,
        other => WriteError::Io(io::Error::from(other)),
    }
}

/// `rename` that refuses to replace: `renameat2(RENAME_NOREPLACE)`, or `link` + `unlink`
/// where the file system does not support the flag (`link` fails on an existing name
/// just as atomically).
fn no_replace(dir: &Dir, from: &str, to: &str) -> Result<(), WriteError> {
    match rustix::fs::renameat_with(dir, from, dir, to, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(()),
        Err(Errno::INVAL | Errno::NOSYS) => {
            rustix::fs::linkat(dir, from, dir, to, AtFlags::empty()).map_err(rename_error)?;
            rustix::fs::unlinkat(dir, from, AtFlags::empty()).map_err(rename_error)?;
            Ok(())
        }
        Err(e) => Err(rename_error(e)),
    }
}

/// fsync of a directory, which makes a rename in it durable. The held handle is path-only
/// (cap-std opens directories with `O_PATH`), which fsync refuses (EBADF): sync a readable
/// descriptor of the same directory. Blocking.
pub fn sync_directory(dir: &Dir) -> io::Result<()> {
    let readable = rustix::fs::openat(
        dir,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    rustix::fs::fsync(&readable)?;
    Ok(())
}
