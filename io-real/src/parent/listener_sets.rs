//! The listener sets the parent holds, keyed by the core's [`Listen`]: the starting
//! configuration's, bound before anything else, and one per reload that moved the port,
//! bound when the core says `BindListeners`. The core decides which set a worker starts on
//! (its `Spawn`'s configuration) and when a set's sockets close here (`ReleaseListeners`,
//! `CloseListeners`); this table only holds the sockets (decision 0035).

use std::net::{SocketAddr, TcpListener};

use servery_core::config::Listen;

use super::listeners::{BindError, Binding, bind_all, url};

#[derive(Debug)]
pub(super) struct ListenerSets {
    sets: Vec<(Listen, Vec<TcpListener>)>,
    /// The addresses every set listens on, and their backlog (fixed while servery runs).
    binding: Binding,
    scheme: &'static str,
}

impl ListenerSets {
    /// The set bound at start for `listen`.
    pub(super) fn new(
        binding: Binding,
        scheme: &'static str,
        listen: Listen,
        listeners: Vec<TcpListener>,
    ) -> Self {
        ListenerSets {
            sets: vec![(listen, listeners)],
            binding,
            scheme,
        }
    }

    /// The sockets of `listen`; none once it is closed.
    pub(super) fn get(&self, listen: Listen) -> &[TcpListener] {
        self.sets
            .iter()
            .find(|(l, _)| *l == listen)
            .map_or(&[], |(_, set)| set.as_slice())
    }

    pub(super) fn addrs(&self, listen: Listen) -> Vec<SocketAddr> {
        self.get(listen)
            .iter()
            .filter_map(|l| l.local_addr().ok())
            .collect()
    }

    /// `SCHEME://ADDR/` of each socket of `listen`.
    pub(super) fn urls(&self, listen: Listen) -> Vec<String> {
        self.addrs(listen)
            .into_iter()
            .map(|a| url(self.scheme, a))
            .collect()
    }

    /// Bind `listen` on every address; a set already held is not bound twice.
    pub(super) fn bind(&mut self, listen: Listen) -> Result<(), BindError> {
        if self.sets.iter().any(|(l, _)| *l == listen) {
            return Ok(());
        }
        // A port asked for by number may be the one a held set already listens on (started
        // without `--port` on 8000, then `port = 8000` written into the file): binding it
        // again would fail with "address in use", so the new set is the same sockets,
        // duplicated, and the kernel's socket lives on while either set holds it.
        if let Some(port) = listen.port.filter(|&p| p != 0)
            && let Some((_, held)) = self.sets.iter().find(|(_, set)| {
                !set.is_empty()
                    && set
                        .iter()
                        .all(|l| l.local_addr().is_ok_and(|a| a.port() == port))
            })
        {
            let mut same = Vec::with_capacity(held.len());
            for socket in held {
                let dup = socket.try_clone().map_err(|source| BindError::Bind {
                    addr: socket
                        .local_addr()
                        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], port))),
                    source,
                })?;
                same.push(dup);
            }
            self.sets.push((listen, same));
            return Ok(());
        }
        let set = bind_all(&self.binding, listen.port)?;
        self.sets.push((listen, set));
        Ok(())
    }

    /// Close the parent's copy of `listen`; whether it held one.
    pub(super) fn release(&mut self, listen: Listen) -> bool {
        let before = self.sets.len();
        self.sets.retain(|(l, _)| *l != listen);
        self.sets.len() < before
    }

    pub(super) fn close_all(&mut self) {
        self.sets.clear();
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpStream;

    use super::*;

    fn loopback() -> Binding {
        Binding {
            addrs: vec![std::net::IpAddr::from([127, 0, 0, 1])],
            backlog: super::super::listeners::LISTEN_BACKLOG,
        }
    }

    fn started() -> (ListenerSets, u16) {
        let any = Listen { port: Some(0) };
        let first = bind_all(&loopback(), any.port).expect("bind");
        let port = first[0].local_addr().expect("addr").port();
        (ListenerSets::new(loopback(), "http", any, first), port)
    }

    #[test]
    fn naming_the_port_a_held_set_has_reuses_its_sockets() {
        let (mut sets, port) = started();
        let named = Listen { port: Some(port) };
        sets.bind(named)
            .expect("the held port is not busy for its own parent");
        assert_eq!(sets.addrs(named), sets.addrs(Listen { port: Some(0) }));
        // The first key's copy closes; the socket still listens through the second.
        assert!(sets.release(Listen { port: Some(0) }));
        assert!(TcpStream::connect(("127.0.0.1", port)).is_ok());
        sets.close_all();
        assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
    }

    #[test]
    fn a_port_another_program_holds_is_refused_and_a_free_one_bound() {
        let (mut sets, _) = started();
        let other = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let busy = Listen {
            port: Some(other.local_addr().expect("addr").port()),
        };
        let err = sets.bind(busy).expect_err("busy");
        assert!(err.to_string().contains("in use"), "{err}");
        assert!(sets.get(busy).is_empty());
        drop(other);
        sets.bind(busy).expect("free now");
        assert_eq!(sets.urls(busy).len(), 1);
    }
}
