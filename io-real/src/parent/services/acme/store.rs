//! The ACME state directory: `account-<directory hash>.json` (the account's credentials,
//! one per CA) and `certificate.pem` (the chain, leaf first, then its private key). Each is
//! replaced atomically — written to a private temporary file, synced, renamed over the
//! old one, the directory synced — so a crash leaves the old file or the new one, never a
//! mix, and a certificate never sits next to another certificate's key. The directory is
//! 0700 and the files 0600: both hold private keys.

use std::fs::{self, DirBuilder, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

const CERTIFICATE: &str = "certificate.pem";
/// Larger state files are refused rather than read whole.
const MAX_FILE: u64 = 1024 * 1024;

#[derive(Debug, Clone)]
pub struct StateDir {
    dir: PathBuf,
}

impl StateDir {
    /// Creates the directory (0700) if needed; an existing one is narrowed to 0700.
    pub fn open(dir: &Path) -> io::Result<StateDir> {
        DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
        Ok(StateDir {
            dir: dir.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    fn account_path(&self, directory_url: &str) -> PathBuf {
        let hash = Sha256::digest(directory_url.as_bytes());
        let short: String = hash[..8].iter().map(|b| format!("{b:02x}")).collect();
        self.dir.join(format!("account-{short}.json"))
    }

    pub fn load_account(&self, directory_url: &str) -> io::Result<Option<String>> {
        read_optional(&self.account_path(directory_url))
    }

    pub fn store_account(&self, directory_url: &str, json: &str) -> io::Result<()> {
        self.replace(&self.account_path(directory_url), json.as_bytes())
    }

    /// The stored chain and key, split, if there is a certificate.
    pub fn load_certificate(&self) -> io::Result<Option<(String, String)>> {
        let Some(text) = read_optional(&self.dir.join(CERTIFICATE))? else {
            return Ok(None);
        };
        Ok(split_key(&text).map(|(c, k)| (c.to_owned(), k.to_owned())))
    }

    pub fn store_certificate(&self, cert_pem: &str, key_pem: &str) -> io::Result<()> {
        let mut both = String::with_capacity(cert_pem.len() + key_pem.len() + 1);
        both.push_str(cert_pem.trim_end());
        both.push('\n');
        both.push_str(key_pem);
        self.replace(&self.dir.join(CERTIFICATE), both.as_bytes())
    }

    fn replace(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let temp = self.dir.join(format!(".{name}.tmp-{}", std::process::id()));
        let written = (|| {
            let mut f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&temp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
            fs::rename(&temp, path)?;
            fs::File::open(&self.dir)?.sync_all()
        })();
        if written.is_err() {
            let _ = fs::remove_file(&temp);
        }
        written
    }
}

fn read_optional(path: &Path) -> io::Result<Option<String>> {
    match fs::metadata(path) {
        Ok(m) if m.len() > MAX_FILE => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is larger than {MAX_FILE} bytes", path.display()),
        )),
        Ok(_) => fs::read_to_string(path).map(Some),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// `(chain, key)`: the key is the first PEM block whose label names a private key.
pub fn split_key(text: &str) -> Option<(&str, &str)> {
    let mut from = 0;
    while let Some(i) = text[from..].find("-----BEGIN ") {
        let at = from + i;
        let label_end = text[at..]
            .find("-----\n")
            .or_else(|| text[at..].find("-----\r"))?;
        if text[at..at + label_end].contains("PRIVATE KEY") {
            return Some((&text[..at], &text[at..]));
        }
        from = at + 11;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificate_and_key_are_written_together_privately_and_read_back_split() {
        let tmp = std::env::temp_dir().join(format!("servery-acme-store-{}", std::process::id()));
        let _ = fs::remove_dir_all(&tmp);
        let dir = StateDir::open(&tmp.join("state")).expect("open");
        assert!(dir.load_certificate().expect("read").is_none());
        let cert = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let key = "-----BEGIN PRIVATE KEY-----\nBBBB\n-----END PRIVATE KEY-----\n";
        dir.store_certificate(cert, key).expect("store");
        let (c, k) = dir.load_certificate().expect("read").expect("there");
        assert_eq!((c.as_str(), k.as_str()), (cert, key));
        let mode = |p: &Path| fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode(&tmp.join("state")), 0o700);
        assert_eq!(mode(&tmp.join("state").join(CERTIFICATE)), 0o600);
        dir.store_account("https://ca/dir", "{}").expect("account");
        assert_eq!(
            dir.load_account("https://ca/dir").expect("read").as_deref(),
            Some("{}")
        );
        assert_eq!(dir.load_account("https://other/dir").expect("read"), None);
        let left: Vec<_> = fs::read_dir(tmp.join("state")).expect("list").collect();
        assert_eq!(left.len(), 2, "no temporary file left");
        let _ = fs::remove_dir_all(&tmp);
    }

    #[test]
    fn split_finds_only_a_private_key_block() {
        assert_eq!(
            split_key("-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----\n"),
            None
        );
        let t = "-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----\n-----BEGIN EC PRIVATE KEY-----\nK\n";
        assert!(split_key(t).is_some_and(
            |(c, k)| c.ends_with("CERTIFICATE-----\n") && k.starts_with("-----BEGIN EC")
        ));
    }
}
