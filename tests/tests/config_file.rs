//! The `--config` file (docs/operations.md, "Configuration file"): precedence per setting
//! (command line > environment > file > default), errors naming the file, line and key
//! reported with every other configuration error, `--print-config` read back by
//! `--config`, and reloads that read the file again and refuse a change to a setting
//! fixed at start while the running generation keeps serving.

use std::path::{Path, PathBuf};
use std::time::Duration;

use servery_tests::serde_json::json;
use servery_tests::*;

const BOUND: Duration = Duration::from_secs(20);

fn write(path: &Path, text: &str) -> PathBuf {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    path.to_owned()
}

fn text(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// `key = value  # source` lines of `--print-config` output, as (key, value, source).
fn settings(printed: &str) -> Vec<(String, String, String)> {
    printed
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains(" = "))
        .map(|l| {
            let (kv, source) = l.split_once("  # ").unwrap_or((l, ""));
            let (k, v) = kv.split_once(" = ").expect("key = value");
            (k.to_owned(), v.to_owned(), source.to_owned())
        })
        .collect()
}

fn setting<'a>(all: &'a [(String, String, String)], key: &str) -> (&'a str, &'a str) {
    all.iter()
        .find(|(k, _, _)| k == key)
        .map(|(_, v, s)| (v.as_str(), s.as_str()))
        .unwrap_or_else(|| panic!("{key} not printed in {all:?}"))
}

#[test]
fn each_setting_takes_the_command_line_then_the_environment_then_the_file_then_the_default() {
    let tree = Tree::new("cfg-precedence");
    let file = write(
        &tree.dir.join("servery.toml"),
        "drain_timeout = 7\nforce_timeout = 0.7\nheartbeat_timeout = 9\nbind = [\"127.0.0.1\", \"::1\"]\ncors = true\n",
    );
    let run = run_servery(
        &[
            text(&tree.root()),
            "--config",
            text(&file),
            "--heartbeat-timeout",
            "6",
            "--print-config",
        ],
        &[
            ("SERVERY_FORCE_TIMEOUT", "0.8"),
            ("SERVERY_HEARTBEAT_TIMEOUT", "8"),
        ],
        BOUND,
    );
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    let all = settings(&run.stdout);
    let at = format!("file {}", text(&file));
    // Given only in the file.
    let (v, s) = setting(&all, "drain_timeout");
    assert_eq!((v, s), ("7", format!("{at}:1; reloadable").as_str()));
    let (v, s) = setting(&all, "bind");
    assert_eq!(
        (v, s),
        ("[\"127.0.0.1\", \"::1\"]", format!("{at}:4").as_str())
    );
    assert_eq!(setting(&all, "cors"), ("true", format!("{at}:5").as_str()));
    // The environment over the file.
    assert_eq!(
        setting(&all, "force_timeout"),
        ("0.8", "env SERVERY_FORCE_TIMEOUT; reloadable")
    );
    // The command line over both.
    assert_eq!(setting(&all, "heartbeat_timeout"), ("6", "cli; reloadable"));
    // Given nowhere.
    assert_eq!(
        setting(&all, "worker_start_timeout"),
        ("30", "default; reloadable")
    );
    assert_eq!(setting(&all, "spa"), ("false", "default"));

    // The same configuration reaches validation: --check-config shows the core's values.
    let run = run_servery(
        &[
            text(&tree.root()),
            "--config",
            text(&file),
            "--check-config",
        ],
        &[("SERVERY_FORCE_TIMEOUT", "0.8")],
        BOUND,
    );
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    for line in [
        "recovery.drain_timeout = 7",
        "recovery.force_timeout = 0.8",
        "recovery.heartbeat_timeout = 9",
    ] {
        assert!(run.stdout.contains(line), "{line} missing:\n{}", run.stdout);
    }
}

