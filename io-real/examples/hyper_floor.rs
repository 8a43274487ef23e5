//! The floor of the HTTP stack a worker is built on: tokio's current-thread runtime (what
//! a worker runs on two CPUs with two workers) and hyper-util's HTTP/1 + h2c server,
//! answering every request with the same 1 KiB from memory — no file system, no policy,
//! no lifecycle, no drain. Measured next to `servery --workers 1` (same runtime shape), it
//! says how much of a request's CPU is the stack's and how much is servery's.
//!
//! Usage: `cargo run --release --example hyper_floor -- PORT [--http1-only]`, then load it
//! like a server (`scripts/bench-floor.py` does both and prints CPU per request).
#![forbid(unsafe_code)]

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::Full;
use hyper::Response;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let port: u16 = args
        .next()
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| std::io::Error::other("usage: hyper_floor PORT [--http1-only]"))?;
    let http1_only = args.next().as_deref() == Some("--http1-only");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(serve(SocketAddr::from(([127, 0, 0, 1], port)), http1_only))
}

async fn serve(addr: SocketAddr, http1_only: bool) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let body = Bytes::from(vec![b'x'; 1024]);
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        let body = body.clone();
        tokio::spawn(async move {
            let service = service_fn(move |_request| {
                let body = body.clone();
                async move { Ok::<_, Infallible>(Response::new(Full::new(body))) }
            });
            let io = TokioIo::new(stream);
            let result = if http1_only {
                hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .serve_connection(io, service)
                    .await
                    .map_err(|e| e.to_string())
            } else {
                auto::Builder::new(TokioExecutor::new())
                    .serve_connection(io, service)
                    .await
                    .map_err(|e| e.to_string())
            };
            drop(result);
        });
    }
}
