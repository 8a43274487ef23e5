//! `Want-Repr-Digest` → `Repr-Digest` (RFC 9530).
//!
//! What is hashed: the whole *selected representation*, never just the bytes of this
//! message. For identity that is the full file, even on a 206 (so a client can verify a
//! download it assembled from ranges); for a coded response it is the encoded bytes (the
//! precompressed sidecar, or our in-memory encoding), because a representation's content
//! coding is part of the representation (RFC 9530 §3). A response encoded while streaming
//! (files above [`super::site::ENCODE_IN_MEMORY_MAX`]) carries no `Repr-Digest`: its bytes
//! do not exist before they are sent, and hashing would mean encoding twice. RFC 9530 lets
//! a server ignore `Want-Repr-Digest`, so that is a permitted answer, not a wrong one.
//!
//! The response head waits for the hash, so asking for the digest of a large file delays
//! its first byte by one full read of it; that is the price of sending the field in the
//! head rather than as a trailer, which most clients ignore.
//!
//! Digests are not cached. Concurrent requests for the same (file version, coding,
//! algorithm) share one computation through [`super::single_flight`], which retains
//! nothing once the computation is done.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use http::HeaderValue;
use http::header::HeaderName;
use sha2::{Digest, Sha256, Sha512};

/// `Want-Repr-Digest`.
pub static WANT_REPR_DIGEST: HeaderName = HeaderName::from_static("want-repr-digest");
/// `Repr-Digest`.
pub static REPR_DIGEST: HeaderName = HeaderName::from_static("repr-digest");

/// A digest algorithm servery computes (the two RFC 9530 marks "Active" and secure).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DigestAlg {
    /// `sha-256`.
    Sha256,
    /// `sha-512`.
    Sha512,
}

impl DigestAlg {
    /// The Hash Algorithm registry key.
    pub fn key(self) -> &'static str {
        match self {
            DigestAlg::Sha256 => "sha-256",
            DigestAlg::Sha512 => "sha-512",
        }
    }
}

/// Chooses the algorithm for a `Want-Repr-Digest` value (all field lines joined by `,`).
///
/// The field is a Structured Fields dictionary of integer preferences 0–10, where 0 means
/// "not acceptable" (RFC 9530 §4). The highest preference among the algorithms we support
/// wins; on a tie sha-256 is chosen, as the cheaper one with SHA extensions and the one
/// every client knows. A field that does not parse as a dictionary is ignored as a whole
/// (RFC 8941 §4.2); a member whose value is not an integer in range is ignored alone.
pub fn choose(want: Option<&str>) -> Option<DigestAlg> {
    let mut weights: [Option<i64>; 2] = [None; 2];
    for member in want?.split(',') {
        let member = member.trim_matches([' ', '\t']);
        if member.is_empty() {
            // An empty member is a syntax error in a dictionary.
            return None;
        }
        let (key, value) = parse_member(member)?;
        let slot = match key {
            "sha-256" => 0,
            "sha-512" => 1,
            _ => continue,
        };
        // Later members override earlier ones, as in any SF dictionary.
        weights[slot] = value.filter(|w| (0..=10).contains(w));
    }
    let best = [DigestAlg::Sha256, DigestAlg::Sha512]
        .into_iter()
        .zip(weights)
        .filter_map(|(alg, w)| w.filter(|&w| w > 0).map(|w| (w, alg)))
        // max_by_key keeps the last maximum; iterate so sha-256 comes last among equals.
        .rev()
        .max_by_key(|&(w, _)| w)?;
    Some(best.1)
}

/// One dictionary member: its key, and its value when that is an integer (`None` for any
/// other bare item, which makes the member useless here but not the field invalid).
/// `None` overall means a syntax error.
fn parse_member(member: &str) -> Option<(&str, Option<i64>)> {
    let (key, rest) = match member.find(['=', ';']) {
        Some(i) => member.split_at(i),
        None => (member, ""),
    };
    if !is_key(key) {
        return None;
    }
    let Some(rest) = rest.strip_prefix('=') else {
        // A bare key is boolean true (with optional parameters): not a preference.
        return Some((key, None));
    };
    let item = rest.split(';').next().unwrap_or_default();
    let digits = item.strip_prefix('-').unwrap_or(item);
    if digits.is_empty() || digits.len() > 15 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        // Strings, tokens, decimals and byte sequences are valid SF items but not integers;
        // tell them apart from garbage only as far as needed: any other bare item starts
        // with one of these.
        let other_item = item.starts_with(['"', ':', '?', '*', '@', '%'])
            || item.starts_with(|c: char| c.is_ascii_alphabetic())
            || item.contains('.');
        return other_item.then_some((key, None));
    }
    item.parse().ok().map(|w| (key, Some(w)))
}

/// `key = ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" )`.
fn is_key(key: &str) -> bool {
    let mut bytes = key.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b == b'*')
        && bytes.all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-' | b'.' | b'*')
        })
}

/// An incremental hash for one algorithm.
#[derive(Debug, Clone)]
pub enum Hasher {
    /// SHA-256 state.
    Sha256(Sha256),
    /// SHA-512 state.
    Sha512(Sha512),
}

impl Hasher {
    /// A fresh hash.
    pub fn new(alg: DigestAlg) -> Self {
        match alg {
            DigestAlg::Sha256 => Hasher::Sha256(Sha256::new()),
            DigestAlg::Sha512 => Hasher::Sha512(Sha512::new()),
        }
    }

