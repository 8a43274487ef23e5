//! Things in the served tree that are not files (issue 34): a FIFO and a Unix socket are
//! refused with 403, never a server error, and the server keeps serving.

use std::os::unix::net::UnixListener;
use std::process::Command;

use servery_tests::{FAST, Server, Tree, http_get};

#[test]
fn a_fifo_and_a_unix_socket_are_refused_with_403() {
    let tree = Tree::new("special-files");
    // Bound (and kept) by the test: a live socket, as a running program leaves it.
    let _socket = UnixListener::bind(tree.root().join("app.sock")).expect("bind a socket");
    let fifo = Command::new("mkfifo")
        .arg(tree.root().join("pipe"))
        .status()
        .is_ok_and(|s| s.success());
    let server = Server::start(&tree, 1, FAST, &[]);
    let (status, body) = http_get(server.addr, "/app.sock").expect("an answer");
    assert_eq!(
        status,
        403,
        "GET of a Unix socket: {}",
        String::from_utf8_lossy(&body)
    );
    if fifo {
        assert_eq!(http_get(server.addr, "/pipe").expect("an answer").0, 403);
    } else {
        servery_tests::skipped("the FIFO case: mkfifo is not available");
    }
    // Nothing was hurt: the files beside them are served.
    assert_eq!(
        http_get(server.addr, "/hello.txt").expect("an answer").0,
        200
    );
}
