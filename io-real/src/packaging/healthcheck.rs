//! `servery healthcheck`: one `GET` of the admin listener's `/livez` (or `/readyz`), exit
//! 0 on 200 and 1 otherwise, as a container's `HEALTHCHECK` expects. Plain HTTP/1.1 over a
//! std socket: the admin listener speaks nothing else, and the probe must not need a
//! runtime, a shell or a client program in the image.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use super::HealthcheckArgs;

/// A container's `HEALTHCHECK` reads 1 as unhealthy.
const UNHEALTHY: i32 = 1;

/// The most of the answer read: its status line is all that is judged.
const ANSWER_CAP: u64 = 4096;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(super) enum ProbeError {
    #[error("no admin listener is configured: give --admin ADDR, or set SERVERY_ADMIN")]
    NoAdmin,
    #[error("the configuration cannot be read: {0}")]
    Config(String),
    #[error("--timeout must be a positive number of seconds, got {0}")]
    Timeout(f64),
    #[error("--path must start with `/` and hold no spaces or control characters, got {0:?}")]
    Path(String),
    #[error("{addr}: {source}")]
    Io {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("{addr}: the answer is not HTTP: {line:?}")]
    NotHttp { addr: SocketAddr, line: String },
}

/// Probes, prints one line, returns the exit code: 0 healthy, 1 anything else, a
/// configuration that names no admin listener included (Docker keeps 2 for itself in a
/// `HEALTHCHECK`).
pub fn healthcheck(args: &HealthcheckArgs) -> i32 {
    match probe(args) {
        Ok((addr, 200, line)) => {
            say!("healthy: http://{addr}{} answered {line}", args.path);
            0
        }
        Ok((addr, _, line)) => {
            tell!("unhealthy: http://{addr}{} answered {line}", args.path);
            UNHEALTHY
        }
        Err(
            e @ (ProbeError::NoAdmin
            | ProbeError::Config(_)
            | ProbeError::Timeout(_)
            | ProbeError::Path(_)),
        ) => {
            tell!("servery healthcheck: {e}");
            UNHEALTHY
        }
        Err(e) => {
            tell!("unhealthy: {e}");
            UNHEALTHY
        }
    }
}

/// The address asked, the status code and the status line's text after the version.
fn probe(args: &HealthcheckArgs) -> Result<(SocketAddr, u16, String), ProbeError> {
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        return Err(ProbeError::Timeout(args.timeout));
    }
    // It goes into the request line as it is.
    let path = &args.path;
    if !path.starts_with('/') || path.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(ProbeError::Path(path.clone()));
    }
    let timeout = Duration::from_secs_f64(args.timeout.min(3600.0));
    let addr = reachable(match args.admin {
        Some(addr) => addr,
        None => configured_admin()?,
    });
    let io = |source| ProbeError::Io { addr, source };
    let deadline = Instant::now() + timeout;
    let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(io)?;
    let left = || {
        deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    };
    stream.set_write_timeout(Some(left())).map_err(io)?;
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: localhost\r\nUser-Agent: servery-healthcheck\r\nConnection: close\r\n\r\n",
        args.path
    );
    stream.write_all(request.as_bytes()).map_err(io)?;
    stream.set_read_timeout(Some(left())).map_err(io)?;
    let mut answer = Vec::new();
    let mut limited = (&mut stream).take(ANSWER_CAP);
    // Read until the status line is complete (the parent closes after answering).
    let mut chunk = [0u8; 512];
    while !answer.contains(&b'\n') {
        stream_read(&mut limited, &mut chunk, &mut answer).map_err(io)?;
        if Instant::now() >= deadline {
            break;
        }
    }
    let text = String::from_utf8_lossy(&answer);
    let line = text.lines().next().unwrap_or("").trim().to_owned();
    let status = line
        .strip_prefix("HTTP/1.")
        .and_then(|rest| rest.get(2..))
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse::<u16>().ok());
    match status {
        Some(code) => Ok((addr, code, line.get(9..).unwrap_or("").to_owned())),
        None => Err(ProbeError::NotHttp { addr, line }),
    }
}

fn stream_read(from: &mut impl Read, chunk: &mut [u8], into: &mut Vec<u8>) -> std::io::Result<()> {
    match from.read(chunk)? {
        0 => Err(std::io::ErrorKind::UnexpectedEof.into()),
        n => {
            into.extend_from_slice(&chunk[..n]);
            Ok(())
        }
    }
}

/// The service's `--admin` as its environment and configuration file give it.
fn configured_admin() -> Result<SocketAddr, ProbeError> {
    let argv = [std::ffi::OsString::from("servery")];
    let loaded = crate::settings::load(&argv).map_err(|e| ProbeError::Config(e.to_string()))?;
    loaded.cli.serve.ops.admin.ok_or(ProbeError::NoAdmin)
}

/// A listener on a wildcard address is asked on the loopback of its family.
fn reachable(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), addr.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), addr.port())
        }
        _ => addr,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_are_asked_on_the_loopback() {
        let v4: SocketAddr = "0.0.0.0:9000".parse().expect("addr");
        let v6: SocketAddr = "[::]:9000".parse().expect("addr");
        let own: SocketAddr = "10.0.0.2:9000".parse().expect("addr");
        assert_eq!(reachable(v4), "127.0.0.1:9000".parse().expect("addr"));
        assert_eq!(reachable(v6), "[::1]:9000".parse().expect("addr"));
        assert_eq!(reachable(own), own);
    }
}
