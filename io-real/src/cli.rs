//! The command line: `servery [DIR] [options]`, `servery ctl …`, and the hidden worker
//! entry point. Every serving option is also read from a `SERVERY_*` environment variable;
//! the defaults of the recovery policy and the budgets come from `servery-core`, so the
//! help text and the core can never disagree.

use std::net::IpAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use serde::{Deserialize, Serialize};
use servery_core::RawConfig;
use servery_core::config::{RawBudgets, RawConnections, RawRecovery};

use crate::http::SiteConfig;
use crate::settings::LIVE;

const AFTER_HELP: &str = "\
Control socket:
  The parent listens for `servery ctl` on a Unix socket: --control-socket PATH, or by
  default $XDG_RUNTIME_DIR/servery-<port>.sock, or, when XDG_RUNTIME_DIR is unset,
  ${TMPDIR:-/tmp}/servery-<uid>/servery-<port>.sock in a directory servery creates
  mode 0700 (an existing one must be a real directory of the same user, mode 0700).
  The socket is created mode 0600 and removed on exit. The parent answers only
  clients of its own user or root, and `servery ctl` talks only to a socket, and a
  process, of its own user or root; root also to another user's servery through a
  socket it names with --socket, answered by the socket file's owner.

Signals:
  SIGTERM / SIGINT stop gracefully (drain, then exit); SIGHUP reloads the configuration
  from the original command line and environment and the --config file read again (same
  as `servery ctl reload`). Options marked [reloadable] may change on reload; a reload
  that changes any other is rejected and the running generation keeps serving.

systemd:
  Started with LISTEN_FDS (socket activation), servery serves on the passed sockets
  instead of binding (one named `admin` is the --admin listener). With NOTIFY_SOCKET it
  reports READY=1, RELOADING=1, STOPPING=1 and STATUS=, and WATCHDOG=1 when
  WATCHDOG_USEC is set. Units: docs/systemd/ in the source.

Operator files:
  --tls-cert and --tls-key are read once, at most 256 KiB each; a larger file, or a
  device or FIFO that streams more, is a configuration error.

Exit codes:
  0 clean stop, 1 runtime error (e.g. cannot bind, an unsafe control socket
  directory), 2 configuration error (e.g. an unreadable or oversized --tls-cert, a
  directory to serve that servery's user cannot list),
  3 the first generation failed to start, 4 the crash restart limit was exceeded.";

/// Share a directory over HTTP from supervised worker processes.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "servery",
    version = crate::build_info::SHORT,
    long_version = crate::build_info::LONG,
    args_conflicts_with_subcommands = true,
    after_help = AFTER_HELP,
    group = crate::settings::live_group()
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Sub>,
    #[command(flatten)]
    pub serve: ServeArgs,
}

#[derive(Debug, Clone, Subcommand)]
pub enum Sub {
    /// Talk to a running servery over its control socket.
    Ctl(CtlArgs),
    /// Print the man page or a shell's completion script (for packages).
    Generate(crate::packaging::GenerateArgs),
    /// Ask the admin listener's /livez once: exit 0 on 200, 1 otherwise (a container's
    /// HEALTHCHECK).
    Healthcheck(crate::packaging::HealthcheckArgs),
}

/// `--workers N|auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workers {
    Auto,
    /// Kept signed so that validation, not the parser, names a bad count.
    Count(i64),
}

impl Workers {
    pub fn count(self) -> i64 {
        match self {
            Workers::Count(n) => n,
            Workers::Auto => std::thread::available_parallelism()
                .map(|n| n.get() as i64)
                .unwrap_or(1),
        }
    }
}

/// Serialized as written on the command line: the count, or `auto`.
impl Serialize for Workers {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Workers::Auto => s.serialize_str("auto"),
            Workers::Count(n) => s.serialize_i64(*n),
        }
    }
}

impl<'de> Deserialize<'de> for Workers {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Count(i64),
            Word(String),
        }
        match Written::deserialize(d)? {
            Written::Count(n) => Ok(Workers::Count(n)),
            Written::Word(w) => parse_workers(&w).map_err(serde::de::Error::custom),
        }
    }
}

