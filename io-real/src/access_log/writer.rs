//! The parent's access-log writer: the one handle on the log (a file, or standard output),
//! on a thread of its own so a slow disk never holds up the driver. The driver hands it a
//! batch of records (each one or more whole lines, from one worker) when it is idle; the
//! writer writes the batch with one `write` per record where it can (`O_APPEND`: lines
//! from the one writer are never interleaved or torn), then tells the driver it can take
//! the next. `reopen` (SIGUSR1, `servery ctl reopen-logs`) closes and opens the path again,
//! for logrotate's `postrotate`.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::thread::JoinHandle;

/// Where the log goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    Stdout,
    File(PathBuf),
}

impl Destination {
    pub fn parse(value: &Path) -> Destination {
        if value == Path::new("-") {
            Destination::Stdout
        } else {
            Destination::File(value.to_path_buf())
        }
    }
}

/// Opens the log file to append: created with mode 0640, never through a symlink planted
/// at its path (`O_NOFOLLOW`), and it must be a regular file.
pub fn open(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o640)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    Ok(file)
}

/// What the writer has done, for `ctl status` and `/metrics`.
#[derive(Debug, Default)]
pub struct WriterStats {
    pub lines_written: AtomicU64,
    /// Failed writes (each a batch of one or more lines).
    pub write_errors: AtomicU64,
    /// Lines in those batches: none of them is in the file, not even in part.
    pub lines_failed: AtomicU64,
    pub reopens: AtomicU64,
}

enum Job {
    Batch(Vec<String>),
    Reopen,
}

/// The writer thread and the way to it.
#[derive(Debug)]
pub struct LogWriter {
    tx: Option<Sender<Job>>,
    thread: Option<JoinHandle<()>>,
    stats: Arc<WriterStats>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Job::Batch(b) => write!(f, "Batch({})", b.len()),
            Job::Reopen => f.write_str("Reopen"),
        }
    }
}

impl LogWriter {
    /// Starts the writer on `destination`, whose file (when it is one) was opened already
    /// (`first`), before anything was bound. `written` is called after every batch.
    pub fn start(
        destination: Destination,
        first: Option<File>,
        written: impl Fn() + Send + 'static,
    ) -> io::Result<LogWriter> {
        let (tx, rx) = channel::<Job>();
        let stats = Arc::new(WriterStats::default());
        let thread_stats = Arc::clone(&stats);
        let thread = std::thread::Builder::new()
            .name("servery-access-log".into())
            .spawn(move || {
                let mut file = first;
                let mut failing = FailureLog::default();
                let mut torn = false;
                for job in rx {
                    match job {
                        Job::Batch(batch) => {
                            stall_for_tests();
                            let lines = batch.iter().map(|r| lines_in(r)).sum::<u64>();
                            match write_batch(&destination, file.as_mut(), &batch, &mut torn) {
                                Ok(()) => {
                                    thread_stats.lines_written.fetch_add(lines, Ordering::Relaxed);
                                    failing.written(std::time::Instant::now());
                                }
                                Err(e) => {
                                    thread_stats.write_errors.fetch_add(1, Ordering::Relaxed);
                                    thread_stats.lines_failed.fetch_add(lines, Ordering::Relaxed);
                                    failing.failed(lines, &e, std::time::Instant::now());
                                }
                            }
                            written();
                        }
                        Job::Reopen => {
                            if let Destination::File(path) = &destination {
                                match open(path) {
                                    Ok(f) => {
                                        file = Some(f);
                                        thread_stats.reopens.fetch_add(1, Ordering::Relaxed);
                                        tracing::info!(path = %path.display(), "access log reopened");
                                    }
                                    Err(e) => tracing::error!(path = %path.display(), error = %e, "cannot reopen the access log; still writing to the old file"),
                                }
                            }
                        }
                    }
                }
                if let Some(f) = file.as_mut() {
                    let _ = f.flush();
                }
            })?;
        Ok(LogWriter {
            tx: Some(tx),
            thread: Some(thread),
            stats,
        })
    }

    pub fn stats(&self) -> &Arc<WriterStats> {
        &self.stats
    }

    /// Write `batch`, then call back.
    pub fn write(&self, batch: Vec<String>) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(Job::Batch(batch));
        }
    }

    pub fn reopen(&self) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(Job::Reopen);
        }
    }
}

