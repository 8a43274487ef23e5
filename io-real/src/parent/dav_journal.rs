//! The WebDAV lock journal (`--state-dir DIR`): `DIR/dav-locks.json`, every live lock with
//! the wall-clock time it expires, replaced atomically (temporary file, fsync, rename,
//! fsync of the directory) whenever the parent's lock table changes and before the answer
//! that changed it is sent. A parent started again, even after `kill -9` of the last one,
//! gives the journal back to the core, and every lock not yet expired holds again.
//!
//! Wall-clock time, because the monotonic clock starts anew with every process. A clock
//! stepped between the two parents shortens or lengthens the locks by the step; a lock is
//! never kept past the expiry the journal names.

use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use servery_core::proto::{DavDepth, DavLockInfo};
use servery_core::{Generation, LeaseId};

const FILE: &str = "dav-locks.json";
const VERSION: u32 = 1;

/// `O_NOFOLLOW`: journal files are never opened through a symbolic link.
const NO_FOLLOW: i32 = rustix::fs::OFlags::NOFOLLOW.bits() as i32;

/// A journal larger than this is not read (the lock table's own bounds keep a real one
/// far below it).
const MAX_JOURNAL: u64 = 64 * 1024 * 1024;

#[derive(Debug, Serialize, Deserialize)]
struct Stored {
    version: u32,
    locks: Vec<StoredLock>,
}

#[derive(Debug, Serialize, Deserialize)]
struct StoredLock {
    /// The token's 128 bits, in hexadecimal.
    token: String,
    resource: String,
    depth_infinity: bool,
    owner: String,
    exclusive: bool,
    expires_unix_ms: u64,
}

/// The journal's place, checked and ready. Which locks it holds, and what a failed write
/// means for them, is the core's to know (`servery_core::parent::JournalWrite`).
#[derive(Debug, Clone)]
pub(super) struct Journal {
    dir: PathBuf,
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Journal {
    /// Checks (or makes, mode 0700) the state directory: a directory servery can write,
    /// not inside the served root (the journal would be served). Returns the journal and
    /// the locks it holds. Every failure is a configuration error naming why.
    pub(super) fn open(dir: &Path, root: &Path) -> Result<(Journal, Loaded), String> {
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        let dir = dir
            .canonicalize()
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        let meta = std::fs::metadata(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        if !meta.is_dir() {
            return Err(format!("{} is not a directory", dir.display()));
        }
        let facts = servery_core::state_dir::DirFacts {
            mode: meta.mode() & 0o7777,
            owner: meta.uid(),
        };
        servery_core::state_dir::judge(facts, rustix::process::geteuid().as_raw())
            .map_err(|refusal| format!("{} {refusal}", dir.display()))?;
        if dir.starts_with(root) {
            return Err(format!(
                "{} is inside the served directory, where the lock journal would be served",
                dir.display()
            ));
        }
        let journal = Journal { dir };
        let loaded = journal.load()?;
        // Prove now that it can be written, rather than at the first LOCK: write back what
        // was read (the same locks, the same expiries).
        journal
            .write_stored(&loaded.stored)
            .map_err(|e| format!("cannot write in {}: {e}", journal.dir.display()))?;
        Ok((journal, loaded))
    }

    pub(super) fn path(&self) -> PathBuf {
        self.dir.join(FILE)
    }

    fn load(&self) -> Result<Loaded, String> {
        let path = self.path();
        // Not through a symbolic link: what is read is the file in the directory itself.
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(NO_FOLLOW)
            .open(&path);
        let mut file = match opened {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(Loaded::default());
            }
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
                return Err(format!(
                    "{} is a symbolic link; servery follows none in the state directory",
                    path.display()
                ));
            }
            Err(e) => return Err(format!("{}: {e}", path.display())),
            Ok(file) => file,
        };
        let meta = file
            .metadata()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if !meta.is_file() {
            return Err(format!("{} is not a regular file", path.display()));
        }
        if meta.len() > MAX_JOURNAL {
            return Err(format!(
                "{} is larger than {MAX_JOURNAL} bytes",
                path.display()
            ));
        }
        let mut text = Vec::new();
        file.read_to_end(&mut text)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let stored: Stored = serde_json::from_slice(&text).map_err(|e| {
            format!(
                "{} is not a lock journal ({e}); remove it to start without its locks",
                path.display()
            )
        })?;
        if stored.version != VERSION {
            return Err(format!(
                "{} has version {}, this servery reads {VERSION}",
                path.display(),
                stored.version
            ));
        }
        let now = unix_ms(SystemTime::now());
        let mut locks = Vec::new();
        for l in &stored.locks {
            let token = u128::from_str_radix(&l.token, 16)
                .map_err(|_| format!("{}: a lock token is not hexadecimal", path.display()))?;
            if l.expires_unix_ms <= now {
                continue;
            }
            locks.push(DavLockInfo {
                token: LeaseId(token),
                resource: l.resource.clone(),
                depth: if l.depth_infinity {
                    DavDepth::Infinity
                } else {
                    DavDepth::Zero
                },
                owner: l.owner.clone(),
                exclusive: l.exclusive,
                expires_in_ms: l.expires_unix_ms - now,
                generation: Generation(0),
            });
        }
        Ok(Loaded {
            locks,
            read_at: std::time::Instant::now(),
            stored,
        })
    }

    /// Replaces the journal with `locks` (their time left counts from now).
    pub(super) fn store(&self, locks: &[DavLockInfo]) -> io::Result<()> {
        let now = unix_ms(SystemTime::now());
        let stored = Stored {
            version: VERSION,
            locks: locks
                .iter()
                .map(|l| StoredLock {
                    token: format!("{:032x}", l.token.0),
                    resource: l.resource.clone(),
                    depth_infinity: l.depth == DavDepth::Infinity,
                    owner: l.owner.clone(),
                    exclusive: l.exclusive,
                    expires_unix_ms: now.saturating_add(l.expires_in_ms),
                })
                .collect(),
        };
        self.write_stored(&stored)
    }