fn parse_workers(s: &str) -> Result<Workers, String> {
    if s.eq_ignore_ascii_case("auto") {
        return Ok(Workers::Auto);
    }
    s.parse::<i64>()
        .map(Workers::Count)
        .map_err(|_| format!("expected a number of workers or `auto`, got `{s}`"))
}

// The server's own options, and the groups flattened into it; each group's core fields
// are its own `core_fields!` declaration, and the macro lists every group once for both.
crate::knobs::settings_struct! {
    /// Options of the server itself.
    #[derive(Debug, Clone, Args, Serialize, Deserialize)]
    pub struct ServeArgs {
        /// Directory to serve [default: the current directory].
        #[arg(value_name = "DIR", env = "SERVERY_DIR")]
        pub dir: Option<PathBuf>,

        /// Address to listen on; repeat (or separate with commas) for several, all on one
        /// port.
        #[arg(
            long,
            value_name = "ADDR",
            env = "SERVERY_BIND",
            value_delimiter = ',',
            default_value = "127.0.0.1"
        )]
        pub bind: Vec<IpAddr>,

        /// Connections the kernel queues on each listener before a worker accepts them
        /// (the listen backlog; the kernel caps it at net.core.somaxconn). The shipped
        /// socket unit's `Backlog=` says the same number.
        #[arg(long, value_name = "N", env = "SERVERY_LISTEN_BACKLOG", default_value_t = crate::parent::LISTEN_BACKLOG, value_parser = clap::value_parser!(u32).range(1..=65535))]
        pub listen_backlog: u32,

        /// Port to listen on. Without it servery tries 8000 and scans forward to 8099 while
        /// the port is busy; 0 picks a free ephemeral port. A reload that changes it binds
        /// the new port before the new generation starts and closes the old one when that
        /// generation commits (not with --http3, --acme or sockets from the service
        /// manager, which fix the port).
        #[arg(long, env = "SERVERY_PORT", group = LIVE)]
        pub port: Option<u16>,

        /// Worker processes: a number, or `auto` for one per available CPU.
        #[arg(long, value_name = "N|auto", env = "SERVERY_WORKERS", default_value = "1", value_parser = parse_workers, allow_negative_numbers = true, group = LIVE)]
        pub workers: Workers,

        /// Which CPUs the workers run on. `auto`: workers hosting an application (--wsgi,
        /// --asgi) share out the CPUs this process may run on (as taskset or the cgroup's
        /// cpuset leave them, read at start), each worker slot its own, so a request's
        /// hand-over between a worker's threads stays on one CPU; a replacement gets its
        /// slot's CPUs, with more workers than CPUs each gets one in turn. File-serving
        /// workers are not pinned. `off`: no worker is pinned.
        #[arg(long, value_enum, value_name = "auto|off", env = "SERVERY_WORKER_CPU_AFFINITY", default_value = "auto", group = LIVE)]
        pub worker_cpu_affinity: Affinity,

        /// How the kernel schedules the workers' threads. `batch` (SCHED_BATCH): a
        /// worker's thread that wakes does not preempt the one running on its CPU, so the
        /// hand-over of a request between a worker's threads (its I/O thread and its
        /// application thread) is taken at the next natural switch instead of costing two
        /// switches a request; the wait is bounded by the scheduler's tick. `normal`
        /// (SCHED_OTHER): every wake-up may preempt. Nice values are unchanged either
        /// way; the parent always runs `normal`; CGI scripts inherit their worker's. Fixed
        /// for the parent's life.
        #[arg(long, value_enum, value_name = "batch|normal", env = "SERVERY_WORKER_SCHEDULING", default_value = "batch")]
        pub worker_scheduling: Scheduling,

        /// Serve and list dot-files, and accept them as upload names. Always on with
        /// --dav --upload: WebDAV clients (rclone, davfs2, Finder) store dot-files and
        /// must find them again. servery's own `.servery-*` files are never served,
        /// listed or written, whatever this says.
        #[arg(long, env = "SERVERY_SHOW_HIDDEN", value_parser = clap::builder::BoolishValueParser::new())]
        pub show_hidden: bool,

        /// Unix socket for `servery ctl` (see "Control socket" below).
        #[arg(long, value_name = "PATH", env = "SERVERY_CONTROL_SOCKET")]
        pub control_socket: Option<PathBuf>,

        /// Validate the configuration, print it with its aggregates, and exit (0 if valid, 2
        /// if not) without binding anything.
        #[arg(long)]
        pub check_config: bool,

        /// Read settings from this TOML file: `key = value`, the keys being the long options
        /// without `--` and with `_` for `-` (`max_connections = 64`). The command line and
        /// the environment override it; a reload reads it again.
        #[arg(long, value_name = "FILE", env = "SERVERY_CONFIG")]
        pub config: Option<PathBuf>,

        /// Print the effective settings as TOML (accepted back by --config), each with where
        /// its value came from, and exit without binding anything.
        #[arg(long, conflicts_with = "check_config")]
        pub print_config: bool,
    }
    flatten {
        site: SiteArgs,
        recovery: RecoveryArgs,
        budgets: BudgetArgs,
        connections: ConnectionArgs,
        upload: crate::write::args::UploadArgs,
        dav: crate::http::dav::args::DavArgs,
        page: crate::http::page::args::PageArgs,
        access_log: crate::access_log::args::AccessLogArgs,
        ops: crate::parent::ops_args::OpsArgs,
        discovery: crate::parent::services::args::DiscoveryArgs,
        tftp: crate::tftp::args::TftpArgs,
        acme: crate::parent::services::acme::args::AcmeArgs,
        app: crate::app::args::AppArgs,
        proxy: crate::proxy::ProxyArgs,
        cgi: crate::cgi::CgiArgs,
        cluster: crate::cluster::ClusterArgs,
    }
    core_fields {
        workers => workers via Workers::count;
        worker_cpu_affinity => worker_cpu_affinity via Affinity::core;
        port => listen.port;
    }
}

