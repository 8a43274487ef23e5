//! An HTTP/3 client for the tests: quinn and h3 (the crates servery uses, built once),
//! trusting exactly the test's certificate, one connection per [`H3`] from a local
//! address the test chooses (so the access log's remote address names the connection).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes};
use h3::error::{Code, ConnectionError, StreamError};
use rustls::pki_types::CertificateDer;

/// How long a connection may go without hearing from the server: short, so a client of a
/// killed worker notices within the test's bounds.
pub(crate) const IDLE: Duration = Duration::from_secs(2);

/// A client configuration that trusts `cert` only, offering ALPN `h3`.
pub(crate) fn config(cert: &CertificateDer<'static>) -> quinn::ClientConfig {
    config_pinging(cert, None)
}

/// [`config`], sending a PING every `keep_alive` so an idle connection never times out.
pub(crate) fn config_pinging(
    cert: &CertificateDer<'static>,
    keep_alive: Option<Duration>,
) -> quinn::ClientConfig {
    config_with(cert, keep_alive, IDLE)
}

/// [`config`] with its own idle timeout.
pub(crate) fn config_with(
    cert: &CertificateDer<'static>,
    keep_alive: Option<Duration>,
    idle: Duration,
) -> quinn::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.clone()).expect("trust anchor");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).expect("QUIC TLS");
    let mut config = quinn::ClientConfig::new(Arc::new(crypto));
    let mut transport = quinn::TransportConfig::default();
    transport.max_idle_timeout(Some(idle.try_into().expect("idle timeout")));
    transport.keep_alive_interval(keep_alive);
    config.transport_config(Arc::new(transport));
    config
}

/// A client that grants the server only `window` bytes of credit per stream to begin with
/// (QUIC's initial MAX_STREAM_DATA), so the server can send a response no further than
/// the client reads: one that stops reading withholds credit for good, one that reads a
/// trickle grants it a trickle at a time. It PINGs every 300 ms, so QUIC's own idle
/// timer never ends its connection: only the server's deadlines can.
pub(crate) fn config_withholding(
    cert: &CertificateDer<'static>,
    window: u32,
) -> quinn::ClientConfig {
    let mut config = config(cert);
    let mut transport = quinn::TransportConfig::default();
    transport.max_idle_timeout(Some(Duration::from_secs(60).try_into().expect("idle")));
    transport.keep_alive_interval(Some(Duration::from_millis(300)));
    transport.stream_receive_window(quinn::VarInt::from_u32(window));
    config.transport_config(Arc::new(transport));
    config
}

/// A request whose response head has arrived and whose body is the caller's to read (or
/// not).
pub(crate) type Open = h3::client::RequestStream<h3_quinn::BidiStream<Bytes>, Bytes>;

/// One HTTP/3 connection.
pub(crate) struct H3 {
    pub local: IpAddr,
    pub connection: quinn::Connection,
    send: h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>,
    driver: tokio::task::JoinHandle<()>,
    endpoint: quinn::Endpoint,
}

impl Drop for H3 {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// A response, whole.
#[derive(Debug)]
pub(crate) struct Reply {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Vec<u8>,
}

/// Why a request got no answer: `Retry` when the server had not taken it (the connection
/// could not be made, was refused, or the server said GOAWAY or rejected the stream), so
/// sending it again is what a client does; `Failed` for a request lost in flight.
#[derive(Debug)]
pub(crate) enum Miss {
    Retry(String),
    Failed(String),
}

/// Connects from `local` (port chosen by the system) to `server` as `localhost`, within
/// `bound`.
pub(crate) async fn connect(
    server: SocketAddr,
    local: IpAddr,
    config: &quinn::ClientConfig,
    bound: Duration,
) -> Result<H3, Miss> {
    let endpoint = quinn::Endpoint::client(SocketAddr::new(local, 0))
        .map_err(|e| Miss::Retry(format!("client socket: {e}")))?;
    let connecting = endpoint
        .connect_with(config.clone(), server, "localhost")
        .map_err(|e| Miss::Retry(format!("connect: {e}")))?;
    let connection = match tokio::time::timeout(bound, connecting).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return Err(Miss::Retry(format!("handshake: {e}"))),
        Err(_) => return Err(Miss::Retry("handshake timed out".into())),
    };
    let setup = h3::client::new(h3_quinn::Connection::new(connection.clone()));
    let (mut driver, send) = match tokio::time::timeout(bound, setup).await {
        Ok(Ok(pair)) => pair,
        Ok(Err(e)) => return Err(Miss::Retry(format!("h3 setup: {e}"))),
        Err(_) => return Err(Miss::Retry("h3 setup timed out".into())),
    };
    let driver = tokio::spawn(async move {
        let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
    });
    Ok(H3 {
        local,
        connection,
        send,
        driver,
        endpoint,
    })
}

