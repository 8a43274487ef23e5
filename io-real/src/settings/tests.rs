use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::PathBuf;

use clap::CommandFactory;

use super::file::{FileRead, parse};
use super::*;

/// Arguments of the serving command that are actions, not settings.
const ACTIONS: &[&str] = &["help", "version", "check_config", "print_config", CONFIG_ID];

#[test]
fn every_serving_argument_is_a_setting_with_a_unique_key_and_variable() {
    let mut cmd = crate::cli::Cli::command();
    cmd.build();
    let settings = table();
    for arg in cmd.get_arguments() {
        let id = arg.get_id().as_str();
        assert!(
            ACTIONS.contains(&id) || settings.iter().any(|s| s.id == id),
            "--{id} has no environment variable, so it is no setting: give it one"
        );
    }
    let keys: BTreeSet<_> = settings.iter().map(|s| &s.key).collect();
    let envs: BTreeSet<_> = settings.iter().map(|s| &s.env).collect();
    assert_eq!(keys.len(), settings.len());
    assert_eq!(envs.len(), settings.len());
    for s in &settings {
        assert!(s.env.starts_with("SERVERY_"), "{}", s.env);
    }
    // The reloadable group names real settings, and the budgets are among them.
    let live: Vec<_> = settings
        .iter()
        .filter(|s| s.reloadable)
        .map(|s| &*s.key)
        .collect();
    assert!(
        live.contains(&"max_connections") && live.contains(&"workers"),
        "{live:?}"
    );
    assert!(
        live.contains(&"port") && !live.contains(&"bind") && !live.contains(&"tftp_timeout"),
        "{live:?}"
    );
}

#[test]
fn help_marks_the_reloadable_settings() {
    let help = command().render_long_help().to_string();
    // The option's line and its help text, to the blank line after it (however many lines
    // the terminal's width wraps it to).
    let line = |flag: &str| {
        help.lines()
            .skip_while(|l| !l.trim_start().starts_with(flag))
            .take_while(|l| !l.trim().is_empty())
            .collect::<String>()
    };
    assert!(line("--drain-timeout").contains("[reloadable]"), "{help}");
    assert!(line("--port <PORT>").contains("[reloadable]"), "{help}");
    assert!(!line("--bind <ADDR>").contains("[reloadable]"), "{help}");
}

fn read(text: &str) -> FileRead {
    let mut cmd = command();
    cmd.build();
    let mut out = FileRead {
        path: PathBuf::from("s.toml"),
        ..FileRead::default()
    };
    parse(text, &table(), &cmd, &mut out);
    out
}

#[test]
fn file_values_are_checked_by_the_flags_own_parsers_and_every_problem_is_kept() {
    let out = read(
        "port = 70000\nworkers = \"auto\"\nbind = \"::1\"\naccess_log_format = \"xml\"\n\
         cors = 1\ndav_propfind_max_entries = 0\nmax_conections = 1\n[x]\n",
    );
    let errors = out.errors.join("\n");
    for needle in [
        "s.toml:1: port: invalid value '70000'",
        "s.toml:4: access_log_format: invalid value 'xml'",
        "s.toml:5: cors: expected true or false, got an integer",
        "s.toml:6: dav_propfind_max_entries: invalid value '0'",
        "s.toml:7: max_conections: no such setting (did you mean `max_connections`?)",
        "s.toml:8: x: tables are not read",
    ] {
        assert!(errors.contains(needle), "{needle}:\n{errors}");
    }
    assert_eq!(out.errors.len(), 6, "{errors}");
    let ids: Vec<_> = out.values.iter().map(|v| v.id.as_str()).collect();
    assert_eq!(ids, ["bind", "workers"]);
}

#[test]
fn suggestions_are_near_misses_only() {
    let t = table();
    assert_eq!(suggest(&t, "max-upload-size"), Some("max_upload_size"));
    assert_eq!(suggest(&t, "prot"), Some("port"));
    assert_eq!(suggest(&t, "drain_timout"), Some("drain_timeout"));
    assert_eq!(suggest(&t, "colour"), None);
}

