//! The certificate files read again on reload (decision 0093).
//!
//! When the identity came from files (`--tls-cert`/`--tls-key`), an operator renews the
//! certificate by replacing the files and reloading. Whether a reload reads them, and what
//! a read that fails does to the reload, is decided here, once, for every driver: a reload
//! whose configuration is valid waits for [`ParentAction::ReadTlsFiles`]'s answer
//! ([`Event::TlsFilesRead`]). A good read hands the identity to the TLS material before
//! the reload reaches the supervisor, so the new generation starts with it and the old one
//! is handed it at once; a bad read refuses the reload with the read's reason (the current
//! identity stays, and `ctl status` shows why until a new one is taken). A reload whose
//! configuration is invalid is refused for that without reading anything; a reload that
//! changes the features is refused before (`crate::parent`). A resize (SIGTTIN, SIGTTOU)
//! only changes the worker count and reads nothing.

use crate::config::RawConfig;
use crate::ids::ReloadId;
use crate::supervisor::{Command, Event};
use crate::time::Instant;
use crate::tls_material::TlsInput;

use super::{Parent, ParentAction};

/// Reloads waiting for their read of the certificate files.
#[derive(Debug, Clone, Default)]
pub(super) struct TlsFiles {
    /// The identity came from files, which a reload reads again.
    from_files: bool,
    /// In the order asked (the driver answers each once).
    reading: Vec<(ReloadId, Box<RawConfig>)>,
}

impl Parent {
    /// The driver's report, before the first event: the identity handed to
    /// [`Parent::start_tls`] came from certificate files, which every reload reads again.
    pub fn reread_tls_files_on_reload(mut self) -> Self {
        self.tls_files.from_files = true;
        self
    }

    /// Reloads waiting for the certificate files to be read.
    pub fn tls_files_reading(&self) -> usize {
        self.tls_files.reading.len()
    }

    /// A reload the supervisor would take: when the identity came from files, it waits for
    /// them to be read; otherwise (or with a configuration the supervisor will refuse
    /// anyway) it goes on at once.
    pub(super) fn reload_or_read(&mut self, now: Instant, id: ReloadId, config: Box<RawConfig>) {
        let reads = self.tls_files.from_files && self.tls.is_some() && config.validate().is_ok();
        if reads {
            self.tls_files.reading.push((id, config));
            self.actions
                .push_back(ParentAction::ReadTlsFiles { reload: id });
        } else {
            self.supervisor
                .handle(now, Event::Command(Command::Reload { id, config }));
        }
    }

    /// The files read for reload `id`: the identity taken and the reload on its way, or the
    /// reload refused with the read's reason. An answer nobody waits for is dropped.
    pub(super) fn tls_files_read(
        &mut self,
        now: Instant,
        id: ReloadId,
        read: Result<TlsInput, String>,
    ) {
        let Some(at) = self.tls_files.reading.iter().position(|(r, _)| *r == id) else {
            return;
        };
        let (_, config) = self.tls_files.reading.remove(at);
        match read {
            Ok(identity) => {
                if let Some(tls) = &mut self.tls {
                    tls.handle(now, identity);
                }
                self.supervisor
                    .handle(now, Event::Command(Command::Reload { id, config }));
            }
            Err(reason) => {
                if let Some(tls) = &mut self.tls {
                    tls.handle(
                        now,
                        TlsInput::Refused {
                            reason: reason.clone(),
                        },
                    );
                }
                self.supervisor.handle(
                    now,
                    Event::Command(Command::ReloadUnreadable {
                        id,
                        message: reason,
                    }),
                );
            }
        }
    }
}
