//! Folder archives: `?archive=zip` and `?archive=tar.gz` on a directory.
//!
//! The folder is first walked (bounded by the entry limit, so the walk's memory is
//! bounded too) to check both limits before a byte is sent: a folder over them gets a
//! clear 403 rather than a truncated download. The archive is then written on the
//! blocking pool into a bounded channel that the response body drains, so it is never
//! held in memory or on disk, and a client that goes away stops the writer at its next
//! chunk. The walk applies the listing's rules: hidden names only with `--show-hidden`,
//! servery's own files never, and everything is opened beneath the root (cap-std), so no
//! symlink leads out of it; symlinks to directories are not followed (no loops), symlinks
//! to files inside the root are archived as the file.
//!
//! Crates (decision 0022): `zip`'s stream writer (data descriptors, no `Seek`) and `tar`
//! over `flate2`, both maintained and already written for a blocking writer; the async
//! `async_zip` would have needed an adapter from our files anyway.

use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::UNIX_EPOCH;

use bytes::Bytes;
use cap_std::fs::Dir;
use http_body_util::BodyExt;
use hyper::body::Frame;
use tokio::sync::mpsc;

use super::text::civil;
use crate::http::body::Body;
use crate::http::compress;
use crate::http::long_work::Permit;
use crate::http::mime;
use crate::http::path::is_hidden;

/// The default bound on the entries (files and folders) of one archive.
pub const DEFAULT_MAX_ENTRIES: u64 = 100_000;
/// The default bound on the bytes of file content in one archive: 16 GiB.
pub const DEFAULT_MAX_SIZE: u64 = 16 << 30;

/// Bytes handed to the response per channel message, and messages in flight.
const CHUNK: usize = 128 * 1024;
const IN_FLIGHT: usize = 4;

/// An archive format the page offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Zip,
    TarGz,
}

impl Format {
    /// `archive=zip` or `archive=tar.gz` in the query; `None` when absent or unknown.
    pub fn from_query(query: Option<&str>) -> Option<Format> {
        query?.split('&').find_map(|pair| match pair {
            "archive=zip" => Some(Format::Zip),
            "archive=tar.gz" => Some(Format::TarGz),
            _ => None,
        })
    }

    pub fn extension(self) -> &'static str {
        match self {
            Format::Zip => "zip",
            Format::TarGz => "tar.gz",
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::Zip => "application/zip",
            Format::TarGz => "application/gzip",
        }
    }
}

/// How much one archive may hold (`--archive-max-entries`, `--archive-max-size`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_entries: u64,
    pub max_size: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_entries: DEFAULT_MAX_ENTRIES,
            max_size: DEFAULT_MAX_SIZE,
        }
    }
}

/// Why an archive is not sent.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ArchiveError {
    #[error("the folder holds more than {limit} entries (--archive-max-entries)")]
    TooManyEntries { limit: u64 },
    #[error("the folder holds more than {limit} bytes (--archive-max-size)")]
    TooLarge { limit: u64 },
    #[error("folder archives are off (--no-archive)")]
    Off,
}

/// One file or folder to archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The name inside the archive as text: `top/a/b.txt`, folders ending in `/`. A byte
    /// of a file name that is not UTF-8 is written `%XX` here (zip names are text).
    pub name: String,
    /// The same name from the file names' exact bytes (tar names are bytes).
    pub exact: PathBuf,
    /// Where it is, relative to the served root.
    pub path: PathBuf,
    pub is_dir: bool,
    pub size: u64,
    pub mtime: u64,
}

