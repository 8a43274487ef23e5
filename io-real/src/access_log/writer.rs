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

/// What the writer has done, for `ctl status`.
#[derive(Debug, Default)]
pub struct WriterStats {
    pub lines_written: AtomicU64,
    pub write_errors: AtomicU64,
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
                for job in rx {
                    match job {
                        Job::Batch(batch) => {
                            stall_for_tests();
                            let lines = write_batch(&destination, file.as_mut(), &batch);
                            match lines {
                                Ok(n) => {
                                    thread_stats.lines_written.fetch_add(n, Ordering::Relaxed);
                                }
                                Err(e) => {
                                    thread_stats.write_errors.fetch_add(1, Ordering::Relaxed);
                                    tracing::error!(error = %e, "cannot write the access log");
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

/// Lines in a batch of records; each record is whole lines.
fn write_batch(
    destination: &Destination,
    file: Option<&mut File>,
    batch: &[String],
) -> io::Result<u64> {
    let mut lines = 0;
    let mut joined = Vec::with_capacity(batch.iter().map(String::len).sum());
    for record in batch {
        joined.extend_from_slice(record.as_bytes());
        if !record.ends_with('\n') {
            joined.push(b'\n');
        }
        lines += record.bytes().filter(|b| *b == b'\n').count().max(1) as u64;
    }
    match (destination, file) {
        (Destination::File(_), Some(f)) => f.write_all(&joined)?,
        (Destination::File(_), None) => return Err(io::Error::other("no log file open")),
        (Destination::Stdout, _) => {
            let mut out = io::stdout().lock();
            out.write_all(&joined)?;
            out.flush()?;
        }
    }
    Ok(lines)
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
