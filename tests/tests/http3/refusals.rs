//! Requests h3 refuses before servery sees a request are logged and counted as refused
//! heads are (decision 0083): a malformed request (no `:method`; h3 resets its stream
//! with H3_MESSAGE_ERROR) is `"-" 400`, a field section over the limit (h3 answers 431)
//! is `"-" 431`, a field section that does not decode (h3 closes the connection with
//! QPACK_DECOMPRESSION_FAILED) is `"-" 400`, each counted under method `other` and route
//! class `refused`.

use super::*;

/// One HTTP/3 request stream carrying `field_section` as its HEADERS frame, raw: what
/// no HTTP/3 client library would send.
async fn raw_request(connection: &quinn::Connection, field_section: &[u8]) {
    let (mut send, mut recv) = connection.open_bi().await.expect("a request stream");
    let mut frame = vec![0x01]; // HEADERS
    let len = u32::try_from(field_section.len()).expect("a length");
    // A QUIC variable-length integer, in four bytes.
    frame.extend_from_slice(&(0x8000_0000 | len).to_be_bytes());
    frame.extend_from_slice(field_section);
    send.write_all(&frame).await.expect("the frame");
    let _ = send.finish();
    // The answer (a 431) or a reset: either ends the stream.
    let _ = tokio::time::timeout(REQUEST_BOUND, recv.read_to_end(1 << 20)).await;
}

#[test]
fn requests_h3_refuses_before_servery_sees_them_are_logged_and_counted() {
    let tree = Tree::new("h3-refusals");
    let (cert, flags) = identity(&tree);
    let log = tree.root().with_file_name("h3-refusals.log");
    let log_arg = log.to_str().expect("utf-8").to_owned();
    let mut server = start(
        &tree,
        1,
        &flags,
        &["--access-log", &log_arg, "--admin", "127.0.0.1:0"],
    );
    let admin = server.admin_addr(REQUEST_BOUND);
    let config = h3_client::config(&cert);
    runtime().block_on(async {
        let mut h3 = h3_client::connect(server.addr, loopback(), &config, REQUEST_BOUND)
            .await
            .expect("connected");
        // QPACK: no dynamic table (two zero bytes), then `:path /` from the static table
        // (index 1): a request without `:method`.
        raw_request(&h3.connection, &[0x00, 0x00, 0xC1]).await;
        // `age` (static name 2) with a 70,000-byte value: over the 64 KiB limit.
        let mut big = vec![0x00, 0x00, 0x52, 0x7F, 0xF1, 0xA1, 0x04];
        big.resize(big.len() + 70_000, b'a');
        raw_request(&h3.connection, &big).await;
        // The connection still serves.
        let reply = h3.get("/hello.txt", REQUEST_BOUND).await.expect("served");
        assert_eq!(reply.status, 200);
        // A static-table index past its end (63 + 127): the section cannot be decoded,
        // which ends the connection.
        let doomed = h3_client::connect(server.addr, loopback(), &config, REQUEST_BOUND)
            .await
            .expect("connected");
        raw_request(&doomed.connection, &[0x00, 0x00, 0xFF, 0x7F]).await;
    });
    let read = || -> Vec<String> {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.lines().map(str::to_owned).collect()
    };
    let (lines, _) = wait_until_or(
        Duration::from_secs(10),
        || Some(read()).filter(|lines| lines.len() >= 4),
        || {
            format!(
                "a line for each refused HTTP/3 request (no :method, too large, undecodable) and the GET: {:#?}",
                read()
            )
        },
    );
    // Combined format: `… [time] "REQUEST" STATUS BYTES …`.
    let mut refused: Vec<&str> = lines
        .iter()
        .filter_map(|l| {
            let (request, rest) = l.split_once("] \"")?.1.split_once("\" ")?;
            (request == "-").then(|| rest.split(' ').next())?
        })
        .collect();
    refused.sort_unstable();
    assert_eq!(
        refused,
        ["400", "400", "431"],
        "each refused HTTP/3 request logged: {lines:#?}"
    );
    let sample = |text: &str, series: &str| {
        text.lines()
            .find_map(|l| {
                l.strip_prefix(series)?
                    .strip_prefix(' ')?
                    .parse::<f64>()
                    .ok()
            })
            .unwrap_or(0.0)
    };
    let counted = |text: &str| {
        (
            sample(
                text,
                "servery_http_requests_total{method=\"other\",code=\"4xx\"}",
            ),
            sample(
                text,
                "servery_http_request_duration_seconds_count{class=\"refused\"}",
            ),
        )
    };
    // Heartbeats bring the counts (one a second by default): wait for them.
    let metrics = || {
        http_get(admin, "/metrics")
            .map(|(_, body)| String::from_utf8_lossy(&body).into_owned())
            .unwrap_or_default()
    };
    wait_until_or(
        Duration::from_secs(10),
        || (counted(&metrics()) == (3.0, 3.0)).then_some(()),
        || {
            format!(
                "the three refusals counted (other 4xx, refused):\n{}",
                metrics()
            )
        },
    );
}
