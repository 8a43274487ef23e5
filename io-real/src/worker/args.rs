//! `servery __worker …`: the arguments a worker is started with. Only the parent writes
//! them (`parent/spawn.rs`), so they are read by hand rather than by clap: a worker that
//! never builds clap's parser starts with fewer pages of the binary touched (idle memory
//! in docs/benchmarks.md), and none of the parent's environment variables can change how
//! a worker reads its arguments.

use std::ffi::OsString;
use std::path::PathBuf;
use std::str::FromStr;

use crate::http::Deadlines;
use crate::write::args::{DEFAULT_MAX_UPLOAD_SIZE, UploadWorkerArgs};

/// How every worker serves, as the parent passes it on their command lines (nothing
/// secret: the TLS identity and credentials travel in the setup preamble). Written by
/// [`SiteFlags::to_args`] and read back by [`WorkerArgs::parse`], one definition for both.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SiteFlags {
    pub show_hidden: bool,
    /// Serve TLS with the identity the parent sends in the setup preamble.
    pub tls: bool,
    pub cors: bool,
    pub spa: bool,
    pub cache: Option<u32>,
    pub no_security_headers: bool,
    pub hsts: bool,
    pub max_compress_size: Option<u64>,
    /// WebDAV, and the bound on one PROPFIND with Depth infinity.
    pub dav: bool,
    pub dav_propfind_max_entries: Option<u64>,
    /// Folder archives off, or their limits when not the defaults (`http::page::args`).
    pub no_archive: bool,
    pub archive_max_entries: Option<u64>,
    pub archive_max_size: Option<u64>,
    /// `--qr`: the LAN address of the root, for the code in the page.
    pub qr_url: Option<String>,
}

impl SiteFlags {
    pub fn to_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        for (on, flag) in self.switches() {
            if on {
                args.push(flag.to_owned());
            }
        }
        if let Some(secs) = self.cache {
            args.extend(["--cache".to_owned(), secs.to_string()]);
        }
        if let Some(bytes) = self.max_compress_size {
            args.extend(["--max-compress-size".to_owned(), bytes.to_string()]);
        }
        if let Some(n) = self.dav_propfind_max_entries {
            args.extend(["--dav-propfind-max-entries".to_owned(), n.to_string()]);
        }
        if let Some(n) = self.archive_max_entries {
            args.extend(["--archive-max-entries".to_owned(), n.to_string()]);
        }
        if let Some(n) = self.archive_max_size {
            args.extend(["--archive-max-size".to_owned(), n.to_string()]);
        }
        if let Some(url) = &self.qr_url {
            args.extend(["--qr-url".to_owned(), url.clone()]);
        }
        args
    }

    fn switches(&self) -> [(bool, &'static str); 8] {
        [
            (self.show_hidden, "--show-hidden"),
            (self.tls, "--tls"),
            (self.cors, "--cors"),
            (self.spa, "--spa"),
            (self.no_security_headers, "--no-security-headers"),
            (self.hsts, "--hsts"),
            (self.dav, "--dav"),
            (self.no_archive, "--no-archive"),
        ]
    }

    /// Takes `name` (and its value) if it is one of ours.
    fn read(
        &mut self,
        name: &str,
        value: &mut dyn FnMut() -> Result<OsString, String>,
    ) -> Result<bool, String> {
        match name {
            "--show-hidden" => self.show_hidden = true,
            "--tls" => self.tls = true,
            "--cors" => self.cors = true,
            "--spa" => self.spa = true,
            "--no-security-headers" => self.no_security_headers = true,
            "--hsts" => self.hsts = true,
            "--dav" => self.dav = true,
            "--no-archive" => self.no_archive = true,
            "--archive-max-entries" => self.archive_max_entries = Some(number(name, value()?)?),
            "--archive-max-size" => self.archive_max_size = Some(number(name, value()?)?),
            "--dav-propfind-max-entries" => {
                self.dav_propfind_max_entries = Some(number(name, value()?)?)
            }
            "--cache" => self.cache = Some(number(name, value()?)?),
            "--qr-url" => {
                let url = value()?;
                let url = url
                    .to_str()
                    .ok_or_else(|| format!("{name}: {url:?} is not UTF-8"))?;
                self.qr_url = Some(url.to_owned());
            }
            "--max-compress-size" => self.max_compress_size = Some(number(name, value()?)?),
            _ => return Ok(false),
        }
        Ok(true)
    }
}

