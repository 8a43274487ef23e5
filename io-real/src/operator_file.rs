//! Reading a file the operator named on the command line (`--tls-cert`, `--tls-key`, and
//! whatever else comes to be read from a path), with a size cap.
//!
//! A path is not necessarily a regular file: `/dev/zero`, a FIFO or `/dev/stdin` stream
//! for as long as anyone reads them, and `std::fs::read_to_string` would grow the parent's
//! memory until the OOM killer ends it (measured before this module: `--tls-cert /dev/zero`
//! took the parent from 1.8 to 3.9 GB in 3 s). Every such read goes through
//! [`read_text`], which reads at most `cap + 1` bytes through [`Read::take`] and refuses
//! the file when the extra byte arrives. A FIFO or `/dev/stdin` (process substitution,
//! `--tls-key <(vault read …)`) still works when what it carries fits the cap.

use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// The cap for one PEM file (`--tls-cert`, `--tls-key`): 256 KiB.
///
/// A certificate is 1–2 KiB of PEM (ECDSA) or 2–3 KiB (RSA 4096), a chain of a leaf and
/// its intermediates rarely exceeds 10 KiB, and even an RSA 16384 key is about 12 KiB; a
/// 256 KiB file is more than twenty times any real chain. Both halves travel to every
/// worker in one control frame (`servery_core::tls_material`), 256 KiB in all: a pair that
/// does not fit is refused by name (`check_identity_fits`), at startup as a configuration
/// error and on a reload as the reload's refusal, never as a failure of every worker.
pub const PEM_CAP: u64 = 256 * 1024;

/// Why an operator's file was not read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OperatorFileError {
    /// Opening or reading failed.
    #[error("cannot read {}: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// More than `cap` bytes: a regular file's size is known, a stream's is not.
    #[error("{} is too large ({}): {what} may hold at most {}", .path.display(), Size(*.size, *.cap), Bytes(*.cap))]
    TooLarge {
        path: PathBuf,
        /// What the file was supposed to hold (`a PEM file`).
        what: &'static str,
        cap: u64,
        size: Option<u64>,
    },
    /// The contents are not UTF-8 text.
    #[error("{} is not text (not valid UTF-8)", .path.display())]
    NotText { path: PathBuf },
}

impl OperatorFileError {
    /// The path the error is about.
    pub fn path(&self) -> &Path {
        match self {
            Self::Io { path, .. } | Self::TooLarge { path, .. } | Self::NotText { path } => path,
        }
    }
}

/// `5242880 bytes` for a file whose size is known; for a stream, that it did not end.
struct Size(Option<u64>, u64);

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(size) => write!(f, "{size} bytes"),
            None => write!(
                f,
                "not a regular file, and it had not ended after {} bytes",
                self.1.saturating_add(1)
            ),
        }
    }
}

/// `256 KiB (262144 bytes)`.
struct Bytes(u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        if n >= 1024 && n.is_multiple_of(1024) {
            write!(f, "{} KiB ({n} bytes)", n / 1024)
        } else {
            write!(f, "{n} bytes")
        }
    }
}

/// Reads `path` as UTF-8 text of at most `cap` bytes; `what` names the kind of file in
/// the error (`a PEM file`). Reads at most `cap + 1` bytes whatever the file is, so a
/// device or a FIFO that never ends costs `cap` bytes of memory, not all of it.
pub fn read_text(path: &Path, cap: u64, what: &'static str) -> Result<String, OperatorFileError> {
    let io_err = |source| OperatorFileError::Io {
        path: path.to_owned(),
        source,
    };
    let file = File::open(path).map_err(io_err)?;
    // A regular file's size, for the message (the read below decides, not this).
    let regular_size = file
        .metadata()
        .ok()
        .filter(std::fs::Metadata::is_file)
        .map(|m| m.len());
    let mut bytes = Vec::new();
    file.take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io_err)?;
    if bytes.len() as u64 > cap {
        return Err(OperatorFileError::TooLarge {
            path: path.to_owned(),
            what,
            cap,
            size: regular_size.filter(|&s| s > cap),
        });
    }
    String::from_utf8(bytes).map_err(|_| OperatorFileError::NotText {
        path: path.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file in a directory of its own; [`done`] removes both.
    fn temp(name: &str, contents: &[u8]) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("servery-opfile-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let path = dir.join(name);
        std::fs::write(&path, contents).expect("write");
        path
    }

    fn done(path: &Path) {
        if let Some(dir) = path.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    #[test]
    fn a_file_up_to_the_cap_is_read_whole() {
        let path = temp("exact", &[b'a'; 100]);
        assert_eq!(
            read_text(&path, 100, "a test file").expect("fits"),
            "a".repeat(100)
        );
        done(&path);
    }

    #[test]
    fn one_byte_over_the_cap_is_refused_with_its_size_and_the_rule() {
        let path = temp("over", &[b'a'; 2049]);
        let err = read_text(&path, 2048, "a PEM file").expect_err("too large");
        assert!(
            matches!(
                err,
                OperatorFileError::TooLarge {
                    size: Some(2049),
                    cap: 2048,
                    ..
                }
            ),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(text.contains(&path.display().to_string()), "{text}");
        assert!(text.contains("is too large (2049 bytes)"), "{text}");
        assert!(
            text.contains("a PEM file may hold at most 2 KiB (2048 bytes)"),
            "{text}"
        );
        done(&path);
    }

    #[test]
    fn an_endless_device_costs_the_cap_not_the_memory() {
        let err = read_text(Path::new("/dev/zero"), PEM_CAP, "a PEM file").expect_err("endless");
        assert!(
            matches!(err, OperatorFileError::TooLarge { size: None, .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }

    #[test]
    fn a_certificate_and_key_too_large_for_the_control_channel_are_refused_by_name() {
        use servery_core::tls_material::check_identity_fits;
        // PEM as it is written: 64 base64 characters and a newline per line.
        let line = format!("{}\n", "A".repeat(64));
        let pem = line.repeat((PEM_CAP as usize) / line.len());
        assert!(pem.len() as u64 <= PEM_CAP);
        let err = check_identity_fits(&pem, &pem).expect_err("two full files");
        assert!(err.to_string().contains("at most"), "{err}");
        // A long chain (a hundred kilobytes) with its key is still handed over.
        let chain = line.repeat(100 * 1024 / line.len());
        check_identity_fits(&chain, &line.repeat(40)).expect("fits");
    }

    #[test]
    fn missing_and_binary_files_name_the_path() {
        let err =
            read_text(Path::new("/nonexistent/x.pem"), PEM_CAP, "a PEM file").expect_err("missing");
        assert!(matches!(err, OperatorFileError::Io { .. }));
        assert!(err.to_string().contains("/nonexistent/x.pem"), "{err}");
        let path = temp("binary", &[0xff, 0xfe, 0x00]);
        let err = read_text(&path, PEM_CAP, "a PEM file").expect_err("binary");
        assert!(matches!(err, OperatorFileError::NotText { .. }), "{err:?}");
        assert_eq!(err.path(), path);
        done(&path);
    }
}