/// How files are served: TLS, access policy and response headers. Fixed for the life of
/// the parent (a reload re-reads the original command line, so these cannot change).
#[derive(Debug, Clone, Args, Serialize, Deserialize)]
#[command(next_help_heading = "Serving")]
pub struct SiteArgs {
    /// Serve HTTPS with this certificate chain (PEM, leaf first); needs --tls-key.
    #[arg(
        long,
        value_name = "PATH",
        env = "SERVERY_TLS_CERT",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 RSA or SEC1 EC, unencrypted).
    #[arg(
        long,
        value_name = "PATH",
        env = "SERVERY_TLS_KEY",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,
    /// Serve HTTPS with a certificate generated at startup (ECDSA P-256, for localhost,
    /// the loopback and bound addresses); every worker presents the same one.
    #[arg(long, env = "SERVERY_TLS_SELF_SIGNED", value_parser = clap::builder::BoolishValueParser::new(), conflicts_with_all = ["tls_cert", "tls_key"])]
    pub tls_self_signed: bool,
    /// Require HTTP Basic authentication: `user:password` or `user:sha256:<64 hex>` (the
    /// SHA-256 of the password). Repeat for several users; SERVERY_AUTH takes one per line.
    #[arg(
        long,
        value_name = "USER:PASS",
        env = "SERVERY_AUTH",
        value_delimiter = '\n',
        hide_env_values = true
    )]
    pub auth: Vec<String>,
    /// Allow cross-origin reads (Access-Control-Allow-Origin: *) and answer preflights.
    #[arg(long, env = "SERVERY_CORS", value_parser = clap::builder::BoolishValueParser::new())]
    pub cors: bool,
    /// Single-page app: unknown paths requested by a browser get /index.html.
    #[arg(long, env = "SERVERY_SPA", value_parser = clap::builder::BoolishValueParser::new())]
    pub spa: bool,
    /// `Cache-Control: public, max-age=SECS` on files (default: `no-cache`, revalidate).
    #[arg(long, value_name = "SECS", env = "SERVERY_CACHE")]
    pub cache: Option<u32>,
    /// Do not send X-Content-Type-Options, X-Frame-Options and Referrer-Policy.
    #[arg(long, env = "SERVERY_NO_SECURITY_HEADERS", value_parser = clap::builder::BoolishValueParser::new())]
    pub no_security_headers: bool,
    /// Send Strict-Transport-Security (one year) on HTTPS responses.
    #[arg(long, env = "SERVERY_HSTS", value_parser = clap::builder::BoolishValueParser::new())]
    pub hsts: bool,
    /// Files larger than this are not compressed on the fly (precompressed sidecars are
    /// still served).
    #[arg(long, value_name = "BYTES", env = "SERVERY_MAX_COMPRESS_SIZE", default_value_t = SiteConfig::default().max_compress_size)]
    pub max_compress_size: u64,
    /// Also serve HTTP/3 (QUIC) on the same UDP port, advertised to TCP clients by
    /// `Alt-Svc`; needs TLS (--tls-cert/--tls-key or --tls-self-signed).
    #[arg(long, env = "SERVERY_HTTP3", value_parser = clap::builder::BoolishValueParser::new())]
    pub http3: bool,
    /// Also answer requests for this host name (any port); repeat for several, `*.NAME`
    /// for every name under NAME. Others get 421 (DNS-rebinding defence). Checked when
    /// every listener is on the loopback or any --allowed-host is given; IP addresses,
    /// localhost, the --acme domains, the certificate's names and the name --qr and
    /// --discoverable advertise always pass. `*` turns the check off.
    #[arg(long, value_name = "NAME", env = "SERVERY_ALLOWED_HOST", value_delimiter = ',', value_parser = parse_allowed_host)]
    pub allowed_host: Vec<String>,
    /// Names never served, listed, searched, archived, offered over TFTP or written, at
    /// any depth, as servery's own `.servery-*` files are (404, as if absent);
    /// repeat or separate with commas. A whole file or folder name, `*` for any run of
    /// characters and `?` for one, case-sensitive: `--deny .git,.env,'*.key'`. Even with
    /// --show-hidden. TFTP keeps the list servery started with.
    #[arg(long, value_name = "PATTERN", env = "SERVERY_DENY", value_delimiter = ',', value_parser = parse_deny)]
    pub deny: Vec<String>,
}

