//! The worker's setup preamble: everything a worker is started with apart from who it is
//! (its id, slot and generation, on its command line for `ps` and the fault hooks). The
//! parent writes it on the control channel right after the listeners and before any
//! protocol frame (HELLO); the worker reads it before it starts its runtime.
//!
//! The settings travel whole: the parent's parsed [`ServeArgs`], with every reloadable
//! setting's value taken from the generation the core spawned the worker for
//! ([`crate::settings::for_generation`]). A setting added to any `Args` struct therefore
//! reaches every worker, and a reload that changes it reaches new workers, without a
//! second spelling of it on a command line (decision 0024, addendum).
//!
//! Why the control channel and not a file or an argument: a command line and the
//! environment are readable by every process of the same user (`ps`, `/proc/PID/cmdline`),
//! and the settings include the `--auth` credentials; a temporary file outlives a parent
//! killed with SIGKILL, which would break "stop leaves no temporary file". The socketpair
//! has no name in the file system, is shared by exactly the parent and this one worker,
//! and already carries everything else the worker is told, in order.
//!
//! Frame: a u32 big-endian length, then that many bytes of JSON ([`Setup`]).

use std::io::{self, Read};
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::cli::ServeArgs;

/// Larger preambles are refused: the settings and a few thousand credentials fit easily.
pub const MAX_SETUP: usize = 1024 * 1024;

/// Room kept in [`MAX_SETUP`] for everything but the credentials (the settings are a few
/// KiB), so the parent can refuse too many `--auth` entries before starting anyone.
pub const SETTINGS_ROOM: usize = 64 * 1024;

/// What the parent works out for every worker that is not a setting's value.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct SiteFacts {
    /// Serve TLS with the identity the parent sends (`ParentMessage::TlsMaterial`).
    pub tls: bool,
    /// `--qr`: the LAN address of the root, for the code in the page.
    pub qr_url: Option<String>,
    /// With `--acme`: how many of the listeners (the last ones) are the cleartext
    /// HTTP-01 listeners, and the HTTPS port they redirect to.
    pub acme_http_listeners: Option<u32>,
    pub https_port: Option<u16>,
}

/// Everything a worker serves with. (The TLS identity is not here: it changes while the
/// worker serves, so it comes as the parent's first control message and again on every
/// change; see `servery_core::tls_material`.)
#[derive(Clone, Serialize, Deserialize)]
pub struct Setup {
    /// The served directory, resolved by the parent.
    pub root: PathBuf,
    /// Async runtime threads: the CPUs shared out among the generation's workers.
    pub runtime_threads: u32,
    /// The CPUs the worker keeps to, set before it starts a thread (decision 0122);
    /// `None`: wherever the parent may run.
    #[serde(default)]
    pub cpus: Option<Vec<u32>>,
    /// How long a resumable upload's partial file is kept (the core's, not a setting).
    pub partial_ttl: Duration,
    pub facts: SiteFacts,
    /// The settings of the worker's generation.
    pub settings: ServeArgs,
}

impl std::fmt::Debug for Setup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never a password, even in a debug log.
        f.debug_struct("Setup")
            .field("root", &self.root)
            .field("runtime_threads", &self.runtime_threads)
            .field("cpus", &self.cpus)
            .field("facts", &self.facts)
            .field("auth_entries", &self.settings.site.auth.len())
            .finish_non_exhaustive()
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
        // Every value is plain data, and finite once validated (NaN would become null and
        // the worker would refuse the preamble, naming it).
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
    use clap::Parser;

    fn setup(args: &[&str]) -> Setup {
        let cli =
            crate::cli::Cli::try_parse_from(std::iter::once("servery").chain(args.iter().copied()))
                .expect("parses");
        Setup {
            root: "/srv".into(),
            runtime_threads: 1,
            cpus: Some(vec![1, 3]),
            partial_ttl: Duration::from_secs(60),
            facts: SiteFacts::default(),
            settings: cli.serve,
        }
    }

    #[test]
    fn round_trips_and_leaves_what_follows() {
        let setup = setup(&["--auth", "a:K", "--cache", "60", "--workers", "auto"]);
        let mut wire = setup.encode();
        wire.extend_from_slice(b"HELLO");
        let mut r = &wire[..];
        let back = Setup::read_from(&mut r).expect("decode");
        assert_eq!(back.settings.site.auth, ["a:K"]);
        assert_eq!(back.settings.site.cache, Some(60));
        assert_eq!(back.settings.workers, crate::cli::Workers::Auto);
        assert_eq!(back.cpus, Some(vec![1, 3]), "the CPUs reach the worker");
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
        let mut short = setup(&[]).encode();
        short.pop();
        assert!(matches!(
            Setup::read_from(&short[..]),
            Err(SetupError::Io(_))
        ));
        assert!(
            setup(&[]).encode().len() < SETTINGS_ROOM,
            "the settings fit their room"
        );
    }
}
