//! Binding the listeners, all of them before any worker exists.

use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener};

/// Where servery listens when no port is given, and how far it scans forward.
pub(super) const DEFAULT_PORT: u16 = 8000;
pub(super) const PORT_SCAN: u16 = 100;

/// How long the kernel holds a connection whose client has sent nothing before handing it
/// to a worker anyway (`TCP_DEFER_ACCEPT`, see [`crate::os::set_defer_accept`]). Short:
/// past it the header-read timeout decides, as for any slow client.
pub(super) const DEFER_ACCEPT_SECS: u32 = 1;

/// The default of `--listen-backlog`: connections the kernel completes before a worker
/// accepts them. The kernel caps it at `net.core.somaxconn` (4,096 on current Linux);
/// the standard library's 128 overflows under a burst of connections. The shipped socket
/// unit (`docs/systemd/servery.socket`, `Backlog=`) names the same number.
pub const LISTEN_BACKLOG: u32 = 4096;

/// The addresses every listener set is bound on, and the backlog each socket asks for
/// (both fixed while servery runs).
#[derive(Debug, Clone)]
pub(super) struct Binding {
    pub addrs: Vec<IpAddr>,
    /// `--listen-backlog` (validated to 1..=65535 by its parser).
    pub backlog: u32,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BindError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error("no free port in {first}..{last} on {addrs}")]
    NoFreePort {
        first: u16,
        last: u16,
        addrs: String,
    },
    #[error("no address to listen on")]
    NoAddress,
    #[error("cannot use a listener passed by the service manager: {source}")]
    Adopt {
        #[source]
        source: io::Error,
    },
    #[error("cannot listen on {addr} (--admin): {source}")]
    Admin {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
}

/// Bind every address on one port. With `port` given (0 = ephemeral, chosen on the first
/// address and reused for the rest) a busy port is an error; without it, the default port
/// and the ones after it are tried in turn.
pub(super) fn bind_all(
    binding: &Binding,
    port: Option<u16>,
) -> Result<Vec<TcpListener>, BindError> {
    let (addrs, backlog) = (binding.addrs.as_slice(), binding.backlog);
    if addrs.is_empty() {
        return Err(BindError::NoAddress);
    }
    if let Some(port) = port {
        return bind_on(addrs, port, backlog);
    }
    let last = DEFAULT_PORT + PORT_SCAN - 1;
    for port in DEFAULT_PORT..=last {
        match bind_on(addrs, port, backlog) {
            Ok(listeners) => return Ok(listeners),
            Err(BindError::Bind { source, .. }) if source.kind() == io::ErrorKind::AddrInUse => {
                tracing::debug!(port, "port busy, trying the next one");
            }
            Err(e) => return Err(e),
        }
    }
    Err(BindError::NoFreePort {
        first: DEFAULT_PORT,
        last,
        addrs: addrs
            .iter()
            .map(IpAddr::to_string)
            .collect::<Vec<_>>()
            .join(", "),
    })
}

fn bind_on(addrs: &[IpAddr], port: u16, backlog: u32) -> Result<Vec<TcpListener>, BindError> {
    let mut listeners: Vec<TcpListener> = Vec::with_capacity(addrs.len());
    let mut port = port;
    for &ip in addrs {
        let addr = SocketAddr::new(ip, port);
        // An IPv6 wildcard listener would also take the port on every IPv4 address
        // (dual stack) and collide with the IPv4 listeners beside it: it takes IPv6 alone
        // then, as nginx's listeners do. Alone, it keeps the system's dual-stack default.
        let v6only = ip.is_ipv6() && addrs.iter().any(IpAddr::is_ipv4);
        let listener =
            listen_on(addr, v6only, backlog).map_err(|source| BindError::Bind { addr, source })?;
        if let Err(e) = crate::os::set_defer_accept(&listener, DEFER_ACCEPT_SECS) {
            // Only a cost, never a fault: connections are then accepted when established.
            tracing::warn!(%addr, error = %e, "TCP_DEFER_ACCEPT not set");
        }
        if port == 0 {
            port = listener
                .local_addr()
                .map_err(|source| BindError::Bind { addr, source })?
                .port();
        }
        listeners.push(listener);
    }
    Ok(listeners)
}

/// A listening socket on `addr`: `SO_REUSEADDR` (a restart binds while the old
/// connections are in TIME_WAIT), close-on-exec, the backlog, and `IPV6_V6ONLY` when
/// asked.
fn listen_on(addr: SocketAddr, v6only: bool, backlog: u32) -> io::Result<TcpListener> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType, sockopt};
    let family = if addr.is_ipv6() {
        AddressFamily::INET6
    } else {
        AddressFamily::INET
    };
    let fd = rustix::net::socket_with(family, SocketType::STREAM, SocketFlags::CLOEXEC, None)?;
    sockopt::set_socket_reuseaddr(&fd, true)?;
    if v6only {
        sockopt::set_ipv6_v6only(&fd, true)?;
    }
    rustix::net::bind(&fd, &addr)?;
    // At most 65,535 by its parser; the kernel caps it further at somaxconn.
    rustix::net::listen(&fd, i32::try_from(backlog).unwrap_or(i32::MAX))?;
    Ok(TcpListener::from(fd))
}

