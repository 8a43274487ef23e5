//! The binary's entry: parse, pick the role (parent, `ctl`, worker), return the exit code.

use std::ffi::OsString;

use clap::Parser;

use crate::cli::{Cli, Sub, WORKER_SUBCOMMAND};
use crate::worker::WorkerArgs;
use crate::{ctl, logging, parent, worker};

pub fn main() -> i32 {
    let argv: Vec<OsString> = std::env::args_os().collect();
    if argv.get(1).is_some_and(|a| a == WORKER_SUBCOMMAND) {
        logging::init(logging::worker_format());
        match WorkerArgs::parse(argv.into_iter().skip(2)) {
            Ok(args) => worker::run(args),
            Err(e) => {
                eprintln!("servery {WORKER_SUBCOMMAND}: {e}");
                return crate::EXIT_CONFIG;
            }
        }
    }
    let cli = match Cli::try_parse_from(&argv) {
        Ok(cli) => cli,
        Err(e) => {
            // Usage errors exit 2, like configuration errors: nothing was started.
            let _ = e.print();
            return e.exit_code();
        }
    };
    logging::init(cli.serve.ops.log_format);
    match cli.command {
        Some(Sub::Ctl(args)) => ctl::run(args),
        None => parent::run(cli.serve, argv),
    }
}
