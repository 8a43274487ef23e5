//! The `Containerfile` at the top of the source: what can be checked without a container
//! engine is checked here — it builds with the shipped build's command and copies the
//! path that build produces, the final image runs as a user other than root, every
//! `SERVERY_*` variable it sets is a setting, it exposes the ports it configures — and the
//! image's configuration is run against the test binary, with its `HEALTHCHECK` command.
//! With the release binary (`SERVERY_CHECK_RELEASE=1`, as `scripts/test` runs this, or
//! `SERVERY_RELEASE_BIN`) and root, the image's file system is assembled by the
//! Containerfile's own commands and the binary serves from it under `chroot` as the
//! image's user, with only the `/proc` and `/dev` a container runtime provides.
//! Building the image needs podman or a docker daemon and a network for the crates: it
//! runs only with `SERVERY_CHECK_CONTAINER=1`, and says it was skipped otherwise.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use servery_tests::{
    HELLO, Server, Sig, Tree, free_port, http_get, run_command, run_servery, servery_bin,
    signal_pid, wait_until,
};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The instructions, continuation lines joined, comments dropped: (keyword, arguments).
fn instructions() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(workspace().join("Containerfile")).expect("Containerfile");
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || (line.is_empty() && current.is_empty()) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(part) => {
                current.push_str(part);
                current.push(' ');
            }
            None => {
                current.push_str(line);
                let (keyword, rest) = current.split_once(' ').unwrap_or((&current, ""));
                out.push((keyword.to_ascii_uppercase(), rest.trim().to_owned()));
                current.clear();
            }
        }
    }
    out
}

/// The instructions of the last stage (the image that ships).
fn final_stage(all: &[(String, String)]) -> &[(String, String)] {
    let from = all.iter().rposition(|(k, _)| k == "FROM").expect("a FROM");
    &all[from..]
}

/// `ENV A=1 B=2` of the final stage.
fn final_env(stage: &[(String, String)]) -> BTreeMap<String, String> {
    stage
        .iter()
        .filter(|(k, _)| k == "ENV")
        .flat_map(|(_, args)| {
            args.split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            Some((k.to_owned(), v.to_owned()))
        })
        .collect()
}

/// A JSON-array (exec form) argument list.
fn exec_form(args: &str) -> Vec<String> {
    let list = &args[args.find('[').expect("exec form")..];
    servery_tests::serde_json::from_str(list).expect("a JSON array")
}

#[test]
fn the_image_is_the_static_build_run_by_an_unprivileged_user() {
    let all = instructions();
    let build = all
        .iter()
        .find(|(k, a)| k == "RUN" && a.contains("cargo"))
        .map(|(_, a)| a.as_str())
        .expect("a RUN with cargo");
    assert!(build.contains("cargo release-static"), "{build}");
    // The alias's target decides where its binary is (.cargo/config.toml).
    let config = std::fs::read_to_string(workspace().join(".cargo/config.toml")).expect("config");
    let target = config
        .split_once("\"--target\", \"")
        .and_then(|(_, rest)| rest.split_once('"'))
        .map(|(t, _)| t)
        .expect("the alias's --target");
    let produced = format!("target/{target}/release/servery");
    assert!(
        build.contains(&produced),
        "the build copies another path than {produced}: {build}"
    );
    assert!(build.contains("/rootfs/usr/local/bin/servery"), "{build}");

    let stage = final_stage(&all);
    assert!(
        stage[0].1.starts_with("scratch"),
        "not a minimal base: {:?}",
        stage[0]
    );
    let user = stage
        .iter()
        .rfind(|(k, _)| k == "USER")
        .map(|(_, u)| u.clone())
        .expect("a USER");
    let uid = user.split(':').next().unwrap_or("").to_owned();
    assert!(
        uid.parse::<u32>().is_ok_and(|u| u != 0),
        "the image runs as `{user}`, not a numeric non-root uid"
    );
    assert!(
        build.contains(&format!("servery:x:{uid}:")),
        "no passwd entry names uid {uid}: {build}"
    );
    let entry = stage
        .iter()
        .find(|(k, _)| k == "ENTRYPOINT")
        .map(|(_, a)| exec_form(a))
        .expect("an ENTRYPOINT");
    assert_eq!(entry, ["/usr/local/bin/servery"]);
    let health = stage
        .iter()
        .find(|(k, _)| k == "HEALTHCHECK")
        .map(|(_, a)| exec_form(a))
        .expect("a HEALTHCHECK");
    assert_eq!(health, ["/usr/local/bin/servery", "healthcheck"]);

    // Every variable is a setting `--help` names, and the exposed ports are the served ones.
    let env = final_env(stage);
    let help = run_servery(&["--help"], &[], Duration::from_secs(30)).stdout;
    for name in env.keys() {
        assert!(
            help.contains(&format!("[env: {name}")),
            "{name} is not a setting"
        );
    }
    let admin: SocketAddr = env["SERVERY_ADMIN"].parse().expect("SERVERY_ADMIN");
    let exposed: Vec<u16> = stage
        .iter()
        .filter(|(k, _)| k == "EXPOSE")
        .flat_map(|(_, a)| {
            a.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<_>>()
        })
        .collect();
    let port: u16 = env["SERVERY_PORT"].parse().expect("SERVERY_PORT");
    assert_eq!(exposed, [port, admin.port()]);
    assert!(
        admin.ip().is_unspecified(),
        "the admin listener must be reachable from outside"
    );
}

