//! Test-only fault injection, read from `SERVERY_TEST_FAULT` in the worker. The black-box
//! tests use it to make real worker processes misbehave in the ways the simulator models;
//! it is not a product feature and is never set in production.
//!
//! - `exit-at-start`: exit 1 before saying anything (before PREPARED).
//! - `fail-startup`: report a startup failure with a recognisable message.
//! - `crash-after-requests=K`: abort once K requests have been served.

/// The environment variable the worker reads.
pub const ENV: &str = "SERVERY_TEST_FAULT";

/// The text a `fail-startup` worker reports, so tests can look for it.
pub const FAIL_STARTUP_MESSAGE: &str =
    "test fault (SERVERY_TEST_FAULT=fail-startup): this worker refuses to start";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    ExitAtStart,
    FailStartup,
    CrashAfterRequests(u64),
}

impl Fault {
    pub fn parse(s: &str) -> Result<Fault, String> {
        match s.trim() {
            "exit-at-start" => Ok(Fault::ExitAtStart),
            "fail-startup" => Ok(Fault::FailStartup),
            other => match other.strip_prefix("crash-after-requests=") {
                Some(k) => k
                    .parse()
                    .map(Fault::CrashAfterRequests)
                    .map_err(|_| format!("{ENV}: `{k}` is not a request count")),
                None => Err(format!("{ENV}: unknown fault `{other}`")),
            },
        }
    }

    /// The fault this process was started with, if any.
    pub fn from_env() -> Result<Option<Fault>, String> {
        match std::env::var(ENV) {
            Ok(s) if !s.trim().is_empty() => Fault::parse(&s).map(Some),
            _ => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_fault_and_names_a_bad_one() {
        assert_eq!(Fault::parse("exit-at-start"), Ok(Fault::ExitAtStart));
        assert_eq!(Fault::parse("fail-startup"), Ok(Fault::FailStartup));
        assert_eq!(
            Fault::parse("crash-after-requests=3"),
            Ok(Fault::CrashAfterRequests(3))
        );
        assert!(Fault::parse("crash-after-requests=x").is_err());
        assert!(Fault::parse("explode").is_err());
    }
}
