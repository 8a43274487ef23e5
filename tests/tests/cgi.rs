//! CGI scripts (`--cgi`) on the real binary: shell, Python and a C program compiled here,
//! run by real workers and reached with curl.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use servery_tests::upstream::tool_present;
use servery_tests::*;

/// Writes an executable script `name` into `dir`.
fn script(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

fn cgi_dir(tree: &Tree) -> PathBuf {
    let dir = tree.dir.join("cgi");
    std::fs::create_dir_all(&dir).expect("mkdir cgi");
    dir
}

fn text(answer: &CurlAnswer) -> String {
    String::from_utf8_lossy(&answer.body).into_owned()
}

/// The value of `NAME=` in `env`'s output.
fn var<'t>(env: &'t str, name: &str) -> Option<&'t str> {
    env.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
}

const ENV_SH: &str = "#!/bin/sh\nprintf 'Content-Type: text/plain\\r\\n\\r\\n'\nenv\necho 'to the log from a script' >&2\n";

#[test]
fn a_shell_script_sees_its_meta_variables_and_nothing_else() {
    let tree = Tree::new("cgi-env");
    let dir = cgi_dir(&tree);
    script(&dir, "env.sh", ENV_SH);
    let server = Server::start(
        &tree,
        1,
        &[
            "--cgi",
            dir.to_str().expect("utf-8"),
            "--cgi-env",
            "PASSED_ON",
            "--cgi-env",
            "SET_HERE=fixed value",
        ],
        &[("PASSED_ON", "yes"), ("NOT_PASSED", "secret")],
    );
    let answer = curl(
        server.addr,
        "/cgi-bin/env.sh/a%20b/c/?x=1&y=%20",
        &[
            "-H",
            "Authorization: Basic c2VjcmV0",
            "-H",
            "Proxy: http://evil.example:1",
            "-H",
            "X-Custom: kept",
            "-H",
            "X_Under: dropped",
        ],
    );
    let env = text(&answer);
    assert_eq!(answer.status, 200, "{env}");
    for (name, want) in [
        ("GATEWAY_INTERFACE", "CGI/1.1"),
        ("REQUEST_METHOD", "GET"),
        ("SCRIPT_NAME", "/cgi-bin/env.sh"),
        ("PATH_INFO", "/a b/c/"),
        ("QUERY_STRING", "x=1&y=%20"),
        ("REMOTE_ADDR", "127.0.0.1"),
        ("SERVER_NAME", "127.0.0.1"),
        ("SERVER_PORT", &server.addr.port().to_string()),
        ("SERVER_PROTOCOL", "HTTP/1.1"),
        ("HTTP_X_CUSTOM", "kept"),
        ("PASSED_ON", "yes"),
        ("SET_HERE", "fixed value"),
        ("PATH", "/usr/local/bin:/usr/bin:/bin"),
    ] {
        assert_eq!(var(&env, name), Some(want), "{name} in:\n{env}");
    }
    for withheld in [
        "HTTP_AUTHORIZATION",
        "HTTP_PROXY",
        "HTTP_X_UNDER",
        "NOT_PASSED",
        "SERVERY_LOG",
        "HOME",
    ] {
        assert_eq!(
            var(&env, withheld),
            None,
            "{withheld} reached the script:\n{env}"
        );
    }
    wait_until(
        Duration::from_secs(10),
        "the script's stderr in the log",
        || {
            server
                .stderr()
                .contains("to the log from a script")
                .then_some(())
        },
    );
}

const PY_SUM: &str = r#"#!/usr/bin/env python3
import hashlib, json, os, sys
h = hashlib.sha256()
n = 0
while True:
    chunk = sys.stdin.buffer.read(65536)
    if not chunk:
        break
    h.update(chunk)
    n += len(chunk)
