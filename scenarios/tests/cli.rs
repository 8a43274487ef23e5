//! The sweep command as a user runs it: `--random` prints its seeds first, and they
//! differ from one invocation to the next.

use std::process::Command;

fn random_sweep() -> (String, Vec<u64>) {
    let out = Command::new(env!("CARGO_BIN_EXE_servery-scenarios"))
        .args(["sweep", "--random", "3", "--only", "steady", "--jobs", "1"])
        .output()
        .expect("runs");
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    assert!(out.status.success(), "{stdout}");
    let first = stdout.lines().next().expect("a first line");
    let seeds = first
        .strip_prefix("random seeds: ")
        .unwrap_or_else(|| panic!("the seeds come first: {stdout}"))
        .split(' ')
        .map(|s| s.parse().expect("a seed"))
        .collect();
    (stdout, seeds)
}

#[test]
fn a_random_sweep_prints_fresh_seeds_first_and_runs_them() {
    let (stdout, a) = random_sweep();
    let (_, b) = random_sweep();
    assert_eq!(a.len(), 3);
    assert_ne!(a, b, "two invocations drew the same seeds");
    assert!(
        stdout.contains("steady                         posix    runs=3"),
        "{stdout}"
    );
    assert!(stdout.contains("6 runs, 0 failed"), "{stdout}");
}

#[test]
fn a_swarm_run_names_its_kinds_and_a_left_out_scenario_is_refused() {
    let bin = env!("CARGO_BIN_EXE_servery-scenarios");
    let out = Command::new(bin)
        .args(["run", "chaos", "--seed", "5", "--swarm"])
        .output()
        .expect("runs");
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.starts_with("swarm: enabled "), "{stdout}");
    let out = Command::new(bin)
        .args(["run", "hang-during-drain", "--seed", "5", "--swarm"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).expect("utf-8");
    assert!(
        stderr.contains("swarm mode leaves hang-during-drain out"),
        "{stderr}"
    );
}
