//! `servery __worker --worker-id N --slot S --generation G`: who a worker is. Everything
//! it serves with comes in its setup preamble ([`super::setup::Setup`]), so no setting is
//! spelled here. The three numbers stay on the command line because they name the
//! process in `ps` and pick the test faults before anything is read from the parent.
//!
//! Read by hand rather than by clap: only the parent writes them (`parent/spawn.rs`), a
//! worker that never builds clap's parser starts with fewer pages of the binary touched
//! (idle memory in docs/benchmarks.md), and none of the parent's environment variables
//! can change how a worker reads its arguments.

use std::ffi::OsString;

/// Who a worker is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerArgs {
    /// For log lines written before HELLO names the worker.
    pub worker_id: u64,
    /// The slot and generation the parent spawned this process for.
    pub slot: u64,
    pub generation: u64,
}

impl WorkerArgs {
    /// The command line [`WorkerArgs::parse`] reads back.
    pub fn to_args(self) -> [String; 6] {
        [
            "--worker-id".to_owned(),
            self.worker_id.to_string(),
            "--slot".to_owned(),
            self.slot.to_string(),
            "--generation".to_owned(),
            self.generation.to_string(),
        ]
    }

    /// Reads `--name VALUE` pairs; an unknown name, a missing or malformed value, or a
    /// missing `--worker-id` is an error naming it.
    pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<WorkerArgs, String> {
        let mut worker_id = None;
        let mut w = WorkerArgs {
            worker_id: 0,
            slot: 0,
            generation: 1,
        };
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let name = arg
                .to_str()
                .ok_or_else(|| format!("unexpected argument {arg:?}"))?
                .to_owned();
            let value = args.next().ok_or_else(|| format!("{name} needs a value"))?;
            let place = match name.as_str() {
                "--worker-id" => worker_id.insert(0),
                "--slot" => &mut w.slot,
                "--generation" => &mut w.generation,
                _ => return Err(format!("unexpected argument {name}")),
            };
            *place = value
                .to_str()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| format!("{name}: {value:?} is not a number"))?;
        }
        w.worker_id = worker_id.ok_or("--worker-id is required")?;
        Ok(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<WorkerArgs, String> {
        WorkerArgs::parse(args.iter().map(OsString::from))
    }

    #[test]
    fn reads_what_the_parent_writes() {
        let w = WorkerArgs {
            worker_id: 7,
            slot: 2,
            generation: 3,
        };
        assert_eq!(WorkerArgs::parse(w.to_args().map(OsString::from)), Ok(w));
        let least = parse(&["--worker-id", "7"]).expect("worker args");
        assert_eq!((least.slot, least.generation), (0, 1));
    }

    #[test]
    fn names_what_is_wrong() {
        let err = |args: &[&str]| parse(args).expect_err("refused");
        assert!(err(&["--slot", "1"]).contains("--worker-id"));
        assert!(err(&["--worker-id", "seven"]).contains("--worker-id"));
        assert!(err(&["--worker-id", "7", "--bogus", "1"]).contains("--bogus"));
        assert!(err(&["--worker-id", "7", "--slot"]).contains("needs a value"));
    }
}
