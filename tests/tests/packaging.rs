//! What packages take from the binary: `--version` names the commit and the features,
//! `servery generate man` documents every long option `--help` lists (and `man` renders
//! it), `servery generate completions` completes them, `servery healthcheck` tells a
//! serving admin listener from a missing one, and `--help` fits the terminal's width.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use servery_tests::{FAST, Finished, Server, Tree, free_port, run_command, run_servery};

const BOUND: Duration = Duration::from_secs(30);

fn run_ok(args: &[&str]) -> String {
    let done = run_servery(args, &[], BOUND);
    assert!(done.status.success(), "servery {args:?}: {}", done.stderr);
    done.stdout
}

/// The long options an option list defines: `--name` at the start of a line (after
/// indentation and an optional `-x, `), as `--help` lays them out.
fn defined_in_help(help: &str) -> BTreeSet<String> {
    help.lines()
        .filter_map(|line| {
            let line = line.trim_start();
            let line = match line.strip_prefix('-') {
                Some(rest) if !rest.starts_with('-') => line.split_once(", ")?.1,
                _ => line,
            };
            long_option(line.strip_prefix("--")?)
        })
        .collect()
}

fn long_option(rest: &str) -> Option<String> {
    let name: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    (!name.is_empty()).then(|| format!("--{name}"))
}

/// Every `--name` a text mentions.
fn mentioned(text: &str) -> BTreeSet<String> {
    text.split("--").skip(1).filter_map(long_option).collect()
}

#[test]
fn version_names_the_version_the_commit_and_the_features() {
    let long = run_ok(&["--version"]);
    let lines: Vec<&str> = long.lines().collect();
    assert_eq!(lines.len(), 4, "{long}");
    let version = lines[0].strip_prefix("servery ").expect("servery VERSION");
    assert!(
        version.split('.').count() == 3 && version.split('.').all(|n| n.parse::<u32>().is_ok()),
        "{long}"
    );
    let commit = lines[1].strip_prefix("commit: ").expect("a commit line");
    let features = lines[2]
        .strip_prefix("features: ")
        .expect("a features line");
    assert!(
        lines[3].starts_with("target: ") && lines[3].contains("linux"),
        "{long}"
    );
    // The tests' binary is built with both (tests/Cargo.toml).
    let features: BTreeSet<&str> = features.split(',').collect();
    assert!(
        features.contains("python") && features.contains("test-hooks"),
        "{long}"
    );

    // Built from this checkout, the commit is one of its own (HEAD, or an ancestor when
    // only commits were made since the binary was built).
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut git = Command::new("git");
    git.args(["rev-parse", "--verify", "--quiet"])
        .arg(format!("{commit}^{{commit}}"))
        .current_dir(&workspace);
    match git.output() {
        Ok(out) if workspace.join(".git").exists() => assert!(
            out.status.success() && commit.len() >= 7,
            "`{commit}` is not a commit of this repository"
        ),
        _ => eprintln!("commit not checked against the repository: no git or no .git here"),
    }

    let short = run_ok(&["-V"]);
    assert_eq!(
        short.trim_end(),
        format!("servery {version} (commit {commit})")
    );
}

#[test]
fn the_man_page_documents_every_long_option_of_help_and_man_renders_it() {
    let help = run_ok(&["--help"]);
    let options = defined_in_help(&help);
    assert!(
        options.len() > 50 && options.contains("--workers") && options.contains("--admin"),
        "{options:?}"
    );
    let page = run_ok(&["generate", "man"]);
    assert!(
        page.starts_with(".ie") || page.contains(".TH servery"),
        "{page}"
    );
    // roff writes a hyphen as `\-`.
    let plain = page.replace("\\-", "-");
    let documented = mentioned(&plain);
    let missing: Vec<_> = options.difference(&documented).collect();
    assert!(missing.is_empty(), "the man page lacks {missing:?}");
    let in_help = mentioned(&help);
    let invented: Vec<_> = documented
        .difference(&in_help)
        .filter(|o| !["--help", "--version"].contains(&o.as_str()))
        .collect();
    assert!(
        invented.is_empty(),
        "the man page has options --help does not: {invented:?}"
    );
    assert!(
        plain.contains("SERVERY_MAX_CONNECTIONS"),
        "no environment variables"
    );

    if Command::new("man").arg("--version").output().is_err() {
        servery_tests::skipped("the man page's rendering: man is not installed");
        return;
    }
    let tree = Tree::new("packaging-man");
    let file = tree.root().join("servery.1");
    std::fs::write(&file, &page).expect("write the page");
    let mut man = Command::new("man");
    man.arg("-l")
        .arg(&file)
        .env("MANPAGER", "cat")
        .env("PAGER", "cat")
        .env("MANWIDTH", "100");
    let rendered = run_command(man, BOUND);
    assert!(rendered.status.success(), "man -l: {}", rendered.stderr);
    let text = strip_overstrike(&rendered.stdout);
    for word in ["NAME", "SYNOPSIS", "--workers", "--max-connections"] {
        assert!(
            text.contains(word),
            "`{word}` not in the rendered page:\n{text}"
        );
    }
}

/// `man` without a terminal may still embolden with backspaces: `W\bW`.
fn strip_overstrike(text: &str) -> String {
    let mut out: Vec<char> = Vec::new();
    for c in text.chars() {
        if c == '\u{8}' {
            out.pop();
        } else {
            out.push(c);
        }
    }
    out.into_iter().collect()
}

