//! Binding the listeners, all of them before any worker exists.

use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener};

/// Where servery listens when no port is given, and how far it scans forward.
pub const DEFAULT_PORT: u16 = 8000;
pub const PORT_SCAN: u16 = 100;

/// How long the kernel holds a connection whose client has sent nothing before handing it
/// to a worker anyway (`TCP_DEFER_ACCEPT`, see [`crate::os::set_defer_accept`]). Short:
/// past it the header-read timeout decides, as for any slow client.
pub const DEFER_ACCEPT_SECS: u32 = 1;

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
pub fn bind_all(addrs: &[IpAddr], port: Option<u16>) -> Result<Vec<TcpListener>, BindError> {
    if addrs.is_empty() {
        return Err(BindError::NoAddress);
    }
    if let Some(port) = port {
        return bind_on(addrs, port);
    }
    let last = DEFAULT_PORT + PORT_SCAN - 1;
    for port in DEFAULT_PORT..=last {
        match bind_on(addrs, port) {
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

fn bind_on(addrs: &[IpAddr], port: u16) -> Result<Vec<TcpListener>, BindError> {
    let mut listeners: Vec<TcpListener> = Vec::with_capacity(addrs.len());
    let mut port = port;
    for &ip in addrs {
        let addr = SocketAddr::new(ip, port);
        let listener =
            TcpListener::bind(addr).map_err(|source| BindError::Bind { addr, source })?;
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

/// The listeners a service manager passed (socket activation), instead of binding: the
/// one named `admin` (`FileDescriptorName=admin`) is the admin listener, every other one
/// serves files. `--admin`, if given too, binds the admin listener when none was passed.
pub fn adopt(
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
pub fn url(scheme: &str, addr: SocketAddr) -> String {
    format!("{scheme}://{addr}/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ephemeral_port_is_shared_by_every_address_and_a_busy_port_is_an_error() {
        let lo: IpAddr = "127.0.0.1".parse().expect("ip");
        let listeners = bind_all(&[lo], Some(0)).expect("bind");
        let port = listeners[0].local_addr().expect("addr").port();
        assert_ne!(port, 0);
        let err = bind_all(&[lo], Some(port)).expect_err("busy");
        assert!(matches!(err, BindError::Bind { .. }), "{err}");
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn every_bound_listener_defers_accept_until_the_client_speaks() {
        let lo: IpAddr = "127.0.0.1".parse().expect("ip");
        for listener in bind_all(&[lo], Some(0)).expect("bind") {
            crate::os::assert_defers_accept(&listener);
        }
    }
}
