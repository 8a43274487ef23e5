//! The process groups of the scripts a worker is running. Each script leads its own
//! group, so whatever it starts dies with it: the group is killed when the response
//! ends or is abandoned (client gone, timeout, output bound), and every group still
//! live is killed when the worker exits.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};

use rustix::process::{Pid, Signal, kill_process_group};

/// The live groups of one worker.
#[derive(Debug, Default)]
pub struct Groups {
    live: Mutex<BTreeSet<i32>>,
}

/// One script's group, killed (the whole group, SIGKILL) when dropped.
#[derive(Debug)]
pub struct Group {
    pgid: i32,
    groups: Arc<Groups>,
}

impl Groups {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<i32>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A script started leading group `pgid`.
    pub fn started(self: &Arc<Self>, pgid: i32) -> Group {
        self.lock().insert(pgid);
        Group {
            pgid,
            groups: Arc::clone(self),
        }
    }

    /// Groups live now.
    pub fn live(&self) -> Vec<i32> {
        self.lock().iter().copied().collect()
    }

    /// Kills every live group (the worker is exiting: nothing it started may outlive it).
    pub fn kill_all(&self) {
        for pgid in std::mem::take(&mut *self.lock()) {
            kill_group(pgid);
        }
    }
}

impl Group {
    pub fn pgid(&self) -> i32 {
        self.pgid
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if self.groups.lock().remove(&self.pgid) {
            kill_group(self.pgid);
        }
    }
}

/// SIGKILL to process group `pgid`; one already gone is not an error.
pub fn kill_group(pgid: i32) {
    let Some(pid) = Pid::from_raw(pgid) else {
        return;
    };
    match kill_process_group(pid, Signal::KILL) {
        Ok(()) | Err(rustix::io::Errno::SRCH) => {}
        Err(e) => tracing::warn!(pgid, error = %e, "cannot kill a CGI script's process group"),
    }
}
