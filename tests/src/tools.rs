//! Outside programs the tests drive: `h2load` for load, `promtool` for the metrics' form.

use std::io::Write as _;
use std::net::SocketAddr;
use std::process::{Command, Stdio};

/// `requests` GETs of `/hello.txt` over HTTP/1.1 on `connections` connections; every one
/// must succeed.
pub fn h2load_hello(addr: SocketAddr, requests: u64, connections: u64) {
    let out = Command::new("h2load")
        .args([
            "-n",
            &requests.to_string(),
            "-c",
            &connections.to_string(),
            "--h1",
        ])
        .arg(format!("http://{addr}/hello.txt"))
        .output()
        .expect("h2load is needed (apt-get install nghttp2-client)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("{requests} succeeded")),
        "h2load:\n{text}"
    );
}

/// `promtool check metrics` on a scrape: `None` when promtool cannot be run, else its
/// verdict with what it said.
pub fn promtool_check(text: &str) -> Option<Result<(), String>> {
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    promtool
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write to promtool");
    let out = promtool.wait_with_output().expect("promtool ran");
    Some(if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    })
}
