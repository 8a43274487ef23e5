//! What each signal means to the parent, against the real binary (the table in
//! docs/operations.md): SIGTTIN and SIGTTOU add and remove a worker by reload, SIGUSR2 is
//! ignored and said so, SIGQUIT stops gracefully, SIGINT stops and a second one kills
//! the workers still draining. Without their handlers, SIGQUIT and SIGUSR2 kill the
//! parent (exit 131/140 in a shell) and SIGTTIN/SIGTTOU stop it.

use std::time::Duration;

use servery_tests::*;

const BOUND: Duration = Duration::from_secs(30);

fn ready_count(server: &Server) -> usize {
    worker_pids(&server.status()).len()
}

#[test]
fn ttin_and_ttou_resize_by_reload_usr2_is_ignored_and_quit_stops() {
    let tree = Tree::new("signals");
    let mut server = Server::start(&tree, 2, FAST, &[]);
    server.wait_ready(2, BOUND);

    server.signal(Sig::TTIN);
    wait_until(BOUND, "three workers after SIGTTIN", || {
        let s = server.status();
        (s["generation"] == 2 && worker_pids(&s).len() == 3).then_some(())
    });
    // One reload at a time (as for `ctl reload`): each signal after the last committed.
    for left in [2, 1] {
        wait_until(BOUND, "the reload before to finish", || {
            (server.status()["reload_in_flight"] == false).then_some(())
        });
        server.signal(Sig::TTOU);
        wait_until(BOUND, "one worker fewer after SIGTTOU", || {
            let s = server.status();
            (worker_pids(&s).len() == left && s["reload_in_flight"] == false).then_some(())
        });
    }
    // Fewer than one is refused, and the one keeps serving.
    server.signal(Sig::TTOU);
    wait_until(BOUND, "the refusal in the log", || {
        server
            .stderr()
            .contains("a service runs one worker at least")
            .then_some(())
    });
    assert_eq!(ready_count(&server), 1);

    server.signal(Sig::USR2);
    wait_until(BOUND, "SIGUSR2's note", || {
        server.stderr().contains("SIGUSR2 ignored").then_some(())
    });
    let (code, body) = http_get(server.addr, "/hello.txt").expect("still serving");
    assert_eq!((code, body.as_slice()), (200, HELLO));

    server.signal(Sig::QUIT);
    let (status, _) = server.wait_exit(BOUND);
    assert_eq!(
        status.code(),
        Some(0),
        "a graceful stop: {}",
        server.stderr()
    );
}

#[test]
fn a_second_interrupt_stops_at_once_instead_of_waiting_for_the_drain() {
    let tree = Tree::new("signals-int");
    // A long drain, held open by a download its client never reads.
    let mut args = FAST.to_vec();
    let at = args
        .iter()
        .position(|a| *a == "--drain-timeout")
        .expect("in FAST");
    args[at + 1] = "60";
    let mut server = Server::start(&tree, 1, &args, &[]);
    server.wait_ready(1, BOUND);
    std::fs::File::create(tree.root().join("large.bin"))
        .and_then(|f| f.set_len(256 << 20))
        .expect("large file");
    let mut stalled = std::net::TcpStream::connect(server.addr).expect("connect");
    std::io::Write::write_all(
        &mut stalled,
        b"GET /large.bin HTTP/1.1\r\nHost: localhost\r\n\r\n",
    )
    .expect("request");
    wait_until(BOUND, "the download to start", || {
        let mut b = [0u8; 1];
        std::io::Read::read(&mut stalled, &mut b)
            .ok()
            .filter(|n| *n > 0)
    });

    server.signal(Sig::INT);
    wait_until(BOUND, "the drain to begin", || {
        server.stderr().contains("SIGINT: stopping").then_some(())
    });
    let again = std::time::Instant::now();
    server.signal(Sig::INT);
    let (status, _) = server.wait_exit(BOUND);
    let took = again.elapsed();
    eprintln!(
        "MEASURED a second SIGINT: exit {:?} {took:?} later",
        status.code()
    );
    assert!(
        took < Duration::from_secs(10),
        "not the 60 s drain: {took:?}\n{}",
        server.stderr()
    );
    drop(stalled);
}