sys.stdout.write("Status: 201 Made\r\nContent-Type: application/json\r\nX-Py: 1\r\n\r\n")
sys.stdout.write(json.dumps({"n": n, "sha256": h.hexdigest(),
    "length": os.environ.get("CONTENT_LENGTH"), "type": os.environ.get("CONTENT_TYPE")}))
"#;

#[test]
fn a_python_script_reads_a_streamed_post_body() {
    if !tool_present("python3", &["--version"]) {
        return;
    }
    let tree = Tree::new("cgi-python");
    let dir = cgi_dir(&tree);
    script(&dir, "sum.py", PY_SUM);
    // Allowed so that `/usr/bin/env` finds python3 wherever it is installed.
    let server = Server::start(
        &tree,
        1,
        &["--cgi", dir.to_str().expect("utf-8"), "--cgi-env", "PATH"],
        &[],
    );
    let body: Vec<u8> = (0..24 * 1024 * 1024u32).map(|i| (i % 253) as u8).collect();
    let file = tree.dir.join("upload.bin");
    std::fs::write(&file, &body).expect("write body");
    let expected = {
        let out = std::process::Command::new("sha256sum")
            .arg(&file)
            .output()
            .expect("sha256sum");
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()
            .expect("a digest")
            .to_owned()
    };
    let data = format!("@{}", file.display());
    let answer = curl(
        server.addr,
        "/cgi-bin/sum.py",
        &[
            "--data-binary",
            &data,
            "-H",
            "Content-Type: application/octet-stream",
        ],
    );
    assert_eq!(answer.status, 201, "{}", text(&answer));
    let got: serde_json::Value = serde_json::from_slice(&answer.body).expect("json");
    assert_eq!(got["n"], body.len());
    assert_eq!(got["sha256"], expected.as_str());
    assert_eq!(got["length"], body.len().to_string());
    assert_eq!(got["type"], "application/octet-stream");
    // Chunked (no length): streamed to the script until the end of the body.
    let answer = curl(
        server.addr,
        "/cgi-bin/sum.py",
        &["--data-binary", &data, "-H", "Transfer-Encoding: chunked"],
    );
    let got: serde_json::Value = serde_json::from_slice(&answer.body).expect("json");
    assert_eq!(got["sha256"], expected.as_str(), "chunked upload");
    assert_eq!(got["length"], serde_json::Value::Null);
}

const C_PROGRAM: &str = r#"
#include <stdio.h>
#include <stdlib.h>
int main(void) {
    const char *q = getenv("QUERY_STRING");
    printf("Status: 202 Accepted\n");
    printf("Content-Type: text/plain\n\n");
    printf("compiled: %s\n", q ? q : "(none)");
    return 0;
}
"#;

#[test]
fn a_compiled_c_program_runs_as_a_script() {
    if !tool_present("cc", &["--version"]) {
        return skipped("no C compiler (cc)");
    }
    let tree = Tree::new("cgi-c");
    let dir = cgi_dir(&tree);
    let source = tree.dir.join("prog.c");
    std::fs::write(&source, C_PROGRAM).expect("write source");
    let status = std::process::Command::new("cc")
        .arg("-o")
        .arg(dir.join("prog"))
        .arg(&source)
        .status()
        .expect("run cc");
    assert!(status.success(), "cc failed");
    let server = Server::start(&tree, 1, &["--cgi", dir.to_str().expect("utf-8")], &[]);
    let answer = curl(server.addr, "/cgi-bin/prog?a=b", &[]);
    assert_eq!(answer.status, 202);
    assert_eq!(text(&answer), "compiled: a=b\n");
}

