//! Resumable uploads: `PUT` with `Content-Range: bytes a-b/total`.
//!
//! The bytes received so far live in a partial file next to the target,
//! `.servery-partial-<hash of the target key>`, so that any worker can find them: a client
//! that was interrupted resumes through whichever worker it reaches, including after the
//! worker that held the upload was killed. Its length is the count of bytes held: every
//! chunk is appended in order under the target lease, so whatever a killed writer left
//! is a prefix of what the client sent. Next to it, `<partial>.meta` records the total
//! length and the broker's partial-reservation ID, written whole with rename.
//!
//! Each chunk runs the same steps as a whole upload: reserve the chunk's bytes, take the
//! target lease (so a chunk and a plain `PUT` to the same target serialize), then take
//! the broker's partial reservation for the target:
//!
//! - **adopt** it (`AdoptPartial`): ours already, or orphaned by a dead worker (0004);
//! - **take it over** when another live worker owns it: that worker is idle on it (we
//!   hold the lease), but the core has no request to hand a partial back between chunks,
//!   so the new writer releases it by the ID recorded in the meta file
//!   (`ReleasePartial` is allowed from any worker) and reserves it again;
//! - **reserve** it again when the broker has forgotten it (its `partial_ttl` passed, or
//!   the parent restarted) but the files are younger than `partial_ttl`.
//!
//! Then the chunk is appended. A chunk that starts past the bytes held is a gap (409 with
//! the `Range` held); one that starts before them has its overlap dropped (a client that
//! resends a whole chunk after an interruption). When the last byte arrives, the partial
//! file is published like a temporary file and the reservation released.
//!
//! The order of these steps, and what each way out keeps or gives back, is the core's
//! [`servery_core::chunk_flow`]; [`super::chunk_run`] performs it. This module holds the
//! files: their names, what they say, and how they are read and written.

use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};
use rustix::fs::{AtFlags, FileType, OFlags};
use serde::{Deserialize, Serialize};
use servery_core::LeaseId;
use servery_core::chunk_flow::{Held as FlowHeld, Recorded};
use servery_core::proto::TargetKey;
use sha2::{Digest, Sha256};

pub use super::chunk_run::{ChunkOutcome, chunk};
use super::target::Target;
use super::{PRIVATE_PREFIX, WriteError, temp};

/// A parsed `Content-Range` of a resumable `PUT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentRange {
    /// `bytes start-end/total`: these bytes (inclusive) of a `total`-byte upload.
    Chunk { start: u64, end: u64, total: u64 },
    /// `bytes */total`: how much is held? (no body)
    Query { total: u64 },
}

impl ContentRange {
    /// Parses `bytes a-b/total` or `bytes */total`; `None` for anything else, including a
    /// chunk outside `0..total` and an unknown total (`*`), which resumption cannot use.
    pub fn parse(value: &str) -> Option<ContentRange> {
        let rest = value.trim().strip_prefix("bytes")?;
        let rest = rest.strip_prefix(' ')?.trim_start();
        let (range, total) = rest.split_once('/')?;
        let total = digits(total)?;
        if range == "*" {
            return Some(ContentRange::Query { total });
        }
        let (start, end) = range.split_once('-')?;
        let (start, end) = (digits(start)?, digits(end)?);
        (start <= end && end < total).then_some(ContentRange::Chunk { start, end, total })
    }

    pub fn total(&self) -> u64 {
        match *self {
            ContentRange::Chunk { total, .. } | ContentRange::Query { total } => total,
        }
    }
}

