//! The served directory: checked once at start (it must be a directory servery's user can
//! list and open), then followed by path on every request, so a deploy that replaces it —
//! a `current -> releases/N` symbolic link flipped, or the directory deleted and copied
//! again — is served to the requests after it, as nginx and Caddy do (decision 0058).
//!
//! Every path of a request is still resolved beneath one directory handle (`cap_std`,
//! `openat2(RESOLVE_BENEATH)`): what changes is which handle. A request `statx`es the
//! root's path (following links) and compares the directory's identity — device, inode
//! and birth time — with the handle's; a difference opens the path again, and the new
//! handle's own identity is what later requests compare with. One look stands for
//! [`LOOK_INTERVAL`]: a request within that long of the worker's last look uses its
//! answer, so a busy worker pays one `statx` a millisecond instead of one a request
//! (measured: docs/benchmarks/http.md, "The served root followed per request").

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use rustix::fs::{AtFlags, CWD, Statx, StatxFlags};

/// Why the served directory cannot be served: a configuration error (exit 2), reported
/// before anything is bound.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RootProblem {
    #[error("{} does not exist", .0.display())]
    Missing(PathBuf),
    #[error("{} is not a directory", .0.display())]
    NotADirectory(PathBuf),
    #[error(
        "{} cannot be {what} by uid {uid}, the user servery runs as ({source}): grant that user read and search permission (r-x) on it",
        .path.display()
    )]
    Unreadable {
        path: PathBuf,
        what: &'static str,
        uid: u32,
        #[source]
        source: io::Error,
    },
    #[error("{}: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Checks that `path` is a directory this process can list (read) and open files in
/// (search), trying exactly that: a directory that would answer 403 to every request is
/// refused at start instead. Root passes on a directory of mode 000 (it may read it);
/// an unprivileged user does not.
pub fn check(path: &Path) -> Result<(), RootProblem> {
    let meta = std::fs::metadata(path).map_err(|source| match source.kind() {
        io::ErrorKind::NotFound => RootProblem::Missing(path.to_owned()),
        _ => RootProblem::Io {
            path: path.to_owned(),
            source,
        },
    })?;
    if !meta.is_dir() {
        return Err(RootProblem::NotADirectory(path.to_owned()));
    }
    let unreadable = |what, source| RootProblem::Unreadable {
        path: path.to_owned(),
        what,
        uid: rustix::process::geteuid().as_raw(),
        source,
    };
    let mut entries = std::fs::read_dir(path).map_err(|e| unreadable("listed", e))?;
    if let Some(Err(e)) = entries.next() {
        return Err(unreadable("listed", e));
    }
    // Search permission, judged with the effective ids and capabilities the requests
    // will have.
    rustix::fs::accessat(CWD, path, rustix::fs::Access::EXEC_OK, AtFlags::EACCESS)
        .map_err(|e| unreadable("opened (searched)", e.into()))?;
    Ok(())
}

/// Which directory a handle or a path names: a directory deleted and made again may get
/// the same inode number back, but not the same birth time (where the file system keeps
/// one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    dev: (u32, u32),
    ino: u64,
    birth: Option<(i64, u32)>,
}

impl Identity {
    fn of(stat: &Statx) -> Identity {
        let birth = (stat.stx_mask & StatxFlags::BTIME.bits() != 0)
            .then_some((stat.stx_btime.tv_sec, stat.stx_btime.tv_nsec));
        Identity {
            dev: (stat.stx_dev_major, stat.stx_dev_minor),
            ino: stat.stx_ino,
            birth,
        }
    }
}

const WANTED: StatxFlags = StatxFlags::INO.union(StatxFlags::BTIME);

/// One open root and which directory it is.
#[derive(Debug)]
struct Opened {
    dir: Arc<Dir>,
    identity: Identity,
}

impl Opened {
    fn open(path: &Path) -> io::Result<Opened> {
        let dir = Dir::open_ambient_dir(path, ambient_authority())?;
        // The handle's own identity, not the path's: the path may change between the
        // two, and the handle is what requests will use.
        let stat = rustix::fs::statx(&dir, "", AtFlags::EMPTY_PATH, WANTED)?;
        Ok(Opened {
            dir: Arc::new(dir),
            identity: Identity::of(&stat),
        })
    }
}

/// How long one look at the root's path stands for: a request that arrives this long
/// after a swap is served from the new directory.
pub const LOOK_INTERVAL: Duration = Duration::from_millis(1);

/// The served root of one worker, as its path names it now.
#[derive(Debug)]
pub struct LiveRoot {
    path: PathBuf,
    current: RwLock<Arc<Opened>>,
    /// The path names nothing (or nothing we can open) now: said once until it does again.
    missing: AtomicBool,
    /// Microseconds after `epoch` before which the last look still stands.
    next_look_us: AtomicU64,
    epoch: Instant,
}