#[test]
fn a_reload_refuses_changes_to_fixed_settings_only() {
    let argv = |more: &[&str]| -> Vec<OsString> {
        std::iter::once("servery")
            .chain(more.iter().copied())
            .map(Into::into)
            .collect()
    };
    let started = load(&argv(&["--bind", "127.0.0.1", "--max-connections", "5"])).expect("loads");
    let live = load(&argv(&[
        "--bind",
        "127.0.0.1",
        "--max-connections",
        "6",
        "--port",
        "9",
    ]))
    .expect("loads");
    assert!(reload::fixed_changes(&started.effective, &live.effective).is_empty());
    let fixed = load(&argv(&["--bind", "127.0.0.2", "--cors"])).expect("loads");
    let changes = reload::fixed_changes(&started.effective, &fixed.effective);
    assert_eq!(changes.len(), 2, "{changes:?}");
    assert!(
        changes[0].starts_with("bind cannot change on reload"),
        "{changes:?}"
    );
    assert!(
        changes[0].ends_with("127.0.0.1 -> 127.0.0.2"),
        "{changes:?}"
    );
    assert!(changes[1].starts_with("cors "), "{changes:?}");
    // The CA and the trusted peers are reloadable (decision 0118, addendum).
    let proxy = load(&argv(&[
        "--bind",
        "127.0.0.1",
        "--max-connections",
        "5",
        "--proxy-ca",
        "/etc/ca.pem",
        "--trust-proxy",
        "10.0.0.1",
    ]))
    .expect("loads");
    assert_eq!(
        reload::fixed_changes(&started.effective, &proxy.effective),
        Vec::<String>::new(),
        "a reload may change --proxy-ca and --trust-proxy"
    );
}

