//! CGI on the real binary, continued (decision 0101): the meta-variables `--auth` and the
//! served directory give (`AUTH_TYPE`, `REMOTE_USER`, `PATH_TRANSLATED`), the `cgi` route
//! class on `/metrics`, and a 1 GiB upload streamed to a script while the worker's
//! resident memory stays flat.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use servery_tests::*;

fn script(dir: &Path, name: &str, text: &str) {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

fn cgi_dir(tree: &Tree) -> std::path::PathBuf {
    let dir = tree.dir.join("cgi");
    std::fs::create_dir_all(&dir).expect("mkdir cgi");
    dir
}

fn var<'t>(env: &'t str, name: &str) -> Option<&'t str> {
    env.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
}

const ENV_SH: &str = "#!/bin/sh\nprintf 'Content-Type: text/plain\\r\\n\\r\\n'\nenv\n";

#[test]
fn auth_and_path_info_give_remote_user_and_path_translated() {
    let tree = Tree::new("cgi-auth-vars");
    let dir = cgi_dir(&tree);
    script(&dir, "env.sh", ENV_SH);
    let mut server = Server::start(
        &tree,
        1,
        &[
            "--cgi",
            dir.to_str().expect("utf-8"),
            "--auth",
            "alice:secret",
            "--admin",
            "127.0.0.1:0",
        ],
        &[],
    );
    let admin = server.admin_addr(Duration::from_secs(10));
    let refused = curl(server.addr, "/cgi-bin/env.sh/a/b", &[]);
    assert_eq!(refused.status, 401, "--auth applies to scripts");
    let answer = curl(
        server.addr,
        "/cgi-bin/env.sh/a/b%20c",
        &["-u", "alice:secret"],
    );
    assert_eq!(answer.status, 200);
    let env = String::from_utf8_lossy(&answer.body).into_owned();
    assert_eq!(
        var(&env, "REMOTE_USER"),
        Some("alice"),
        "RFC 3875 §4.1.11: the user --auth authenticated\n{env}"
    );
    assert_eq!(var(&env, "AUTH_TYPE"), Some("Basic"), "{env}");
    let root = std::fs::canonicalize(tree.root()).expect("root");
    assert_eq!(
        var(&env, "PATH_TRANSLATED"),
        Some(format!("{}/a/b c", root.display()).as_str()),
        "RFC 3875 §4.1.6: PATH_INFO mapped under the served directory\n{env}"
    );
    assert!(
        !env.contains("secret"),
        "the password never reaches a script\n{env}"
    );
    // The route class: both answers were a script's (the 401 is `refused`).
    wait_until(Duration::from_secs(10), "the cgi class on /metrics", || {
        let (_, text) = http_get(admin, "/metrics").ok()?;
        let text = String::from_utf8_lossy(&text).into_owned();
        text.lines()
            .any(|l| l == "servery_http_request_duration_seconds_count{class=\"cgi\"} 1")
            .then_some(())
    });
}

#[test]
fn without_auth_or_path_info_those_variables_are_not_set() {
    let tree = Tree::new("cgi-no-auth-vars");
    let dir = cgi_dir(&tree);
    script(&dir, "env.sh", ENV_SH);
    let server = Server::start(&tree, 1, &["--cgi", dir.to_str().expect("utf-8")], &[]);
    let answer = curl(server.addr, "/cgi-bin/env.sh", &["-u", "mallory:guess"]);
    assert_eq!(answer.status, 200);
    let env = String::from_utf8_lossy(&answer.body).into_owned();
    for name in ["REMOTE_USER", "AUTH_TYPE", "PATH_TRANSLATED", "PATH_INFO"] {
        assert_eq!(
            var(&env, name),
            None,
            "{name}: without --auth a client's own Authorization names nobody\n{env}"
        );
    }
}

/// A script that reads its whole input and says how much it read.
const COUNT_SH: &str =
    "#!/bin/sh\nn=$(wc -c)\nprintf 'Content-Type: text/plain\\r\\n\\r\\n%s\\n' \"$n\"\n";

#[test]
fn a_one_gib_upload_streams_to_a_script_in_flat_memory() {
    const SIZE: u64 = 1 << 30;
    let tree = Tree::new("cgi-gib-upload");
    let dir = cgi_dir(&tree);
    script(&dir, "count.sh", COUNT_SH);
    let server = Server::start(&tree, 1, &["--cgi", dir.to_str().expect("utf-8")], &[]);
    let (status, _) = server.wait_ready(1, Duration::from_secs(20));
    let pids = worker_pids(&status);
    let rss_kib = move || -> u64 {
        pids.iter()
            .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/status")).ok())
            .filter_map(|s| {
                s.lines()
                    .find(|l| l.starts_with("VmRSS:"))
                    .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            })
            .max()
            .unwrap_or(0)
    };
    let before = rss_kib();
    let peak = Arc::new(AtomicU64::new(before));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, stop, rss) = (Arc::clone(&peak), Arc::clone(&stop), rss_kib.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(rss(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    // A sparse file: the bytes cost the disk nothing.
    let file = tree.dir.join("upload.bin");
    std::fs::File::create(&file)
        .and_then(|f| f.set_len(SIZE))
        .expect("sparse file");
    // `-T` streams the file (`--data-binary @` would read it whole into curl first).
    let answer = curl(
        server.addr,
        "/cgi-bin/count.sh",
        &[
            "-T",
            &file.display().to_string(),
            "-X",
            "POST",
            "-H",
            "Content-Type: application/octet-stream",
            "--max-time",
            "300",
        ],
    );
    stop.store(true, Ordering::Relaxed);
    sampler.join().expect("sampler");
    assert_eq!(
        answer.status,
        200,
        "{:?}",
        String::from_utf8_lossy(&answer.body)
    );
    assert_eq!(
        String::from_utf8_lossy(&answer.body).trim(),
        SIZE.to_string(),
        "the script read every byte"
    );
    let peak = peak.load(Ordering::Relaxed);
    eprintln!(
        "worker RSS: {before} KiB before, {peak} KiB at most while 1 GiB streamed to a script"
    );
    assert!(
        peak < before + 48 * 1024,
        "a 1 GiB upload streams to the script: the worker grew from {before} KiB to {peak} KiB"
    );
}