#[test]
fn redirects_nph_and_malformed_heads() {
    let tree = Tree::new("cgi-heads");
    let dir = cgi_dir(&tree);
    script(
        &dir,
        "local",
        "#!/bin/sh\nprintf 'Location: /hello.txt\\n\\n'\n",
    );
    script(
        &dir,
        "to-env",
        "#!/bin/sh\nprintf 'Location: /cgi-bin/env.sh/again?q=2\\n\\n'\n",
    );
    script(&dir, "env.sh", ENV_SH);
    script(
        &dir,
        "client",
        "#!/bin/sh\nprintf 'Location: https://example.org/x\\n\\n'\n",
    );
    script(
        &dir,
        "loop",
        "#!/bin/sh\nprintf 'Location: /cgi-bin/loop\\n\\n'\n",
    );
    script(
        &dir,
        "nph-raw",
        "#!/bin/sh\nprintf 'HTTP/1.1 299 Custom\\r\\nX-Raw: yes\\r\\n\\r\\nraw body'\n",
    );
    script(
        &dir,
        "bad",
        "#!/bin/sh\nprintf 'this is not a header\\n\\nbody'\n",
    );
    script(&dir, "nothing", "#!/bin/sh\nexit 0\n");
    let server = Server::start(&tree, 1, &["--cgi", dir.to_str().expect("utf-8")], &[]);
    let addr = server.addr;

    let local = curl(addr, "/cgi-bin/local", &[]);
    assert_eq!(
        (local.status, local.body.as_slice()),
        (200, HELLO),
        "local redirect"
    );
    let again = curl(addr, "/cgi-bin/to-env", &["-X", "POST", "-d", "x"]);
    let env = text(&again);
    assert_eq!(var(&env, "PATH_INFO"), Some("/again"), "{env}");
    assert_eq!(var(&env, "QUERY_STRING"), Some("q=2"));
    assert_eq!(
        var(&env, "REQUEST_METHOD"),
        Some("GET"),
        "a local redirect is a GET"
    );
    assert_eq!(
        curl(addr, "/cgi-bin/loop", &[]).status,
        502,
        "endless local redirects"
    );

    let (head, _) = curl_head_and_body(&format!("http://{addr}/cgi-bin/client"), &[]);
    assert!(head.starts_with("http/1.1 302"), "{head}");
    assert!(head.contains("location: https://example.org/x"), "{head}");

    let (head, body) = curl_head_and_body(&format!("http://{addr}/cgi-bin/nph-raw"), &[]);
    assert!(head.starts_with("http/1.1 299"), "{head}");
    assert!(head.contains("x-raw: yes"), "{head}");
    assert_eq!(body, b"raw body");

    let bad = curl(addr, "/cgi-bin/bad", &[]);
    assert_eq!(bad.status, 502);
    assert!(text(&bad).contains("has no `:`"), "{}", text(&bad));
    let nothing = curl(addr, "/cgi-bin/nothing", &[]);
    assert_eq!(nothing.status, 502);
    assert!(
        text(&nothing).contains("ended before its header block"),
        "{}",
        text(&nothing)
    );
}

#[test]
fn only_executable_files_inside_the_directory_run() {
    let tree = Tree::new("cgi-escape");
    let dir = cgi_dir(&tree);
    script(
        &dir,
        "ok",
        "#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\nok'\n",
    );
    let outside = script(
        &tree.dir,
        "outside",
        "#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\nescaped'\n",
    );
    std::os::unix::fs::symlink(&outside, dir.join("link-out")).expect("symlink");
    std::os::unix::fs::symlink(&tree.dir, dir.join("up")).expect("symlink");
    std::fs::write(dir.join("data.txt"), "not a script").expect("write");
    std::fs::create_dir(dir.join("folder")).expect("mkdir");
    let server = Server::start(&tree, 1, &["--cgi", dir.to_str().expect("utf-8")], &[]);
    let addr = server.addr;
    assert_eq!(text(&curl(addr, "/cgi-bin/ok", &[])), "ok");
    for (path, status) in [
        ("/cgi-bin/link-out", 403),
        ("/cgi-bin/up/outside", 403),
        ("/cgi-bin/data.txt", 403),
        ("/cgi-bin/folder", 403),
        ("/cgi-bin/", 403),
        ("/cgi-bin/missing", 404),
        ("/cgi-bin/.hidden", 404),
    ] {
        let answer = curl(addr, path, &[]);
        assert_eq!(answer.status, status, "{path}: {}", text(&answer));
        assert!(!text(&answer).contains("escaped"));
    }
    // A climb out, however spelt, never runs anything.
    for path in [
        "/cgi-bin/%2e%2e/outside",
        "/cgi-bin/..%2foutside",
        "/cgi-bin/x/../../outside",
    ] {
        let answer = curl(addr, path, &["--path-as-is"]);
        assert!(
            matches!(answer.status, 400 | 403 | 404),
            "{path}: {} {}",
            answer.status,
            text(&answer)
        );
        assert!(
            !text(&answer).contains("escaped"),
            "{path} ran the outside script"
        );
    }
    // `/cgi-binx` is not under the prefix: a file request.
    assert_eq!(curl(addr, "/cgi-binx", &[]).status, 404);
}