#[test]
fn file_errors_name_the_file_line_and_key_and_come_with_every_other_error() {
    let tree = Tree::new("cfg-errors");
    let file = write(
        &tree.dir.join("bad.toml"),
        "# a comment\nprot = 8000\ncors = \"yes\"\ndrain_timeout = \"soon\"\nworkers = 0\nmax-connections = 5\nwhatever = 1\nbind = [\"not-an-address\"]\n",
    );
    let socket = tree.socket();
    let run = run_servery(
        &[
            text(&tree.root()),
            "--config",
            text(&file),
            "--control-socket",
            text(&socket),
            "--port",
            "0",
            "--force-timeout",
            "-1",
        ],
        &[],
        BOUND,
    );
    assert_eq!(run.status.code(), Some(2), "{run:?}");
    let f = text(&file);
    for needle in [
        format!("{f}:2: prot: no such setting (did you mean `port`?)"),
        format!("{f}:3: cors: expected true or false, got a string"),
        format!("{f}:4: drain_timeout: invalid value 'soon' for '--drain-timeout <SECS>'"),
        format!("{f}:6: max-connections: no such setting (did you mean `max_connections`?)"),
        format!("{f}:7: whatever: no such setting"),
        format!("{f}:8: bind: invalid value 'not-an-address'"),
        // The file's valid values and the command line still reach validation.
        "workers (--workers): must be in [1, 1024] (got 0)".to_owned(),
        "recovery.force_timeout (--force-timeout)".to_owned(),
    ] {
        assert!(
            run.stderr.contains(&needle),
            "`{needle}` missing:\n{}",
            run.stderr
        );
    }
    assert!(
        !run.stderr
            .contains("whatever: no such setting (did you mean")
    );
    // In the file's order.
    let at = |n: &str| run.stderr.find(n).expect("present");
    assert!(at(":2: prot") < at(":3: cors") && at(":3: cors") < at(":8: bind"));
    assert!(!run.stdout.contains("listening"), "{}", run.stdout);
    assert!(!socket.exists(), "nothing may be bound before the errors");

    // The rules between options hold for the file's values too.
    let half = write(&tree.dir.join("half.toml"), "tls_cert = \"cert.pem\"\n");
    let run = run_servery(&["--config", text(&half), "--check-config"], &[], BOUND);
    assert_eq!(run.status.code(), Some(2), "{run:?}");
    assert!(run.stderr.contains("--tls-key"), "{}", run.stderr);
    assert!(
        run.stderr
            .contains(&format!("(with the settings of {})", text(&half))),
        "{}",
        run.stderr
    );

    // A file that is not TOML, or not there, is a configuration error too.
    let broken = write(&tree.dir.join("broken.toml"), "port = 1\nbind = [\n");
    let run = run_servery(&["--config", text(&broken), "--check-config"], &[], BOUND);
    assert_eq!(run.status.code(), Some(2), "{run:?}");
    assert!(
        run.stderr.contains(&format!("{}:", text(&broken))),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("not valid TOML"), "{}", run.stderr);
    let absent = tree.dir.join("absent.toml");
    let run = run_servery(&["--config", text(&absent), "--check-config"], &[], BOUND);
    assert_eq!(run.status.code(), Some(2), "{run:?}");
    assert!(run.stderr.contains("absent.toml"), "{}", run.stderr);
}

#[test]
fn print_config_is_read_back_by_config_to_the_same_settings() {
    let tree = Tree::new("cfg-print");
    let file = write(
        &tree.dir.join("first.toml"),
        "workers = \"auto\"\nbind = [\"127.0.0.1\", \"::1\"]\naccess_log_format = \"json\"\nupload = true\nmax_upload_size = 1000\n",
    );
    let run = run_servery(
        &[
            text(&tree.root()),
            "--config",
            text(&file),
            "--drain-timeout",
            "2.5",
            "--cors",
            "--print-config",
        ],
        &[("SERVERY_PORT", "8123"), ("SERVERY_CACHE", "60")],
        BOUND,
    );
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    let printed = write(&tree.dir.join("printed.toml"), &run.stdout);
    let again = run_servery(&["--config", text(&printed), "--print-config"], &[], BOUND);
    assert_eq!(again.status.code(), Some(0), "{again:?}");
    let values = |out: &str| -> Vec<(String, String)> {
        settings(out).into_iter().map(|(k, v, _)| (k, v)).collect()
    };
    assert_eq!(values(&run.stdout), values(&again.stdout));
    // Read back, every value given comes from the printed file, on its own line.
    for (key, value, source) in settings(&again.stdout) {
        assert!(
            source.starts_with(&format!("file {}:", text(&printed))),
            "{key} = {value} from {source}"
        );
    }
    assert!(values(&run.stdout).contains(&("dir".into(), format!("\"{}\"", text(&tree.root())))));
}

