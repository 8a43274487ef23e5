//! Worker CPU affinity (`--worker-cpu-affinity`, decision 0122) against the real binary,
//! read where the kernel keeps it (`Cpus_allowed_list` in `/proc/PID/status`, for every
//! thread of the process): two workers hosting a WSGI application keep to disjoint
//! shares that together cover the parent's CPUs, as `ctl status` says; a `ctl recycle`
//! replacement keeps to its slot's share; under `off`, and for file-serving workers,
//! every worker keeps the parent's CPUs. The workers' scheduling policy
//! (`--worker-scheduling`, decision 0129) read the same way (`/proc/PID/task/TID/stat`):
//! every thread of every worker SCHED_BATCH by default, a replacement too, the parent's
//! threads SCHED_OTHER; under `normal` every worker's thread SCHED_OTHER.
//!
//! The application is plain Python (no framework): each test says SKIPPED and passes
//! when the binary's interpreter is missing, or when the machine gives the tests one CPU
//! (nothing to share out).

use std::time::Duration;

use servery_core::cpu_affinity::CpuSet;
use servery_tests::serde_json::{Value, json};
use servery_tests::*;

const BOUND: Duration = Duration::from_secs(30);

const WSGI_APP: &str = r#"
def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"pinned\n"]
"#;

fn python_here() -> bool {
    python_imports(&["wsgiref"])
}

/// `Cpus_allowed_list` of one task (`/proc/PID/status` or `/proc/PID/task/TID/status`).
fn cpus_in(status_file: &str) -> Option<CpuSet> {
    let text = std::fs::read_to_string(status_file).ok()?;
    let list = text
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
    Some(CpuSet::parse_list(list).unwrap_or_else(|e| panic!("{status_file}: {e}")))
}

/// The CPUs every thread of `pid` may run on: the one set they all share, or a panic
/// naming the thread that differs (a thread started before the worker pinned itself).
fn process_cpus(pid: u32) -> CpuSet {
    let main = cpus_in(&format!("/proc/{pid}/status")).unwrap_or_else(|| panic!("pid {pid}"));
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("tasks");
    for task in tasks.flatten() {
        let file = format!("{}/status", task.path().display());
        // A thread that ended between the listing and the read is no thread.
        if let Some(set) = cpus_in(&file) {
            assert_eq!(
                set,
                main,
                "thread {} of worker {pid} runs on {set}, its process on {main}: every thread keeps to the worker's CPUs",
                task.file_name().to_string_lossy()
            );
        }
    }
    main
}

/// Each worker of `status` as (slot, pid, the CPUs its status shows).
fn workers(status: &Value) -> Vec<(u64, u32, Option<CpuSet>)> {
    status["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .map(|w| {
            let shown = w["cpus"]
                .as_str()
                .map(|l| CpuSet::parse_list(l).expect("a CPU list"));
            (
                w["slot"].as_u64().expect("slot"),
                w["pid"].as_u64().expect("pid") as u32,
                shown,
            )
        })
        .collect()
}

/// The parent's CPUs, or `None` (said SKIPPED) when there is one to share.
fn parent_cpus(status: &Value) -> Option<CpuSet> {
    let pid = status["pid"].as_u64().expect("the parent's pid") as u32;
    let cpus = process_cpus(pid);
    if cpus.len() < 2 {
        skipped(format!(
            "the parent may run on {cpus} only: one CPU, nothing to share out"
        ));
        return None;
    }
    Some(cpus)
}

fn app_server(name: &str, extra: &[&str]) -> (Tree, Server) {
    let tree = python_app_tree(name, "pinned", WSGI_APP);
    let app_dir = tree.dir.join("app");
    let app_dir = app_dir.to_str().expect("utf-8").to_owned();
    let args = [
        FAST,
        &["--wsgi", "pinned:app", "--app-dir", &app_dir],
        extra,
    ]
    .concat();
    let server = Server::start(&tree, 2, &args, &[]);
    (tree, server)
}

