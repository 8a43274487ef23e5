//! TLS: ALPN for HTTP/1.1 and h2, HSTS, cleartext to a TLS port.

use super::*;

mod tls_support {
    use super::*;
    use servery::http::{Activity, Transport, serve_connection_over};
    use servery::tls::{self, Identity};
    use tokio_rustls::TlsConnector;
    use tokio_rustls::rustls::{self, ClientConfig, RootCertStore, pki_types::ServerName};

    pub(super) struct TlsServer {
        pub addr: SocketAddr,
        pub identity: Identity,
        accept: tokio::task::JoinHandle<()>,
        _drain: watch::Sender<bool>,
    }

    impl Drop for TlsServer {
        fn drop(&mut self) {
            self.accept.abort();
        }
    }

    pub(super) async fn start(config: SiteConfig) -> TlsServer {
        // What a parent would do once and hand to every worker.
        let identity = Identity::self_signed(&["localhost".to_owned(), "127.0.0.1".to_owned()])
            .expect("self-signed identity");
        // What each worker does with what it was handed.
        let handed_over = Identity::from_pem(identity.cert_pem.clone(), identity.key_pem.clone());
        let acceptor = tls::acceptor(handed_over.server_config().expect("server config"));
        let site = Arc::new(Site::open(config).expect("open site"));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (drain, drain_rx) = watch::channel(false);
        let requests = Arc::new(AtomicU64::new(0));
        let accept = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                let site = Arc::clone(&site);
                let drain_rx = drain_rx.clone();
                let requests = Arc::clone(&requests);
                tokio::spawn(async move {
                    // A failed handshake only ends this connection.
                    if let Ok(stream) =
                        tls::accept(&acceptor, tcp, std::time::Duration::from_secs(10)).await
                    {
                        let activity = Activity::new(tokio::time::Instant::now());
                        serve_connection_over(
                            site,
                            stream,
                            drain_rx,
                            requests,
                            Transport::Tls,
                            activity,
                        )
                        .await;
                    }
                });
            }
        });
        TlsServer {
            addr,
            identity,
            accept,
            _drain: drain,
        }
    }

    pub(super) async fn connect(
        server: &TlsServer,
        alpn: &[u8],
    ) -> tokio_rustls::client::TlsStream<TcpStream> {
        let mut roots = RootCertStore::empty();
        for cert in server.identity.certificates().expect("certs") {
            roots.add(cert).expect("trust the self-signed certificate");
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![alpn.to_vec()];
        let connector = TlsConnector::from(Arc::new(config));
        let tcp = timeout(BOUND, TcpStream::connect(server.addr))
            .await
            .expect("connect in time")
            .expect("connect");
        let name = ServerName::try_from("localhost").expect("name");
        timeout(BOUND, connector.connect(name, tcp))
            .await
            .expect("handshake in time")
            .expect("handshake: the client trusts the generated certificate")
    }
}

#[tokio::test]
async fn tls_serves_http1_and_h2_by_alpn_with_hsts() {
    use http_body_util::BodyExt;
    let root = Root::new("tls");
    root.write("hello.txt", b"hello over tls");
    let server = tls_support::start(SiteConfig {
        hsts: true,
        ..config(&root)
    })
    .await;

    // HTTP/1.1
    let stream = tls_support::connect(&server, b"http/1.1").await;
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    let r = exchange(
        stream,
        b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        false,
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"hello over tls");
    assert_eq!(
        r.header("strict-transport-security"),
        Some("max-age=31536000")
    );

    // HTTP/2
    let stream = tls_support::connect(&server, b"h2").await;
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .expect("h2 handshake");
    let driver = tokio::spawn(conn);
    let request = http::Request::get("https://localhost/hello.txt")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .expect("request");
    let response = timeout(BOUND, sender.send_request(request))
        .await
        .expect("h2 response in time")
        .expect("h2 response");
    assert_eq!(response.version(), http::Version::HTTP_2);
    assert_eq!(response.status(), 200);
    assert_eq!(
        response
            .headers()
            .get("strict-transport-security")
            .map(|v| v.as_bytes()),
        Some(&b"max-age=31536000"[..])
    );
    let body = timeout(BOUND, response.into_body().collect())
        .await
        .expect("h2 body in time")
        .expect("h2 body")
        .to_bytes();
    assert_eq!(&body[..], b"hello over tls");
    drop(sender);
    driver.abort();
}

#[tokio::test]
async fn cleartext_to_a_tls_port_fails_fast_without_harm() {
    let root = Root::new("tls-plain");
    root.write("a.txt", b"a");
    let server = tls_support::start(config(&root)).await;
    let mut tcp = timeout(BOUND, TcpStream::connect(server.addr))
        .await
        .expect("connect in time")
        .expect("connect");
    tcp.write_all(b"GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    // The handshake fails; the server sends at most an alert and closes.
    let mut buf = Vec::new();
    timeout(BOUND, tcp.read_to_end(&mut buf))
        .await
        .expect("closed in time")
        .ok();
    assert!(
        !buf.starts_with(b"HTTP/"),
        "no cleartext HTTP on the TLS port"
    );
    // The server is still fine.
    let stream = tls_support::connect(&server, b"http/1.1").await;
    let r = exchange(
        stream,
        b"GET /a.txt HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        false,
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(!r.has("strict-transport-security"), "hsts is opt-in");
}

// =======================================================================================
// Bad input: a clear status, never a panic or a hang.