impl Drop for LogWriter {
    /// Finishes what it was handed (the queue drains on stop).
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The lines a record holds (each record is whole lines; one without a newline is one).
fn lines_in(record: &str) -> u64 {
    (record.bytes().filter(|b| *b == b'\n').count() as u64).max(1)
}

/// Writes a batch whole or not at all. A write that fails part-way (a full disk) is cut
/// back to where the file ended before it, so no line is ever half in the file; where that
/// cannot be done (standard output, a failing truncate) `torn` is set and the next batch
/// that is written starts on a new line.
fn write_batch(
    destination: &Destination,
    file: Option<&mut File>,
    batch: &[String],
    torn: &mut bool,
) -> io::Result<()> {
    let mut joined = Vec::with_capacity(batch.iter().map(String::len).sum::<usize>() + 1);
    if *torn {
        joined.push(b'\n');
    }
    for record in batch {
        joined.extend_from_slice(record.as_bytes());
        if !record.ends_with('\n') {
            joined.push(b'\n');
        }
    }
    match (destination, file) {
        (Destination::File(_), Some(f)) => {
            let before = f.metadata()?.len();
            if let Err(e) = f.write_all(&joined) {
                *torn =
                    f.metadata().map_or(true, |m| m.len() != before) && f.set_len(before).is_err();
                return Err(e);
            }
        }
        (Destination::File(_), None) => return Err(io::Error::other("no log file open")),
        (Destination::Stdout, _) => {
            let mut out = io::stdout().lock();
            if let Err(e) = out.write_all(&joined).and_then(|()| out.flush()) {
                // What reached the pipe of it is unknown: end it before the next line.
                *torn = true;
                return Err(e);
            }
        }
    }
    *torn = false;
    Ok(())
}

/// How often a failing log is said on standard error at most: a nearly full disk makes
/// writes fail and succeed in turn, batch after batch, and each line said would be one
/// more line on a disk that has no room (decision 0057).
const FAILURE_REPORT_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// What the writer has not said yet about its failures.
#[derive(Debug, Default)]
struct FailureLog {
    /// When the writer last said something about failing.
    said_at: Option<std::time::Instant>,
    /// A write failed and the writer has not yet said that it writes again.
    failing: bool,
    /// Lines and writes lost since the writer last said so.
    lost: u64,
    failed_writes: u64,
}

impl FailureLog {
    fn may_say(&self, now: std::time::Instant) -> bool {
        self.said_at
            .is_none_or(|at| now.duration_since(at) >= FAILURE_REPORT_EVERY)
    }

    fn failed(&mut self, lines: u64, error: &io::Error, now: std::time::Instant) {
        self.failing = true;
        self.lost += lines;
        self.failed_writes += 1;
        if self.may_say(now) {
            tracing::error!(
                error = %error,
                lines = self.lost,
                writes = self.failed_writes,
                "cannot write the access log: lines lost (counted in access_log_lines_dropped_total{{reason=\"write_failed\"}}; said at most every 10 s)"
            );
            self.said_at = Some(now);
            self.lost = 0;
            self.failed_writes = 0;
        }
    }

    fn written(&mut self, now: std::time::Instant) {
        if self.failing && self.may_say(now) {
            tracing::warn!(
                lines_lost_unsaid = self.lost,
                "the access log is written again"
            );
            self.said_at = Some(now);
            self.failing = false;
            self.lost = 0;
            self.failed_writes = 0;
        }
    }
}

/// `SERVERY_TEST_LOG_STALL_MS`: the writer sleeps this long before each batch, so the
/// tests can fill the queue (only in builds with the `test-hooks` feature).
fn stall_for_tests() {
    #[cfg(feature = "test-hooks")]
    if let Some(ms) = std::env::var("SERVERY_TEST_LOG_STALL_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;
    use std::time::Duration;

    #[test]
    fn batches_are_appended_whole_and_reopen_follows_a_rotation() {
        let dir = std::env::temp_dir().join(format!("servery-alog-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("access.log");
        let (done_tx, done) = channel();
        let w = LogWriter::start(
            Destination::File(path.clone()),
            Some(open(&path).expect("open")),
            move || {
                let _ = done_tx.send(());
            },
        )
        .expect("start");
        w.write(vec!["a 1\n".into(), "b 1\nb 2\n".into()]);
        done.recv_timeout(Duration::from_secs(5)).expect("written");
        assert_eq!(
            std::fs::read_to_string(&path).expect("log"),
            "a 1\nb 1\nb 2\n"
        );
        assert_eq!(w.stats().lines_written.load(Ordering::Relaxed), 3);
        std::fs::rename(&path, dir.join("access.log.1")).expect("rotate");
        w.reopen();
        w.write(vec!["c 1\n".into()]);
        done.recv_timeout(Duration::from_secs(5)).expect("written");
        assert_eq!(std::fs::read_to_string(&path).expect("new log"), "c 1\n");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode & !0o640, 0, "mode {mode:o}");
        drop(w);
        std::os::unix::fs::symlink(dir.join("access.log.1"), dir.join("planted")).expect("symlink");
        assert!(
            open(&dir.join("planted")).is_err(),
            "a symlink is never followed"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