/// Walks `rel` (a directory beneath `root`) depth first in name order, naming members
/// under `top/`. Blocking.
pub fn scan(
    root: &Dir,
    rel: &Path,
    top: &str,
    show_hidden: bool,
    limits: Limits,
) -> Result<Result<Vec<Member>, ArchiveError>, io::Error> {
    let mut members = vec![Member {
        name: format!("{top}/"),
        exact: PathBuf::from(top),
        path: rel.to_path_buf(),
        is_dir: true,
        size: 0,
        mtime: mtime_of(&root.metadata(rel)?),
    }];
    // (directory, its text prefix, its exact prefix)
    let mut pending = vec![(rel.to_path_buf(), format!("{top}/"), PathBuf::from(top))];
    let mut total: u64 = 0;
    while let Some((dir, prefix, exact_prefix)) = pending.pop() {
        let mut names: Vec<(String, OsString)> = Vec::new();
        for entry in root.read_dir(&dir)? {
            let os_name = entry?.file_name();
            let shown = os_name.to_string_lossy();
            if (!show_hidden && is_hidden(&shown))
                || crate::write::is_private(&shown)
                || shown.contains('\\')
            {
                continue;
            }
            names.push((text_form(&os_name), os_name));
        }
        names.sort();
        let mut subdirs = Vec::new();
        for (name, os_name) in names {
            let path = dir.join(&os_name);
            let Ok(link) = root.symlink_metadata(&path) else {
                continue;
            };
            let meta = if link.file_type().is_symlink() {
                // Resolved beneath the root: a link out of it fails here and is skipped.
                match root.metadata(&path) {
                    Ok(meta) if meta.is_file() => meta,
                    _ => continue,
                }
            } else {
                link
            };
            if !(meta.is_dir() || meta.is_file()) {
                continue;
            }
            let member = Member {
                name: format!("{prefix}{name}{}", if meta.is_dir() { "/" } else { "" }),
                exact: exact_prefix.join(&os_name),
                path: path.clone(),
                is_dir: meta.is_dir(),
                size: if meta.is_file() { meta.len() } else { 0 },
                mtime: mtime_of(&meta),
            };
            total = total.saturating_add(member.size);
            if total > limits.max_size {
                return Ok(Err(ArchiveError::TooLarge {
                    limit: limits.max_size,
                }));
            }
            if member.is_dir {
                subdirs.push((path, member.name.clone(), member.exact.clone()));
            }
            members.push(member);
            if members.len() as u64 > limits.max_entries {
                return Ok(Err(ArchiveError::TooManyEntries {
                    limit: limits.max_entries,
                }));
            }
        }
        // Popped from the end: reversed, so folders are visited in name order.
        pending.extend(subdirs.into_iter().rev());
    }
    Ok(Ok(members))
}

/// A file name as zip entry text: itself when it is UTF-8; otherwise each byte that is not
/// part of a UTF-8 character as `%XX` (U+FFFD would make different names equal and say
/// nothing of the bytes). A tool that unpacks the zip gets a readable, distinct name; the
/// tar.gz keeps the exact bytes.
fn text_form(name: &std::ffi::OsStr) -> String {
    if let Some(text) = name.to_str() {
        return text.to_owned();
    }
    let bytes = name.as_encoded_bytes();
    let mut out = String::with_capacity(bytes.len() + 8);
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn mtime_of(meta: &cap_std::fs::Metadata) -> u64 {
    meta.modified()
        .ok()
        .and_then(|t| t.into_std().duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs())
}

/// Starts writing the archive of `members` on the blocking pool and returns the body
/// that streams it. The writer keeps `place` (its place in the worker's share of long
/// work) until it ends: when the archive is written, or when its client has gone.
pub fn stream(
    format: Format,
    root: Arc<Dir>,
    members: Vec<Member>,
    place: Permit,
    runtime: &tokio::runtime::Handle,
) -> Body {
    let (tx, rx) = mpsc::channel(IN_FLIGHT);
    let errors = tx.clone();
    runtime.spawn_blocking(move || {
        let _place = place;
        let out = ChannelWriter {
            tx,
            buf: Vec::with_capacity(CHUNK),
        };
        let written = match format {
            Format::Zip => write_zip(&root, &members, out),
            Format::TarGz => write_tar_gz(&root, &members, out),
        };
        if let Err(e) = written {
            if e.kind() != io::ErrorKind::BrokenPipe {
                tracing::warn!(error = %e, "archive ended early");
            }
            // The body fails, so the client sees a broken download, never a short archive
            // that looks whole.
            let _ = errors.blocking_send(Err(e));
        }
    });
    ChannelBody(rx).boxed()
}

/// A file's exact bytes: the size recorded in the archive's header, no more, and an
/// error if the file shrank meanwhile.
struct Exact<R> {
    inner: io::Take<R>,
    left: u64,
}

impl<R: Read> Exact<R> {
    fn new(inner: R, len: u64) -> Self {
        Exact {
            inner: inner.take(len),
            left: len,
        }
    }
}

impl<R: Read> Read for Exact<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && self.left > 0 && !buf.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "a file shrank while it was archived",
            ));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

fn open(root: &Dir, member: &Member) -> io::Result<Exact<std::fs::File>> {
    let file = root.open(&member.path)?.into_std();
    Ok(Exact::new(file, member.size))
}

