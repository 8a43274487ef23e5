//! Test-only fault injection, read from `SERVERY_TEST_FAULT` in the worker. The black-box
//! tests use it to make real worker processes misbehave in the ways the simulator models
//! (so the seeded scenarios can drive real processes too); it is not a product feature.
//! It is compiled only with the `test-hooks` feature, which release builds do not enable:
//! without it `no_fault.rs` stands in, and the variable is not read.
//!
//! The variable holds one rule per line, `[WHEN ]FAULT`; the first rule whose condition
//! matches this process applies. `WHEN` is `*` or a comma-separated subset of
//! `index=N` (0 for the first process the parent spawned), `slot=N`, `generation=N`.
//! Faults:
//!
//! - `exit-at-start`: exit 1 before saying anything (before PREPARED).
//! - `fail-startup[=MESSAGE]`: report a startup failure with this (or a recognisable) text.
//! - `hang-at-boot`: never finish preparing.
//! - `slow-boot=MS`: take this long to prepare.
//! - `crash-after-prepare`: abort right after PREPARED reached the parent.
//! - `crash-after-requests=K`: abort once K requests have been served.
//! - `wedged-drain`: ignore SIGTERM and never finish a drain.
//! - `exit-during-drain`: exit abruptly as soon as told to drain.
//! - `kill-before-tree-step=STEP[:N]`: abort just before the `N`-th (from 0, default 0)
//!   action named `STEP` of a WebDAV tree request (MOVE, COPY, DELETE, MKCOL); the step
//!   names are the core's `tree_flow::STEPS`.
//! - `kill-after-lock-grant`: abort once the broker granted a WebDAV LOCK and before
//!   the client hears of it (a grant reply lost with its worker).

use std::time::Duration;

pub use crate::http::dav::TreeKill;

/// The environment variable the worker reads.
pub const ENV: &str = "SERVERY_TEST_FAULT";

/// The text a `fail-startup` worker reports when the rule names none.
pub const FAIL_STARTUP_MESSAGE: &str =
    "test fault (SERVERY_TEST_FAULT=fail-startup): this worker refuses to start";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    ExitAtStart,
    FailStartup(String),
    HangAtBoot,
    SlowBoot(Duration),
    CrashAfterPrepare,
    CrashAfterRequests(u64),
    WedgedDrain,
    ExitDuringDrain,
    KillBeforeTreeStep(TreeKill),
    KillAfterLockGrant,
}

/// The fault this worker runs with, if any, as the questions the worker asks of it.
/// Without the `test-hooks` feature `no_fault.rs` answers "no" to those the worker asks
/// in every build.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TestFault(Option<Fault>);

impl TestFault {
    /// Read `SERVERY_TEST_FAULT` for the process spawned `index`-th (from 0) into `slot`
    /// of `generation`.
    pub fn from_env(index: u64, slot: u64, generation: u64) -> Result<TestFault, String> {
        let spawn = SpawnInfo {
            index,
            slot,
            generation,
        };
        Fault::from_env(spawn).map(TestFault)
    }

    pub fn exit_at_start(&self) -> bool {
        self.0 == Some(Fault::ExitAtStart)
    }

    /// The text to report as a startup failure instead of starting.
    pub fn fail_startup(&self) -> Option<&str> {
        match &self.0 {
            Some(Fault::FailStartup(message)) => Some(message),
            _ => None,
        }
    }

    pub fn hang_at_boot(&self) -> bool {
        self.0 == Some(Fault::HangAtBoot)
    }

    pub fn slow_boot(&self) -> Option<Duration> {
        match self.0 {
            Some(Fault::SlowBoot(delay)) => Some(delay),
            _ => None,
        }
    }

    pub fn crash_after_prepare(&self) -> bool {
        self.0 == Some(Fault::CrashAfterPrepare)
    }

    /// After how many served requests to crash.
    pub fn crash_after_requests(&self) -> Option<u64> {
        match self.0 {
            Some(Fault::CrashAfterRequests(k)) => Some(k),
            _ => None,
        }
    }

    pub fn wedged_drain(&self) -> bool {
        self.0 == Some(Fault::WedgedDrain)
    }

    pub fn exit_during_drain(&self) -> bool {
        self.0 == Some(Fault::ExitDuringDrain)
    }

    pub fn kill_after_lock_grant(&self) -> bool {
        self.0 == Some(Fault::KillAfterLockGrant)
    }

    pub fn kill_before_tree_step(&self) -> Option<TreeKill> {
        match &self.0 {
            Some(Fault::KillBeforeTreeStep(kill)) => Some(kill.clone()),
            _ => None,
        }
    }
}

/// Which process this is, for a rule's condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpawnInfo {
    pub index: u64,
    pub slot: u64,
    pub generation: u64,
}