#[test]
fn a_reload_reads_the_file_again_and_refuses_a_setting_fixed_at_start() {
    let tree = Tree::new("cfg-reload");
    let path = tree.dir.join("live.toml");
    write(&path, "max_connections = 100\nshow_hidden = false\n");
    let server = Server::start(&tree, 1, &[FAST, &["--config", text(&path)]].concat(), &[]);
    let (status, _) = server.wait_ready(1, BOUND);
    assert_eq!(
        status["config"]["budgets"]["max_connections"], 100,
        "{status}"
    );

    // A reloadable change: a new generation with the new value.
    write(&path, "max_connections = 200\nshow_hidden = false\n");
    let answer = server.ctl(&json!({"cmd": "reload"})).expect("reload");
    assert_eq!(answer["generation"], 2, "{answer}");
    let (status, _) = server.wait_ready(1, BOUND);
    assert_eq!(
        status["config"]["budgets"]["max_connections"], 200,
        "{status}"
    );
    // The status names every setting by its key.
    let settings = &status["config"]["settings"];
    assert_eq!(settings["max_connections"], 200, "{settings}");
    assert_eq!(settings["show_hidden"], false, "{settings}");
    assert_eq!(settings["bind"], json!(["127.0.0.1"]), "{settings}");

    // A change to a setting fixed at start: refused, naming it; nothing else applied.
    write(&path, "max_connections = 300\nshow_hidden = true\n");
    let err = server
        .ctl(&json!({"cmd": "reload"}))
        .expect_err("a fixed setting cannot change");
    assert!(err.contains("show_hidden cannot change on reload"), "{err}");
    assert!(err.contains("false -> true"), "{err}");
    let status = server.status();
    assert_eq!(status["generation"], 2, "{status}");
    assert_eq!(
        status["config"]["budgets"]["max_connections"], 200,
        "{status}"
    );
    assert_eq!(status["state"], "ready", "{status}");
    let (code, body) = http_get(server.addr, "/hello.txt").expect("still serving");
    assert_eq!((code, body.as_slice()), (200, HELLO));

    // A file that no longer parses: refused the same way.
    write(&path, "max_connections = \"many\"\n");
    let err = server.ctl(&json!({"cmd": "reload"})).expect_err("bad file");
    assert!(err.contains("live.toml:1: max_connections"), "{err}");
    // Judged by the core like any reload: counted and reported in the status.
    let status = server.status();
    let last = status["last_reload_error"].as_str().unwrap_or_default();
    assert!(last.contains("live.toml:1: max_connections"), "{status}");

    // A SIGHUP whose file changes a fixed setting: rejected and reported the same way.
    write(&path, "max_connections = 250\nshow_hidden = true\n");
    server.signal(Sig::HUP);
    let (status, _) = wait_until(BOUND, "the SIGHUP's rejection in the status", || {
        let s = server.status();
        let last = s["last_reload_error"].as_str().unwrap_or_default();
        last.contains("show_hidden cannot change on reload")
            .then_some(s)
    });
    assert_eq!(status["generation"], 2, "{status}");

    // SIGHUP reads the file too.
    write(&path, "max_connections = 250\nshow_hidden = false\n");
    server.signal(Sig::HUP);
    let (status, _) = wait_until(BOUND, "generation 3 after SIGHUP", || {
        let s = server.status();
        (s["generation"] == 3).then_some(s)
    });
    assert_eq!(
        status["config"]["budgets"]["max_connections"], 250,
        "{status}"
    );
    server.wait_ready(1, BOUND);

    // `ctl reload --set` applies on top of the file for that reload only: a later SIGHUP
    // reads the file again and undoes an override the file does not hold (as Caddy's
    // `caddy reload` replaces an API change; docs/operations.md).
    server
        .ctl(&json!({"cmd": "reload", "set": {"max_connections": 300}}))
        .expect("the override reloads");
    let status = server.status();
    assert_eq!(status["generation"], 4, "{status}");
    assert_eq!(
        status["config"]["budgets"]["max_connections"], 300,
        "the override is in force: {status}"
    );
    server.signal(Sig::HUP);
    let (status, _) = wait_until(BOUND, "generation 5 after SIGHUP", || {
        let s = server.status();
        (s["generation"] == 5).then_some(s)
    });
    assert_eq!(
        status["config"]["budgets"]["max_connections"], 250,
        "a later SIGHUP reads the file again and drops the override: {status}"
    );
    server.wait_ready(1, BOUND);
}