/// What binding these addresses on one port would refuse, as far as it can be known
/// without trying: an address twice, or a wildcard address beside another address of its
/// family (the wildcard holds the port on all of them). `0.0.0.0` beside `::` is fine:
/// the IPv6 listener then takes IPv6 alone.
pub(super) fn conflicting_binds(addrs: &[IpAddr]) -> Option<String> {
    for (i, a) in addrs.iter().enumerate() {
        for b in &addrs[i + 1..] {
            if a == b {
                return Some(format!("{a} is given twice"));
            }
            let same_family = a.is_ipv4() == b.is_ipv4();
            if same_family && (a.is_unspecified() || b.is_unspecified()) {
                let (wildcard, other) = if a.is_unspecified() { (a, b) } else { (b, a) };
                return Some(format!(
                    "{wildcard} already listens on every address of its family, {other} \
                     included: give one or the other"
                ));
            }
        }
    }
    None
}

/// The listeners a service manager passed (socket activation), instead of binding: the
/// one named `admin` (`FileDescriptorName=admin`) is the admin listener, every other one
/// serves files. `--admin`, if given too, binds the admin listener when none was passed.
pub(super) fn adopt(
    inherited: Vec<crate::os::InheritedListener>,
    admin: Option<SocketAddr>,
) -> Result<(Vec<TcpListener>, Option<TcpListener>), BindError> {
    let mut serving = Vec::new();
    let mut admin_listener = None;
    for passed in inherited {
        if passed.name == "admin" && admin_listener.is_none() {
            passed
                .listener
                .set_nonblocking(true)
                .map_err(|source| BindError::Adopt { source })?;
            admin_listener = Some(passed.listener);
            continue;
        }
        // As bound here: blocking until a worker takes it (each sets its own copy).
        passed
            .listener
            .set_nonblocking(false)
            .map_err(|source| BindError::Adopt { source })?;
        if let Err(e) = crate::os::set_defer_accept(&passed.listener, DEFER_ACCEPT_SECS) {
            tracing::warn!(name = %passed.name, error = %e, "TCP_DEFER_ACCEPT not set");
        }
        serving.push(passed.listener);
    }
    if serving.is_empty() {
        return Err(BindError::NoAddress);
    }
    let admin_listener = match (admin_listener, admin) {
        (Some(l), _) => Some(l),
        (None, Some(addr)) => Some(
            crate::parent::admin::bind(addr).map_err(|source| BindError::Admin { addr, source })?,
        ),
        (None, None) => None,
    };
    Ok((serving, admin_listener))
}

/// `SCHEME://ADDR/` for a listener's address, with IPv6 in brackets.
pub(super) fn url(scheme: &str, addr: SocketAddr) -> String {
    format!("{scheme}://{addr}/")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on(addrs: &[IpAddr]) -> Binding {
        Binding {
            addrs: addrs.to_vec(),
            backlog: LISTEN_BACKLOG,
        }
    }

    #[test]
    fn an_ephemeral_port_is_shared_by_every_address_and_a_busy_port_is_an_error() {
        let lo: IpAddr = "127.0.0.1".parse().expect("ip");
        let listeners = bind_all(&on(&[lo]), Some(0)).expect("bind");
        let port = listeners[0].local_addr().expect("addr").port();
        assert_ne!(port, 0);
        let err = bind_all(&on(&[lo]), Some(port)).expect_err("busy");
        assert!(matches!(err, BindError::Bind { .. }), "{err}");
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn every_bound_listener_defers_accept_until_the_client_speaks() {
        let lo: IpAddr = "127.0.0.1".parse().expect("ip");
        for listener in bind_all(&on(&[lo]), Some(0)).expect("bind") {
            crate::os::assert_defers_accept(&listener);
        }
    }

    #[test]
    fn both_wildcards_share_a_port_and_each_family_answers() {
        let v4: IpAddr = "0.0.0.0".parse().expect("ip");
        let v6: IpAddr = "::".parse().expect("ip");
        if TcpListener::bind("[::1]:0").is_err() {
            eprintln!("SKIPPED: no IPv6 on this host");
            return;
        }
        let listeners = bind_all(&on(&[v4, v6]), Some(0)).expect("0.0.0.0 and :: on one port");
        let port = listeners[0].local_addr().expect("addr").port();
        for (target, listener) in [("127.0.0.1", &listeners[0]), ("::1", &listeners[1])] {
            let addr = SocketAddr::new(target.parse().expect("ip"), port);
            let client = std::net::TcpStream::connect(addr).expect("connect");
            // TCP_DEFER_ACCEPT: the connection is handed over once it has spoken.
            std::io::Write::write_all(&mut &client, b"x").expect("write");
            let (_, peer) = listener.accept().expect("accept");
            assert_eq!(
                peer.is_ipv4(),
                target.contains('.'),
                "{target} reached {peer}"
            );
        }
    }

    #[test]
    fn binds_that_would_collide_are_named_before_binding() {
        let ips = |list: &[&str]| -> Vec<IpAddr> {
            list.iter().map(|a| a.parse().expect("ip")).collect()
        };
        assert_eq!(conflicting_binds(&ips(&["0.0.0.0", "::"])), None);
        assert_eq!(conflicting_binds(&ips(&["127.0.0.1", "::1"])), None);
        assert!(conflicting_binds(&ips(&["0.0.0.0", "127.0.0.1"])).is_some());
        assert!(conflicting_binds(&ips(&["::1", "::"])).is_some());
        assert!(conflicting_binds(&ips(&["127.0.0.1", "127.0.0.1"])).is_some());
    }
}
