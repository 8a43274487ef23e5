//! What one request costs inside the site, without sockets, hyper or a peer: the time
//! `Site::handle` takes to answer `GET /1k.bin` from the file cache (path parsing, access
//! policy, the `statx` that proves the cached entry, validators, headers), on tokio's
//! current-thread runtime as a worker runs it. End-to-end benchmarks on a shared two-core
//! machine move by a few percent from run to run; this moves by one, so a change to the
//! request path can be measured here first (docs/benchmarks.md).
//!
//! Usage: `cargo run --release --example handle_cost [-- REQUESTS]` (default 200,000 per
//! round, three rounds; the last is the figure to quote).
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use servery::http::{FILE_CACHE_SETTLE, Site, SiteConfig};

fn main() -> std::io::Result<()> {
    let requests: u32 = match std::env::args().nth(1) {
        Some(n) => n
            .parse()
            .map_err(|_| std::io::Error::other("usage: handle_cost [REQUESTS]"))?,
        None => 200_000,
    };
    let root = std::env::temp_dir().join(format!("servery-handle-cost-{}", std::process::id()));
    std::fs::create_dir_all(&root)?;
    std::fs::write(root.join("1k.bin"), [b'x'; 1024])?;
    // The file cache keeps only files that have not changed for a while.
    std::thread::sleep(FILE_CACHE_SETTLE + Duration::from_millis(100));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let result = runtime.block_on(measure(&root, requests));
    let _ = std::fs::remove_dir_all(&root);
    result
}

async fn measure(root: &std::path::Path, requests: u32) -> std::io::Result<()> {
    let site = Arc::new(
        Site::open(SiteConfig {
            root: root.to_path_buf(),
            ..Default::default()
        })
        .map_err(std::io::Error::other)?,
    );
    for round in 1..=3 {
        let started = Instant::now();
        let mut served = 0u32;
        for _ in 0..requests {
            let request = http::Request::get("/1k.bin")
                .header(http::header::HOST, "127.0.0.1:8080")
                .header(http::header::USER_AGENT, "wrk")
                .body(http_body_util::Empty::<bytes::Bytes>::new())
                .map_err(std::io::Error::other)?;
            let response = site.handle(request).await;
            served += u32::from(response.status() == http::StatusCode::OK);
        }
        let elapsed = started.elapsed();
        if served != requests {
            return Err(std::io::Error::other(format!(
                "only {served} of {requests} answered 200"
            )));
        }
        println!(
            "round {round}: {:.0} ns per request",
            elapsed.as_nanos() as f64 / f64::from(requests)
        );
    }
    Ok(())
}
