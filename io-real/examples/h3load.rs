//! A bounded HTTP/3 load client for docs/benchmarks.md (this h2load is built without QUIC):
//! `C` connections with `S` requests in flight on each fetch `PATH` until `N` requests are
//! answered or `SECS` pass, trusting the certificate in `--ca` (its name: `localhost`).
//! Prints one JSON line: requests, failures, bytes, seconds, requests per second, MB/s.
//!
//! `cargo run --release -p servery --example h3load -- --addr 127.0.0.1:8443
//!  --ca cert.pem --path /1k.bin --connections 8 --streams 8 --requests 100000 --seconds 30`

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

struct Args {
    addr: SocketAddr,
    ca: String,
    path: String,
    connections: usize,
    streams: usize,
    requests: u64,
    seconds: u64,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        addr: "127.0.0.1:8443".parse().map_err(|e| format!("{e}"))?,
        ca: String::new(),
        path: "/".into(),
        connections: 1,
        streams: 1,
        requests: 1000,
        seconds: 30,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
        match flag.as_str() {
            "--addr" => a.addr = value.parse().map_err(|e| bad(&e))?,
            "--ca" => a.ca = value,
            "--path" => a.path = value,
            "--connections" => a.connections = value.parse().map_err(|e| bad(&e))?,
            "--streams" => a.streams = value.parse().map_err(|e| bad(&e))?,
            "--requests" => a.requests = value.parse().map_err(|e| bad(&e))?,
            "--seconds" => a.seconds = value.parse().map_err(|e| bad(&e))?,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(a)
}

#[derive(Default)]
struct Count {
    claimed: AtomicU64,
    done: AtomicU64,
    failed: AtomicU64,
    bytes: AtomicU64,
}

fn config(ca: &str) -> Result<quinn::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).map_err(|e| format!("{ca}: {e}"))? {
        roots
            .add(cert.map_err(|e| format!("{ca}: {e}"))?)
            .map_err(|e| e.to_string())?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let crypto =
        quinn::crypto::rustls::QuicClientConfig::try_from(tls).map_err(|e| e.to_string())?;
    Ok(quinn::ClientConfig::new(Arc::new(crypto)))
}

async fn connection(a: Arc<Args>, config: quinn::ClientConfig, count: Arc<Count>, until: Instant) {
    let endpoint = match quinn::Endpoint::client("127.0.0.1:0".parse().expect("addr")) {
        Ok(e) => e,
        Err(e) => return eprintln!("client socket: {e}"),
    };
    let connected = match endpoint.connect_with(config, a.addr, "localhost") {
        Ok(connecting) => connecting.await,
        Err(e) => return eprintln!("connect: {e}"),
    };
    let conn = match connected {
        Ok(c) => c,
        Err(e) => return eprintln!("handshake: {e}"),
    };
    let (mut driver, send) = match h3::client::new(h3_quinn::Connection::new(conn)).await {
        Ok(pair) => pair,
        Err(e) => return eprintln!("h3: {e}"),
    };
    let drive = tokio::spawn(async move {
        let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
    });
    let mut streams = Vec::new();
    for _ in 0..a.streams {
        let (a, count, mut send) = (Arc::clone(&a), Arc::clone(&count), send.clone());
        streams.push(tokio::spawn(async move {
            while Instant::now() < until
                && count.claimed.fetch_add(1, Ordering::Relaxed) < a.requests
            {
                match one(&mut send, &a.path).await {
                    Ok(n) => {
                        count.done.fetch_add(1, Ordering::Relaxed);
                        count.bytes.fetch_add(n, Ordering::Relaxed);
                    }
                    Err(e) => {
                        if count.failed.fetch_add(1, Ordering::Relaxed) < 3 {
                            eprintln!("request failed: {e}");
                        }
                        return;
                    }
                }
            }
        }));
    }
    for s in streams {
        let _ = s.await;
    }
    drive.abort();
}

async fn one(
    send: &mut h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>,
    path: &str,
) -> Result<u64, String> {
    let req = http::Request::get(format!("https://localhost{path}"))
        .body(())
        .map_err(|e| e.to_string())?;
    let mut stream = send.send_request(req).await.map_err(|e| e.to_string())?;
    stream.finish().await.map_err(|e| e.to_string())?;
    let response = stream.recv_response().await.map_err(|e| e.to_string())?;
    if response.status() != http::StatusCode::OK {
        return Err(format!("status {}", response.status()));
    }
    let mut n = 0u64;
    while let Some(chunk) = stream.recv_data().await.map_err(|e| e.to_string())? {
        n += chunk.remaining() as u64;
    }
    Ok(n)
}

fn main() {
    let a = match args() {
        Ok(a) => Arc::new(a),
        Err(e) => {
            eprintln!("h3load: {e}");
            std::process::exit(2);
        }
    };
    let config = match config(&a.ca) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("h3load: {e}");
            std::process::exit(2);
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let count = Arc::new(Count::default());
    let started = Instant::now();
    let until = started + Duration::from_secs(a.seconds);
    rt.block_on(async {
        let tasks: Vec<_> = (0..a.connections)
            .map(|_| {
                tokio::spawn(connection(
                    Arc::clone(&a),
                    config.clone(),
                    Arc::clone(&count),
                    until,
                ))
            })
            .collect();
        for t in tasks {
            let _ = t.await;
        }
    });
    let secs = started.elapsed().as_secs_f64();
    let done = count.done.load(Ordering::Relaxed);
    let bytes = count.bytes.load(Ordering::Relaxed);
    println!(
        "{{\"requests\":{done},\"failed\":{},\"bytes\":{bytes},\"seconds\":{secs:.3},\"rps\":{:.0},\"mb_per_s\":{:.1}}}",
        count.failed.load(Ordering::Relaxed),
        done as f64 / secs,
        bytes as f64 / secs / 1e6
    );
}