/// A value for `setting` other than its default: from this table where the type needs
/// one, else `true` for a switch and the default plus one (or a half) for a number. A
/// new setting that fits neither fails the round-trip test until it gets a line here.
fn sample(setting: &servery::settings::Setting) -> Option<Vec<String>> {
    const SAMPLES: &[(&str, &[&str])] = &[
        ("dir", &["/srv/files"]),
        ("bind", &["::1", "127.0.0.2"]),
        ("port", &["8123"]),
        ("control_socket", &["/run/servery/x.sock"]),
        ("tls_cert", &["/etc/servery/cert.pem"]),
        ("tls_key", &["/etc/servery/key.pem"]),
        ("auth", &["alice:secret", "bob:sha256:00"]),
        ("cache", &["60"]),
        ("allowed_host", &["files.example.org", "*.lan.example.org"]),
        ("deny", &[".git", "*.key"]),
        ("max_upload_size", &["1000"]),
        ("state_dir", &["/var/lib/servery"]),
        ("access_log", &["/var/log/servery.log"]),
        ("access_log_format", &["json"]),
        ("access_log_overflow", &["drop"]),
        ("admin", &["127.0.0.1:9999"]),
        ("log_format", &["json"]),
        ("tftp_bind", &["127.0.0.2"]),
        ("acme", &["files.example.org", "www.example.org"]),
        ("acme_directory", &["https://acme.example.org/directory"]),
        ("acme_directory_ca", &["/etc/servery/ca.pem"]),
        ("acme_email", &["ops@example.org"]),
        ("acme_dir", &["/var/lib/servery/acme"]),
        ("acme_eab_kid", &["kid-1"]),
        ("acme_eab_hmac", &["c2VjcmV0"]),
        ("wsgi", &["myproject.wsgi:application"]),
        ("asgi", &["myproject.asgi:application"]),
        ("app_dir", &["/srv/app", "/srv/lib"]),
        ("static_prefix", &["/assets/"]),
        ("lifespan", &["on"]),
        ("loop", &["uvloop"]),
        (
            "proxy",
            &["/api=http://127.0.0.1:9000/", "/app=unix:/run/app.sock"],
        ),
        ("trust_proxy", &["10.0.0.1", "::1"]),
        ("proxy_ca", &["/etc/servery/upstream-ca.pem"]),
        ("proxy_health", &["/healthz"]),
        ("proxy_balance", &["least-inflight"]),
        ("cgi", &["/srv/cgi-bin"]),
        ("cgi_prefix", &["/scripts"]),
        ("cgi_env", &["GIT_PROJECT_ROOT", "LANG=C.UTF-8"]),
        ("cluster", &["etcd://10.0.0.11:2379,10.0.0.12:2379"]),
        ("cluster_name", &["office"]),
        ("cluster_host_id", &["web-1"]),
        ("cluster_cacert", &["/etc/servery/etcd-ca.pem"]),
        ("cluster_cert", &["/etc/servery/etcd-client.pem"]),
        ("cluster_key", &["/etc/servery/etcd-client-key.pem"]),
        ("cluster_user", &["servery"]),
        ("cluster_password_file", &["/run/credentials/servery/etcd"]),
        ("restart_backoff_jitter", &["decorrelated"]),
        ("worker_cpu_affinity", &["off"]),
        ("worker_scheduling", &["normal"]),
    ];
    if let Some((_, values)) = SAMPLES.iter().find(|(k, _)| *k == setting.key) {
        return Some(values.iter().map(|v| (*v).to_owned()).collect());
    }
    if setting.shape == servery::settings::Shape::Switch {
        return Some(vec!["true".into()]);
    }
    let default = setting.default.first()?;
    if let Ok(n) = default.parse::<i64>() {
        return Some(vec![(n + 1).to_string()]);
    }
    let x = default.parse::<f64>().ok()?;
    Some(vec![(x + 0.5).to_string()])
}

