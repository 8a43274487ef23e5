//! The supervisor parent: validates the configuration, binds every listener, starts the
//! host runtime and runs the core's shared driver loop over [`io::RealIo`].

mod acme_site;
pub(crate) mod admin;
mod admin_conn;
mod check_config;
mod cleanup;
mod control;
mod dav_journal;
mod host;
mod io;
mod lifecycle_log;
mod listener_sets;
mod listeners;
mod local_broker;
mod metrics;
mod metrics_acme;
mod metrics_proxy;
pub mod ops_args;
mod process_stats;
pub mod services;
pub(crate) mod site;
mod spawn;
mod status;
mod systemd;
mod tls_material;
mod upstream_probe;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use servery_core::driver::RunEnd;
use servery_core::parent::Parent;
use servery_core::supervisor::Platform;
use servery_core::{ConfigError, ValidConfig};

pub use cleanup::{remove_worker_temp_files, temp_prefix};
pub use control::{default_path as default_control_socket, trusted_uid};
pub use listeners::LISTEN_BACKLOG;
pub use status::{config_json, config_text, status_text};

use crate::cli::ServeArgs;
use crate::clock::Clock;
use crate::settings::Loaded;
use crate::{EXIT_CONFIG, EXIT_RUNTIME, knobs};
use cleanup::Cleaner;
use control::{ControlContext, ControlError, Reparse, SocketFile};
use host::{Host, Signals};
use io::{DriverPoll, RealIo, RealIoParts};
use listeners::BindError;
use spawn::Launcher;
use status::ServiceInfo;