fn write_tar_gz<W: Write>(root: &Dir, members: &[Member], out: W) -> io::Result<()> {
    let gz = flate2::write::GzEncoder::new(out, flate2::Compression::fast());
    let mut tar = tar::Builder::new(gz);
    for m in members {
        let mut header = tar::Header::new_gnu();
        header.set_mtime(m.mtime);
        if m.is_dir {
            header.set_entry_type(tar::EntryType::Directory);
            header.set_mode(0o755);
            header.set_size(0);
            tar.append_data(&mut header, &m.exact, io::empty())?;
        } else {
            header.set_entry_type(tar::EntryType::Regular);
            header.set_mode(0o644);
            header.set_size(m.size);
            tar.append_data(&mut header, &m.exact, open(root, m)?)?;
        }
    }
    let mut out = tar.into_inner()?.finish()?;
    out.flush()
}

fn write_zip<W: Write>(root: &Dir, members: &[Member], out: W) -> io::Result<()> {
    use zip::CompressionMethod;
    use zip::write::SimpleFileOptions;
    let mut zip = zip::ZipWriter::new_stream(out);
    let mut written = std::collections::HashSet::new();
    for m in members {
        // A name whose `%XX` text form is also another file's real name: the first in
        // name order is archived, the other left out of the zip (the tar.gz has both).
        if !written.insert(m.name.as_str()) {
            tracing::info!(name = %m.name, "left out of a zip: two files have this name as text");
            continue;
        }
        let options = SimpleFileOptions::default().last_modified_time(zip_time(m.mtime));
        if m.is_dir {
            zip.add_directory(m.name.as_str(), options.unix_permissions(0o755))
                .map_err(io::Error::other)?;
            continue;
        }
        // Deflate (fast) what compresses; store what is compressed already.
        let (method, level) = if compress::is_compressible(mime::content_type(&m.name)) {
            (CompressionMethod::Deflated, Some(1))
        } else {
            (CompressionMethod::Stored, None)
        };
        let options = options
            .compression_method(method)
            .compression_level(level)
            .unix_permissions(0o644)
            .large_file(m.size >= u64::from(u32::MAX));
        let mut file = open(root, m)?;
        zip.start_file(m.name.as_str(), options)
            .map_err(io::Error::other)?;
        io::copy(&mut file, &mut zip)?;
    }
    let mut out = zip.finish().map_err(io::Error::other)?.into_inner();
    out.flush()
}

/// A zip timestamp (1980–2107, local time by convention: UTC here); out of range, the
/// format's default.
fn zip_time(secs: u64) -> zip::DateTime {
    let (y, mo, d, h, mi, s) = civil(secs);
    let fit = |v: u64| u8::try_from(v).unwrap_or(0);
    u16::try_from(y)
        .ok()
        .and_then(|y| {
            zip::DateTime::from_date_and_time(
                y,
                fit(u64::from(mo)),
                fit(u64::from(d)),
                fit(h),
                fit(mi),
                fit(s),
            )
            .ok()
        })
        .unwrap_or_default()
}

/// Hands what the archive writer produces to the response, `CHUNK` bytes at a time,
/// waiting while `IN_FLIGHT` chunks are unsent; fails once the response is gone.
struct ChannelWriter {
    tx: mpsc::Sender<io::Result<Bytes>>,
    buf: Vec<u8>,
}

impl ChannelWriter {
    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK)));
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the client went away"))
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(CHUNK - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}

/// The response body: whatever the writer sends, until it drops its sender.
struct ChannelBody(mpsc::Receiver<io::Result<Bytes>>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|next| next.map(|chunk| chunk.map(Frame::data)))
    }
}

