//! The listener sets the parent holds, keyed by the core's [`Listen`]: the starting
//! configuration's, bound before anything else, and one per reload that moved the port,
//! bound when the core says `BindListeners`. The core decides which set a worker starts on
//! (its `Spawn`'s configuration) and when a set's sockets close here (`ReleaseListeners`,
//! `CloseListeners`); this table only holds the sockets (decision 0035).

use std::net::{IpAddr, SocketAddr, TcpListener};

use servery_core::config::Listen;

use super::listeners::{BindError, bind_all, url};

#[derive(Debug)]
pub struct ListenerSets {
    sets: Vec<(Listen, Vec<TcpListener>)>,
    /// The addresses every set listens on (fixed while servery runs).
    bind: Vec<IpAddr>,
    scheme: &'static str,
    /// The set bound at start, and what fixes it for the run, if anything does.
    started: Listen,
    fixed_by: Option<&'static str>,
}

impl ListenerSets {
    /// The set bound at start for `listen`.
    pub fn new(
        bind: Vec<IpAddr>,
        scheme: &'static str,
        listen: Listen,
        listeners: Vec<TcpListener>,
    ) -> Self {
        ListenerSets {
            sets: vec![(listen, listeners)],
            bind,
            scheme,
            started: listen,
            fixed_by: None,
        }
    }

    /// The port cannot move in this run, for `reason` (HTTP/3's per-slot sockets, ACME,
    /// the service manager's sockets).
    pub fn with_port_fixed_by(mut self, reason: Option<&'static str>) -> Self {
        self.fixed_by = reason;
        self
    }

    /// Why a reload to `listen` cannot be carried out, if it cannot: checked on the
    /// reload's whole configuration (file, command line and `ctl reload --set`).
    pub fn refuse_move(&self, listen: Listen) -> Result<(), String> {
        match self.fixed_by {
            Some(reason) if listen != self.started => Err(format!(
                "port cannot change on reload {reason}; restart to change it: {} -> {}",
                shown(self.started),
                shown(listen)
            )),
            _ => Ok(()),
        }
    }

    /// The sockets of `listen`; none once it is closed.
    pub fn get(&self, listen: Listen) -> &[TcpListener] {
        self.sets
            .iter()
            .find(|(l, _)| *l == listen)
            .map_or(&[], |(_, set)| set.as_slice())
    }

    pub fn addrs(&self, listen: Listen) -> Vec<SocketAddr> {
        self.get(listen)
            .iter()
            .filter_map(|l| l.local_addr().ok())
            .collect()
    }

    /// `SCHEME://ADDR/` of each socket of `listen`.
    pub fn urls(&self, listen: Listen) -> Vec<String> {
        self.addrs(listen)
            .into_iter()
            .map(|a| url(self.scheme, a))
            .collect()
    }

    /// Bind `listen` on every address; a set already held is not bound twice.
    pub fn bind(&mut self, listen: Listen) -> Result<(), BindError> {
        if self.sets.iter().any(|(l, _)| *l == listen) {
            return Ok(());
        }
        let set = bind_all(&self.bind, listen.port)?;
        self.sets.push((listen, set));
        Ok(())
    }

    /// Close the parent's copy of `listen`; whether it held one.
    pub fn release(&mut self, listen: Listen) -> bool {
        let before = self.sets.len();
        self.sets.retain(|(l, _)| *l != listen);
        self.sets.len() < before
    }

    pub fn close_all(&mut self) {
        self.sets.clear();
    }
}

fn shown(listen: Listen) -> String {
    listen
        .port
        .map_or_else(|| "unset".into(), |p| p.to_string())
}