/// A `--deny` pattern, kept as written once it is known to be one.
fn parse_deny(s: &str) -> Result<String, String> {
    crate::write::deny::NamePattern::parse(s).map(|_| s.to_owned())
}

/// An `--allowed-host` value, kept as written once it is known to be a pattern.
fn parse_allowed_host(s: &str) -> Result<String, String> {
    crate::http::host::Pattern::parse(s).map(|_| s.to_owned())
}

impl SiteArgs {
    /// Whether the listeners speak TLS.
    pub fn tls(&self) -> bool {
        self.tls_self_signed || self.tls_cert.is_some()
    }
}

fn rec() -> RawRecovery {
    RawRecovery::default()
}

/// How a crash's restart delay is spread at random (`--restart-backoff-jitter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Jitter {
    /// The delay as computed: initial x 2^n, capped.
    None,
    /// Uniform between 0 and the computed delay.
    Full,
    /// Uniform between the initial delay and three times the slot's last, capped.
    Decorrelated,
    /// The computed delay within +/-20 %.
    Proportional,
}

impl Jitter {
    pub fn core(self) -> servery_core::config::RestartJitter {
        use servery_core::config::RestartJitter as J;
        match self {
            Jitter::None => J::None,
            Jitter::Full => J::Full,
            Jitter::Decorrelated => J::Decorrelated,
            Jitter::Proportional => J::Proportional,
        }
    }
}

/// `--worker-scheduling` (decision 0129).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheduling {
    /// SCHED_BATCH: a waking thread does not preempt the running one.
    Batch,
    /// SCHED_OTHER, the system's default.
    Normal,
}

/// `--worker-cpu-affinity`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Affinity {
    /// Application workers share out the CPUs, each slot its own.
    Auto,
    /// No worker is pinned.
    Off,
}

impl Affinity {
    pub fn core(self) -> servery_core::config::CpuAffinity {
        use servery_core::config::CpuAffinity as A;
        match self {
            Affinity::Auto => A::Auto,
            Affinity::Off => A::Off,
        }
    }
}

fn budgets() -> RawBudgets {
    RawBudgets::default()
}

