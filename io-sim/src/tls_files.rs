//! Certificate files read again on reload (decision 0093), as the simulated host plays
//! them: the files' contents change at the plan's moments, and the parent's
//! [`ParentAction::ReadTlsFiles`](servery_core::parent::ParentAction::ReadTlsFiles) is
//! answered with what they hold then, as `io-real` reads and checks them. What the parent
//! decides about a reload from that is the core's; this module only records it for the
//! scenarios' predicates.

use core::time::Duration;

use servery_core::Instant;
use servery_core::ids::ReloadId;
use servery_core::parent::Parent;
use servery_core::supervisor::Event;
use servery_core::tls_material::{
    CertSummary, STATELESS_RESET_KEY_LEN, TICKET_ENTROPY_LEN, TicketPolicy, TlsInput, TlsState,
};

use crate::world::SimWorld;

/// What the certificate files hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsFilesHold {
    /// A certificate and its key, told apart by serial.
    Good { serial: u64 },
    /// Something that does not load (a half-copied file, a key of another certificate).
    Broken,
}

/// The files from time zero and their changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFilesPlan {
    /// What they hold from each moment on, in time order; the first at time zero must be
    /// good (servery does not start without a certificate).
    pub changes: Vec<(Duration, TlsFilesHold)>,
}

impl TlsFilesPlan {
    pub fn holds_at(&self, at: Duration) -> TlsFilesHold {
        self.changes
            .iter()
            .take_while(|(from, _)| *from <= at)
            .last()
            .map_or(TlsFilesHold::Broken, |c| c.1)
    }
}

/// One read the parent asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TlsFilesRead {
    pub at_ms: u64,
    pub reload: u64,
    /// The serial read; `None`: the files were broken.
    pub serial: Option<u64>,
}

/// What the parent did with its certificate files over a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFilesOutcome {
    pub reads: Vec<TlsFilesRead>,
    /// Each reload's end: (reload, committed).
    pub reloads: Vec<(u64, bool)>,
    /// Rejected reloads' messages, by reload.
    pub rejections: Vec<(u64, String)>,
    /// Every change of the identity the parent serves: (ms, identity generation, serial),
    /// the starting one first.
    pub identities: Vec<(u64, u64, u64)>,
}

/// The subject the simulated driver gives a certificate of this serial.
fn subject(serial: u64) -> String {
    format!("sim-file-{serial}")
}

fn serial_of(subject: &str) -> u64 {
    subject
        .strip_prefix("sim-file-")
        .and_then(|s| s.parse().ok())
        .unwrap_or(u64::MAX)
}

fn identity(serial: u64) -> TlsInput {
    TlsInput::Identity {
        cert_pem: format!("SIM FILE CERTIFICATE\nserial={serial}\n"),
        key_pem: format!("SIM FILE KEY {serial}\n"),
        summary: CertSummary {
            subject: subject(serial),
            ..CertSummary::default()
        },
    }
}

impl SimWorld {
    /// The TLS material the parent starts with, read from the files at time zero.
    pub fn tls_files_parent(&mut self) -> Option<TlsState> {
        let plan = self.spec.workload.tls_files.as_ref()?;
        let TlsFilesHold::Good { serial } = plan.holds_at(Duration::ZERO) else {
            return None;
        };
        let TlsInput::Identity {
            cert_pem,
            key_pem,
            summary,
        } = identity(serial)
        else {
            return None;
        };
        let mut entropy = [0u8; TICKET_ENTROPY_LEN];
        for chunk in entropy.chunks_mut(8) {
            let draw = self.rng.next_u64().to_be_bytes();
            chunk.copy_from_slice(&draw[..chunk.len()]);
        }
        let mut reset_key = [0u8; STATELESS_RESET_KEY_LEN];
        for (byte, from) in reset_key.iter_mut().zip(entropy.iter().cycle()) {
            *byte = *from;
        }
        TlsState::new(
            Instant::ZERO,
            TicketPolicy::default(),
            cert_pem,
            key_pem,
            summary,
            entropy,
            reset_key,
        )
        .ok()
    }

    /// The parent's [`ParentAction::ReadTlsFiles`](servery_core::parent::ParentAction::ReadTlsFiles):
    /// answered with what the files hold now.
    pub(crate) fn read_tls_files(&mut self, now: Instant, reload: ReloadId) {
        let at = Duration::from_nanos(now.as_nanos());
        let holds = self
            .spec
            .workload
            .tls_files
            .as_ref()
            .map_or(TlsFilesHold::Broken, |p| p.holds_at(at));
        let serial = match holds {
            TlsFilesHold::Good { serial } => Some(serial),
            TlsFilesHold::Broken => None,
        };
        self.out.tls_files.reads.push(TlsFilesRead {
            at_ms: now.as_nanos() / 1_000_000,
            reload: reload.0,
            serial,
        });
        let read = match serial {
            Some(serial) => Ok(identity(serial)),
            None => Err(
                "the certificate files (cert.pem, key.pem) were not reloaded and the current certificate stays: the key does not match the certificate"
                    .to_owned(),
            ),
        };
        self.inbox.push_back(Event::TlsFilesRead { reload, read });
    }

    /// A reload's end, for the certificate-file predicates.
    pub(crate) fn tls_files_reload_ended(&mut self, reload: u64, rejected: Option<&str>) {
        if self.spec.workload.tls_files.is_none() {
            return;
        }
        let t = &mut self.out.tls_files;
        t.reloads.push((reload, rejected.is_none()));
        if let Some(message) = rejected {
            t.rejections.push((reload, message.to_owned()));
        }
    }

    /// After each parent step: the identity it serves, recorded when it changed.
    pub(crate) fn tls_files_observe(&mut self, now: Instant, parent: &Parent) {
        let Some(tls) = parent.tls() else {
            return;
        };
        let status = tls.status();
        let generation = status.identity_generation;
        let identities = &mut self.out.tls_files.identities;
        if identities.last().is_none_or(|(_, g, _)| *g != generation) {
            identities.push((
                now.as_nanos() / 1_000_000,
                generation,
                serial_of(&status.summary.subject),
            ));
        }
    }
}
