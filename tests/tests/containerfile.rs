//! The `Containerfile` at the top of the source: what can be checked without a container
//! engine is checked here — it builds with the shipped build's command and copies the
//! path that build produces, the final image runs as a user other than root, every
//! `SERVERY_*` variable it sets is a setting, it exposes the ports it configures — and the
//! image's configuration is run against the test binary, with its `HEALTHCHECK` command.
//! Building the image needs podman or a docker daemon and a network for the crates: it
//! runs only with `SERVERY_CHECK_CONTAINER=1`, and says it was skipped otherwise.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use servery_tests::{Server, Tree, free_port, run_command, run_servery, servery_bin};

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
        eprintln!("image build skipped: set SERVERY_CHECK_CONTAINER=1 with podman or docker");
        return;
    }
    let engine = ["podman", "docker"].into_iter().find(|e| {
        Command::new(e)
            .arg("info")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    let Some(engine) = engine else {
        eprintln!("image build skipped: neither podman nor a docker daemon answers");
        return;
    };
    let mut build = Command::new(engine);
    build
        .args(["build", "-f", "Containerfile", "-t", "servery-test", "."])
        .current_dir(workspace());
    let built = run_command(build, Duration::from_secs(3600));
    assert!(built.status.success(), "{engine} build: {}", built.stderr);
}