/// The recovery policy. Durations are seconds (fractions allowed).
#[derive(Debug, Clone, Args, Serialize, Deserialize)]
#[command(next_help_heading = "Recovery policy (durations in seconds)")]
pub struct RecoveryArgs {
    /// First crash-replacement delay; doubles per consecutive crash of a slot.
    #[arg(long, value_name = "SECS", env = "SERVERY_RESTART_BACKOFF_INITIAL", default_value_t = rec().restart_backoff_initial, allow_negative_numbers = true, group = LIVE)]
    pub restart_backoff_initial: f64,
    /// Cap of the crash-replacement delay.
    #[arg(long, value_name = "SECS", env = "SERVERY_RESTART_BACKOFF_MAX", default_value_t = rec().restart_backoff_max, allow_negative_numbers = true, group = LIVE)]
    pub restart_backoff_max: f64,
    /// A worker ready this long resets its slot's backoff and crash run.
    #[arg(long, value_name = "SECS", env = "SERVERY_RESTART_STABLE_PERIOD", default_value_t = rec().restart_stable_period, allow_negative_numbers = true, group = LIVE)]
    pub restart_stable_period: f64,
    /// Crash replacements allowed per window (0: the first crash fails the service).
    #[arg(long, value_name = "N", env = "SERVERY_WORKER_RESTART_LIMIT", default_value_t = rec().worker_restart_limit, allow_negative_numbers = true, group = LIVE)]
    pub worker_restart_limit: i64,
    /// The sliding window of the restart limit.
    #[arg(long, value_name = "SECS", env = "SERVERY_WORKER_RESTART_WINDOW", default_value_t = rec().worker_restart_window, allow_negative_numbers = true, group = LIVE)]
    pub worker_restart_window: f64,
    /// Crashes of different workers within this long of the first count once against the
    /// restart limit's window (0: each counts; below worker_restart_window).
    #[arg(long, value_name = "SECS", env = "SERVERY_RESTART_BURST_WINDOW", default_value_t = rec().restart_burst_window, allow_negative_numbers = true, group = LIVE)]
    pub restart_burst_window: f64,
    /// Spread each crash's restart delay at random so that workers lost together do not
    /// all return at once: none (the delay as computed), full (uniform up to it),
    /// decorrelated (between the initial delay and three times the slot's last),
    /// proportional (within +/-20 %). Drawn from the supervisor's seeded stream.
    #[arg(long, value_enum, value_name = "JITTER", env = "SERVERY_RESTART_BACKOFF_JITTER", default_value = "none", group = LIVE)]
    pub restart_backoff_jitter: Jitter,
    /// Pool-aware backoff: a crash that leaves no worker running or starting is replaced
    /// after --restart-backoff-initial rather than its slot's grown delay (the restart
    /// limit still counts it).
    #[arg(long, env = "SERVERY_RESTART_BACKOFF_KEEP_ONE", value_parser = clap::builder::BoolishValueParser::new(), group = LIVE)]
    pub restart_backoff_keep_one: bool,
    /// Backoff shared across slots: every unstable restart, whichever slot, grows one
    /// delay for the pool, and a crash waits at least that; a stable worker's crash
    /// resets it.
    #[arg(long, env = "SERVERY_RESTART_BACKOFF_SHARED", value_parser = clap::builder::BoolishValueParser::new(), group = LIVE)]
    pub restart_backoff_shared: bool,
    /// Recycle a worker after this age (0: off).
    #[arg(long, value_name = "SECS", env = "SERVERY_WORKER_MAX_AGE", default_value_t = rec().worker_max_age, allow_negative_numbers = true, group = LIVE)]
    pub worker_max_age: f64,
    /// Fraction in [0, 1] by which the max age is shortened at random per worker.
    #[arg(long, value_name = "FRACTION", env = "SERVERY_WORKER_MAX_AGE_JITTER", default_value_t = rec().worker_max_age_jitter, allow_negative_numbers = true, group = LIVE)]
    pub worker_max_age_jitter: f64,
    /// Recycle a worker after this many requests (0: off).
    #[arg(long, value_name = "N", env = "SERVERY_MAX_REQUESTS_PER_WORKER", default_value_t = rec().max_requests_per_worker, allow_negative_numbers = true, group = LIVE)]
    pub max_requests_per_worker: i64,
    /// Fraction in [0, 1] by which the request limit is lowered at random per worker.
    #[arg(long, value_name = "FRACTION", env = "SERVERY_MAX_REQUESTS_JITTER", default_value_t = rec().max_requests_jitter, allow_negative_numbers = true, group = LIVE)]
    pub max_requests_jitter: f64,
    /// Recycle a worker whose resident memory (RSS) is above this many bytes at two
    /// heartbeats in a row, replacement first (0: off; else at least 16 MiB).
    #[arg(long, value_name = "BYTES", env = "SERVERY_WORKER_MAX_RSS", default_value_t = rec().worker_max_rss, allow_negative_numbers = true, group = LIVE)]
    pub worker_max_rss: i64,
    /// The fewest ready workers with which the service answers `/readyz` 200 (below
    /// `--workers` it is `degraded`; below this, not ready).
    #[arg(long, value_name = "N", env = "SERVERY_MIN_READY_WORKERS", default_value_t = rec().min_ready_workers, allow_negative_numbers = true, group = LIVE)]
    pub min_ready_workers: i64,
    /// Failed recycle replacements in a row before recycling is suspended.
    #[arg(long, value_name = "N", env = "SERVERY_RECYCLE_RETRY_LIMIT", default_value_t = rec().recycle_retry_limit, allow_negative_numbers = true, group = LIVE)]
    pub recycle_retry_limit: i64,
    /// How often workers report they are alive.
    #[arg(long, value_name = "SECS", env = "SERVERY_HEARTBEAT_INTERVAL", default_value_t = rec().heartbeat_interval, allow_negative_numbers = true, group = LIVE)]
    pub heartbeat_interval: f64,
    /// A worker silent this long is terminated and replaced.
    #[arg(long, value_name = "SECS", env = "SERVERY_HEARTBEAT_TIMEOUT", default_value_t = rec().heartbeat_timeout, allow_negative_numbers = true, group = LIVE)]
    pub heartbeat_timeout: f64,
    /// A worker not ready this long after spawning has failed to start.
    #[arg(long, value_name = "SECS", env = "SERVERY_WORKER_START_TIMEOUT", default_value_t = rec().worker_start_timeout, allow_negative_numbers = true, group = LIVE)]
    pub worker_start_timeout: f64,
    /// How long a draining worker may finish in-flight requests.
    #[arg(long, value_name = "SECS", env = "SERVERY_DRAIN_TIMEOUT", default_value_t = rec().drain_timeout, allow_negative_numbers = true, group = LIVE)]
    pub drain_timeout: f64,
    /// Between SIGTERM and SIGKILL.
    #[arg(long, value_name = "SECS", env = "SERVERY_FORCE_TIMEOUT", default_value_t = rec().force_timeout, allow_negative_numbers = true, group = LIVE)]
    pub force_timeout: f64,
}