#[test]
fn two_application_workers_keep_to_disjoint_shares_and_a_replacement_to_its_slots() {
    if !python_here() {
        return;
    }
    let (_tree, server) = app_server("pinned", &[]);
    let (status, _) = server.wait_ready(2, BOUND);
    let Some(parent) = parent_cpus(&status) else {
        return;
    };
    let mut by_slot = std::collections::BTreeMap::new();
    for (slot, pid, shown) in workers(&status) {
        let actual = process_cpus(pid);
        assert_eq!(
            shown.as_ref(),
            Some(&actual),
            "ctl status shows worker {pid}'s CPUs as the kernel has them: {}",
            status["workers"]
        );
        assert!(
            actual.is_subset(&parent) && !actual.is_empty(),
            "worker {pid} runs on {actual}, not a share of the parent's {parent}"
        );
        by_slot.insert(slot, actual);
    }
    let shares: Vec<&CpuSet> = by_slot.values().collect();
    assert!(
        shares[0].is_disjoint(shares[1]),
        "partition rule: the two workers' CPUs {} and {} overlap",
        shares[0],
        shares[1]
    );
    let union = CpuSet::new(shares.iter().flat_map(|s| s.as_slice().iter().copied()));
    assert_eq!(
        union, parent,
        "partition rule: the workers' CPUs cover the parent's"
    );

    // A recycle replaces both, one at a time; each replacement on its slot's CPUs.
    let before = worker_pids(&status);
    server.ctl(&json!({"cmd": "recycle"})).expect("recycle");
    let (status, _) = wait_until(BOUND, "both workers recycled", || {
        let s = server.status();
        let ws = workers(&s);
        let ready = s["workers"]
            .as_array()
            .is_some_and(|ws| ws.iter().all(|w| w["state"] == "ready"));
        (ready && ws.len() == 2 && ws.iter().all(|(_, pid, _)| !before.contains(pid))).then_some(s)
    });
    for (slot, pid, shown) in workers(&status) {
        let actual = process_cpus(pid);
        assert_eq!(
            Some(&actual),
            by_slot.get(&slot),
            "replacement rule: slot {slot}'s replacement {pid} runs on {actual}"
        );
        assert_eq!(
            shown,
            Some(actual),
            "ctl status after the recycle: {}",
            status["workers"]
        );
    }
}

#[test]
fn under_off_and_for_files_every_worker_keeps_the_parents_cpus() {
    if !python_here() {
        return;
    }
    let (tree, server) = app_server("unpinned", &["--worker-cpu-affinity", "off"]);
    let (status, _) = server.wait_ready(2, BOUND);
    let Some(parent) = parent_cpus(&status) else {
        return;
    };
    for (_, pid, shown) in workers(&status) {
        assert_eq!(
            shown, None,
            "off: nobody pinned, says ctl status: {}",
            status["workers"]
        );
        assert_eq!(
            process_cpus(pid),
            parent,
            "off rule: worker {pid} keeps the parent's CPUs"
        );
    }
    drop(server);

    // File-serving workers, under the default `auto`.
    let server = Server::start(&tree, 2, FAST, &[]);
    let (status, _) = server.wait_ready(2, BOUND);
    for (_, pid, shown) in workers(&status) {
        assert_eq!(
            shown, None,
            "file-serving workers are not pinned: {}",
            status["workers"]
        );
        assert_eq!(
            process_cpus(pid),
            parent,
            "file-serving worker {pid} keeps the parent's CPUs"
        );
    }
}

#[test]
fn check_config_prints_each_slots_cpus() {
    if !python_here() {
        return;
    }
    let tree = python_app_tree("cpuplan", "pinned", WSGI_APP);
    let app_dir = tree.dir.join("app");
    let root = tree.root();
    let run = |extra: &[&str]| {
        let args = [
            &[
                root.to_str().expect("utf-8"),
                "--check-config",
                "--wsgi",
                "pinned:app",
                "--app-dir",
                app_dir.to_str().expect("utf-8"),
                "--workers",
                "2",
            ][..],
            extra,
        ]
        .concat();
        let done = run_servery(&args, &[], BOUND);
        assert!(done.status.success(), "{}", done.stderr);
        done.stdout
            .lines()
            .find_map(|l| l.strip_prefix("worker_cpus = "))
            .map(str::to_owned)
            .unwrap_or_else(|| panic!("no worker_cpus line: {}", done.stdout))
    };
    let pinned = run(&[]);
    assert!(
        pinned.contains("slot 0: ") && pinned.contains("slot 1: "),
        "{pinned}"
    );
    let off = run(&["--worker-cpu-affinity", "off"]);
    assert!(
        off.contains("not pinned (worker_cpu_affinity is off)"),
        "{off}"
    );
}