    fn write_stored(&self, stored: &Stored) -> io::Result<()> {
        let text = serde_json::to_vec(stored).map_err(io::Error::other)?;
        let temp = self.dir.join(format!(".{FILE}.{}", std::process::id()));
        // A fresh file of our own: whatever has the name (a leftover, a planted link) is
        // unlinked first, not followed, and O_EXCL with O_NOFOLLOW makes the create fail
        // rather than write through anything put there in between. The rename replaces a
        // link at the journal's name with the file itself.
        match std::fs::remove_file(&temp) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(NO_FOLLOW)
            .mode(0o600)
            .open(&temp)?;
        let written = file
            .write_all(&text)
            .and_then(|()| file.sync_all())
            .and_then(|()| std::fs::rename(&temp, self.path()));
        if let Err(e) = written {
            // A write the disk could not hold leaves nothing behind: its pages would
            // stand between the next write (or the next start's) and the room it needs.
            let _ = std::fs::remove_file(&temp);
            return Err(e);
        }
        std::fs::File::open(&self.dir)?.sync_all()
    }
}

/// What a journal held when servery started.
#[derive(Debug)]
pub(super) struct Loaded {
    locks: Vec<DavLockInfo>,
    read_at: std::time::Instant,
    stored: Stored,
}

impl Default for Loaded {
    fn default() -> Self {
        Loaded {
            locks: Vec::new(),
            read_at: std::time::Instant::now(),
            stored: Stored {
                version: VERSION,
                locks: Vec::new(),
            },
        }
    }
}

impl Loaded {
    /// The live locks, their time left counted from now (less the time since the read).
    pub(super) fn take(self) -> Vec<DavLockInfo> {
        let since = u64::try_from(self.read_at.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.locks
            .into_iter()
            .filter_map(|mut l| {
                l.expires_in_ms = l.expires_in_ms.checked_sub(since).filter(|ms| *ms > 0)?;
                Some(l)
            })
            .collect()
    }

    pub(super) fn len(&self) -> usize {
        self.locks.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn lock(token: u128, resource: &str, expires_in_ms: u64) -> DavLockInfo {
        DavLockInfo {
            token: LeaseId(token),
            resource: resource.into(),
            depth: DavDepth::Infinity,
            owner: "<D:href xmlns:D=\"DAV:\">me</D:href>".into(),
            exclusive: true,
            expires_in_ms,
            generation: Generation(3),
        }
    }

    #[test]
    fn a_journal_round_trips_its_live_locks_and_refuses_garbage_and_the_served_root() {
        let base = std::env::temp_dir().join(format!("servery-journal-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let root = base.join("root");
        std::fs::create_dir_all(&root).expect("root");
        let state = base.join("state");
        let (journal, loaded) = Journal::open(&state, &root).expect("fresh");
        assert_eq!(loaded.len(), 0);
        journal
            .store(&[lock(u128::MAX, "/a b", 60_000), lock(7, "/c", 1)])
            .expect("store");
        std::thread::sleep(Duration::from_millis(5));
        let (_, loaded) = Journal::open(&state, &root).expect("again");
        let locks = loaded.take();
        assert_eq!(locks.len(), 1, "the lock that expired is gone");
        assert_eq!(locks[0].token, LeaseId(u128::MAX));
        assert_eq!(locks[0].resource, "/a b");
        assert_eq!(locks[0].owner, lock(0, "", 0).owner);
        assert!(locks[0].expires_in_ms <= 60_000 && locks[0].expires_in_ms > 50_000);

        std::fs::write(journal.path(), b"{not json").expect("corrupt");
        let err = Journal::open(&state, &root).expect_err("garbage");
        assert!(err.contains("not a lock journal"), "{err}");
        let err = Journal::open(&root.join("state"), &root).expect_err("inside root");
        assert!(err.contains("inside the served directory"), "{err}");
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn planted_links_are_not_followed_and_an_open_directory_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let base = std::env::temp_dir().join(format!("servery-journal-ln-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let root = base.join("root");
        std::fs::create_dir_all(&root).expect("root");
        let victim = base.join("victim");
        std::fs::write(&victim, b"precious").expect("victim");
        let state = base.join("state");
        let (journal, _) = Journal::open(&state, &root).expect("fresh");

        // A link at the temporary file's name: the store replaces the link, not the victim.
        let temp = state.join(format!(".{FILE}.{}", std::process::id()));
        std::os::unix::fs::symlink(&victim, &temp).expect("plant at the temporary name");
        journal.store(&[]).expect("store");
        assert_eq!(std::fs::read(&victim).expect("victim"), b"precious");

        // A link at the journal's name: the start refuses it, and the victim is untouched.
        std::fs::remove_file(journal.path()).expect("remove the journal");
        std::os::unix::fs::symlink(&victim, journal.path()).expect("plant at the journal");
        let err = Journal::open(&state, &root).expect_err("a planted journal link");
        assert!(err.contains("symbolic link"), "{err}");
        assert_eq!(std::fs::read(&victim).expect("victim"), b"precious");

        // A directory others can write is refused before anything in it is read.
        std::fs::remove_file(journal.path()).expect("remove the link");
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let err = Journal::open(&state, &root).expect_err("world-writable");
        assert!(err.contains("writable by other users"), "{err}");
        let _ = std::fs::remove_dir_all(&base);
    }
}
