//! What a package or an image needs from the binary itself: the man page and shell
//! completions, generated from the one clap command definition (`servery generate`), and
//! a probe of the admin listener's `/livez` for a container's `HEALTHCHECK`
//! (`servery healthcheck`), which has no shell or HTTP client to run one with.

mod generate;
mod healthcheck;

use clap::{Args, Subcommand};

pub use generate::generate;
pub use healthcheck::healthcheck;

/// `servery generate`.
#[derive(Debug, Clone, Args)]
pub struct GenerateArgs {
    #[command(subcommand)]
    pub what: Generated,
}

#[derive(Debug, Clone, Subcommand)]
pub enum Generated {
    /// Print the man page (roff) to standard output: `servery generate man > servery.1`.
    Man,
    /// Print the completion script for SHELL to standard output.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        #[arg(value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
}

/// `servery healthcheck`.
#[derive(Debug, Clone, Args)]
pub struct HealthcheckArgs {
    /// The admin listener to ask [default: the service's --admin, as the environment
    /// (SERVERY_ADMIN) or the --config file (SERVERY_CONFIG) set it]. A wildcard address
    /// is asked on the loopback.
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<std::net::SocketAddr>,
    /// The path to ask: /livez (the parent answers) or /readyz (it serves).
    #[arg(long, value_name = "PATH", default_value = "/livez")]
    pub path: String,
    /// Give up after this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 5.0)]
    pub timeout: f64,
}
