//! Processes by their /proc entries, and signals.

use std::collections::BTreeSet;

use rustix::process::{Pid, Signal};

/// `/proc/<pid>/stat` fields after the command name: state, ppid, pgrp.
pub(crate) fn proc_stat(pid: u32) -> Option<(char, u32, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, ppid, pgrp))
}

/// Whether `pid` is a running (not zombie) process.
pub fn alive(pid: u32) -> bool {
    proc_stat(pid).is_some_and(|(state, _, _)| state != 'Z' && state != 'X')
}

/// Whether `pid` is a live servery worker (so a guard never kills a recycled pid): named
/// by its title, or, in the moment before it sets one, by its subcommand.
pub(crate) fn is_worker(pid: u32) -> bool {
    alive(pid)
        && std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
            c.starts_with(b"servery: worker ") || c.split(|b| *b == 0).any(|arg| arg == b"__worker")
        })
}

/// Live processes whose process group is one of `groups`.
pub fn processes_in_groups(groups: &BTreeSet<u32>) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            proc_stat(pid).is_some_and(|(state, _, pgrp)| state != 'Z' && groups.contains(&pgrp))
        })
        .collect()
}

/// Send `signal` to one process.
pub fn signal_pid(pid: u32, signal: Signal) {
    if let Some(p) = Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(p, signal);
    }
}

pub use rustix::process::Signal as Sig;
