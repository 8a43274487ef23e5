//! What a listing needs of each entry of a folder: its kind, size, time and identity,
//! from one `statx` by its name relative to the opened folder, not following links.
//!
//! The folder's entries are read with rustix's directory stream and each name given to
//! `statx` as the C string the stream holds: reading through cap-std's entries made two
//! copies of every name (its own and a C string for each `stat`) and took a lock per
//! entry, about a tenth of a large listing's instructions.

use std::ffi::{CStr, OsStr};
use std::time::UNIX_EPOCH;

use cap_std::fs::Dir;
use rustix::fs::{AtFlags, FileType, StatxFlags};

use crate::http::file_cache::FileIdentity;

/// An entry as the listing shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Listed {
    pub(super) kind: Kind,
    pub(super) size: u64,
    /// Seconds since the Unix epoch; 0 for a time before it or none known.
    pub(super) mtime: u64,
    pub(super) identity: FileIdentity,
}

/// The kinds a listing tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    File,
    Dir,
    Symlink,
    /// A FIFO, socket or device: never listed.
    Other,
}

/// The entry `name` of the opened folder `dir` (`exact`: the same name as the OS names
/// it, for the fallback), not following a link. `None` when it cannot be read (gone
/// since the folder was read, or not ours to see).
pub(super) fn stat(dir: &Dir, name: &CStr, exact: &OsStr) -> Option<Listed> {
    match rustix::fs::statx(
        dir,
        name,
        AtFlags::SYMLINK_NOFOLLOW,
        StatxFlags::BASIC_STATS,
    ) {
        Ok(stat) => {
            let mtime = if stat.stx_mask & StatxFlags::MTIME.bits() != 0 {
                u64::try_from(stat.stx_mtime.tv_sec).unwrap_or(0)
            } else {
                0
            };
            Some(Listed {
                kind: kind_of(FileType::from_raw_mode(stat.stx_mode.into())),
                size: stat.stx_size,
                mtime,
                identity: FileIdentity::of_statx(&stat),
            })
        }
        // A kernel without `statx` (before Linux 4.11): cap-std's `fstatat`.
        Err(rustix::io::Errno::NOSYS) => dir.symlink_metadata(exact).ok().map(|m| of_metadata(&m)),
        Err(_) => None,
    }
}

/// What cap-std's metadata says of an entry (a link's target, or any entry on a kernel
/// without `statx`).
pub(super) fn of_metadata(meta: &cap_std::fs::Metadata) -> Listed {
    let file_type = meta.file_type();
    let kind = if file_type.is_symlink() {
        Kind::Symlink
    } else if file_type.is_dir() {
        Kind::Dir
    } else if file_type.is_file() {
        Kind::File
    } else {
        Kind::Other
    };
    Listed {
        kind,
        size: meta.len(),
        mtime: meta
            .modified()
            .ok()
            .and_then(|t| t.into_std().duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs()),
        identity: FileIdentity::of_cap_metadata(meta),
    }
}

fn kind_of(file_type: FileType) -> Kind {
    match file_type {
        FileType::RegularFile => Kind::File,
        FileType::Directory => Kind::Dir,
        FileType::Symlink => Kind::Symlink,
        _ => Kind::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cap_std::ambient_authority;

    /// `statx` on the opened folder says what cap-std's metadata says, for a file, a
    /// folder, a link and a FIFO.
    #[test]
    fn statx_says_what_the_metadata_says() {
        let tmp = std::env::temp_dir().join(format!("servery-listed-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(tmp.join("folder")).expect("folder");
        std::fs::write(tmp.join("file"), b"12345").expect("file");
        std::os::unix::fs::symlink("file", tmp.join("link")).expect("link");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            tmp.join("fifo"),
            FileType::Fifo,
            rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
            0,
        )
        .expect("fifo");
        let dir = Dir::open_ambient_dir(&tmp, ambient_authority()).expect("open");
        let kinds = [
            ("file", Kind::File),
            ("folder", Kind::Dir),
            ("link", Kind::Symlink),
            ("fifo", Kind::Other),
        ];
        for (name, kind) in kinds {
            let c_name = std::ffi::CString::new(name).expect("a C string");
            let listed = stat(&dir, &c_name, OsStr::new(name)).expect("stat");
            let meta = dir.symlink_metadata(name).expect("metadata");
            assert_eq!(listed.kind, kind, "{name}");
            assert_eq!(listed, of_metadata(&meta), "{name}");
        }
        let c_gone = std::ffi::CString::new("gone").expect("a C string");
        assert_eq!(stat(&dir, &c_gone, OsStr::new("gone")), None);
        let _ = std::fs::remove_dir_all(&tmp);
    }
}