#[test]
fn the_images_configuration_serves_and_its_healthcheck_passes() {
    let all = instructions();
    let stage = final_stage(&all);
    let mut env = final_env(stage);
    // The image's settings, on ports free here and the tree of this test.
    let tree = Tree::new("containerfile");
    let admin_port = free_port().to_string();
    env.insert("SERVERY_ADMIN".into(), format!("0.0.0.0:{admin_port}"));
    env.insert("SERVERY_PORT".into(), free_port().to_string());
    env.insert("SERVERY_WORKERS".into(), "2".into());
    env.insert(
        "SERVERY_DIR".into(),
        tree.root().to_string_lossy().into_owned(),
    );
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let check = run_servery(&["--check-config"], &pairs, Duration::from_secs(30));
    assert!(check.status.success(), "{}", check.stderr);

    let server = Server::start(&tree, 2, &[], &pairs);
    server.wait_ready(2, Duration::from_secs(20));
    let health = stage
        .iter()
        .find(|(k, _)| k == "HEALTHCHECK")
        .map(|(_, a)| exec_form(a))
        .expect("a HEALTHCHECK");
    let mut probe = Command::new(servery_bin());
    probe.args(&health[1..]).env_clear().envs(env.iter());
    let probed = run_command(probe, Duration::from_secs(30));
    assert!(
        probed.status.success(),
        "{}{}",
        probed.stdout,
        probed.stderr
    );
    assert!(
        probed.stdout.contains(&format!(":{admin_port}/livez")),
        "{}",
        probed.stdout
    );

    if std::env::var_os("SERVERY_CHECK_CONTAINER").is_none_or(|v| v != "1") {
        servery_tests::skipped(
            "the image build: set SERVERY_CHECK_CONTAINER=1 with podman or docker",
        );
        return;
    }
    let engine = ["podman", "docker"].into_iter().find(|e| {
        Command::new(e)
            .arg("info")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    let Some(engine) = engine else {
        servery_tests::skipped("the image build: neither podman nor a docker daemon answers");
        return;
    };
    let mut build = Command::new(engine);
    build
        .args(["build", "-f", "Containerfile", "-t", "servery-test", "."])
        .current_dir(workspace());
    let built = run_command(build, Duration::from_secs(3600));
    assert!(built.status.success(), "{engine} build: {}", built.stderr);
}

/// The shipped binary, if this run is to check it (as tests/release_binary.rs finds it).
fn release_binary() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("SERVERY_RELEASE_BIN") {
        return Some(PathBuf::from(bin));
    }
    if std::env::var_os("SERVERY_CHECK_RELEASE").is_none_or(|v| v != "1") {
        return None;
    }
    let out = Command::new("python3")
        .arg(workspace().join("scripts/release_binary.py"))
        .output()
        .expect("run scripts/release_binary.py");
    assert!(
        out.status.success(),
        "the release build failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// Kills what it holds when the test ends, however it ends.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_images_file_system_serves_as_its_user_under_chroot() {
    let Some(bin) = release_binary() else {
        servery_tests::skipped(
            "the image's file system under chroot needs the release binary \
             (SERVERY_CHECK_RELEASE=1 or SERVERY_RELEASE_BIN)",
        );
        return;
    };
    if !cfg!(all(target_arch = "x86_64", target_os = "linux")) {
        servery_tests::skipped("the image is x86_64 Linux only");
        return;
    }
    if !rustix::process::geteuid().is_root() {
        servery_tests::skipped("chroot and mounts need root");
        return;
    }
    let all = instructions();
    let build = all
        .iter()
        .find(|(k, a)| k == "RUN" && a.contains("cargo"))
        .map(|(_, a)| a.clone())
        .expect("a RUN with cargo");
    let stage = final_stage(&all);
    let user = stage
        .iter()
        .rfind(|(k, _)| k == "USER")
        .map(|(_, u)| u.clone())
        .expect("a USER");

    // The build stage's commands, with the binary already built and the image's root here.
    let tree = Tree::new("containerfile-rootfs");
    let rootfs = tree.root().join("image");
    let produced = build
        .split_whitespace()
        .find(|w| w.starts_with("target/") && w.ends_with("/servery"))
        .expect("the path the build produces")
        .to_owned();
    let assemble = build
        .replace(
            "SERVERY_BUILD_COMMIT=\"$SERVERY_BUILD_COMMIT\" cargo release-static --locked",
            "true",
        )
        .replace(&produced, &bin.to_string_lossy())
        .replace("/rootfs", &rootfs.to_string_lossy());
    assert!(
        !assemble.contains("cargo"),
        "the build command changed: {build}"
    );
    let mut sh = Command::new("sh");
    sh.arg("-ec").arg(&assemble);
    let assembled = run_command(sh, Duration::from_secs(30));
    assert!(
        assembled.status.success(),
        "{assemble}: {}",
        assembled.stderr
    );
    std::fs::write(rootfs.join("srv/hello.txt"), HELLO).expect("a file to serve");
    for dir in ["proc", "dev"] {
        std::fs::create_dir_all(rootfs.join(dir)).expect("mount points");
    }
    let files = count_files(&rootfs);
    assert_eq!(
        files, 3,
        "the image holds the binary, passwd and group, nothing else"
    );

    // The image's settings, on ports free here.
    let mut env = final_env(stage);
    let port = free_port();
    let admin_port = free_port();
    env.insert("SERVERY_PORT".into(), port.to_string());
    env.insert("SERVERY_ADMIN".into(), format!("0.0.0.0:{admin_port}"));
    env.insert("SERVERY_WORKERS".into(), "2".into());
    // What a runtime gives a container: its own /proc and the host's /dev; then the
    // entry point, as the image's user, in the image's root (`exec` keeps the pid).
    let in_image = |args: &[&str]| {
        let mut cmd = Command::new("unshare");
        cmd.args(["--mount", "--propagation", "private", "sh", "-ec"])
            .arg(
                "user=\"$1\"; shift; \
                 mount -t proc proc \"$0/proc\"; mount --rbind /dev \"$0/dev\"; \
                 exec chroot --userspec=\"$user\" \"$0\" /usr/local/bin/servery \"$@\"",
            )
            .arg(&rootfs)
            .arg(&user)
            .args(args)
            .env_clear()
            .envs(env.iter());
        cmd
    };
    let mut child = in_image(&[])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("unshare and chroot");
    let stdout = child.stdout.take().expect("stdout");
    let stderr = child.stderr.take().expect("stderr");
    let mut guard = Guard(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            text.push_str(&line);
            text.push('\n');
        }
        text
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.starts_with("servery: ready") => break,
            Ok(_) => {}
            Err(_) => {
                let _ = guard.0.kill();
                panic!(
                    "not ready in the image: {}",
                    errors.join().unwrap_or_default()
                );
            }
        }
    }

    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let (code, body) = http_get(addr, "/hello.txt").expect("served from the image");
    assert_eq!((code, body.as_slice()), (200, HELLO));
    let health = run_command(in_image(&["healthcheck"]), Duration::from_secs(30));
    assert!(
        health.status.success(),
        "{}{}",
        health.stdout,
        health.stderr
    );
    // The control socket in the image's /tmp, as `podman exec … servery ctl` finds it.
    let status = run_command(
        in_image(&["ctl", "--port", &port.to_string(), "status", "--json"]),
        Duration::from_secs(30),
    );
    assert!(status.status.success(), "{}", status.stderr);
    let status: servery_tests::serde_json::Value =
        servery_tests::serde_json::from_str(&status.stdout).expect("status JSON");
    let uid: u64 = user
        .split(':')
        .next()
        .and_then(|u| u.parse().ok())
        .expect("uid");
    assert_eq!(status["state"], "ready", "{status}");
    assert_eq!(
        std::fs::metadata(rootfs.join(format!("tmp/servery-{uid}")))
            .map(|m| {
                use std::os::unix::fs::MetadataExt;
                u64::from(m.uid())
            })
            .ok(),
        Some(uid),
        "the control socket's directory belongs to the image's user"
    );

    // SIGTERM, as `podman stop` sends it (STOPSIGNAL): a clean stop.
    signal_pid(guard.0.id(), Sig::TERM);
    let (exit, _) = wait_until(Duration::from_secs(20), "the exit after SIGTERM", || {
        guard.0.try_wait().ok().flatten()
    });
    assert_eq!(
        exit.code(),
        Some(0),
        "{}",
        errors.join().unwrap_or_default()
    );
}

/// Regular files under `dir` (the image's /tmp and /srv contents left out).
fn count_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| !p.ends_with("srv"))
        .map(|p| if p.is_dir() { count_files(&p) } else { 1 })
        .sum()
}
