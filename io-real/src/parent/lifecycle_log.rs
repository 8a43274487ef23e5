//! One structured log record per lifecycle event, from the core's outputs: the actions
//! the supervisor asks for, and the reaped workers its status lists with their reason
//! codes. Every record has `event` (its name, listed in docs/operations.md) and, where
//! the output names them, `worker`, `slot`, `generation` and `reason`; with
//! `--log-format json` each is one JSON object.

use servery_core::parent::Parent;
use servery_core::proto::{ParentMessage, WorkerMessage};
use servery_core::supervisor::Action;
use servery_core::{Generation, WorkerId};

/// The record of one supervisor action.
pub(super) fn action(action: &Action) {
    match action {
        Action::Spawn {
            worker,
            slot,
            generation,
            ..
        } => tracing::info!(
            event = "spawn",
            worker = worker.0,
            slot = slot.0,
            generation = generation.0,
            "starting a worker"
        ),
        Action::Send { worker, message } => match message {
            ParentMessage::Commit => {
                tracing::info!(event = "commit", worker = worker.0, "worker committed")
            }
            ParentMessage::Drain { deadline_ms } => tracing::info!(
                event = "drain",
                worker = worker.0,
                deadline_ms,
                "worker told to drain"
            ),
            _ => {}
        },
        Action::Terminate { worker } => tracing::info!(
            event = "terminate",
            worker = worker.0,
            "terminating (SIGTERM to its process group)"
        ),
        Action::Kill { worker } => tracing::info!(
            event = "kill",
            worker = worker.0,
            "killing (SIGKILL to its process group)"
        ),
        Action::CloseListeners => {
            tracing::info!(event = "close_listeners", "closing the listeners")
        }
        Action::BindListeners { reload, listen } => tracing::info!(
            event = "bind_listeners",
            reload = reload.0,
            %listen,
            "binding the reload's listeners"
        ),
        Action::ReleaseListeners { listen } => tracing::info!(
            event = "release_listeners",
            %listen,
            "closing the parent's copy of listeners no generation starts on again"
        ),
        Action::WorkerGone { worker } => tracing::debug!(
            event = "worker_gone",
            worker = worker.0,
            "the worker's grants are revoked"
        ),
        Action::QuicSteering(steering) => tracing::debug!(
            event = "quic_steering",
            sockets = steering.readers.len(),
            accepting = ?steering.accepting,
            "HTTP/3 sockets steered"
        ),
        Action::GenerationCommitted {
            generation, reload, ..
        } => tracing::info!(
            event = "generation_committed",
            generation = generation.0,
            reload = reload.map(|r| r.0),
            "generation committed"
        ),
        Action::ReloadStarted { reload, generation } => tracing::info!(
            event = "reload_started",
            generation = generation.0,
            reload = reload.0,
            "reload started"
        ),
        Action::ReloadRejected { reload, message } => tracing::warn!(
            event = "reload_rejected",
            reload = reload.0,
            %message,
            "reload rejected"
        ),
        Action::ServiceFailed { reason, message } => tracing::error!(
            event = "service_failed",
            reason = reason.code(),
            %message,
            "service failed"
        ),
        Action::RecyclingSuspended { message } => tracing::warn!(
            event = "recycling_suspended",
            %message,
            "recycling suspended"
        ),
        Action::Exit { code } => tracing::info!(event = "parent_exit", code, "exiting"),
    }
}

/// The record of a lifecycle message a worker sent (heartbeats and broker requests are
/// not lifecycle events).
pub(super) fn message(worker: WorkerId, message: &WorkerMessage) {
    match message {
        WorkerMessage::Prepared => {
            tracing::info!(event = "prepared", worker = worker.0, "worker prepared")
        }
        WorkerMessage::Ready => tracing::info!(event = "ready", worker = worker.0, "worker ready"),
        WorkerMessage::StartupFailed { error } => tracing::warn!(
            event = "startup_failed",
            worker = worker.0,
            %error,
            "worker failed to start"
        ),
        WorkerMessage::ScriptStarted { pgid } => {
            tracing::debug!(worker = worker.0, pgid, "CGI script started")
        }
        WorkerMessage::ScriptEnded { pgid } => {
            tracing::debug!(worker = worker.0, pgid, "CGI script ended")
        }
        WorkerMessage::Heartbeat { .. } | WorkerMessage::Broker { .. } => {}
    }
}

/// Records for the workers reaped since `seen` exits were recorded (the core counts every
/// exit and lists the last few with their reason codes); returns the new count.
pub(super) fn exits(parent: &Parent, seen: u64) -> u64 {
    let sup = parent.supervisor();
    let total: u64 = sup.tally().exits.iter().sum();
    if total == seen {
        // The common case, after every step of the loop: nothing to copy.
        return total;
    }
    let new = usize::try_from(total.saturating_sub(seen)).unwrap_or(usize::MAX);
    let recent: Vec<_> = sup.recent_exits().collect();
    for exit in recent.iter().skip(recent.len().saturating_sub(new)) {
        let fault = exit.reason.is_failure();
        let status = exit.status.map(|s| s.to_string());
        let Generation(generation) = exit.generation;
        if fault {
            tracing::warn!(
                event = "worker_exit",
                worker = exit.worker.0,
                slot = exit.slot.0,
                generation,
                reason = exit.reason.code(),
                status,
                "worker exited"
            );
        } else {
            tracing::info!(
                event = "worker_exit",
                worker = exit.worker.0,
                slot = exit.slot.0,
                generation,
                reason = exit.reason.code(),
                status,
                "worker exited"
            );
        }
    }
    total
}