#[test]
fn completions_complete_the_options() {
    let bash = run_ok(&["generate", "completions", "bash"]);
    assert!(
        bash.contains("--workers") && bash.contains("complete -F"),
        "{bash}"
    );
    for option in ["--max-connections", "--admin", "--tls-cert"] {
        assert!(bash.contains(option), "bash completion lacks {option}");
    }
    let zsh = run_ok(&["generate", "completions", "zsh"]);
    assert!(
        zsh.starts_with("#compdef servery") && zsh.contains("--workers"),
        "{zsh}"
    );
    let fish = run_ok(&["generate", "completions", "fish"]);
    assert!(
        fish.contains("complete -c servery") && fish.contains("-l workers"),
        "{fish}"
    );
    let unknown = run_servery(&["generate", "completions", "tcsh"], &[], BOUND);
    assert_eq!(unknown.status.code(), Some(2), "{}", unknown.stderr);

    // The script is valid bash.
    let tree = Tree::new("packaging-bash");
    let file = tree.root().join("servery.bash");
    std::fs::write(&file, &bash).expect("write the script");
    let mut check = Command::new("bash");
    check.arg("-n").arg(&file);
    let checked: Finished = run_command(check, BOUND);
    assert!(checked.status.success(), "bash -n: {}", checked.stderr);
}

#[test]
fn healthcheck_answers_for_the_admin_listener() {
    let tree = Tree::new("packaging-healthcheck");
    let mut args: Vec<&str> = FAST.to_vec();
    args.extend(["--admin", "127.0.0.1:0"]);
    let mut server = Server::start(&tree, 1, &args, &[]);
    let admin: SocketAddr = server.admin_addr(Duration::from_secs(10));
    server.wait_ready(1, Duration::from_secs(20));

    let given = run_servery(&["healthcheck", "--admin", &admin.to_string()], &[], BOUND);
    assert_eq!(given.status.code(), Some(0), "{}", given.stderr);
    assert!(
        given.stdout.starts_with("healthy:") && given.stdout.contains("200"),
        "{}",
        given.stdout
    );

    // From the service's own variable, a wildcard asked on the loopback.
    let wildcard = format!("0.0.0.0:{}", admin.port());
    let configured = run_servery(
        &["healthcheck", "--path", "/readyz"],
        &[("SERVERY_ADMIN", &wildcard)],
        BOUND,
    );
    assert_eq!(configured.status.code(), Some(0), "{}", configured.stderr);

    // From the configuration file the service reads.
    let config = tree.root().join("admin.toml");
    std::fs::write(&config, format!("admin = \"{admin}\"\n")).expect("write the file");
    let config = config.to_string_lossy().into_owned();
    let from_file = run_servery(&["healthcheck"], &[("SERVERY_CONFIG", &config)], BOUND);
    assert_eq!(from_file.status.code(), Some(0), "{}", from_file.stderr);

    let unknown = run_servery(
        &[
            "healthcheck",
            "--admin",
            &admin.to_string(),
            "--path",
            "/nothing",
        ],
        &[],
        BOUND,
    );
    assert_eq!(unknown.status.code(), Some(1), "{}", unknown.stdout);
    assert!(
        unknown.stderr.contains("unhealthy") && unknown.stderr.contains("404"),
        "{}",
        unknown.stderr
    );

    let closed = format!("127.0.0.1:{}", free_port());
    let refused = run_servery(
        &["healthcheck", "--admin", &closed, "--timeout", "2"],
        &[],
        BOUND,
    );
    assert_eq!(refused.status.code(), Some(1), "{}", refused.stderr);
    assert!(refused.stderr.contains("unhealthy"), "{}", refused.stderr);

    let injected = run_servery(
        &[
            "healthcheck",
            "--admin",
            &admin.to_string(),
            "--path",
            "/livez HTTP/1.0\r\nX: y",
        ],
        &[],
        BOUND,
    );
    assert_eq!(injected.status.code(), Some(1), "{}", injected.stdout);
    assert!(injected.stderr.contains("--path"), "{}", injected.stderr);

    let nothing = run_servery(&["healthcheck"], &[], BOUND);
    assert_eq!(nothing.status.code(), Some(1), "{}", nothing.stderr);
    assert!(
        nothing.stderr.contains("SERVERY_ADMIN"),
        "{}",
        nothing.stderr
    );
}

#[test]
fn help_is_wrapped_to_the_terminal_width() {
    // Not a terminal here: clap takes the width from COLUMNS, as from the terminal.
    let width_of = |columns: &str| {
        let done = run_servery(&["--help"], &[("COLUMNS", columns)], BOUND);
        assert!(done.status.success(), "{}", done.stderr);
        let widest = done
            .stdout
            .lines()
            .map(|l| l.chars().count())
            .max()
            .unwrap_or(0);
        (widest, done.stdout)
    };
    let (narrow, text) = width_of("70");
    assert!(
        narrow <= 70,
        "a line of {narrow} columns in a 70-column terminal:\n{text}"
    );
    let (wide, text) = width_of("200");
    assert!(
        wide > 100 && wide <= 200,
        "the widest line is {wide} columns in a 200-column terminal:\n{text}"
    );
}
