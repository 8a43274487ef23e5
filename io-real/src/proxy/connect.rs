//! Connecting to an upstream: TCP (with `TCP_NODELAY`), TLS over TCP, or a Unix socket,
//! each under the connect timeout. The HTTP/1.1 pools (`pool.rs`) dial a route's
//! [`Target`], read once; hyper-util's client (HTTP/2 routes) dials a URI, a Unix route
//! addressed as `http://unix-N.invalid`.

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpStream, UnixStream};

/// The host name a Unix route's requests carry to the connector.
pub(super) fn unix_host(index: usize) -> String {
    format!("unix-{index}.invalid")
}

/// A connection to an upstream, either kind.
#[derive(Debug)]
pub(crate) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl Connection for Stream {
    /// HTTP/2 when TLS negotiated it by ALPN (the client then speaks HTTP/2 on it and
    /// shares it among requests); an h2c route's client speaks HTTP/2 whatever this says.
    fn connected(&self) -> Connected {
        match self {
            Stream::Tls(s) if s.get_ref().1.alpn_protocol() == Some(b"h2") => {
                Connected::new().negotiated_h2()
            }
            _ => Connected::new(),
        }
    }
}

impl tokio::io::AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl tokio::io::AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_flush(cx),
            Stream::Unix(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Unix(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Dials what a request's URI names (also the cluster's etcd client, `crate::cluster`).
#[derive(Clone)]
pub(crate) struct Connector {
    /// The socket of each Unix route, by the index in its host name.
    pub unix: Arc<Vec<PathBuf>>,
    pub timeout: Duration,
    /// For `https` URIs.
    pub tls: tokio_rustls::TlsConnector,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector")
            .field("unix", &self.unix)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// Why a connection was not made (the proxy's answer tells the two apart: 504 and 502).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    #[error("connecting to the upstream timed out after {0:?}")]
    TimedOut(Duration),
    #[error("cannot connect to the upstream: {0}")]
    Failed(#[source] io::Error),
}

/// Where one upstream is dialled: read once from its route, so a pooled connection is made
/// without reading a URI again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Target {
    Tcp { host: String, port: u16 },
    Tls { host: String, port: u16 },
    Unix(PathBuf),
}

impl Target {
    /// The target a URI names (`http` or `https`, or a Unix route's `unix-N.invalid`).
    fn of_uri(uri: &Uri, unix: &[PathBuf]) -> Result<Target, io::Error> {
        let host = uri.host().unwrap_or_default();
        if let Some(index) = host
            .strip_prefix("unix-")
            .and_then(|h| h.strip_suffix(".invalid"))
            .and_then(|i| i.parse::<usize>().ok())
        {
            let path = unix
                .get(index)
                .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such unix route"))?;
            return Ok(Target::Unix(path.clone()));
        }
        let https = uri.scheme_str() == Some("https");
        Ok(Target::tcp(
            host,
            uri.port_u16().unwrap_or(if https { 443 } else { 80 }),
            https,
        ))
    }

    /// A TCP target, over TLS when `tls`; an IPv6 host loses its brackets.
    pub(super) fn tcp(host: &str, port: u16, tls: bool) -> Target {
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        if tls {
            Target::Tls { host, port }
        } else {
            Target::Tcp { host, port }
        }
    }
}

impl Connector {
    /// A connection to `target`, within the connect timeout.
    pub(super) async fn dial(&self, target: &Target) -> Result<Stream, ConnectError> {
        let dial = async {
            let (host, port, tls) = match target {
                Target::Unix(path) => return UnixStream::connect(path).await.map(Stream::Unix),
                Target::Tcp { host, port } => (host, *port, false),
                Target::Tls { host, port } => (host, *port, true),
            };
            let stream = TcpStream::connect((host.as_str(), port)).await?;
            stream.set_nodelay(true)?;
            if !tls {
                return Ok(Stream::Tcp(stream));
            }
            let name = rustls::pki_types::ServerName::try_from(host.clone())
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
            let stream = self.tls.connect(name, stream).await?;
            Ok(Stream::Tls(Box::new(stream)))
        };
        match tokio::time::timeout(self.timeout, dial).await {
            Ok(Ok(stream)) => Ok(stream),
            Ok(Err(e)) => Err(ConnectError::Failed(e)),
            Err(_) => Err(ConnectError::TimedOut(self.timeout)),
        }
    }
}

/// hyper-util's pooled client (the `h2://` and `h2c://` routes) dials through this.
impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<Stream>;
    type Error = ConnectError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connector = self.clone();
        Box::pin(async move {
            let target = Target::of_uri(&uri, &connector.unix).map_err(ConnectError::Failed)?;
            connector.dial(&target).await.map(TokioIo::new)
        })
    }
}