#[test]
fn a_bad_value_is_refused_naming_the_flag_or_the_key() {
    // Needs no interpreter: the value is refused before anything is bound or started.
    let tree = Tree::new("cpu-affinity-bad");
    let root = tree.root();
    let root = root.to_str().expect("utf-8");
    let run = run_servery(
        &[root, "--worker-cpu-affinity", "sometimes", "--port", "0"],
        &[],
        BOUND,
    );
    assert_eq!(run.status.code(), Some(2), "{run:?}");
    assert!(
        run.stderr.contains("'sometimes'") && run.stderr.contains("--worker-cpu-affinity"),
        "the error names the flag and the value: {}",
        run.stderr
    );

    let file = tree.dir.join("bad.toml");
    std::fs::write(&file, "worker_cpu_affinity = \"pinned\"\n").expect("write");
    let run = run_servery(
        &[
            root,
            "--config",
            file.to_str().expect("utf-8"),
            "--port",
            "0",
        ],
        &[],
        BOUND,
    );
    assert_eq!(run.status.code(), Some(2), "{run:?}");
    assert!(
        run.stderr
            .contains(&format!("{}:1: worker_cpu_affinity: ", file.display()))
            && run.stderr.contains("'pinned'"),
        "the error names the file's key and the value: {}",
        run.stderr
    );
}

/// The kernel's `SCHED_OTHER` and `SCHED_BATCH` (`sched(7)`).
const SCHED_OTHER: u32 = 0;
const SCHED_BATCH: u32 = 3;

/// The scheduling policy of every thread of `pid`: the one they all share, or a panic
/// naming the thread that differs (a thread started before the worker set its policy).
fn process_policy(pid: u32) -> u32 {
    // Field 41 of `stat`; the command name (field 2) may hold spaces, so count from the
    // parenthesis that closes it: the state (field 3) is the first field after it.
    let policy_of = |file: &str| -> Option<u32> {
        let text = std::fs::read_to_string(file).ok()?;
        let (_, rest) = text.rsplit_once(')')?;
        let field = rest.split_whitespace().nth(41 - 3)?;
        Some(
            field
                .parse()
                .unwrap_or_else(|e| panic!("{file}: {field}: {e}")),
        )
    };
    let main = policy_of(&format!("/proc/{pid}/stat")).unwrap_or_else(|| panic!("pid {pid}"));
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("tasks");
    for task in tasks.flatten() {
        if let Some(policy) = policy_of(&format!("{}/stat", task.path().display())) {
            assert_eq!(
                policy,
                main,
                "thread {} of process {pid} has policy {policy}, its main thread {main}: every thread of a worker is scheduled alike",
                task.file_name().to_string_lossy()
            );
        }
    }
    main
}

#[test]
fn workers_run_as_a_batch_by_default_and_the_parent_does_not() {
    let tree = Tree::new("sched-batch");
    let server = Server::start(&tree, 2, FAST, &[]);
    let (status, _) = server.wait_ready(2, BOUND);
    let parent = status["pid"].as_u64().expect("the parent's pid") as u32;
    assert_eq!(
        process_policy(parent),
        SCHED_OTHER,
        "scheduling rule: the parent (supervisor, broker) keeps the system's policy"
    );
    let before = worker_pids(&status);
    for &pid in &before {
        assert_eq!(
            process_policy(pid),
            SCHED_BATCH,
            "scheduling rule: worker {pid}'s threads run as SCHED_BATCH under the default"
        );
    }
    server.ctl(&json!({"cmd": "recycle"})).expect("recycle");
    let (status, _) = wait_until(BOUND, "both workers recycled", || {
        let s = server.status();
        let pids = worker_pids(&s);
        let ready = s["workers"]
            .as_array()
            .is_some_and(|ws| ws.iter().all(|w| w["state"] == "ready"));
        (ready && pids.len() == 2 && pids.iter().all(|p| !before.contains(p))).then_some(s)
    });
    for pid in worker_pids(&status) {
        assert_eq!(
            process_policy(pid),
            SCHED_BATCH,
            "scheduling rule: replacement {pid} runs as SCHED_BATCH"
        );
    }
}

/// Each application worker's pid and policy, once a request has started the
/// application's threads.
fn application_policies(name: &str, extra: &[&str]) -> Vec<(u32, u32)> {
    let (_tree, server) = app_server(name, extra);
    let (status, _) = server.wait_ready(2, BOUND);
    let (code, _) = http_get(server.addr, "/").expect("GET");
    assert_eq!(code, 200);
    worker_pids(&status)
        .into_iter()
        .map(|pid| (pid, process_policy(pid)))
        .collect()
}

#[test]
fn an_application_workers_threads_run_as_a_batch_and_normal_turns_it_off() {
    if !python_here() {
        return;
    }
    for (pid, policy) in application_policies("sched-app", &[]) {
        assert_eq!(
            policy, SCHED_BATCH,
            "scheduling rule: application worker {pid}'s threads (the interpreter's too) run as SCHED_BATCH"
        );
    }
    for (pid, policy) in application_policies("sched-normal", &["--worker-scheduling", "normal"]) {
        assert_eq!(
            policy, SCHED_OTHER,
            "normal rule: worker {pid}'s threads keep the system's policy"
        );
    }
}