impl H3 {
    /// Moves the connection to a new local socket on `local` (port chosen by the system),
    /// as a NAT rebinding or a migration would: the server sees the same connection from
    /// a new address.
    pub(crate) fn rebind(&self, local: IpAddr) -> std::io::Result<SocketAddr> {
        let socket = std::net::UdpSocket::bind(SocketAddr::new(local, 0))?;
        let addr = socket.local_addr()?;
        self.endpoint.rebind(socket)?;
        Ok(addr)
    }

    /// `METHOD path` with `headers`, read whole, within `bound`.
    pub(crate) async fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        bound: Duration,
    ) -> Result<Reply, Miss> {
        self.send(method, path, headers, &[], bound).await
    }

    /// [`Self::request`] with a request body (sent in 16 KiB DATA frames).
    pub(crate) async fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        bound: Duration,
    ) -> Result<Reply, Miss> {
        let exchange = self.exchange(method, path, headers, body);
        match tokio::time::timeout(bound, exchange).await {
            Ok(result) => result,
            Err(_) => Err(Miss::Failed(format!(
                "no answer to {path} within {bound:?}"
            ))),
        }
    }

    /// `GET path`, returning once the response head has arrived (within `bound`), with
    /// its status and the stream its body comes on.
    pub(crate) async fn open(&mut self, path: &str, bound: Duration) -> Result<(u16, Open), Miss> {
        let opening = async {
            let req = http::Request::builder()
                .uri(format!("https://localhost{path}"))
                .body(())
                .map_err(|e| Miss::Failed(e.to_string()))?;
            let mut stream = self.send.send_request(req).await.map_err(classify)?;
            stream.finish().await.map_err(classify)?;
            let response = stream.recv_response().await.map_err(classify)?;
            Ok((response.status().as_u16(), stream))
        };
        tokio::time::timeout(bound, opening)
            .await
            .unwrap_or_else(|_| Err(Miss::Failed(format!("no head for {path} in {bound:?}"))))
    }

    pub(crate) async fn get(&mut self, path: &str, bound: Duration) -> Result<Reply, Miss> {
        self.request("GET", path, &[], bound).await
    }

    async fn exchange(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Reply, Miss> {
        let mut req = http::Request::builder()
            .method(method)
            .uri(format!("https://localhost{path}"));
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let req = req.body(()).map_err(|e| Miss::Failed(e.to_string()))?;
        let mut stream = self.send.send_request(req).await.map_err(classify)?;
        for chunk in body.chunks(16 * 1024) {
            let chunk = Bytes::copy_from_slice(chunk);
            stream.send_data(chunk).await.map_err(classify)?;
        }
        // A server that has its answer may stop reading the request before its end
        // (quinn's STOP_SENDING when the request is dropped unread); RFC 9114 §4.1.2:
        // clients must not discard a complete response for that. The response, or the
        // real error, comes next.
        match stream.finish().await {
            Err(StreamError::RemoteTerminate { .. }) | Ok(()) => {}
            Err(e) => return Err(classify(e)),
        }
        let response = stream.recv_response().await.map_err(classify)?;
        let mut body = Vec::new();
        while let Some(mut chunk) = stream.recv_data().await.map_err(classify)? {
            while chunk.has_remaining() {
                let part = chunk.chunk();
                body.extend_from_slice(part);
                let n = part.len();
                chunk.advance(n);
            }
        }
        Ok(Reply {
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            body,
        })
    }
}

fn classify(e: StreamError) -> Miss {
    let retry = match &e {
        StreamError::RemoteClosing { .. } => true,
        StreamError::RemoteTerminate { code, .. } => *code == Code::H3_REQUEST_REJECTED,
        StreamError::ConnectionError { 0: c, .. } => closed_cleanly(c),
        _ => false,
    };
    if retry {
        Miss::Retry(e.to_string())
    } else {
        Miss::Failed(e.to_string())
    }
}

/// The server closed the connection with H3_NO_ERROR (after its GOAWAY).
fn closed_cleanly(e: &ConnectionError) -> bool {
    e.is_h3_no_error()
}