/// Per-worker resource budgets.
#[derive(Debug, Clone, Args, Serialize, Deserialize)]
#[command(next_help_heading = "Per-worker budgets")]
pub struct BudgetArgs {
    /// Connections one worker admits at once (more wait in the shared backlog).
    #[arg(long, value_name = "N", env = "SERVERY_MAX_CONNECTIONS", default_value_t = budgets().max_connections, allow_negative_numbers = true, group = LIVE)]
    pub max_connections: i64,
    /// Threads one worker may use for blocking file-system work.
    #[arg(long, value_name = "N", env = "SERVERY_MAX_BLOCKING_THREADS", default_value_t = budgets().max_blocking_threads, allow_negative_numbers = true, group = LIVE)]
    pub max_blocking_threads: i64,
    /// Encoded bytes one worker's compression cache may retain.
    #[arg(long, value_name = "BYTES", env = "SERVERY_COMPRESSION_CACHE_SIZE", default_value_t = budgets().compression_cache_size, allow_negative_numbers = true, group = LIVE)]
    pub compression_cache_size: i64,
    /// Bytes of small files' contents one worker may keep in memory; each hit is checked
    /// against the file with one stat. 0 disables it.
    #[arg(long, value_name = "BYTES", env = "SERVERY_FILE_CACHE_SIZE", default_value_t = budgets().file_cache_size, allow_negative_numbers = true, group = LIVE)]
    pub file_cache_size: i64,
}

fn conn() -> RawConnections {
    RawConnections::default()
}

