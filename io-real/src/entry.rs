//! The binary's entry: parse, pick the role (parent, `ctl`, worker), return the exit code.

use std::ffi::OsString;

use clap::FromArgMatches;

use crate::cli::{Cli, Sub, WORKER_SUBCOMMAND};
use crate::worker::WorkerArgs;
use crate::{ctl, logging, packaging, parent, settings, worker};

pub fn main() -> i32 {
    let argv: Vec<OsString> = std::env::args_os().collect();
    if argv.get(1).is_some_and(|a| a == WORKER_SUBCOMMAND) {
        logging::init(logging::worker_format());
        match WorkerArgs::parse(argv.into_iter().skip(2)) {
            Ok(args) => {
                logging::set_worker_id(args.worker_id);
                worker::run(args)
            }
            Err(e) => {
                eprintln!("servery {WORKER_SUBCOMMAND}: {e}");
                return crate::EXIT_CONFIG;
            }
        }
    }
    let cli = match settings::command()
        .try_get_matches_from(&argv)
        .and_then(|m| Cli::from_arg_matches(&m))
    {
        Ok(cli) => cli,
        Err(e) => {
            // Usage errors exit 2, like configuration errors: nothing was started.
            let _ = e.print();
            return e.exit_code();
        }
    };
    match cli.command {
        Some(Sub::Ctl(args)) => {
            logging::init(cli.serve.ops.log_format);
            return ctl::run(args);
        }
        Some(Sub::Generate(args)) => return packaging::generate(&args),
        Some(Sub::Healthcheck(args)) => return packaging::healthcheck(&args),
        None => {}
    }
    match settings::load(&argv) {
        Ok(loaded) => {
            logging::init(loaded.cli.serve.ops.log_format);
            parent::run(loaded)
        }
        Err(e) => {
            tell!("servery: invalid configuration (nothing was started):");
            for problem in e.problems() {
                tell!("  - {problem}");
            }
            crate::EXIT_CONFIG
        }
    }
}
