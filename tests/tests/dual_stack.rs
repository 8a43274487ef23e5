//! Both address families on one port, as the README's own `bind = ["0.0.0.0", "::"]`
//! asks, against the real binary: both serve (the IPv6 listener takes IPv6 alone beside an
//! IPv4 one, as nginx's do), and binds that would collide are refused by `--check-config`
//! and at start, naming `--bind`, before anything is bound.

use std::time::Duration;

use servery_tests::*;

fn has_ipv6() -> bool {
    let ok = std::net::TcpListener::bind("[::1]:0").is_ok();
    if !ok {
        servery_tests::skipped("no IPv6 loopback on this host");
    }
    ok
}

#[test]
fn both_wildcards_on_one_port_serve_each_family() {
    if !has_ipv6() {
        return;
    }
    let tree = Tree::new("dualstack");
    let server = Server::start(
        &tree,
        1,
        &[FAST, &["--bind", "0.0.0.0", "--bind", "::"]].concat(),
        &[],
    );
    server.wait_ready(1, Duration::from_secs(30));
    let port = server.addr.port();
    for host in ["127.0.0.1", "[::1]"] {
        let out = std::process::Command::new("curl")
            .args([
                "-s",
                "--max-time",
                "10",
                &format!("http://{host}:{port}/hello.txt"),
            ])
            .output()
            .expect("curl");
        assert_eq!(out.stdout, HELLO, "{host}: {}", server.stderr());
    }
}

#[test]
fn binds_that_would_collide_are_refused_before_binding() {
    let tree = Tree::new("dualstack-bad");
    let root = tree.root();
    let root = root.to_str().expect("utf-8");
    for extra in [&["--check-config"][..], &[]] {
        let args = [
            &[
                root,
                "--port",
                "0",
                "--bind",
                "0.0.0.0",
                "--bind",
                "127.0.0.1",
            ][..],
            extra,
        ]
        .concat();
        let done = run_servery(&args, &[], Duration::from_secs(20));
        assert_eq!(done.status.code(), Some(2), "{}", done.stderr);
        assert!(
            done.stderr
                .contains("--bind: 0.0.0.0 already listens on every address of its family"),
            "{}",
            done.stderr
        );
    }
}