/// Waits until none of the pids written (one a line) in `file` is alive.
fn wait_all_dead(file: &Path, what: &str) {
    let pids: Vec<u32> = wait_until(Duration::from_secs(10), "the script's pids", || {
        let text = std::fs::read_to_string(file).ok()?;
        let pids: Vec<u32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
        (pids.len() >= 2).then_some(pids)
    })
    .0;
    wait_until_or(
        Duration::from_secs(10),
        || pids.iter().all(|&p| !alive(p)).then_some(()),
        || format!("{what}: the script's process group must be killed, alive: {pids:?}"),
    );
}

/// A script that starts a background child (same group), records both pids, and then
/// does what `then` says.
fn group_script(pids: &Path, head_first: bool) -> String {
    let head = if head_first {
        "printf 'Content-Type: text/plain\\n\\nstarted\\n'\n"
    } else {
        ""
    };
    format!(
        "#!/bin/sh\nsleep 300 &\necho $$ > {p}.tmp\necho $! >> {p}.tmp\nmv {p}.tmp {p}\n{head}exec sleep 300\n",
        p = pids.display()
    )
}

#[test]
fn a_silent_script_is_killed_with_its_group_and_answered_504() {
    let tree = Tree::new("cgi-timeout");
    let dir = cgi_dir(&tree);
    let pids = tree.dir.join("pids");
    script(&dir, "slow", &group_script(&pids, false));
    let server = Server::start(
        &tree,
        1,
        &["--cgi", dir.to_str().expect("utf-8"), "--cgi-timeout", "1"],
        &[],
    );
    let started = Instant::now();
    let answer = curl(server.addr, "/cgi-bin/slow", &[]);
    assert_eq!(answer.status, 504, "{}", text(&answer));
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        text(&answer).contains("no response head within"),
        "{}",
        text(&answer)
    );
    wait_all_dead(&pids, "--cgi-timeout");
}

#[test]
fn a_client_that_leaves_kills_the_scripts_group() {
    let tree = Tree::new("cgi-abort");
    let dir = cgi_dir(&tree);
    let pids = tree.dir.join("pids");
    script(&dir, "stream", &group_script(&pids, true));
    let server = Server::start(&tree, 1, &["--cgi", dir.to_str().expect("utf-8")], &[]);
    // curl gives up after 2 s, in the middle of the body: the client left.
    let answer = curl(server.addr, "/cgi-bin/stream", &["--max-time", "2"]);
    assert_eq!(answer.status, 200);
    assert!(text(&answer).contains("started"));
    wait_all_dead(&pids, "client abort");
}