fn number<T: FromStr>(name: &str, v: OsString) -> Result<T, String> {
    v.to_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{name}: {v:?} is not a number"))
}

#[derive(Debug, Clone)]
pub struct WorkerArgs {
    pub root: PathBuf,
    /// For log lines written before HELLO names the worker.
    pub worker_id: u64,
    /// The slot and generation the parent spawned this process for.
    pub slot: u64,
    pub generation: u64,
    pub max_connections: u32,
    pub max_blocking_threads: u32,
    pub compression_cache_size: u64,
    pub file_cache_size: u64,
    /// Async runtime threads: 1 runs a single-threaded runtime; 0 picks from the CPUs.
    pub runtime_threads: u32,
    pub site: SiteFlags,
    pub upload: UploadWorkerArgs,
    /// The access log's line format and overflow policy, when the log is on.
    pub access_log: Option<(
        crate::access_log::format::Format,
        servery_core::config::LogPolicy,
    )>,
    /// The connection deadlines (`Deadlines::to_args`); the defaults when not given.
    pub deadlines: Deadlines,
}

impl WorkerArgs {
    /// Reads `--flag` and `--name VALUE` pairs; an unknown name, a missing or malformed
    /// value, or a missing required argument is an error naming it.
    pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<WorkerArgs, String> {
        let mut root = None;
        let mut worker_id = None;
        let mut max_connections = None;
        let mut max_blocking_threads = None;
        let mut compression_cache_size = None;
        let mut file_cache_size = None;
        let mut w = WorkerArgs {
            root: PathBuf::new(),
            worker_id: 0,
            slot: 0,
            generation: 1,
            max_connections: 0,
            max_blocking_threads: 0,
            compression_cache_size: 0,
            file_cache_size: 0,
            runtime_threads: 0,
            site: SiteFlags::default(),
            access_log: None,
            deadlines: Deadlines::default(),
            upload: UploadWorkerArgs {
                upload: false,
                allow_overwrite: false,
                max_upload_size: DEFAULT_MAX_UPLOAD_SIZE,
                max_upload_files: 1000,
                write_lock_timeout_ms: 0,
                broker_queue_capacity: 64,
                broker_reply_timeout_ms: 2000,
                partial_ttl_ms: 24 * 3600 * 1000,
            },
        };
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let name = arg
                .to_str()
                .ok_or_else(|| format!("unexpected argument {arg:?}"))?
                .to_owned();
            let mut value = || args.next().ok_or_else(|| format!("{name} needs a value"));
            if w.site.read(&name, &mut value)? {
                continue;
            }
            if Deadlines::knows(&name) {
                let v = value()?;
                if let Some(read) = w.deadlines.read(&name, v.to_str().unwrap_or_default()) {
                    read?;
                }
                continue;
            }
            match name.as_str() {
                "--root" => root = Some(PathBuf::from(value()?)),
                "--worker-id" => worker_id = Some(number(&name, value()?)?),
                "--slot" => w.slot = number(&name, value()?)?,
                "--generation" => w.generation = number(&name, value()?)?,
                "--max-connections" => max_connections = Some(number(&name, value()?)?),
                "--max-blocking-threads" => max_blocking_threads = Some(number(&name, value()?)?),
                "--compression-cache-size" => {
                    compression_cache_size = Some(number(&name, value()?)?)
                }
                "--file-cache-size" => file_cache_size = Some(number(&name, value()?)?),
                "--runtime-threads" => w.runtime_threads = number(&name, value()?)?,
                "--max-upload-size" => w.upload.max_upload_size = number(&name, value()?)?,
                "--max-upload-files" => w.upload.max_upload_files = number(&name, value()?)?,
                "--write-lock-timeout-ms" => {
                    w.upload.write_lock_timeout_ms = number(&name, value()?)?
                }
                "--broker-queue-capacity" => {
                    w.upload.broker_queue_capacity = number(&name, value()?)?
                }
                "--broker-reply-timeout-ms" => {
                    w.upload.broker_reply_timeout_ms = number(&name, value()?)?
                }
                "--partial-ttl-ms" => w.upload.partial_ttl_ms = number(&name, value()?)?,
                "--access-log-format" => {
                    let v = value()?;
                    let format = v
                        .to_str()
                        .and_then(crate::access_log::format::Format::parse)
                        .ok_or_else(|| format!("{name}: unknown format {v:?}"))?;
                    let policy = w.access_log.map_or(Default::default(), |(_, p)| p);
                    w.access_log = Some((format, policy));
                }
                "--access-log-overflow" => {
                    let v = value()?;
                    let policy = match v.to_str() {
                        Some("block") => servery_core::config::LogPolicy::Block,
                        Some("drop") => servery_core::config::LogPolicy::Drop,
                        _ => return Err(format!("{name}: block or drop, not {v:?}")),
                    };
                    let format = w
                        .access_log
                        .map_or(crate::access_log::format::Format::Combined, |(f, _)| f);
                    w.access_log = Some((format, policy));
                }
                "--upload" => w.upload.upload = true,
                "--allow-overwrite" => w.upload.allow_overwrite = true,
                _ => return Err(format!("unexpected argument {name}")),
            }
        }
        let missing = |what: &str| format!("{what} is required");
        w.root = root.ok_or_else(|| missing("--root"))?;
        w.worker_id = worker_id.ok_or_else(|| missing("--worker-id"))?;
        w.max_connections = max_connections.ok_or_else(|| missing("--max-connections"))?;
        w.max_blocking_threads =
            max_blocking_threads.ok_or_else(|| missing("--max-blocking-threads"))?;
        w.compression_cache_size =
            compression_cache_size.ok_or_else(|| missing("--compression-cache-size"))?;
        w.file_cache_size = file_cache_size.ok_or_else(|| missing("--file-cache-size"))?;
        Ok(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<WorkerArgs, String> {
        WorkerArgs::parse(args.iter().map(OsString::from))
    }

    const REQUIRED: &[&str] = &[
        "--root",
        "/srv",
        "--worker-id",
        "7",
        "--max-connections",
        "10",
        "--max-blocking-threads",
        "4",
        "--compression-cache-size",
        "0",
        "--file-cache-size",
        "0",
    ];

    #[test]
    fn reads_what_the_parent_writes() {
        let w = parse(REQUIRED).expect("worker args");
        assert_eq!(
            (w.worker_id, w.max_connections, w.slot, w.generation),
            (7, 10, 0, 1)
        );
        assert_eq!(w.root, PathBuf::from("/srv"));
        assert!(!w.upload.upload);
        let mut more = REQUIRED.to_vec();
        more.extend([
            "--slot",
            "2",
            "--generation",
            "3",
            "--tls",
            "--cache",
            "60",
            "--upload",
            "--broker-queue-capacity",
            "1",
        ]);
        let w = parse(&more).expect("worker args");
        assert_eq!((w.slot, w.generation, w.site.cache), (2, 3, Some(60)));
        assert!(w.site.tls && w.upload.upload);
        assert_eq!(w.upload.broker_queue_capacity, 1);
    }

    #[test]
    fn site_flags_read_back_as_written() {
        let flags = SiteFlags {
            show_hidden: true,
            tls: true,
            cors: false,
            spa: true,
            cache: Some(3600),
            no_security_headers: true,
            hsts: false,
            max_compress_size: Some(1 << 20),
            dav: true,
            dav_propfind_max_entries: Some(7),
            no_archive: true,
            archive_max_entries: Some(9),
            archive_max_size: Some(1 << 30),
            qr_url: Some("http://192.168.1.5:8000/".into()),
        };
        let mut args: Vec<String> = REQUIRED.iter().map(|s| s.to_string()).collect();
        args.extend(flags.to_args());
        let w = WorkerArgs::parse(args.into_iter().map(OsString::from)).expect("parses");
        assert_eq!(w.site, flags);
        let none = parse(REQUIRED).expect("parses");
        assert_eq!(none.site, SiteFlags::default());
    }

    #[test]
    fn names_what_is_wrong() {
        let err = |args: &[&str]| parse(args).expect_err("refused");
        assert!(err(&REQUIRED[2..]).contains("--root"));
        let mut bad = REQUIRED.to_vec();
        bad[3] = "seven";
        assert!(err(&bad).contains("--worker-id"));
        let mut unknown = REQUIRED.to_vec();
        unknown.push("--bogus");
        assert!(err(&unknown).contains("--bogus"));
        let mut dangling = REQUIRED.to_vec();
        dangling.push("--slot");
        assert!(err(&dangling).contains("needs a value"));
    }
}