#[test]
fn a_reload_whose_ca_file_does_not_parse_is_refused_naming_the_field() {
    let dir = std::env::temp_dir().join(format!("sv-reload-ca-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let bad = dir.join("bad.pem");
    std::fs::write(
        &bad,
        "-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n",
    )
    .expect("write");
    let empty = dir.join("empty.pem");
    std::fs::write(&empty, "").expect("write");
    let mut raw = servery_core::RawConfig::default();
    assert!(
        reload::worker_problems(&raw).is_empty(),
        "no CA: nothing to read"
    );
    // A CA that parses is taken.
    let good = dir.join("good.pem");
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .expect("params")
        .self_signed(&key)
        .expect("self-signed");
    std::fs::write(&good, cert.pem()).expect("write");
    raw.proxy.ca = Some(good.clone());
    assert_eq!(
        reload::worker_problems(&raw),
        Vec::<String>::new(),
        "CA rule: a reload naming a CA file that parses is not refused"
    );
    for (path, what) in [
        (&bad, "a certificate that does not parse"),
        (&empty, "no certificate"),
        (&dir.join("missing.pem"), "a missing file"),
    ] {
        raw.proxy.ca = Some(path.clone());
        let problems = reload::worker_problems(&raw);
        assert!(
            problems.len() == 1 && problems[0].starts_with("proxy.ca (--proxy-ca): "),
            "CA rule: a reload naming {what} as the CA is refused naming proxy.ca: {problems:?}"
        );
        assert!(
            problems[0].contains(&path.display().to_string()),
            "the refusal names the file: {problems:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_reloadable_setting_sets_a_field_the_status_shows() {
    // What a reload changes is shown from the core's committed configuration, so a
    // setting marked reloadable must reach it (`knobs::field_for_key`).
    let valid = servery_core::RawConfig::default()
        .validate()
        .expect("valid");
    let rendered = crate::parent::config_json(&valid);
    for s in table().iter().filter(|s| s.reloadable) {
        let field = crate::knobs::field_for_key(&s.key)
            .unwrap_or_else(|| panic!("{}: reloadable but sets no core field", s.key));
        assert!(
            status::lookup(&rendered, &field).is_some(),
            "{}: {field} is not in the status's config",
            s.key
        );
    }
}

#[test]
fn every_reload_override_is_a_reloadable_setting() {
    // `ctl reload --set` changes only what a reload may change, and every reloadable
    // setting the core sees can be overridden.
    let settings = table();
    let overridable = crate::knobs::overridable();
    for s in settings.iter().filter(|s| s.reloadable) {
        assert!(
            overridable.iter().any(|f| f.key == s.key),
            "{} is reloadable but cannot be --set",
            s.key
        );
    }
    for f in &overridable {
        let s = by_key(&settings, f.key).unwrap_or_else(|| panic!("{}: no setting", f.key));
        assert!(s.reloadable, "{} can be --set but is not reloadable", f.key);
    }
}

#[test]
fn file_values_join_a_command_line_that_ends_with_positionals() {
    let dir = std::env::temp_dir().join(format!("sv-settings-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let file = dir.join("s.toml");
    std::fs::write(&file, "port = 8123\ndir = \"/elsewhere\"\n").expect("write");
    let argv: Vec<OsString> = vec![
        "servery".into(),
        "--config".into(),
        file.clone().into(),
        "--".into(),
        "/srv".into(),
    ];
    let loaded = load(&argv).expect("loads");
    assert_eq!(loaded.cli.serve.port, Some(8123));
    assert_eq!(loaded.cli.serve.dir, Some(PathBuf::from("/srv")));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn every_setting_reaches_every_worker_with_its_generations_value() {
    // Workers receive the settings whole (`worker::setup`): every setting must be a key
    // of that value, so a group flattened into the command but not into the value, or a
    // setting kept out of it, fails here.
    let argv: Vec<OsString> = [
        "servery",
        "--max-connections",
        "5",
        "--cors",
        "--cache",
        "60",
    ]
    .iter()
    .map(Into::into)
    .collect();
    let started = load(&argv).expect("loads");
    let start = as_map(&started.cli.serve).expect("a map");
    for s in table() {
        assert!(
            start.contains_key(&s.key),
            "{} does not reach the workers: it is not a key of the settings they receive",
            s.key
        );
    }
    // A reload to another generation: its reloadable values reach new workers, the
    // fixed ones are the started ones.
    let mut raw = started.cli.serve.raw_config();
    raw.budgets.max_connections = 7;
    raw.recovery.drain_timeout = 3.5;
    // The proxy's clients' settings and health policy are reloadable (decision 0118).
    raw.proxy.first_byte_timeout = 0.5;
    raw.proxy.max_fails = 3;
    raw.proxy.balance = "least-inflight".into();
    // And the CA and the trusted peers (decision 0118, addendum).
    raw.proxy.ca = Some("/etc/servery/upstream-ca.pem".into());
    raw.proxy.trust_proxy = vec!["10.0.0.1".parse().expect("ip"), "::1".parse().expect("ip")];
    // A choice: its value reaches workers as the flag's value (decision 0122).
    raw.worker_cpu_affinity = servery_core::config::CpuAffinity::Off;
    let generation = raw.validate().expect("valid");
    let committed = crate::parent::config_json(&generation);
    let worker = LiveFields::of_table()
        .for_generation(&started.cli.serve, &committed)
        .expect("the worker's settings");
    assert_eq!(worker.budgets.max_connections, 7);
    assert_eq!(worker.recovery.drain_timeout, 3.5);
    assert_eq!(
        (
            worker.proxy.proxy_first_byte_timeout,
            worker.proxy.proxy_max_fails,
            worker.proxy.proxy_balance.as_str()
        ),
        (0.5, 3, "least-inflight"),
        "a generation's workers get its proxy settings"
    );
    assert_eq!(
        (
            worker.proxy.proxy_ca.as_deref(),
            worker.proxy.trust_proxy.as_slice()
        ),
        (
            Some(std::path::Path::new("/etc/servery/upstream-ca.pem")),
            raw.proxy.trust_proxy.as_slice()
        ),
        "a generation's workers get its CA and trusted peers"
    );
    assert_eq!(
        worker.worker_cpu_affinity,
        crate::cli::Affinity::Off,
        "a generation's workers get its CPU affinity"
    );
    assert!(worker.site.cors);
    assert_eq!(worker.site.cache, Some(60));
    let got = as_map(&worker).expect("a map");
    for s in table().iter().filter(|s| !s.reloadable) {
        assert_eq!(got.get(&s.key), start.get(&s.key), "{}", s.key);
    }
}

#[test]
fn relative_paths_in_a_file_are_taken_from_its_folder() {
    let settings = table();
    let paths: Vec<&str> = settings
        .iter()
        .filter(|s| s.path)
        .map(|s| s.key.as_str())
        .collect();
    for key in ["dir", "tls_cert", "access_log", "state_dir", "app_dir"] {
        assert!(paths.contains(&key), "{key} not a path: {paths:?}");
    }
    for key in ["bind", "allowed_host", "wsgi", "static_prefix"] {
        assert!(!paths.contains(&key), "{key} taken for a path");
    }
    let mut cmd = command();
    cmd.build();
    let mut read = FileRead {
        path: PathBuf::from("/etc/servery/site.toml"),
        ..FileRead::default()
    };
    let text = "dir = \"www\"\naccess_log = \"-\"\ntls_cert = \"/abs/cert.pem\"\napp_dir = [\"lib\", \"/opt/x\"]\nstatic_prefix = \"assets/\"\n";
    parse(text, &settings, &cmd, &mut read);
    file::resolve_relative_paths(&mut read, &settings);
    let value = |id: &str| {
        read.values
            .iter()
            .find(|v| v.id == id)
            .map(|v| v.value.clone())
            .unwrap_or_else(|| panic!("{id} not read"))
    };
    let values = |v: &[&str]| file::Given::Values(v.iter().map(|s| (*s).to_owned()).collect());
    assert_eq!(value("dir"), values(&["/etc/servery/www"]));
    assert_eq!(value("access_log"), values(&["-"]));
    assert_eq!(value("tls_cert"), values(&["/abs/cert.pem"]));
    assert_eq!(value("app_dir"), values(&["/etc/servery/lib", "/opt/x"]));
    assert_eq!(value("static_prefix"), values(&["assets/"]));
}
