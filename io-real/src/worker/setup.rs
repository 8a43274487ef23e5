//! The worker's setup preamble: what a worker needs that must not appear on its command
//! line. The parent writes it on the control channel right after the listeners and before
//! any protocol frame (HELLO); the worker reads it before it starts its frame decoder.
//!
//! Why the control channel and not a file or an argument: a command line and the
//! environment are readable by every process of the same user (`ps`, `/proc/PID/cmdline`);
//! a temporary file holding a private key outlives a parent killed with SIGKILL, which
//! would break "stop leaves no temporary file". The socketpair has no name in the file
//! system, is shared by exactly the parent and this one worker, and already carries
//! everything else the worker is told, in order.
//!
//! Frame: a u32 big-endian length, then that many bytes of JSON ([`Setup`]).

use std::io::{self, Read};

use serde::{Deserialize, Serialize};

/// Larger preambles are refused: a certificate chain and a few credentials fit easily.
pub const MAX_SETUP: usize = 1024 * 1024;

/// The secrets a worker serves with. (The TLS identity is not here: it changes while
/// the worker serves, so it comes as the parent's first control message and again on
/// every change; see `servery_core::tls_material`.)
#[derive(Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Setup {
    /// `--auth` values as given (validated by the parent before anything started).
    pub auth: Vec<String>,
}

impl std::fmt::Debug for Setup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key or a password, even in a debug log.
        f.debug_struct("Setup")
            .field("auth_entries", &self.auth.len())
            .finish()
    }
}

/// Why a worker could not read its preamble.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SetupError {
    #[error("cannot read the setup preamble: {0}")]
    Io(#[from] io::Error),
    #[error("the setup preamble announces {0} bytes (at most {MAX_SETUP})")]
    TooLarge(usize),
    #[error("the setup preamble is not valid: {0}")]
    Decode(#[from] serde_json::Error),
}

impl Setup {
    /// The preamble as written on the channel.
    pub fn encode(&self) -> Vec<u8> {
        // Serializing plain strings cannot fail.
        let body = serde_json::to_vec(self).unwrap_or_default();
        let mut frame = Vec::with_capacity(4 + body.len());
        frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
        frame.extend_from_slice(&body);
        frame
    }

    /// Reads exactly one preamble, leaving whatever follows (the protocol frames) unread.
    pub fn read_from(mut r: impl Read) -> Result<Setup, SetupError> {
        let mut len = [0u8; 4];
        r.read_exact(&mut len)?;
        let len = u32::from_be_bytes(len) as usize;
        if len > MAX_SETUP {
            return Err(SetupError::TooLarge(len));
        }
        let mut body = vec![0u8; len];
        r.read_exact(&mut body)?;
        Ok(serde_json::from_slice(&body)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_leaves_what_follows() {
        let setup = Setup {
            auth: vec!["a:K".into()],
        };
        let mut wire = setup.encode();
        wire.extend_from_slice(b"HELLO");
        let mut r = &wire[..];
        assert_eq!(Setup::read_from(&mut r).expect("decode"), setup);
        assert_eq!(r, b"HELLO");
        assert!(!format!("{setup:?}").contains('K'), "Debug hides secrets");
    }

    #[test]
    fn oversized_and_truncated_preambles_are_errors() {
        let huge = ((MAX_SETUP + 1) as u32).to_be_bytes();
        assert!(matches!(
            Setup::read_from(&huge[..]),
            Err(SetupError::TooLarge(_))
        ));
        let mut short = Setup::default().encode();
        short.pop();
        assert!(matches!(
            Setup::read_from(&short[..]),
            Err(SetupError::Io(_))
        ));
    }
}