#[test]
fn no_script_outlives_a_worker_killed_with_sigkill() {
    let tree = Tree::new("cgi-kill9");
    let dir = cgi_dir(&tree);
    let pids = tree.dir.join("pids");
    script(&dir, "stream", &group_script(&pids, true));
    let server = Server::start(&tree, 1, &["--cgi", dir.to_str().expect("utf-8")], &[]);
    let worker = *worker_pids(&server.status()).first().expect("a worker");
    let addr = server.addr;
    let client = std::thread::spawn(move || curl(addr, "/cgi-bin/stream", &["--max-time", "30"]));
    wait_until(Duration::from_secs(10), "the script's pids", || {
        std::fs::read_to_string(&pids)
            .ok()
            .filter(|t| t.lines().count() >= 2)
    });
    // The script and its child lead a group of their own: the worker's group is not
    // theirs, and the worker gets no chance to kill them.
    signal_pid(worker, Sig::KILL);
    wait_all_dead(&pids, "a worker killed with SIGKILL");
    let answer = client.join().expect("client");
    assert_ne!(
        answer.exit,
        Some(28),
        "the response ended with its worker, not at curl's timeout"
    );
    server.wait_ready(1, Duration::from_secs(20));
}

const CONCURRENCY_SH: &str = r#"#!/bin/sh
# Counts the scripts running at once under a lock, and the most ever seen.
state="$STATE_DIR"
(
  flock 9
  n=$(( $(cat "$state/now" 2>/dev/null || echo 0) + 1 ))
  echo $n > "$state/now"
  max=$(cat "$state/max" 2>/dev/null || echo 0)
  [ $n -gt $max ] && echo $n > "$state/max"
) 9>"$state/lock"
sleep 0.4
(
  flock 9
  echo $(( $(cat "$state/now") - 1 )) > "$state/now"
) 9>"$state/lock"
printf 'Content-Type: text/plain\n\ndone\n'
"#;

#[test]
fn the_concurrency_bound_holds_across_workers() {
    if !tool_present("flock", &["--version"]) {
        return;
    }
    let tree = Tree::new("cgi-concurrent");
    let dir = cgi_dir(&tree);
    let state = tree.dir.join("state");
    std::fs::create_dir(&state).expect("mkdir");
    script(&dir, "count", CONCURRENCY_SH);
    let state_env = format!("STATE_DIR={}", state.display());
    let server = Server::start(
        &tree,
        2,
        &[
            "--cgi",
            dir.to_str().expect("utf-8"),
            "--cgi-max-concurrent",
            "2",
            "--cgi-env",
            &state_env,
        ],
        &[],
    );
    let addr = server.addr;
    let clients: Vec<_> = (0..10)
        .map(|_| {
            std::thread::spawn(move || {
                let (head, _) = curl_head_and_body(&format!("http://{addr}/cgi-bin/count"), &[]);
                head
            })
        })
        .collect();
    let heads: Vec<String> = clients
        .into_iter()
        .map(|c| c.join().expect("client"))
        .collect();
    let ok = heads
        .iter()
        .filter(|h| h.starts_with("http/1.1 200"))
        .count();
    let refused: Vec<_> = heads
        .iter()
        .filter(|h| h.starts_with("http/1.1 503"))
        .collect();
    assert!(ok >= 1, "{heads:?}");
    assert_eq!(ok + refused.len(), heads.len(), "{heads:?}");
    for head in &refused {
        assert!(
            head.contains("retry-after: 1"),
            "a refusal says when to retry: {head}"
        );
    }
    let max: u32 = std::fs::read_to_string(state.join("max"))
        .expect("max")
        .trim()
        .parse()
        .expect("a count");
    assert!(
        max <= 2,
        "--cgi-max-concurrent 2 is service-wide: {max} scripts ran at once"
    );
    wait_until(Duration::from_secs(10), "every CGI grant back", || {
        let status = server.status();
        let held = status["broker"]["cgi_grants"].as_u64()?;
        // Spare grants a worker keeps are at most its share; with a bound of 2 over 2
        // workers none are kept (decision 0076).
        (held == 0).then_some(())
    });
}

