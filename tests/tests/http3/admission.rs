//! `--max-connections` over HTTP/3: a full worker closes its longest-idle connection with
//! no request in progress to make room, with GOAWAY and H3_NO_ERROR, as it does on TCP.

use super::*;

#[test]
fn a_full_worker_closes_an_idle_http3_connection_to_admit_a_new_one() {
    let tree = Tree::new("h3-full");
    let (cert, flags) = identity(&tree);
    let server = start(&tree, 1, &flags, &["--max-connections", "1"]);
    // The idle client keeps its connection alive with PINGs: only the worker can end it.
    let pinging = h3_client::config_pinging(&cert, Some(Duration::from_millis(300)));
    let config = h3_client::config(&cert);
    runtime().block_on(async {
        let mut idle = h3_client::connect(server.addr, loopback(), &pinging, REQUEST_BOUND)
            .await
            .expect("first connection");
        idle.get("/hello.txt", REQUEST_BOUND).await.expect("hello");
        let mut fresh = h3_client::connect(server.addr, loopback(), &config, REQUEST_BOUND)
            .await
            .expect("a second connection is admitted");
        let reply = fresh
            .get("/hello.txt", REQUEST_BOUND)
            .await
            .expect("served");
        assert_eq!(reply.status, 200);
        let reason = tokio::time::timeout(REQUEST_BOUND, idle.connection.closed())
            .await
            .expect("the idle connection was closed to make room");
        let h3_no_error =
            |c: &quinn::ApplicationClose| c.error_code == quinn::VarInt::from_u32(0x100);
        assert!(
            matches!(&reason, quinn::ConnectionError::ApplicationClosed(c) if h3_no_error(c))
                || matches!(reason, quinn::ConnectionError::LocallyClosed),
            "closed cleanly (H3_NO_ERROR, by either side after GOAWAY): {reason:?}"
        );
    });
}
