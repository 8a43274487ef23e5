//! `servery generate man|completions SHELL`: from [`crate::settings::command`], the
//! command `--help` describes (with its `[reloadable]` marks), so the man page and the
//! completions list exactly the options the binary takes.

use std::io::Write;

use super::{GenerateArgs, Generated};

/// Writes what was asked for to standard output; the exit code.
pub fn generate(args: &GenerateArgs) -> i32 {
    let mut cmd = crate::settings::command();
    let mut out = Vec::new();
    match &args.what {
        Generated::Man => {
            if let Err(e) = clap_mangen::Man::new(cmd).render(&mut out) {
                tell!("servery generate man: {e}");
                return crate::EXIT_RUNTIME;
            }
        }
        Generated::Completions { shell } => {
            clap_complete::generate(*shell, &mut cmd, "servery", &mut out);
        }
    }
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(&out).and_then(|()| stdout.flush()) {
        Ok(()) => 0,
        Err(e) => {
            tell!("servery generate: cannot write to standard output: {e}");
            crate::EXIT_RUNTIME
        }
    }
}