fn digits(s: &str) -> Option<u64> {
    (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

/// The partial file's and the meta file's names for `key`.
pub fn names(key: &TargetKey) -> (String, String) {
    let mut h = Sha256::new();
    h.update(key.dir_device.to_be_bytes());
    h.update(key.dir_inode.to_be_bytes());
    h.update(key.name.as_bytes());
    let digest = h.finalize();
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    let data = format!("{PRIVATE_PREFIX}partial-{hex}");
    let meta = format!("{data}.meta");
    (data, meta)
}

/// What the meta file records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Meta {
    v: u32,
    total: u64,
    /// The broker's partial-reservation ID, hex.
    grant: String,
    /// The target's basename, for whoever finds the file by hand.
    name: String,
}

impl Meta {
    fn grant(&self) -> Option<LeaseId> {
        u128::from_str_radix(&self.grant, 16).ok().map(LeaseId)
    }
}

/// What is held for a target.
#[derive(Debug, Clone, Default)]
struct Held {
    meta: Option<Meta>,
    /// Bytes in the partial file.
    have: u64,
    /// The partial file exists (a regular file).
    data: bool,
    /// Time since the upload was last touched.
    age: Option<Duration>,
}

fn stat(dir: &Dir, name: &str) -> io::Result<Option<rustix::fs::Stat>> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(rustix::io::Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn age(st: &rustix::fs::Stat) -> Option<Duration> {
    // Whole seconds are plenty for a TTL counted in hours.
    let mtime = SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(st.st_mtime).ok()?);
    Some(SystemTime::now().duration_since(mtime).unwrap_or_default())
}

/// Reads what is held for `key` in `dir`. Blocking.
fn inspect(dir: &Dir, key: &TargetKey) -> io::Result<Held> {
    let (data, meta_name) = names(key);
    let meta = match dir.read_to_string(&meta_name) {
        Ok(text) => serde_json::from_str::<Meta>(&text).ok(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    let mut held = Held {
        meta,
        ..Held::default()
    };
    match stat(dir, &data)? {
        Some(st) if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile => {
            held.data = true;
            held.have = st.st_size as u64;
            held.age = age(&st);
        }
        // Something that is not a plain file under our private name: not ours to trust.
        Some(_) => held.age = Some(Duration::MAX),
        None => {
            if let Some(st) = stat(dir, &meta_name)? {
                held.age = age(&st);
            }
        }
    }
    Ok(held)
}

fn remove(dir: &Dir, name: &str) -> io::Result<()> {
    match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Forgets everything held for `key`. Blocking.
pub(super) fn discard(dir: &Dir, key: &TargetKey) -> io::Result<()> {
    let (data, meta) = names(key);
    remove(dir, &meta)?;
    remove(dir, &data)
}

/// Records `meta` for `key`: written to a private temporary file, then renamed over the
/// old meta, so a reader never sees half of one. Blocking.
fn write_meta(dir: &Arc<Dir>, worker: u64, key: &TargetKey, meta: &Meta) -> io::Result<()> {
    let (_, meta_name) = names(key);
    let (mut guard, mut file) = temp::create(dir, worker)?;
    file.write_all(&serde_json::to_vec(meta).map_err(io::Error::other)?)?;
    file.sync_all()?;
    rustix::fs::renameat(&**dir, guard.name(), &**dir, &meta_name)?;
    guard.disarm();
    Ok(())
}

/// Opens (creating if needed, never through a symlink) the partial file for appending at
/// `at`. Blocking.
pub(super) fn open_data(dir: &Dir, key: &TargetKey, at: u64) -> io::Result<File> {
    let (data, _) = names(key);
    let mut options = OpenOptions::new();
    options
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(OFlags::NOFOLLOW.bits() as i32);
    let mut file = dir.open_with(&data, &options)?.into_std();
    // Bytes past `at` could only come from a writer killed between its write and our
    // look; we report and resume from `at`, so they must go.
    file.set_len(at)?;
    file.seek(SeekFrom::Start(at))?;
    Ok(file)
}

/// Bytes held for the resumable upload of `target` whose total is `total` (0 if none, if
/// it is stale, or if it is for another total). Blocking; asks nothing of the broker.
pub fn held(target: &Target, total: u64, ttl: Duration) -> Result<u64, WriteError> {
    let held = inspect(&target.dir, &target.key)?;
    let fresh = held.age.is_some_and(|a| a <= ttl);
    let same = held.meta.as_ref().is_some_and(|m| m.total == total);
    Ok(if fresh && same { held.have } else { 0 })
}

/// What is held for `key`, as the chunk flow sees it: `expired` when untouched for
/// longer than `ttl` (or not a plain file). Blocking.
pub(super) fn look(dir: &Dir, key: &TargetKey, ttl: Duration) -> io::Result<FlowHeld> {
    let held = inspect(dir, key)?;
    Ok(FlowHeld {
        meta: held.meta.as_ref().map(|m| Recorded {
            total: m.total,
            grant: m.grant(),
        }),
        data: held.data,
        have: held.have,
        expired: held.age.is_some_and(|a| a > ttl),
    })
}

/// Records `grant` as the partial reservation of the `total`-byte upload to `target`.
/// Blocking.
pub(super) fn record(target: &Target, worker: u64, total: u64, grant: LeaseId) -> io::Result<()> {
    let meta = Meta {
        v: 1,
        total,
        grant: format!("{:x}", grant.0),
        name: target.name.clone(),
    };
    write_meta(&target.dir, worker, &target.key, &meta)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_ranges() {
        assert_eq!(
            ContentRange::parse("bytes 0-99/1000"),
            Some(ContentRange::Chunk {
                start: 0,
                end: 99,
                total: 1000
            })
        );
        assert_eq!(
            ContentRange::parse("bytes */1000"),
            Some(ContentRange::Query { total: 1000 })
        );
        for bad in [
            "bytes 0-99/*",
            "bytes 99-0/1000",
            "bytes 0-1000/1000",
            "bytes -5/10",
            "bytes 0-+1/10",
            "items 0-1/2",
            "bytes=0-1/2",
            "bytes 0-1/",
            "",
        ] {
            assert_eq!(ContentRange::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn names_are_private_and_keyed() {
        let key = |name: &str| TargetKey {
            dir_device: 1,
            dir_inode: 2,
            name: name.into(),
        };
        let (data, meta) = names(&key("a"));
        assert!(data.starts_with(".servery-partial-"));
        assert_eq!(meta, format!("{data}.meta"));
        assert_ne!(names(&key("b")).0, data);
    }
}
