//! Deterministic discrete-event simulation of servery's host: worker processes with
//! fault models, control channels, the shared listener, clients, a file system for the
//! write flow, and the parent's log writer.
//!
//! [`SimWorld`] implements the core's [`servery_core::driver::ParentIo`], so a
//! simulation runs the very driver loop production runs. Virtual time jumps to the next
//! event; events are ordered by (time, sequence); every choice is drawn from one seeded
//! [`rng::SimRng`], so a seed replays bit-for-bit.
#![forbid(unsafe_code)]

mod app_startup;
pub mod certs;
mod chunks;
pub mod cluster;
mod conns;
mod dav;
mod dav_tree;
mod fs;
pub mod labels;
mod listen_sets;
mod oracle;
mod outcome;
mod plan;
mod proc_table;
mod process;
mod proxy;
mod quic_sockets;
pub mod rng;
mod takers;
pub mod tls_files;
mod trace;
pub mod tree;
mod uploads;
mod world;

pub use app_startup::{SIM_APP_TARGET, lifespan_timeout_reason, startup_failure_text};
pub use chunks::{
    ChunkEnd, ChunkOutcome, ChunkRecord, ChunkRequest, ChunkStep, ResumablePlan,
    TARGET as RESUMABLE_TARGET, content as resumable_content,
};
pub use dav_tree::{
    DavTreePlan, TreeEnd, TreeMethod, TreeOpPlan, TreeOutcome, TreeRecord, TreeSnapshot, TreeStep,
    TreeStepFails,
};
pub use outcome::{
    DavAnswer, DavEnd, DavIf, DavLockDecision, DavLockRecord, DavOp, DavOutcome, DavRecord,
    Injected, LogStats, Outcome, RequestStats, StatusAnswer, TornRenames, UploadEnd, UploadRecord,
    UploadStats, WorkerExit,
};
pub use plan::{
    AppModel, AppStage, AppStartup, Behavior, BehaviorFn, DAV_COLLECTIONS, DAV_FILES,
    DAV_TARGET_BASE, DAV_UNMAPPED, DavClientPlan, DavDraw, DavWorkload, DavWriteKind, Fault,
    FaultKind, SimCommand, SimSpec, SpawnInfo, Workload,
};
pub use proxy::{DownManner, ProxyOutcome, ProxyPlan, judged_by, proxy_routes, upstream_url};
pub use world::SimWorld;

use servery_core::driver;
use servery_core::parent::Parent;

/// Run one simulation to its end and return what happened.
pub fn simulate(spec: SimSpec) -> Result<Outcome, servery_core::ConfigError> {
    let config = spec.config.validate()?;
    let platform = spec.platform;
    let from_service_manager = spec.listeners_from_service_manager;
    let mut world = SimWorld::new(spec);
    let seed = world.rng_seed();
    let mut parent = Parent::new(config, platform, seed).with_host_cpus(world.host_cpus());
    // The one fact of reload admission only the driver knows (decision 0072).
    if from_service_manager {
        parent = parent.with_listeners_from_service_manager();
    }
    if world.judges_upstreams() {
        parent.watch_upstreams();
    }
    if let Some((acme, tls)) = world.certs_parent() {
        parent = parent.with_acme(acme);
        parent.start_tls(tls);
    } else if let Some(tls) = world.tls_files_parent() {
        parent = parent.reread_tls_files_on_reload();
        parent.start_tls(tls);
    }
    let end = driver::run(&mut parent, &mut world, servery_core::Instant::ZERO);
    Ok(world.finish(end))
}