type Sampled = (servery::settings::Setting, Vec<String>);

fn cli_args(batch: &[Sampled]) -> Vec<std::ffi::OsString> {
    use servery::settings::Shape;
    let mut args = vec!["servery".into()];
    let mut positional = Vec::new();
    for (s, values) in batch {
        match (&s.flag, s.shape) {
            (Some(flag), Shape::Switch) => args.push(flag.into()),
            (Some(flag), _) => args.extend(values.iter().map(|v| format!("{flag}={v}").into())),
            (None, _) => positional.extend(values.iter().map(Into::into)),
        }
    }
    if !positional.is_empty() {
        args.push("--".into());
        args.extend(positional);
    }
    args
}

fn file_text(batch: &[Sampled]) -> String {
    use servery::settings::Shape;
    batch
        .iter()
        .map(|(s, values)| match s.shape {
            Shape::Switch => format!("{} = {}\n", s.key, values[0]),
            Shape::Many => format!("{} = {values:?}\n", s.key),
            Shape::One => format!("{} = {:?}\n", s.key, values[0]),
        })
        .collect()
}

fn env_vars(batch: &[Sampled]) -> Vec<(String, String)> {
    batch
        .iter()
        .map(|(s, values)| {
            let joined = match s.delimiter {
                Some(d) => values.join(&d.to_string()),
                None => values[0].clone(),
            };
            (s.env.clone(), joined)
        })
        .collect()
}