impl LiveRoot {
    /// Opens `path`, the only use of ambient authority: everything served is reached
    /// through a handle this makes.
    pub fn open(path: &Path) -> io::Result<LiveRoot> {
        Ok(LiveRoot {
            path: path.to_owned(),
            current: RwLock::new(Arc::new(Opened::open(path)?)),
            missing: AtomicBool::new(false),
            next_look_us: AtomicU64::new(0),
            epoch: Instant::now(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory the path names now (as of at most [`LOOK_INTERVAL`] ago), opened
    /// again if it is another than the one held. While the path names nothing (between a
    /// delete and the copy that replaces it) the handle held is kept: a deleted directory
    /// answers "not found".
    pub fn dir(&self) -> Arc<Dir> {
        let held = self.held();
        let now_us = u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX);
        if now_us < self.next_look_us.load(Ordering::Relaxed) {
            return Arc::clone(&held.dir);
        }
        let interval_us = u64::try_from(LOOK_INTERVAL.as_micros()).unwrap_or(u64::MAX);
        self.next_look_us
            .store(now_us.saturating_add(interval_us), Ordering::Relaxed);
        match rustix::fs::statx(CWD, &self.path, AtFlags::empty(), WANTED) {
            Ok(stat) if Identity::of(&stat) == held.identity => {
                self.missing.store(false, Ordering::Relaxed);
                Arc::clone(&held.dir)
            }
            Ok(_) => self.reopen(held),
            Err(e) => {
                self.say_missing(&e.into());
                Arc::clone(&held.dir)
            }
        }
    }

    fn held(&self) -> Arc<Opened> {
        // A panic while the lock is held leaves the Arc whole.
        Arc::clone(&self.current.read().unwrap_or_else(|p| p.into_inner()))
    }

    fn reopen(&self, held: Arc<Opened>) -> Arc<Dir> {
        let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
        if !Arc::ptr_eq(&current, &held) {
            // Another request of this worker opened it meanwhile.
            return Arc::clone(&current.dir);
        }
        match Opened::open(&self.path) {
            Ok(opened) => {
                self.missing.store(false, Ordering::Relaxed);
                tracing::info!(
                    root = %self.path.display(),
                    "the served directory was replaced (a link flipped or the directory made again): serving the new one from this request on"
                );
                *current = Arc::new(opened);
                Arc::clone(&current.dir)
            }
            Err(e) => {
                drop(current);
                self.say_missing(&e);
                Arc::clone(&held.dir)
            }
        }
    }

    fn say_missing(&self, error: &io::Error) {
        if !self.missing.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                root = %self.path.display(),
                %error,
                "the served directory cannot be opened by its path: serving the one held until it can"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("servery-served-root-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
        dir
    }

    /// What `name` holds beneath the root, once a look made now stands (past
    /// [`LOOK_INTERVAL`] since the last).
    fn read(root: &LiveRoot, name: &str) -> Option<String> {
        root.next_look_us.store(0, Ordering::Relaxed);
        root.dir().read_to_string(name).ok()
    }

    #[test]
    fn a_flipped_link_and_a_directory_made_again_are_followed() {
        let base = scratch("swap");
        for (release, text) in [("1", "one"), ("2", "two")] {
            std::fs::create_dir(base.join(release)).expect("mkdir");
            std::fs::write(base.join(release).join("v"), text).expect("write");
        }
        std::os::unix::fs::symlink("1", base.join("current")).expect("link");
        let root = LiveRoot::open(&base.join("current")).expect("open");
        assert_eq!(read(&root, "v").as_deref(), Some("one"));
        // Flipped atomically, as deploy tools do: a new link renamed over the old.
        std::os::unix::fs::symlink("2", base.join("next")).expect("link");
        std::fs::rename(base.join("next"), base.join("current")).expect("flip");
        assert_eq!(read(&root, "v").as_deref(), Some("two"));

        // Deleted: the handle held answers (nothing); made again: the new one.
        let plain = base.join("plain");
        std::fs::create_dir(&plain).expect("mkdir");
        std::fs::write(plain.join("v"), "old").expect("write");
        let root = LiveRoot::open(&plain).expect("open");
        std::fs::remove_dir_all(&plain).expect("rm");
        assert_eq!(read(&root, "v"), None);
        std::fs::create_dir(&plain).expect("mkdir");
        std::fs::write(plain.join("v"), "new").expect("write");
        assert_eq!(read(&root, "v").as_deref(), Some("new"));
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn one_look_stands_for_the_interval() {
        let base = scratch("interval");
        for release in ["1", "2"] {
            std::fs::create_dir(base.join(release)).expect("mkdir");
            std::fs::write(base.join(release).join("v"), release).expect("write");
        }
        std::os::unix::fs::symlink("1", base.join("current")).expect("link");
        let root = LiveRoot::open(&base.join("current")).expect("open");
        assert_eq!(read(&root, "v").as_deref(), Some("1"));
        std::fs::remove_file(base.join("current")).expect("rm");
        std::os::unix::fs::symlink("2", base.join("current")).expect("link");
        // Within the interval of the look `read` made: its answer stands.
        root.next_look_us.store(u64::MAX, Ordering::Relaxed);
        assert_eq!(root.dir().read_to_string("v").ok().as_deref(), Some("1"));
        assert_eq!(read(&root, "v").as_deref(), Some("2"));
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn the_check_names_a_missing_path_and_a_file() {
        let base = scratch("check");
        assert!(check(&base).is_ok());
        let missing = check(&base.join("nothing")).expect_err("missing");
        assert!(missing.to_string().ends_with("does not exist"), "{missing}");
        std::fs::write(base.join("file"), "x").expect("write");
        let file = check(&base.join("file")).expect_err("a file");
        assert!(file.to_string().ends_with("is not a directory"), "{file}");
        let _ = std::fs::remove_dir_all(&base);
    }
}
