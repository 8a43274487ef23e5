//! 64 MiB downloads over HTTP/3, one after another on two clients, while every worker is
//! recycled 20 times and the service reloaded once: a draining worker keeps its QUIC
//! connections until their responses are delivered, new connections reach a worker that
//! serves (none refused or left unanswered: decision 0079), and every download arrives
//! whole and byte-exact.

use std::sync::atomic::AtomicBool;

use super::*;

const SIZE: usize = 64 << 20;
const DOWNLOAD_BOUND: Duration = Duration::from_secs(60);

#[derive(Default)]
struct Downloads {
    whole: AtomicU64,
    retried: Mutex<BTreeMap<String, u64>>,
    failed: Mutex<Vec<String>>,
    stop: AtomicBool,
}

async fn downloader(
    server: SocketAddr,
    config: quinn::ClientConfig,
    want: Arc<String>,
    d: Arc<Downloads>,
) {
    let mut conn: Option<H3> = None;
    while !d.stop.load(Ordering::Relaxed) {
        let h3 = match &mut conn {
            Some(h3) => h3,
            None => match h3_client::connect(server, loopback(), &config, REQUEST_BOUND).await {
                Ok(h3) => conn.insert(h3),
                Err(Miss::Retry(why) | Miss::Failed(why)) => {
                    *d.retried.lock().expect("tally").entry(why).or_default() += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
        };
        match h3.get("/big.bin", DOWNLOAD_BOUND).await {
            Ok(reply) if reply.status == 200 && sha256_hex(&reply.body) == *want => {
                d.whole.fetch_add(1, Ordering::Relaxed);
            }
            Ok(reply) => d.failed.lock().expect("tally").push(format!(
                "status {} with {} bytes",
                reply.status,
                reply.body.len()
            )),
            Err(Miss::Retry(why)) => {
                // Not taken by the server (GOAWAY named it): sent again, on a new connection.
                *d.retried.lock().expect("tally").entry(why).or_default() += 1;
                conn = None;
            }
            Err(Miss::Failed(why)) => {
                d.failed.lock().expect("tally").push(why);
                conn = None;
            }
        }
    }
}

#[test]
fn downloads_of_64_mib_over_http3_arrive_whole_across_twenty_recycles_and_a_reload() {
    let tree = Tree::new("h3-recycles");
    let (cert, flags) = identity(&tree);
    let mut x: u32 = 0x9e37_79b9;
    let body: Vec<u8> = (0..SIZE)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect();
    std::fs::write(tree.root().join("big.bin"), &body).expect("write the file");
    let want = Arc::new(sha256_hex(&body));
    drop(body);
    let server = start(&tree, 2, &flags, &[]);
    let rt = runtime();
    let d = Arc::new(Downloads::default());
    let config = h3_client::config(&cert);
    let clients: Vec<_> = (0..2)
        .map(|_| {
            rt.spawn(downloader(
                server.addr,
                config.clone(),
                Arc::clone(&want),
                Arc::clone(&d),
            ))
        })
        .collect();
    let bound = Duration::from_secs(120);
    wait_until(bound, "a first whole download", || {
        (d.whole.load(Ordering::Relaxed) >= 1).then_some(())
    });
    let started = Instant::now();
    for round in 1..=20 {
        let before = worker_ids(&server.status());
        server.ctl(&json!({"cmd": "recycle"})).expect("recycle");
        wait_until(bound, &format!("recycle {round} to end"), || {
            let s = server.status();
            let ids = worker_ids(&s);
            let done = ids.len() == 2 && ids.iter().all(|id| !before.contains(id));
            (done && s["recycle_in_flight"] == false).then_some(())
        });
        if round == 10 {
            server.ctl(&json!({"cmd": "reload"})).expect("reload");
        }
    }
    let during = d.whole.load(Ordering::Relaxed);
    d.stop.store(true, Ordering::Relaxed);
    rt.block_on(async {
        for c in clients {
            let _ = tokio::time::timeout(DOWNLOAD_BOUND * 2, c).await;
        }
    });
    let whole = d.whole.load(Ordering::Relaxed);
    let failed = d.failed.lock().expect("tally").clone();
    let retried = d.retried.lock().expect("tally").clone();
    eprintln!(
        "MEASURED h3 across 20 recycles and a reload in {:?}: {whole} whole 64 MiB downloads, {} failed, sent again: {retried:?}",
        started.elapsed(),
        failed.len()
    );
    assert!(
        failed.is_empty(),
        "downloads lost or cut across recycles (a draining worker keeps its QUIC connections until their responses are delivered): {failed:?}"
    );
    // New connections reach a worker that serves, never a draining one's refusal
    // (decision 0079): no handshake fails, refused or unanswered.
    let handshakes_failed: BTreeMap<&String, &u64> = retried
        .iter()
        .filter(|(why, _)| why.starts_with("handshake") || why.starts_with("h3 setup"))
        .collect();
    assert!(
        handshakes_failed.is_empty(),
        "new HTTP/3 connections refused or unanswered across recycles (new connections must \
         reach a serving, non-draining worker): {handshakes_failed:?}"
    );
    assert!(
        during >= 2,
        "downloads ran while the workers were recycled: {during}"
    );
}

/// Fresh connections, one after another on eight clients, each asking for one small file,
/// while both workers are recycled 10 times: the handshakes whose first packets were
/// queued in a socket when the steering moved new connections off it (decisions 0079,
/// 0084). Each outcome is tallied by its reason.
#[test]
fn fresh_connections_across_recycles_are_not_refused() {
    let tree = Tree::new("h3-fresh-recycles");
    let (cert, flags) = identity(&tree);
    let server = start(&tree, 2, &flags, &[]);
    let rt = runtime();
    let stop = Arc::new(AtomicBool::new(false));
    let tally: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let config = h3_client::config(&cert);
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let (stop, tally, config) = (Arc::clone(&stop), Arc::clone(&tally), config.clone());
            let addr = server.addr;
            rt.spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let outcome =
                        match h3_client::connect(addr, loopback(), &config, REQUEST_BOUND).await {
                            Ok(mut h3) => match h3.get("/hello.txt", REQUEST_BOUND).await {
                                Ok(r) if r.status == 200 && r.body == HELLO => {
                                    if started.elapsed() > Duration::from_millis(500) {
                                        "served, slowly (> 0.5 s)".to_owned()
                                    } else {
                                        "served".to_owned()
                                    }
                                }
                                Ok(r) => format!("status {}", r.status),
                                Err(Miss::Retry(why) | Miss::Failed(why)) => why,
                            },
                            Err(Miss::Retry(why) | Miss::Failed(why)) => why,
                        };
                    *tally.lock().expect("tally").entry(outcome).or_default() += 1;
                }
            })
        })
        .collect();
    let bound = Duration::from_secs(60);
    for round in 1..=10 {
        let before = worker_ids(&server.status());
        server.ctl(&json!({"cmd": "recycle"})).expect("recycle");
        wait_until(bound, &format!("recycle {round} to end"), || {
            let s = server.status();
            let ids = worker_ids(&s);
            let done = ids.len() == 2 && ids.iter().all(|id| !before.contains(id));
            (done && s["recycle_in_flight"] == false).then_some(())
        });
    }
    stop.store(true, Ordering::Relaxed);
    rt.block_on(async {
        for c in clients {
            let _ = tokio::time::timeout(REQUEST_BOUND * 3, c).await;
        }
    });
    let tally = tally.lock().expect("tally").clone();
    eprintln!("MEASURED fresh HTTP/3 connections across 10 recycles: {tally:?}");
    let not_served: BTreeMap<&String, &u64> =
        tally.iter().filter(|(why, _)| *why != "served").collect();
    assert!(
        not_served.keys().all(|why| why.starts_with("served")),
        "fresh HTTP/3 connections refused or lost across recycles: {not_served:?}"
    );
}