/// Deadlines that keep a peer that stops talking from holding a connection slot: every
/// connection is under one of them in every state (docs/operations.md).
#[derive(Debug, Clone, Args, Serialize, Deserialize)]
#[command(next_help_heading = "Connection deadlines (seconds)")]
pub struct ConnectionArgs {
    /// From accepting a connection to its first complete request head, in total.
    #[arg(long, value_name = "SECS", env = "SERVERY_REQUEST_HEAD_TIMEOUT", default_value_t = conn().request_head_timeout, allow_negative_numbers = true, group = LIVE)]
    pub request_head_timeout: f64,
    /// With no request in progress: the end of the last response to the next complete
    /// request head (HTTP/1), or no open stream (HTTP/2, closed with GOAWAY).
    #[arg(long, value_name = "SECS", env = "SERVERY_KEEP_ALIVE_TIMEOUT", default_value_t = conn().keep_alive_timeout, allow_negative_numbers = true, group = LIVE)]
    pub keep_alive_timeout: f64,
    /// From accepting a TLS connection to the end of its handshake.
    #[arg(long, value_name = "SECS", env = "SERVERY_TLS_HANDSHAKE_TIMEOUT", default_value_t = conn().tls_handshake_timeout, allow_negative_numbers = true, group = LIVE)]
    pub tls_handshake_timeout: f64,
    /// A request in progress that moves no byte either way this long ends its connection
    /// (a client that stopped reading its download).
    #[arg(long, value_name = "SECS", env = "SERVERY_SEND_TIMEOUT", default_value_t = conn().send_timeout, allow_negative_numbers = true, group = LIVE)]
    pub send_timeout: f64,
    /// The slowest a client may take a response (bytes a second, averaged while the
    /// response waits on it): slower counts as idle for a full worker, and slower for
    /// --send-timeout ends the connection. 0: only the rule that something moves.
    #[arg(long, value_name = "BYTES", env = "SERVERY_MIN_SEND_RATE", default_value_t = conn().min_send_rate, allow_negative_numbers = true, group = LIVE)]
    pub min_send_rate: i64,
    /// An upload body that delivers no byte this long is answered 408 and its reservation
    /// and lease are released (below the broker's lease lifetime).
    #[arg(long, value_name = "SECS", env = "SERVERY_BODY_TIMEOUT", default_value_t = conn().body_timeout, allow_negative_numbers = true, group = LIVE)]
    pub body_timeout: f64,
}

crate::knobs::core_fields! {
    impl RecoveryArgs {
        restart_backoff_initial => recovery.restart_backoff_initial;
        restart_backoff_max => recovery.restart_backoff_max;
        restart_stable_period => recovery.restart_stable_period;
        worker_restart_limit => recovery.worker_restart_limit;
        worker_restart_window => recovery.worker_restart_window;
        restart_burst_window => recovery.restart_burst_window;
        restart_backoff_jitter => recovery.restart_backoff_jitter via Jitter::core;
        restart_backoff_keep_one => recovery.restart_backoff_keep_one;
        restart_backoff_shared => recovery.restart_backoff_shared;
        worker_max_age => recovery.worker_max_age;
        worker_max_age_jitter => recovery.worker_max_age_jitter;
        max_requests_per_worker => recovery.max_requests_per_worker;
        max_requests_jitter => recovery.max_requests_jitter;
        worker_max_rss => recovery.worker_max_rss;
        recycle_retry_limit => recovery.recycle_retry_limit;
        min_ready_workers => recovery.min_ready_workers;
        heartbeat_interval => recovery.heartbeat_interval;
        heartbeat_timeout => recovery.heartbeat_timeout;
        worker_start_timeout => recovery.worker_start_timeout;
        drain_timeout => recovery.drain_timeout;
        force_timeout => recovery.force_timeout;
    }
}

crate::knobs::core_fields! {
    impl BudgetArgs {
        max_connections => budgets.max_connections;
        max_blocking_threads => budgets.max_blocking_threads;
        compression_cache_size => budgets.compression_cache_size;
        file_cache_size => budgets.file_cache_size;
    }
}

