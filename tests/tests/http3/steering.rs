//! Steering by connection ID and the shared stateless-reset key (decision 0027): a client
//! whose address changes keeps its connection whichever worker serves it; a killed
//! worker's clients are told by its replacement that their connections are gone; a reload
//! that adds workers serves HTTP/3 on the new slots too, steered alike, and one that is
//! rejected leaves no socket behind that nobody reads.

use super::*;

/// A loopback address of its own for each use: `127.0.<net>.<host>`.
fn ip(net: u8, host: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, net, host))
}

/// Connects from `local`, trying again while a replacement may not have taken its slot
/// socket yet (the connection is refused meanwhile).
async fn connect_from(server: SocketAddr, local: IpAddr, config: &quinn::ClientConfig) -> H3 {
    let mut last = None;
    for _ in 0..5 {
        match h3_client::connect(server, local, config, REQUEST_BOUND).await {
            Ok(h3) => return h3,
            Err(miss) => last = Some(miss),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("cannot connect from {local}: {last:?}");
}

/// Moves `h3` to a new address `hops` times, a request after each: every one must be
/// answered on the same connection.
async fn rebind_and_fetch(h3: &mut H3, to: impl Iterator<Item = IpAddr>) {
    for local in to {
        let now = h3.rebind(local).expect("rebind");
        let reply = h3
            .get("/hello.txt", REQUEST_BOUND)
            .await
            .unwrap_or_else(|miss| panic!("after moving to {now}: {miss:?}"));
        assert_eq!(reply.status, 200);
        assert_eq!(reply.body, HELLO);
    }
}

#[test]
fn a_client_whose_address_changes_keeps_its_connection_whichever_worker_serves_it() {
    let tree = Tree::new("h3-rebind");
    let (cert, flags) = identity(&tree);
    // Four workers: by the 4-tuple hash alone, a move lands on another worker 3 times in 4.
    let server = start(&tree, 4, &flags, &[]);
    let config = h3_client::config(&cert);
    runtime().block_on(async {
        for connection in 0..3u8 {
            let mut h3 = connect_from(server.addr, ip(2, connection + 1), &config).await;
            h3.get("/hello.txt", REQUEST_BOUND).await.expect("hello");
            rebind_and_fetch(&mut h3, (1..=6).map(|hop| ip(3 + connection, hop))).await;
        }
    });
}

#[test]
fn a_killed_workers_client_is_reset_by_the_replacement_long_before_its_idle_timeout() {
    const IDLE: Duration = Duration::from_secs(60);
    let tree = Tree::new("h3-reset");
    let (cert, flags) = identity(&tree);
    let server = start(&tree, 1, &flags, &["--keep-alive-timeout", "60"]);
    let config = h3_client::config_with(&cert, None, IDLE);
    let rt = runtime();
    let mut h3 = rt.block_on(async {
        let mut h3 = connect_from(server.addr, loopback(), &config).await;
        h3.get("/hello.txt", REQUEST_BOUND).await.expect("hello");
        h3
    });
    let pid = server.status()["workers"][0]["pid"].as_u64().expect("pid") as u32;
    let killed = Instant::now();
    signal_pid(pid, rustix::process::Signal::KILL);
    let reason = rt.block_on(async {
        // The dead worker cannot answer; the request's packets wait in the slot's socket
        // (the parent holds it) until the replacement reads them, finds no such
        // connection, and answers with a stateless reset.
        let _ = h3.get("/hello.txt", IDLE).await;
        tokio::time::timeout(IDLE / 2, h3.connection.closed()).await
    });
    let took = killed.elapsed();
    let reason = reason.expect("the connection ended before half its idle timeout");
    eprintln!("MEASURED h3 connection of a killed worker closed after {took:?}: {reason}");
    assert!(
        matches!(reason, quinn::ConnectionError::Reset),
        "closed by a stateless reset the client could verify: {reason:?}"
    );
    // And the replacement serves the client's next connection.
    rt.block_on(async {
        let mut again = connect_from(server.addr, loopback(), &config).await;
        again.get("/hello.txt", REQUEST_BOUND).await.expect("again");
    });
}

#[test]
fn a_reload_from_two_to_three_workers_serves_http3_on_the_new_slot_with_steering() {
    let tree = Tree::new("h3-grow");
    let (cert, flags) = identity(&tree);
    let log = tree.dir.join("access.log");
    let log_arg = log.display().to_string();
    let server = start(
        &tree,
        2,
        &flags,
        &["--access-log", &log_arg, "--access-log-format", "json"],
    );
    let before = worker_ids(&server.status());
    server
        .ctl(&json!({"cmd": "reload", "set": {"workers": 3}}))
        .expect("reload");
    wait_until(Duration::from_secs(30), "three new workers", || {
        let s = server.status();
        let ids = worker_ids(&s);
        (ids.len() == 3
            && ids.iter().all(|id| !before.contains(id))
            && s["workers"]
                .as_array()
                .is_some_and(|ws| ws.iter().all(|w| w["state"] == "ready")))
        .then_some(())
    });
    let after = worker_ids(&server.status());
    let config = h3_client::config(&cert);
    // Each connection from its own address; the hash spreads them over the three slot
    // sockets, and each then moves twice.
    const CONNECTIONS: u8 = 24;
    runtime().block_on(async {
        for c in 1..=CONNECTIONS {
            let mut h3 = connect_from(server.addr, ip(10, c), &config).await;
            h3.get("/hello.txt", REQUEST_BOUND).await.expect("hello");
            rebind_and_fetch(&mut h3, [ip(11, c), ip(12, c)].into_iter()).await;
        }
    });
    // Stop the server so every worker's last access-log lines are written.
    server.ctl(&json!({"cmd": "stop"})).expect("stop");
    let mut server = server;
    server.wait_exit(Duration::from_secs(30));
    let seen = workers_by_remote(&std::fs::read_to_string(&log).expect("access log"));
    let served: BTreeSet<u64> = (1..=CONNECTIONS)
        .flat_map(|c| [ip(10, c), ip(11, c), ip(12, c)])
        .filter_map(|ip| seen.get(&ip))
        .flatten()
        .copied()
        .collect();
    assert_eq!(
        served,
        after.iter().copied().collect::<BTreeSet<u64>>(),
        "every worker of the new generation, the added one included, served HTTP/3"
    );
    // A connection stays with its worker when it moves.
    for c in 1..=CONNECTIONS {
        let by: BTreeSet<u64> = [ip(10, c), ip(11, c), ip(12, c)]
            .iter()
            .filter_map(|ip| seen.get(ip))
            .flatten()
            .copied()
            .collect();
        assert_eq!(by.len(), 1, "connection {c} was served by {by:?}");
    }
}

/// A reload to three workers is rejected (the new slot's worker refuses to start). The
/// socket bound for that slot is read by nobody, yet the kernel's hash would still send
/// it its share of new connections, which would never be answered; it leaves the group
/// when its worker is gone, and every new connection reaches one of the two workers.
#[test]
fn a_rejected_reload_to_more_workers_leaves_no_socket_unread() {
    let tree = Tree::new("h3-grow-rejected");
    let (cert, flags) = identity(&tree);
    let args: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = Server::start(
        &tree,
        2,
        &args,
        &[("SERVERY_TEST_FAULT", "slot=2,generation=2 fail-startup")],
    );
    server.wait_ready(2, Duration::from_secs(20));
    let before = worker_ids(&server.status());
    let refused = server.ctl(&json!({"cmd": "reload", "set": {"workers": 3}}));
    assert!(
        refused.is_err(),
        "the reload should be rejected: {refused:?}"
    );
    wait_until(
        Duration::from_secs(30),
        "the first generation alone",
        || (worker_ids(&server.status()) == before).then_some(()),
    );
    let config = h3_client::config(&cert);
    // One attempt each: a second from a new port would be hashed afresh and could hide
    // a socket nobody reads.
    let unanswered: Vec<IpAddr> = runtime().block_on(async {
        let mut unanswered = Vec::new();
        for c in 1..=24 {
            let local = ip(13, c);
            match h3_client::connect(server.addr, local, &config, REQUEST_BOUND).await {
                Ok(mut h3) => {
                    let reply = h3.get("/hello.txt", REQUEST_BOUND).await.expect("hello");
                    assert_eq!(reply.status, 200);
                }
                Err(_) => unanswered.push(local),
            }
        }
        unanswered
    });
    assert!(unanswered.is_empty(), "never answered: {unanswered:?}");
}