/// Errors that stop the parent before or outside the driver loop (exit code 1).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ParentError {
    #[error(transparent)]
    Bind(#[from] BindError),
    #[error(transparent)]
    Control(#[from] ControlError),
    #[error("cannot start the host runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("cannot read OS entropy for the core's seed: {0}")]
    Entropy(#[source] std::io::Error),
    #[error("cannot find our own executable to start workers: {0}")]
    CurrentExe(#[source] std::io::Error),
    #[error("cannot take over the listeners passed by the service manager: {0}")]
    Inherited(#[source] std::io::Error),
    #[error("the host runtime stopped unexpectedly")]
    HostGone,
    #[error(transparent)]
    Tftp(#[from] crate::tftp::TftpError),
    #[error("cannot prepare the TLS material: {0}")]
    TlsMaterial(String),
    #[error(transparent)]
    Quic(#[from] crate::http3::sockets::QuicBindError),
    #[error("cannot prepare the upstream probes: {0}")]
    Proxy(String),
    #[error("cannot prepare the cluster's etcd client: {0}")]
    Cluster(String),
}

/// How long the exit waits for the singleton services to finish their stops (an mDNS
/// goodbye): more than one daemon round trip, little enough that a stalled service cannot
/// hold a stop up.
const SERVICES_FINISH: std::time::Duration = std::time::Duration::from_secs(2);

/// `servery [DIR] …`: returns the process exit code.
pub fn run(loaded: Loaded) -> i32 {
    let args = loaded.cli.serve.clone();
    if args.print_config {
        say!(
            "{}",
            crate::settings::print_toml(&loaded.effective).trim_end()
        );
        for e in loaded.file_errors() {
            tell!("servery: {e}");
        }
        return if loaded.file_errors().is_empty() {
            0
        } else {
            EXIT_CONFIG
        };
    }
    // Every check runs before any is reported, so one run lists every problem.
    let config = args.raw_config().validate();
    let root = resolve_root(args.dir.as_deref());
    let site = site::prepare(&args.site, &args.bind);
    let acme = args
        .acme
        .check(args.site.tls(), args.port)
        .map_err(|issues| {
            issues
                .into_iter()
                .map(|i| site::SiteIssue {
                    flag: i.flag,
                    message: i.message,
                })
                .collect::<Vec<_>>()
        });
    let (site, acme) = match (site, acme) {
        (Ok(site), Ok(acme)) => (Ok(site), acme),
        (Err(mut a), Err(b)) => {
            a.extend(b);
            (Err(a), None)
        }
        (Err(a), Ok(_)) | (Ok(_), Err(a)) => (Err(a), None),
    };
    let site = match (site, &acme) {
        (Ok(site), Some(acme)) => acme_site::prepare(site, acme, args.bind.len(), args.port),
        (site, _) => site,
    };
    // The application's and the proxy's settings: reported with the serving options'
    // problems.
    let mut app_and_proxy = args.app.check();
    app_and_proxy.extend(args.proxy.check());
    app_and_proxy.extend(args.cgi.check());
    let cluster = args.cluster.check().unwrap_or_else(|issues| {
        app_and_proxy.extend(issues);
        None
    });
    let site = match (site, app_and_proxy) {
        (site, app) if app.is_empty() => site,
        (Ok(_), app) => Err(app),
        (Err(mut issues), app) => {
            issues.extend(app);
            Err(issues)
        }
    };
    // What bind would refuse, known now: reported with the other problems.
    let site = match (site, listeners::conflicting_binds(&args.bind)) {
        (site, None) => site,
        (site, Some(message)) => {
            let mut issues = site.err().unwrap_or_default();
            issues.push(site::SiteIssue {
                flag: "--bind",
                message,
            });
            Err(issues)
        }
    };
    let journal = match (&root, &args.dav.state_dir) {
        // Judged against where the root's links lead now.
        (Ok(root), Some(dir)) => Some(
            root.canonicalize()
                .map_err(|e| format!("{}: {e}", root.display()))
                .and_then(|root| dav_journal::Journal::open(dir, &root)),
        ),
        _ => None,
    };
    // Opened now, so a path that cannot be a log stops us before anything is bound.
    let access_log = args.access_log.access_log.as_deref().map(|path| {
        match crate::access_log::writer::Destination::parse(path) {
            crate::access_log::writer::Destination::Stdout => Ok(None),
            crate::access_log::writer::Destination::File(p) => crate::access_log::writer::open(&p)
                .map(Some)
                .map_err(|e| format!("{}: {e}", p.display())),
        }
    });
    let file_errors = loaded.file_errors();
    let (config, root, site, journal, access_log) = match (
        config,
        root,
        site,
        journal.transpose(),
        access_log.transpose(),
    ) {
        (Ok(config), Ok(root), Ok(site), Ok(journal), Ok(log)) if file_errors.is_empty() => {
            (config, root, site, journal, log.flatten())
        }
        (config, root, site, journal, access_log) => {
            tell!("servery: invalid configuration (nothing was started):");
            for e in file_errors {
                tell!("  - {e}");
            }
            if let Err(e) = &config {
                report_config_error(e);
            }
            if let Err(message) = &root {
                tell!("  - dir: {message}");
            }
            if let Err(message) = &journal {
                tell!("  - --state-dir: {message}");
            }
            if let Err(message) = &access_log {
                tell!("  - --access-log: {message}");
            }
            for issue in site.err().into_iter().flatten() {
                tell!("  - {}: {}", issue.flag, issue.message);
            }
            return EXIT_CONFIG;
        }
    };
    if args.check_config {
        let cpus = host_cpus();
        let report = check_config::report(&loaded.effective, &args, &root, &config, &site, &cpus);
        say!("{}", report.trim_end());
        return 0;
    }
    match serve(
        &args, loaded, config, root, site, journal, access_log, acme, cluster,
    ) {
        Ok(code) => code,
        Err(e) => {
            tell!("servery: {e}");
            EXIT_RUNTIME
        }
    }
}

/// The CPUs this parent may run on, read once at start (decision 0122): a later change
/// of the parent's affinity or of its cgroup's cpuset is not followed. Unknown (nobody
/// pinned) when the system will not say.
fn host_cpus() -> servery_core::cpu_affinity::CpuSet {
    crate::os::allowed_cpus().unwrap_or_else(|e| {
        tracing::warn!(error = %e, "cannot read the CPUs this process may run on: no worker is pinned");
        servery_core::cpu_affinity::CpuSet::default()
    })
}

fn report_config_error(e: &ConfigError) {
    for issue in e.issues() {
        match knobs::flag_for_field(issue.field) {
            Some(flag) => tell!("  - {} ({flag}): {}", issue.field, issue.rule),
            None => tell!("  - {}: {}", issue.field, issue.rule),
        }
    }
}

/// Raises the open-file limit the workers inherit to the hard limit, and says so when it
/// still allows fewer connections per worker than `--max-connections` (each worker then
/// holds at most what it allows: `crate::open_files`).
fn warn_of_open_file_limit(max_connections: i64) {
    use crate::open_files;
    let limit = open_files::raise_to_hard_limit();
    let configured = u32::try_from(max_connections.max(1)).unwrap_or(u32::MAX);
    let allowed = open_files::bounded_connections(configured, limit);
    if let Some(limit) = limit
        && allowed < configured
    {
        tracing::warn!(
            max_connections = configured,
            open_file_limit = limit,
            connections_per_worker = allowed,
            "--max-connections {configured} needs up to {needed} open files a worker, and \
             the open-file limit (RLIMIT_NOFILE, hard) is {limit}: each worker holds at \
             most {allowed} connections. Raise the limit (LimitNOFILE= in the unit, \
             `ulimit -Hn`) or lower --max-connections.",
            needed = open_files::needed_for(configured),
        );
    }
}

/// The served directory, absolute but with its symbolic links kept: the workers follow
/// the path on every request, so a `current -> releases/N` link flipped later is served
/// (decision 0058). It must be a directory servery's user can list and open.
fn resolve_root(dir: Option<&Path>) -> Result<PathBuf, String> {
    let dir = dir.unwrap_or(Path::new("."));
    let root = std::path::absolute(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    crate::served_root::check(&root).map_err(|problem| {
        format!(
            "{problem} (the served directory must be a directory servery's user can list and open)"
        )
    })?;
    Ok(root)
}

/// Backs the broker's shared tables with etcd (decision 0130): the cluster machine with
/// decision 0096's timing and the service's budgets, and the driver for its store calls.
fn start_cluster(
    parent: &mut Parent,
    settings: &crate::cluster::ClusterSettings,
    rt: &tokio::runtime::Handle,
    events: io::InboundTx,
    now: servery_core::Instant,
) -> Result<crate::cluster::StoreDriver, ParentError> {
    use servery_core::cluster::{BudgetLimits, ClusterHost, ClusterTiming, KeyLayout};
    let timing = ClusterTiming::default();
    let limits = BudgetLimits::service_wide(parent.broker().limits());
    let answered: crate::cluster::Answered = Arc::new(move |op, reply| {
        // A closed channel means the driver is gone, and the parent with it.
        let _ = events.send(io::Inbound::Event(
            servery_core::supervisor::Event::StoreReplied { op, reply },
        ));
    });
    let driver =
        crate::cluster::StoreDriver::new(settings, rt.clone(), timing.op_timeout, answered)
            .map_err(ParentError::Cluster)?;
    let host = ClusterHost::new(
        KeyLayout::new(&settings.cluster, &settings.host_id),
        timing,
        limits,
    );
    tracing::info!(
        cluster = settings.cluster.as_str(),
        host_id = settings.host_id.as_str(),
        endpoints = ?settings.endpoints,
        tls = settings.tls,
        "sharing DAV locks and the upload budget through etcd"
    );
    parent.start_cluster(now, host);
    Ok(driver)
}

fn entropy() -> std::io::Result<[u8; 32]> {
    let mut seed = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut seed)?;
    Ok(seed)
}

#[allow(clippy::too_many_arguments)]
fn serve(
    args: &ServeArgs,
    loaded: Loaded,
    config: ValidConfig,
    root: PathBuf,
    site: site::PreparedSite,
    journal: Option<(dav_journal::Journal, dav_journal::Loaded)>,
    access_log: Option<std::fs::File>,
    acme: Option<services::acme::args::AcmeSettings>,
    cluster: Option<crate::cluster::ClusterSettings>,
) -> Result<i32, ParentError> {
    warn_of_open_file_limit(args.budgets.max_connections);
    // Both read (and clear) the environment, before any thread exists.
    let notifier = systemd::Notifier::from_env();
    let inherited = crate::os::inherited_listeners().map_err(ParentError::Inherited)?;
    if args.site.http3 {
        let addrs: Vec<_> = inherited
            .iter()
            .filter_map(|i| i.listener.local_addr().ok())
            .collect();
        if let Some(addr) = crate::http3::activation::unbindable(&addrs) {
            tell!("servery: {}", crate::http3::activation::refusal(addr));
            return Ok(EXIT_CONFIG);
        }
    }
    let exe = std::env::current_exe().map_err(ParentError::CurrentExe)?;
    let seed = entropy().map_err(ParentError::Entropy)?;
    // The default socket's directory is checked (or made) before anything is bound: a
    // directory someone else put there is an error that leaves nothing behind.
    let socket_place = control::Place::prepare(args.control_socket.as_deref())?;
    let inherited_given = !inherited.is_empty();
    let binding = listeners::Binding {
        addrs: args.bind.clone(),
        backlog: args.listen_backlog,
    };
    let (listeners, admin_listener) = if inherited.is_empty() {
        let mut listeners = listeners::bind_all(&binding, args.port)?;
        if let Some(acme) = &acme {
            // The cleartext HTTP-01 listeners go last: workers count them from the end.
            listeners.extend(listeners::bind_all(&binding, Some(acme.http_port))?);
        }
        let admin = match args.ops.admin {
            Some(addr) => {
                Some(admin::bind(addr).map_err(|source| BindError::Admin { addr, source })?)
            }
            None => None,
        };
        (listeners, admin)
    } else {
        listeners::adopt(inherited, args.ops.admin)?
    };
    let tftp_socket = match args.tftp.tftp {
        true => Some(crate::tftp::bind(args.tftp.addr())?),
        false => None,
    };
    let addrs: Vec<_> = listeners
        .iter()
        .filter_map(|l| l.local_addr().ok())
        .collect();
    let port = addrs.first().map_or(0, |a| a.port());
    let quic = match args.site.http3 {
        true => Some(crate::http3::sockets::QuicSockets::bind(&addrs)?),
        false => None,
    };
    let socket_path = socket_place.socket(port);
    let control_listener = control::bind(&socket_path)?;
    let _socket_file = SocketFile(socket_path.clone());

    let clock = Clock::start();
    let host = Host::start().map_err(ParentError::Runtime)?;
    let poll = DriverPoll::new().map_err(ParentError::Runtime)?;
    let events_tx = poll.sender();
    // A reload reads the configuration again as the parent was started: same command
    // line and environment, the file as it is now (settings/reload.rs).
    let started_settings = Arc::new(loaded.effective.clone());
    let reparse: Reparse = Arc::new(move || loaded.reload());
    {
        let _enter = host.handle().enter();
        let signals = Signals::register().map_err(ParentError::Runtime)?;
        host.handle()
            .spawn(signals.forward(events_tx.clone(), Arc::clone(&reparse)));
    }
    host.handle().spawn(control::serve(
        control_listener,
        ControlContext {
            events: events_tx.clone(),
            reparse,
        },
    ));

    let mut admin_deadlines = None;
    if let Some(listener) = admin_listener {
        if let Ok(addr) = listener.local_addr() {
            let url = format!("http://{addr}/");
            crate::banner::say(
                "admin_listening",
                &format!("servery: admin (livez, readyz, metrics) on {url}"),
                &[("url", url.clone().into())],
            );
        }
        let (tx, rx) = tokio::sync::watch::channel(crate::http::Deadlines::of(&config));
        admin_deadlines = Some(tx);
        host.handle()
            .spawn(admin::serve(listener, events_tx.clone(), rx));
    }

    let urls: Vec<String> = addrs
        .iter()
        .map(|a| listeners::url(site.scheme(), *a))
        .collect();
    for url in &urls {
        crate::banner::say(
            "listening",
            &format!("servery: listening on {url}"),
            &[("url", url.as_str().into())],
        );
    }
    for addr in quic.iter().flat_map(|q| q.local_addrs()) {
        // The sockets come and go with the workers (`ctl status` shows them): the banner
        // names the address only.
        crate::banner::say(
            "http3_listening",
            &format!("servery: HTTP/3 on udp {addr} (one socket per worker)"),
            &[("address", addr.to_string().into())],
        );
    }
    if let Some(fp) = &site.fingerprint {
        crate::banner::say(
            "tls_certificate",
            &format!("servery: TLS certificate sha256 {fp}"),
            &[("sha256", fp.as_str().into())],
        );
    }
    if args.site.hsts && !args.site.tls() {
        tracing::warn!("--hsts has no effect without TLS (it is never sent over cleartext)");
    }
    crate::banner::say(
        "serving",
        &format!(
            "servery: serving {} with {} worker{}; control socket {}",
            root.display(),
            config.workers(),
            if config.workers() == 1 { "" } else { "s" },
            socket_path.display()
        ),
        &[
            ("root", root.display().to_string().into()),
            ("workers", config.workers().into()),
            ("control_socket", socket_path.display().to_string().into()),
        ],
    );
    let aggregates = [
        (
            "aggregate_connection_limit",
            config.aggregate_connection_limit(),
        ),
        (
            "aggregate_compression_cache_size",
            config.aggregate_compression_cache_size(),
        ),
        (
            "recycling_overlap_compression_bound",
            config.recycling_overlap_compression_bound(),
        ),
        (
            "aggregate_file_cache_size",
            config.aggregate_file_cache_size(),
        ),
        (
            "recycling_overlap_file_cache_bound",
            config.recycling_overlap_file_cache_bound(),
        ),
    ];
    let text = aggregates
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect::<Vec<_>>()
        .join(" ");
    let fields: Vec<(&str, serde_json::Value)> = aggregates
        .iter()
        .map(|(name, value)| (*name, (*value).into()))
        .collect();
    crate::banner::say("aggregates", &format!("servery: {text}"), &fields);

    if args.dav.dav {
        match &journal {
            Some((j, loaded)) => crate::banner::say(
                "dav_locks",
                &format!(
                    "servery: WebDAV locks are journalled in {} ({} restored)",
                    j.path().display(),
                    loaded.len()
                ),
                &[
                    ("journal", j.path().display().to_string().into()),
                    ("restored", loaded.len().into()),
                ],
            ),
            None => crate::banner::say(
                "dav_locks",
                "servery: WebDAV locks are volatile: a restart of servery loses them (--state-dir keeps them)",
                &[("journal", serde_json::Value::Null)],
            ),
        }
    }
    let service_site = services::Site {
        addrs: addrs.clone(),
        tls: args.site.tls(),
        dav: config.features().webdav,
        root_name: root
            .file_name()
            .map_or_else(|| "servery".into(), |n| n.to_string_lossy().into_owned()),
        host_name: services::context::host_name(),
    };
    let scheme = site.scheme();
    let launcher = Launcher::new(exe, root.clone(), site.worker, args.clone())
        .with_log_format(args.ops.log_format)
        .with_quic(quic)
        .with_qr(args.discovery.qr.then(|| service_site.clone()));
    let log_writer = match &args.access_log.access_log {
        Some(path) => {
            let written = events_tx.clone();
            let writer = crate::access_log::writer::LogWriter::start(
                crate::access_log::writer::Destination::parse(path),
                access_log,
                move || {
                    let _ = written.send(io::Inbound::LogWritten);
                },
            )
            .map_err(ParentError::Runtime)?;
            Some(writer)
        }
        None => None,
    };
    let log_stats = log_writer
        .as_ref()
        .map(|w| std::sync::Arc::clone(w.stats()));
    let cleaner = Cleaner::start(root.clone()).map_err(ParentError::Runtime)?;
    let warnings = crate::tftp::no_auth_warnings(
        tftp_socket.as_ref(),
        !args.site.auth.is_empty(),
        args.tftp.tftp_write,
    );
    // The TFTP service this process runs hides what the workers hide (the list servery
    // started with, as its --show-hidden).
    crate::write::deny::set_denied(&args.site.deny);
    let tftp = match tftp_socket {
        Some(socket) => crate::tftp::TftpSlot::ready(
            socket,
            crate::tftp::TftpSettings {
                limits: *config.tftp(),
                writes: args
                    .tftp
                    .tftp_write
                    .then(|| args.upload.parent_write_settings(&config)),
                root_path: root.clone(),
                http_auth: !args.site.auth.is_empty(),
            },
            crate::tftp::ServedRoot::open(&root, args.show_hidden)
                .map_err(crate::tftp::TftpError::Root)?,
            args.tftp
                .tftp_write
                .then(|| local_broker::client(&config, events_tx.clone())),
        ),
        None => crate::tftp::TftpSlot::off(),
    };
    let tftp_replies = tftp.replies();
    let mut ready_services = std::collections::BTreeMap::new();
    let acme_manager = acme.as_ref().map(|a| a.manager.clone());
    let acme_link = acme.map(|settings| {
        services::acme::AcmeLink::start(host.handle(), settings, events_tx.clone())
    });
    if let Some(link) = &acme_link {
        ready_services.insert(
            servery_core::singletons::SingletonKind::Acme,
            link.service(),
        );
    }
    if args.tftp.tftp {
        ready_services.insert(
            servery_core::singletons::SingletonKind::Tftp,
            Box::new(tftp) as Box<dyn services::Service>,
        );
    }
    let services = services::ServiceHost::start(
        host.handle(),
        service_site,
        &servery_core::singletons::SingletonKind::enabled_by(config.features()),
        ready_services,
    );
    // Which worker runs where is the core's choice; the CPUs there are is this host's.
    let mut parent = Parent::new(config, Platform::Posix, seed).with_host_cpus(host_cpus());
    // What fixes the port for the run is the core's rule (decision 0072); where the
    // listeners came from is the one fact only this driver knows.
    if inherited_given {
        parent = parent.with_listeners_from_service_manager();
    }
    if let Some(manager) = acme_manager {
        parent = parent.with_acme(manager);
    }
    let tls_files = match (&args.site.tls_cert, &args.site.tls_key) {
        (Some(cert), Some(key)) => Some(tls_material::TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
        }),
        _ => None,
    };
    // Whether a reload reads them again is the core's rule (decision 0093); that the
    // identity came from files is the fact only this driver knows.
    if tls_files.is_some() {
        parent = parent.reread_tls_files_on_reload();
    }
    if let Some(identity) = &site.identity {
        let material = tls_material::start(identity, clock.now());
        parent.start_tls(material.map_err(ParentError::TlsMaterial)?);
    }
    let prober = Some(upstream_probe::start(&mut parent, &args.proxy).map_err(ParentError::Proxy)?);
    let journal = journal.map(|(journal, loaded)| {
        let report = parent.restore_dav_locks(clock.now(), loaded.take());
        if report.over_table_limit + report.timeout_capped + report.skipped > 0 {
            // The journal asked for more than a LOCK may have: say what was not kept.
            tracing::warn!(
                path = %journal.path().display(),
                restored = report.restored,
                dropped_table_full = report.over_table_limit,
                dropped_duplicate = report.skipped,
                timeout_capped = report.timeout_capped,
                "the lock journal held more than the lock limits allow: the locks past --dav-max-locks were dropped and those past --dav-lock-timeout-max cut to it"
            );
        }
        journal
    });
    let service_reports = services.reports();
    let listeners = listener_sets::ListenerSets::new(
        binding,
        scheme,
        parent.supervisor().config().listen(),
        listeners,
    );
    let store = match &cluster {
        Some(settings) => Some(start_cluster(
            &mut parent,
            settings,
            host.handle(),
            events_tx.clone(),
            clock.now(),
        )?),
        None => None,
    };
    let mut real = RealIo::new(RealIoParts {
        clock,
        rt: host.handle().clone(),
        store,
        prober,
        poll,
        listeners,
        launcher,
        cleaner,
        journal,
        log_writer,
        services,
        tftp_replies,
        tls_files,
        info: ServiceInfo {
            pid: std::process::id(),
            control_socket: socket_path.display().to_string(),
            root: root.display().to_string(),
            access_log: log_stats,
            services: service_reports,
            settings: started_settings,
            warnings,
        },
        notifier,
        acme: acme_link,
        admin_deadlines,
    });
    let start = clock.now();
    match servery_core::driver::run(&mut parent, &mut real, start) {
        RunEnd::Exited(code) => {
            real.finish_services(SERVICES_FINISH);
            drop(real);
            drop(host);
            Ok(code)
        }
        // Only the simulator crashes a parent on purpose; here both mean the host failed.
        RunEnd::HostFailed | RunEnd::Crashed => {
            real.kill_all();
            Err(ParentError::HostGone)
        }
    }
}