#[test]
fn broken_cgi_settings_are_refused_before_binding() {
    let tree = Tree::new("cgi-settings");
    let root = tree.root();
    let finished = run_servery(
        &[
            root.to_str().expect("utf-8"),
            "--port",
            "0",
            "--cgi",
            "/nonexistent/cgi",
            "--cgi-prefix",
            "cgi",
            "--cgi-env",
            "SERVERY_AUTH",
            "--cgi-timeout",
            "0",
        ],
        &[],
        Duration::from_secs(20),
    );
    assert_eq!(finished.status.code(), Some(2), "{}", finished.stderr);
    for expected in [
        "--cgi",
        "--cgi-prefix",
        "--cgi-env",
        "--cgi-timeout",
        "secrets",
    ] {
        assert!(
            finished.stderr.contains(expected),
            "{expected} not named: {}",
            finished.stderr
        );
    }
}

/// `git` with a clean configuration, in `dir`.
fn git(dir: &Path, home: &Path, args: &[&str]) -> std::process::Output {
    let out = std::process::Command::new("git")
        .current_dir(dir)
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.org"])
        .args(args)
        .output()
        .expect("run git");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A known CGI application: `git http-backend` behind servery takes a push (one large
/// enough for git to send it chunked) and serves a clone of what was pushed.
#[test]
fn git_http_backend_takes_a_push_and_serves_a_clone() {
    let backend = Path::new("/usr/lib/git-core/git-http-backend");
    if !tool_present("git", &["--version"]) {
        return;
    }
    if !backend.is_file() {
        return skipped("git http-backend is not installed (/usr/lib/git-core)");
    }
    let tree = Tree::new("cgi-git");
    let dir = cgi_dir(&tree);
    // A wrapper inside DIR: a symlink to the backend would lead out and be refused.
    script(
        &dir,
        "git",
        &format!("#!/bin/sh\nexec {}\n", backend.display()),
    );
    let repos = tree.dir.join("repos");
    std::fs::create_dir(&repos).expect("mkdir");
    git(
        &repos,
        &tree.dir,
        &["init", "-q", "--bare", "-b", "main", "proj.git"],
    );
    git(
        &repos.join("proj.git"),
        &tree.dir,
        &["config", "http.receivepack", "true"],
    );
    let server = Server::start(
        &tree,
        2,
        &[
            "--cgi",
            dir.to_str().expect("utf-8"),
            "--cgi-env",
            "GIT_PROJECT_ROOT",
            "--cgi-env",
            "GIT_HTTP_EXPORT_ALL=1",
        ],
        &[("GIT_PROJECT_ROOT", repos.to_str().expect("utf-8"))],
    );
    let url = format!("http://{}/cgi-bin/git/proj.git", server.addr);
    let work = tree.dir.join("work");
    std::fs::create_dir(&work).expect("mkdir");
    git(&work, &tree.dir, &["init", "-q", "-b", "main"]);
    std::fs::write(work.join("README"), "pushed through servery\n").expect("write");
    // Incompressible and over git's 1 MiB post buffer: sent with chunked encoding.
    let noise: Vec<u8> = (0..3u64 << 20)
        .map(|i| {
            (i.wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407)
                >> 56) as u8
        })
        .collect();
    std::fs::write(work.join("noise.bin"), &noise).expect("write");
    git(&work, &tree.dir, &["add", "."]);
    git(&work, &tree.dir, &["commit", "-q", "-m", "first"]);
    git(&work, &tree.dir, &["push", "-q", &url, "main"]);
    git(&tree.dir, &tree.dir, &["clone", "-q", &url, "clone"]);
    let clone = tree.dir.join("clone");
    assert_eq!(
        std::fs::read_to_string(clone.join("README")).expect("cloned README"),
        "pushed through servery\n"
    );
    assert!(
        std::fs::read(clone.join("noise.bin")).expect("cloned noise") == noise,
        "the large file came back whole"
    );
    let head = git(&clone, &tree.dir, &["log", "--format=%s", "-1"]);
    assert_eq!(String::from_utf8_lossy(&head.stdout).trim(), "first");
}