crate::knobs::core_fields! {
    impl ConnectionArgs {
        request_head_timeout => connections.request_head_timeout;
        keep_alive_timeout => connections.keep_alive_timeout;
        tls_handshake_timeout => connections.tls_handshake_timeout;
        send_timeout => connections.send_timeout;
        min_send_rate => connections.min_send_rate;
        body_timeout => connections.body_timeout;
    }
}

// The serving options reach workers whole; none is a core field.
crate::knobs::core_fields! {
    impl SiteArgs {
        // The parent holds the QUIC sockets across generations and the core says which
        // worker reads which (decisions 0079 and 0119); workers serve the connections.
        http3 => features.http3;
    }
}

impl ServeArgs {
    /// The configuration as written; [`RawConfig::validate`] decides whether it is valid.
    pub fn raw_config(&self) -> RawConfig {
        let mut raw = RawConfig::default();
        self.apply(&mut raw);
        raw
    }
}

/// `servery ctl`.
#[derive(Debug, Clone, Args)]
pub struct CtlArgs {
    /// The control socket [default: derived from --port, see `servery --help`].
    #[arg(long, value_name = "PATH", env = "SERVERY_CONTROL_SOCKET")]
    pub socket: Option<PathBuf>,
    /// Port of the instance, used to derive the default socket path.
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// Give up waiting for an answer after this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 120.0)]
    pub timeout: f64,
    #[command(subcommand)]
    pub command: CtlCommand,
}

#[derive(Debug, Clone, Subcommand)]
pub enum CtlCommand {
    /// Service state, generation, workers, restarts and the last failure.
    Status {
        /// Print the status as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Validate the configuration again and roll a new generation onto it; waits until
    /// the new generation serves or the reload is rejected.
    Reload {
        /// Override one setting for this reload, e.g. `--set max_connections=64`
        /// (names as in `--check-config` or as flags without `--`).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
    },
    /// Recycle every worker, one at a time, without downtime.
    Recycle,
    /// Close and open the access log again (after logrotate moved it); SIGUSR1 does the
    /// same.
    ReopenLogs,
    /// With --acme: order a new certificate now, whatever the renewal schedule says.
    AcmeRenew,
    /// Stop gracefully.
    Stop,
}

/// The first argument that selects the worker entry point.
pub const WORKER_SUBCOMMAND: &str = "__worker";

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("servery").chain(args.iter().copied()))
    }

    #[test]
    fn negative_and_odd_values_reach_validation_instead_of_the_parser() {
        let cli = parse(&[
            "dir",
            "--workers",
            "-2",
            "--restart-backoff-initial",
            "-1",
            "--drain-timeout",
            "nan",
        ])
        .expect("parses");
        let raw = cli.serve.raw_config();
        assert_eq!(raw.workers, -2);
        assert_eq!(raw.recovery.restart_backoff_initial, -1.0);
        assert!(raw.recovery.drain_timeout.is_nan());
        let fields: Vec<_> = raw
            .validate()
            .expect_err("invalid")
            .issues()
            .iter()
            .map(|i| i.field)
            .collect();
        assert!(fields.contains(&"workers"), "{fields:?}");
        assert!(fields.contains(&"recovery.drain_timeout"), "{fields:?}");
    }

    #[test]
    fn defaults_are_the_cores() {
        let cli = parse(&[]).expect("parses");
        assert_eq!(cli.serve.raw_config(), RawConfig::default());
        assert_eq!(cli.serve.bind, vec![IpAddr::from([127, 0, 0, 1])]);
        assert_eq!(cli.serve.port, None);
    }

    #[test]
    fn workers_auto_and_subcommands() {
        let cli = parse(&["--workers", "auto"]).expect("parses");
        assert_eq!(cli.serve.workers, Workers::Auto);
        assert!(cli.serve.raw_config().workers >= 1);
        assert!(parse(&["--workers", "many"]).is_err());

        let cli =
            parse(&["ctl", "--socket", "/x.sock", "reload", "--set", "workers=3"]).expect("parses");
        match cli.command {
            Some(Sub::Ctl(CtlArgs {
                socket: Some(socket),
                command: CtlCommand::Reload { set },
                ..
            })) => {
                assert_eq!(socket, PathBuf::from("/x.sock"));
                assert_eq!(set, ["workers=3"]);
            }
            other => panic!("{other:?}"),
        }
    }
}