    /// Feeds bytes.
    pub fn update(&mut self, data: &[u8]) {
        match self {
            Hasher::Sha256(h) => h.update(data),
            Hasher::Sha512(h) => h.update(data),
        }
    }

    /// The `Repr-Digest` field value, `sha-256=:<base64>:`.
    pub fn header_value(self) -> HeaderValue {
        let (alg, digest) = match self {
            Hasher::Sha256(h) => (DigestAlg::Sha256, h.finalize().to_vec()),
            Hasher::Sha512(h) => (DigestAlg::Sha512, h.finalize().to_vec()),
        };
        let text = format!("{}=:{}:", alg.key(), STANDARD.encode(digest));
        // Only the key, base64 and ':' '=' characters: always a valid header value.
        HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
    }
}

/// The `Repr-Digest` value of in-memory content.
pub fn of_bytes(alg: DigestAlg, data: &[u8]) -> HeaderValue {
    let mut hasher = Hasher::new(alg);
    hasher.update(data);
    hasher.header_value()
}

/// The `Repr-Digest` value of the first `len` bytes of `file` (its whole content, as the
/// validators describe it). Blocking; run it on the blocking pool. A file that is shorter
/// than `len` is being rewritten, and is an error rather than a wrong digest.
pub fn of_file(alg: DigestAlg, mut file: &File, len: u64) -> io::Result<HeaderValue> {
    file.seek(SeekFrom::Start(0))?;
    let mut hasher = Hasher::new(alg);
    let mut buf = vec![0; 256 * 1024];
    let mut remaining = len;
    while remaining > 0 {
        let want = usize::try_from(remaining.min(buf.len() as u64)).unwrap_or(buf.len());
        match file.read(&mut buf[..want]) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "file shrank while being hashed",
                ));
            }
            Ok(n) => {
                hasher.update(&buf[..n]);
                remaining -= n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(hasher.header_value())
}

#[cfg(test)]
mod tests {
    use super::*;
    use DigestAlg::{Sha256, Sha512};

    #[test]
    fn preferences() {
        assert_eq!(choose(None), None);
        assert_eq!(choose(Some("sha-256=1")), Some(Sha256));
        assert_eq!(choose(Some("sha-512=3, sha-256=10")), Some(Sha256));
        assert_eq!(choose(Some("sha-256=1, sha-512=3")), Some(Sha512));
        assert_eq!(choose(Some("sha-256=5, sha-512=5")), Some(Sha256), "tie");
        assert_eq!(choose(Some("sha-512=5,sha-256=5")), Some(Sha256), "tie");
        assert_eq!(choose(Some("sha-256=0, sha-512=1")), Some(Sha512));
        assert_eq!(choose(Some("sha-256=0")), None, "0 is not acceptable");
        assert_eq!(
            choose(Some("md5=10, sha-512=1")),
            Some(Sha512),
            "unknown keys skipped"
        );
        assert_eq!(choose(Some("md5=10")), None);
        assert_eq!(
            choose(Some("sha-256=1;p=2")),
            Some(Sha256),
            "parameters ignored"
        );
        assert_eq!(
            choose(Some("sha-256=1, sha-256=0")),
            None,
            "last member wins"
        );
    }

    #[test]
    fn out_of_range_and_non_integer_values_are_ignored_alone() {
        assert_eq!(choose(Some("sha-256=11, sha-512=1")), Some(Sha512));
        assert_eq!(choose(Some("sha-256=-1, sha-512=1")), Some(Sha512));
        assert_eq!(
            choose(Some("sha-256, sha-512=1")),
            Some(Sha512),
            "boolean member"
        );
        assert_eq!(choose(Some("sha-256=\"x\", sha-512=1")), Some(Sha512));
        assert_eq!(choose(Some("sha-256=1.5, sha-512=1")), Some(Sha512));
    }

    #[test]
    fn malformed_fields_are_ignored_whole() {
        assert_eq!(choose(Some("")), None);
        assert_eq!(choose(Some("SHA-256=1")), None, "keys are lowercase");
        assert_eq!(choose(Some("sha-256=1,,")), None);
        assert_eq!(choose(Some("sha-256=1, ^=2")), None);
        assert_eq!(choose(Some("sha-256=1x")), None);
        assert_eq!(choose(Some("sha-256=1234567890123456")), None);
    }

    #[test]
    fn known_answers() {
        // RFC 9530 appendix examples hash `{"hello": "world"}`.
        let body = br#"{"hello": "world"}"#;
        assert_eq!(
            of_bytes(Sha256, body),
            "sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:"
        );
        assert_eq!(
            of_bytes(Sha512, body),
            "sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:"
        );
    }

    #[test]
    fn files_hash_like_bytes_and_short_files_fail() {
        let path = std::env::temp_dir().join(format!("servery-digest-{}", std::process::id()));
        let data: Vec<u8> = (0..600_000u32).map(|i| (i % 253) as u8).collect();
        std::fs::write(&path, &data).expect("write");
        let file = File::open(&path).expect("open");
        assert_eq!(
            of_file(Sha256, &file, data.len() as u64).expect("hash"),
            of_bytes(Sha256, &data)
        );
        assert!(of_file(Sha256, &file, data.len() as u64 + 1).is_err());
        std::fs::remove_file(path).expect("cleanup");
    }
}
