//! The process groups of the scripts a worker is running. Each script leads its own
//! group, so whatever it starts dies with it: the group is killed when the response
//! ends or is abandoned (client gone, timeout, output bound), and every group still
//! live is killed when the worker exits. Each start and end is told to the parent, which
//! kills what a worker that dies without ending them leaves (decision 0092).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};

use rustix::process::{Pid, Signal, kill_process_group};
use servery_core::proto::WorkerMessage;

/// How a start or an end reaches the parent.
type Report = Box<dyn Fn(WorkerMessage) + Send + Sync>;

/// The live groups of one worker.
#[derive(Default)]
pub struct Groups {
    live: Mutex<BTreeSet<i32>>,
    report: Option<Report>,
}

impl std::fmt::Debug for Groups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Groups")
            .field("live", &self.live)
            .finish_non_exhaustive()
    }
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

    /// Groups whose starts and ends `report` tells the parent.
    pub fn reporting(report: impl Fn(WorkerMessage) + Send + Sync + 'static) -> Groups {
        Groups {
            live: Mutex::default(),
            report: Some(Box::new(report)),
        }
    }

    fn tell(&self, message: WorkerMessage) {
        if let Some(report) = &self.report {
            report(message);
        }
    }

    /// A script started leading group `pgid`: the parent hears of it before the script
    /// is given anything to do.
    pub fn started(self: &Arc<Self>, pgid: i32) -> Group {
        self.lock().insert(pgid);
        self.tell(WorkerMessage::ScriptStarted {
            pgid: pgid.unsigned_abs(),
        });
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
        let removed = self.groups.lock().remove(&self.pgid);
        if removed {
            kill_group(self.pgid);
            // Killed first: the parent forgets the group only once nothing is left of it.
            self.groups.tell(WorkerMessage::ScriptEnded {
                pgid: self.pgid.unsigned_abs(),
            });
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
