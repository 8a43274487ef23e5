//! Reload admission: what a reload may not change in this run, decided here from the
//! configuration and the facts the driver reported when it started the parent, so the
//! real parent and the simulated one refuse the same reloads (decision 0072).

use super::*;

/// Why the port is fixed for the run: the sockets a reload would move are not the core's
/// to bind again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortFixedBy {
    /// The service manager handed the listeners over (socket activation): they are its.
    ServiceManager,
    /// HTTP/3's UDP sockets are bound on the port for the parent's life.
    Http3,
    /// The certificate's HTTP-01 and HTTPS ports are fixed for the manager's life.
    Acme,
}

impl PortFixedBy {
    /// The words a refusal carries ("port cannot change on reload with …").
    pub fn reason(self) -> &'static str {
        match self {
            PortFixedBy::ServiceManager => {
                "with sockets from the service manager (change them in its socket unit)"
            }
            PortFixedBy::Http3 => {
                "with --http3 (its UDP sockets are bound once, for the parent's life)"
            }
            PortFixedBy::Acme => {
                "with --acme (the certificate's HTTP-01 and HTTPS ports are fixed)"
            }
        }
    }
}

impl Supervisor {
    /// The driver's report, before the first event: the serving listeners came from the
    /// service manager.
    pub fn listeners_from_service_manager(&mut self) {
        self.listeners_inherited = true;
    }

    /// What fixes the port for this run, if anything: the service manager's sockets
    /// first (whatever else is on, they are its), then HTTP/3, then ACME. Features cannot
    /// change on reload, so the answer holds for the whole run.
    pub fn port_fixed_by(&self) -> Option<PortFixedBy> {
        let features = self.config.features();
        if self.listeners_inherited {
            Some(PortFixedBy::ServiceManager)
        } else if features.http3 {
            Some(PortFixedBy::Http3)
        } else if features.acme {
            Some(PortFixedBy::Acme)
        } else {
            None
        }
    }

    /// Why a reload to `to` cannot be carried out, if it cannot: a move of a fixed port.
    /// (While the port is fixed the committed set is still the one bound at start.)
    pub(super) fn refuse_port_move(&self, to: Listen) -> Option<String> {
        let from = self.config.listen();
        let fixed = self.port_fixed_by().filter(|_| to != from)?;
        let shown = |l: Listen| l.port.map_or_else(|| "unset".into(), |p| p.to_string());
        Some(format!(
            "port cannot change on reload {}; restart to change it: {} -> {}",
            fixed.reason(),
            shown(from),
            shown(to)
        ))
    }
}