impl Fault {
    pub fn parse(s: &str) -> Result<Fault, String> {
        let s = s.trim();
        let (name, arg) = match s.split_once('=') {
            Some((name, arg)) => (name, Some(arg)),
            None => (s, None),
        };
        let number = |what: &str| -> Result<u64, String> {
            arg.and_then(|a| a.trim().parse().ok())
                .ok_or_else(|| format!("{ENV}: `{s}` needs {what}"))
        };
        match (name, arg) {
            ("exit-at-start", None) => Ok(Fault::ExitAtStart),
            ("fail-startup", None) => Ok(Fault::FailStartup(FAIL_STARTUP_MESSAGE.into())),
            ("fail-startup", Some(message)) => Ok(Fault::FailStartup(message.into())),
            ("hang-at-boot", None) => Ok(Fault::HangAtBoot),
            ("slow-boot", _) => Ok(Fault::SlowBoot(Duration::from_millis(number(
                "milliseconds",
            )?))),
            ("crash-after-prepare", None) => Ok(Fault::CrashAfterPrepare),
            ("crash-after-requests", _) => {
                Ok(Fault::CrashAfterRequests(number("a request count")?))
            }
            ("wedged-drain", None) => Ok(Fault::WedgedDrain),
            ("exit-during-drain", None) => Ok(Fault::ExitDuringDrain),
            ("kill-after-lock-grant", None) => Ok(Fault::KillAfterLockGrant),
            ("kill-before-tree-step", Some(arg)) => {
                let (step, nth) = arg.split_once(':').unwrap_or((arg, "0"));
                let step = servery_core::tree_flow::STEPS
                    .into_iter()
                    .find(|s| *s == step.trim())
                    .ok_or_else(|| format!("{ENV}: `{s}` names no tree step"))?;
                let nth = nth
                    .trim()
                    .parse()
                    .map_err(|_| format!("{ENV}: `{s}` needs STEP[:N]"))?;
                Ok(Fault::KillBeforeTreeStep(TreeKill { step, nth }))
            }
            _ => Err(format!("{ENV}: unknown fault `{s}`")),
        }
    }

    /// The fault of the first rule in `rules` that matches `spawn`.
    pub fn for_spawn(rules: &str, spawn: SpawnInfo) -> Result<Option<Fault>, String> {
        for line in rules.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let (when, fault) = match line.split_once(' ') {
                Some((when, fault)) if when == "*" || is_condition(when) => (when, fault),
                _ => ("*", line),
            };
            if matches(when, spawn)? {
                return Fault::parse(fault).map(Some);
            }
        }
        Ok(None)
    }

    /// The fault this process was started with, if any.
    pub fn from_env(spawn: SpawnInfo) -> Result<Option<Fault>, String> {
        match std::env::var(ENV) {
            Ok(rules) => Fault::for_spawn(&rules, spawn),
            Err(_) => Ok(None),
        }
    }
}

fn is_condition(when: &str) -> bool {
    when.split(',').all(|term| {
        term.split_once('=')
            .is_some_and(|(k, _)| matches!(k, "index" | "slot" | "generation"))
    })
}

fn matches(when: &str, spawn: SpawnInfo) -> Result<bool, String> {
    if when == "*" {
        return Ok(true);
    }
    for term in when.split(',') {
        let (key, value) = term.split_once('=').unwrap_or((term, ""));
        let value: u64 = value
            .parse()
            .map_err(|_| format!("{ENV}: `{term}` is not KEY=NUMBER"))?;
        let actual = match key {
            "index" => spawn.index,
            "slot" => spawn.slot,
            _ => spawn.generation,
        };
        if actual != value {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIRST: SpawnInfo = SpawnInfo {
        index: 0,
        slot: 0,
        generation: 1,
    };

    #[test]
    fn parses_every_fault_and_names_a_bad_one() {
        assert_eq!(Fault::parse("exit-at-start"), Ok(Fault::ExitAtStart));
        assert_eq!(
            Fault::parse("fail-startup"),
            Ok(Fault::FailStartup(FAIL_STARTUP_MESSAGE.into()))
        );
        assert_eq!(
            Fault::parse("fail-startup=root: permission denied"),
            Ok(Fault::FailStartup("root: permission denied".into()))
        );
        assert_eq!(
            Fault::parse("crash-after-requests=3"),
            Ok(Fault::CrashAfterRequests(3))
        );
        assert_eq!(
            Fault::parse("slow-boot=250"),
            Ok(Fault::SlowBoot(Duration::from_millis(250)))
        );
        assert!(Fault::parse("crash-after-requests=x").is_err());
        assert!(Fault::parse("slow-boot").is_err());
        assert!(Fault::parse("explode").is_err());
        assert_eq!(
            Fault::parse("kill-before-tree-step=release-lease:1"),
            Ok(Fault::KillBeforeTreeStep(TreeKill {
                step: "release-lease",
                nth: 1
            }))
        );
        assert_eq!(
            Fault::parse("kill-before-tree-step=place"),
            Ok(Fault::KillBeforeTreeStep(TreeKill {
                step: "place",
                nth: 0
            }))
        );
        assert!(Fault::parse("kill-before-tree-step=nowhere").is_err());
        assert!(Fault::parse("kill-before-tree-step=place:x").is_err());
    }

    #[test]
    fn the_first_matching_rule_applies() {
        let rules = "index=2 exit-at-start\ngeneration=2,slot=1 hang-at-boot\n* wedged-drain";
        let at = |index, slot, generation| {
            Fault::for_spawn(
                rules,
                SpawnInfo {
                    index,
                    slot,
                    generation,
                },
            )
        };
        assert_eq!(at(2, 0, 1), Ok(Some(Fault::ExitAtStart)));
        assert_eq!(at(5, 1, 2), Ok(Some(Fault::HangAtBoot)));
        assert_eq!(at(5, 0, 2), Ok(Some(Fault::WedgedDrain)));
        assert_eq!(Fault::for_spawn("index=3 hang-at-boot", FIRST), Ok(None));
        // A bare fault applies to every process, as before rules existed.
        assert_eq!(
            Fault::for_spawn("crash-after-requests=1", FIRST),
            Ok(Some(Fault::CrashAfterRequests(1)))
        );
        assert!(Fault::for_spawn("index=x exit-at-start", FIRST).is_err());
    }
}
