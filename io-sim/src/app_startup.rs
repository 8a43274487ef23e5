//! An application's startup in a simulated worker ([`Behavior::AppStartup`]): the import,
//! then the lifespan startup, each taking simulated time, either able to fail.
//!
//! The worker tells its lifecycle what a real worker tells it (io-real's `prepare`): on
//! success the application is watched (`watch_app`), its shutdown noted
//! (`app_has_shutdown`), and PREPARED follows; on failure, `startup_failed` with the text
//! a real worker sends — `cannot load the application TARGET: ` and the application's
//! exception line, then its traceback (an import), or `lifespan startup: ` and the
//! exception (a lifespan). A lifespan startup that runs past the worker's
//! `--lifespan-timeout` is cut there and fails with the real worker's `TimeoutError`.

use core::time::Duration;

use servery_core::WorkerId;

use crate::labels;
use crate::plan::{AppStage, Behavior, FaultKind};
use crate::world::{SimEvent, SimWorld};

/// The `MODULE:NAME` the simulated workers load.
pub const SIM_APP_TARGET: &str = "app:application";

/// The exception line of a lifespan startup cut by `--lifespan-timeout` (`timeout`),
/// as the real worker's ASGI host raises it.
pub fn lifespan_timeout_reason(timeout: Duration) -> String {
    format!(
        "TimeoutError: startup took longer than --lifespan-timeout ({} s)",
        timeout.as_secs_f64()
    )
}

/// What a worker whose application failed at `stage` with `reason` (the exception's
/// line) reports, as `servery_io::app::AppError::Load` words it.
pub fn startup_failure_text(stage: AppStage, reason: &str) -> String {
    match stage {
        AppStage::Import => format!(
            "cannot load the application {SIM_APP_TARGET}: {reason}\nTraceback (most recent call last):\n  File \"/srv/app.py\", line 3, in <module>\n{reason}"
        ),
        AppStage::Lifespan => {
            format!("cannot load the application {SIM_APP_TARGET}: lifespan startup: {reason}")
        }
    }
}

impl SimWorld {
    /// A part of `worker`'s application startup finished: fail there, go on to the next
    /// part, or, the lifespan done, watch the application and report PREPARED.
    pub(crate) fn app_startup_step(&mut self, worker: WorkerId, stage: AppStage) {
        let now = self.now;
        let start_timeout = self.spec.config.recovery.worker_start_timeout;
        let has_shutdown = self
            .spec
            .workload
            .app
            .as_ref()
            .is_some_and(|a| a.shutdown_ms.is_some());
        let Some(p) = self.procs.get_mut(&worker).filter(|p| p.runnable()) else {
            return;
        };
        let Behavior::AppStartup(startup) = p.behavior.clone() else {
            return;
        };
        // The lifespan timeout cuts the startup before whatever it would have come to.
        let timed_out = stage == AppStage::Lifespan && startup.overruns_lifespan_timeout();
        let failure = match startup.lifespan_timeout {
            Some(timeout) if timed_out => Some(lifespan_timeout_reason(timeout)),
            _ => startup
                .fails
                .as_ref()
                .filter(|(failed, _)| *failed == stage)
                .map(|(_, reason)| reason.clone()),
        };
        if let Some(reason) = failure {
            p.misbehaved(FaultKind::AppStartupFails);
            p.life.startup_failed(startup_failure_text(stage, &reason));
            self.out
                .coverage
                .insert(labels::APP_STARTUP_FAILURE_REPORTED);
            self.out.coverage.insert(match stage {
                AppStage::Import => labels::APP_IMPORT_FAILED,
                AppStage::Lifespan => labels::APP_LIFESPAN_FAILED,
            });
            if timed_out {
                self.out.coverage.insert(labels::APP_LIFESPAN_TIMED_OUT);
            }
            self.pump(worker);
            return;
        }
        match stage {
            // The lifespan step comes when the lifespan ends or its timeout does.
            AppStage::Import => self.schedule_in(
                startup
                    .lifespan_timeout
                    .map_or(startup.lifespan, |t| startup.lifespan.min(t)),
                SimEvent::AppStartupStep {
                    worker,
                    stage: AppStage::Lifespan,
                },
            ),
            AppStage::Lifespan => {
                // The application started: its interpreter is probed from now on, and the
                // worker is prepared (the real worker's order).
                p.life.watch_app(p.clock.own(now));
                if has_shutdown {
                    p.life.app_has_shutdown();
                }
                p.life.prepared(p.clock.own(now));
                let took = (startup.import + startup.lifespan).as_secs_f64();
                if took > start_timeout / 2.0 {
                    self.out.coverage.insert(labels::APP_SLOW_START_FINISHED);
                }
                self.pump(worker);
            }
        }
    }
}