/// `Content-Disposition` for `top.ext`: an ASCII fallback and the exact UTF-8 name.
pub fn disposition(top: &str, format: Format) -> String {
    let name = format!("{top}.{}", format.extension());
    let ascii: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ' ') {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!(
        "attachment; filename=\"{ascii}\"; filename*=UTF-8''{}",
        crate::http::path::encode_segment(&name)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use cap_std::ambient_authority;

    fn tree() -> (tempdir::Guard, Dir) {
        let guard = tempdir::Guard::new();
        let p = &guard.0;
        std::fs::create_dir_all(p.join("d/sub")).expect("mkdir");
        std::fs::create_dir_all(p.join("d/.git")).expect("mkdir");
        std::fs::write(p.join("d/a.txt"), b"alpha").expect("write");
        std::fs::write(p.join("d/sub/b.bin"), vec![7u8; 3000]).expect("write");
        std::fs::write(p.join("d/.env"), b"secret").expect("write");
        std::fs::write(p.join("outside.txt"), b"out").expect("write");
        std::fs::write(p.join("d/.servery-partial-x"), b"private").expect("write");
        std::os::unix::fs::symlink("../outside.txt", p.join("d/inside-link")).expect("link");
        std::os::unix::fs::symlink("/etc/passwd", p.join("d/abs-link")).expect("link");
        std::os::unix::fs::symlink("..", p.join("d/loop")).expect("link");
        let dir = Dir::open_ambient_dir(p, ambient_authority()).expect("open");
        (guard, dir)
    }

    mod tempdir {
        pub(super) struct Guard(pub std::path::PathBuf);
        impl Guard {
            pub(super) fn new() -> Self {
                use std::sync::atomic::{AtomicU32, Ordering};
                static N: AtomicU32 = AtomicU32::new(0);
                let p = std::env::temp_dir().join(format!(
                    "servery-archive-{}-{}",
                    std::process::id(),
                    N.fetch_add(1, Ordering::Relaxed)
                ));
                let _ = std::fs::remove_dir_all(&p);
                std::fs::create_dir_all(&p).expect("tempdir");
                Guard(p)
            }
        }
        impl Drop for Guard {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    fn names(members: &[Member]) -> Vec<&str> {
        members.iter().map(|m| m.name.as_str()).collect()
    }

    #[test]
    fn walk_keeps_to_the_root_and_the_hidden_rule() {
        let (_g, root) = tree();
        let members = scan(&root, Path::new("d"), "d", false, Limits::default())
            .expect("io")
            .expect("within limits");
        // The relative link stays inside the root (it names a file there): archived. The
        // absolute one, the loop, the dot-files and servery's own file are not.
        assert_eq!(
            names(&members),
            ["d/", "d/a.txt", "d/inside-link", "d/sub/", "d/sub/b.bin"]
        );
        let hidden = scan(&root, Path::new("d"), "d", true, Limits::default())
            .expect("io")
            .expect("within limits");
        assert!(names(&hidden).contains(&"d/.env") && names(&hidden).contains(&"d/.git/"));
        assert!(!names(&hidden).iter().any(|n| n.contains("servery-partial")));
    }

    #[test]
    fn limits_are_checked_before_anything_is_sent() {
        let (_g, root) = tree();
        let few = Limits {
            max_entries: 3,
            max_size: u64::MAX,
        };
        assert!(matches!(
            scan(&root, Path::new("d"), "d", false, few).expect("io"),
            Err(ArchiveError::TooManyEntries { limit: 3 })
        ));
        let small = Limits {
            max_entries: 100,
            max_size: 3000,
        };
        assert!(matches!(
            scan(&root, Path::new("d"), "d", false, small).expect("io"),
            Err(ArchiveError::TooLarge { limit: 3000 })
        ));
        let exact = Limits {
            max_entries: 5,
            max_size: 3008,
        };
        assert!(
            scan(&root, Path::new("d"), "d", false, exact)
                .expect("io")
                .is_ok()
        );
    }

    /// Both formats read back, with every member's bytes (text is deflated, the binary
    /// stored: both paths are taken).
    #[test]
    fn archives_read_back_whole() {
        let (_g, root) = tree();
        let members = scan(&root, Path::new("d"), "d", false, Limits::default())
            .expect("io")
            .expect("within limits");
        let want: Vec<(String, Vec<u8>)> = vec![
            ("d/a.txt".into(), b"alpha".to_vec()),
            ("d/inside-link".into(), b"out".to_vec()),
            ("d/sub/b.bin".into(), vec![7u8; 3000]),
        ];
        let files = |entries: Vec<(String, Vec<u8>)>| -> Vec<(String, Vec<u8>)> {
            entries
                .into_iter()
                .filter(|(n, _)| !n.ends_with('/'))
                .collect()
        };
        assert_eq!(files(unzip(&root, &members)), want);
        let untarred: Vec<(String, Vec<u8>)> = untar(&root, &members)
            .into_iter()
            .map(|(name, bytes)| (String::from_utf8(name).expect("UTF-8 names"), bytes))
            .collect();
        assert_eq!(untarred, want);
    }

    /// Every entry of the zip of `members`, folders with no bytes.
    fn unzip(root: &Dir, members: &[Member]) -> Vec<(String, Vec<u8>)> {
        let mut zipped = Vec::new();
        write_zip(root, members, &mut zipped).expect("zip");
        let mut zip = zip::ZipArchive::new(io::Cursor::new(zipped)).expect("reads");
        (0..zip.len())
            .map(|i| {
                let mut file = zip.by_index(i).expect("member");
                let mut bytes = Vec::new();
                file.read_to_end(&mut bytes).expect("bytes");
                (file.name().expect("name").to_string(), bytes)
            })
            .collect()
    }

    /// Every file of the tar.gz of `members`, by the exact bytes of its name.
    fn untar(root: &Dir, members: &[Member]) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut tgz = Vec::new();
        write_tar_gz(root, members, &mut tgz).expect("tar.gz");
        let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(&tgz[..]));
        let mut got = Vec::new();
        for entry in tar.entries().expect("entries") {
            let mut entry = entry.expect("entry");
            if entry.header().entry_type().is_file() {
                let name = entry.path_bytes().into_owned();
                let mut bytes = Vec::new();
                entry.read_to_end(&mut bytes).expect("bytes");
                got.push((name, bytes));
            }
        }
        got
    }

    /// A name that is not UTF-8 keeps its exact bytes in the tar.gz and reads `%XX` in the
    /// zip; when that text is also another file's real name, the zip keeps the first.
    #[test]
    fn names_that_are_not_utf8_are_archived() {
        use std::os::unix::ffi::OsStrExt;
        let guard = tempdir::Guard::new();
        let p = &guard.0;
        std::fs::create_dir_all(p.join("d")).expect("mkdir");
        let raw = std::ffi::OsStr::from_bytes(b"caf\xE9.txt");
        std::fs::write(p.join("d").join(raw), b"raw").expect("write");
        std::fs::write(p.join("d/caf%E9.txt"), b"text").expect("write");
        std::fs::write(p.join("d/\u{e9}t\u{e9}.txt"), b"utf8").expect("write");
        let root = Dir::open_ambient_dir(p, cap_std::ambient_authority()).expect("open");
        let members = scan(&root, Path::new("d"), "d", false, Limits::default())
            .expect("io")
            .expect("within limits");
        assert_eq!(
            names(&members),
            ["d/", "d/caf%E9.txt", "d/caf%E9.txt", "d/\u{e9}t\u{e9}.txt"]
        );

        let mut got = untar(&root, &members);
        got.sort();
        let want: Vec<(Vec<u8>, Vec<u8>)> = vec![
            (b"d/caf%E9.txt".to_vec(), b"text".to_vec()),
            (b"d/caf\xE9.txt".to_vec(), b"raw".to_vec()),
            ("d/\u{e9}t\u{e9}.txt".as_bytes().to_vec(), b"utf8".to_vec()),
        ];
        assert_eq!(got, want, "the tar.gz has every file by its exact bytes");

        let got = unzip(&root, &members);
        let want: Vec<(String, Vec<u8>)> = vec![
            ("d/".into(), Vec::new()),
            ("d/caf%E9.txt".into(), b"text".to_vec()),
            ("d/\u{e9}t\u{e9}.txt".into(), b"utf8".to_vec()),
        ];
        assert_eq!(got, want, "the real name wins its text in the zip");
    }

    #[test]
    fn a_file_that_shrinks_fails_the_archive() {
        let mut short = Exact::new(&b"abc"[..], 5);
        let mut out = Vec::new();
        assert_eq!(
            io::copy(&mut short, &mut out).map_err(|e| e.kind()),
            Err(io::ErrorKind::UnexpectedEof)
        );
        let mut long = Exact::new(&b"abcdef"[..], 5);
        out.clear();
        assert_eq!(io::copy(&mut long, &mut out).ok(), Some(5));
    }

    #[test]
    fn query_and_disposition() {
        assert_eq!(Format::from_query(Some("archive=zip")), Some(Format::Zip));
        assert_eq!(
            Format::from_query(Some("sort=name&archive=tar.gz")),
            Some(Format::TarGz)
        );
        assert_eq!(Format::from_query(Some("archive=rar")), None);
        assert_eq!(Format::from_query(None), None);
        assert_eq!(
            disposition("a\"b é", Format::Zip),
            "attachment; filename=\"a_b _.zip\"; filename*=UTF-8''a%22b%20%C3%A9.zip"
        );
    }
}