#[test]
fn every_setting_round_trips_through_cli_environment_and_file_to_the_same_config() {
    use servery::settings::{Source, load, print_toml, table};
    let tree = Tree::new("cfg-roundtrip");
    let mut missing = Vec::new();
    // Settings that conflict (--tls-self-signed and --tls-cert) go to separate batches.
    let mut batches: Vec<Vec<Sampled>> = Vec::new();
    for setting in table() {
        let Some(values) = sample(&setting) else {
            missing.push(setting.key.clone());
            continue;
        };
        assert_ne!(
            values, setting.default,
            "{}: sample is the default",
            setting.key
        );
        let sampled = (setting, values);
        let fits = |batch: &Vec<Sampled>| {
            let mut trial = batch.clone();
            trial.push(sampled.clone());
            !matches!(load(&cli_args(&trial)), Err(e) if e.is_conflict())
        };
        match batches.iter_mut().find(|b| fits(b)) {
            Some(batch) => batch.push(sampled),
            None => batches.push(vec![sampled]),
        }
    }
    assert!(
        missing.is_empty(),
        "settings without a sample value: {missing:?}"
    );
    assert!(batches.len() <= 3, "{} batches", batches.len());

    for (i, batch) in batches.iter().enumerate() {
        let keys: Vec<&str> = batch.iter().map(|(s, _)| s.key.as_str()).collect();
        let by_cli = load(&cli_args(batch)).unwrap_or_else(|e| panic!("cli {keys:?}: {e}"));
        let file = write(&tree.dir.join(format!("batch{i}.toml")), &file_text(batch));
        let by_file = load(&["servery".into(), "--config".into(), file.clone().into()])
            .unwrap_or_else(|e| panic!("file {keys:?}: {e}"));
        assert!(
            by_file.file_errors().is_empty(),
            "{:?}",
            by_file.file_errors()
        );
        let raw = by_cli.cli.serve.raw_config();
        assert_eq!(raw, by_file.cli.serve.raw_config(), "{keys:?}");
        assert_eq!(
            format!("{:?}", raw.validate()),
            format!("{:?}", by_file.cli.serve.raw_config().validate())
        );
        for (c, f) in by_cli.effective.iter().zip(&by_file.effective) {
            assert_eq!(c.value, f.value, "{}", c.setting.key);
        }
        for (s, _) in batch {
            let c = by_cli
                .effective
                .iter()
                .find(|e| e.setting.key == s.key)
                .expect("listed");
            let f = by_file
                .effective
                .iter()
                .find(|e| e.setting.key == s.key)
                .expect("listed");
            assert_eq!(c.source, Source::Cli, "{}", s.key);
            assert!(
                matches!(f.source, Source::File { .. }),
                "{}: {:?}",
                s.key,
                f.source
            );
        }
        // The environment, through a real process (the variables are the process's).
        let env = env_vars(batch);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let run = run_servery(&["--print-config"], &env, BOUND);
        assert_eq!(run.status.code(), Some(0), "env {keys:?}: {run:?}");
        let values = |out: &str| -> Vec<(String, String)> {
            settings(out).into_iter().map(|(k, v, _)| (k, v)).collect()
        };
        assert_eq!(
            values(&run.stdout),
            values(&print_toml(&by_cli.effective)),
            "{keys:?}"
        );
        for (key, _, source) in settings(&run.stdout) {
            if keys.contains(&key.as_str()) {
                assert!(source.starts_with("env SERVERY_"), "{key}: {source}");
            }
        }
    }
}

#[test]
fn relative_paths_in_the_file_are_taken_from_its_folder() {
    let tree = Tree::new("cfg-relative");
    // The file lives in a folder of its own, beside what it names; servery is started
    // from another directory (the test's), where none of the names exist.
    let conf = tree.dir.join("conf");
    std::fs::create_dir_all(conf.join("www")).expect("mkdir");
    std::fs::create_dir_all(conf.join("logs")).expect("mkdir");
    std::fs::write(conf.join("www/page.txt"), "from the file's folder\n").expect("write");
    let file = write(
        &conf.join("site.toml"),
        "dir = \"www\"\naccess_log = \"logs/access.log\"\n",
    );
    assert!(!Path::new("www").exists() && !Path::new("logs").exists());

    let checked = run_servery(&["--config", text(&file), "--check-config"], &[], BOUND);
    assert_eq!(checked.status.code(), Some(0), "{checked:?}");
    let www = conf.join("www");
    assert!(
        checked
            .stdout
            .contains(&format!("root = {}", www.display())),
        "{}",
        checked.stdout
    );
    let log = conf.join("logs/access.log");
    let all = settings(&checked.stdout);
    assert_eq!(
        setting(&all, "access_log"),
        (
            format!("{:?}", log.display().to_string()).as_str(),
            format!("file {}:2", file.display()).as_str()
        )
    );

    // Served: the command line's directory wins over the file's, the file's relative
    // access log is written beside the file.
    let server = Server::start(&tree, 1, &["--config", text(&file)], &[]);
    server.wait_ready(1, BOUND);
    let (status, _) = http_get(server.addr, "/hello.txt").expect("GET");
    assert_eq!(status, 200);
    wait_until(BOUND, "the access log line beside the file", || {
        std::fs::read_to_string(&log)
            .ok()
            .filter(|t| t.contains("/hello.txt"))
            .map(|_| ())
    });
}
