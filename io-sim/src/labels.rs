//! The coverage labels the simulator records in [`crate::Outcome::coverage`].
//!
//! Three sorts: branches a scenario's coverage goal names; the goal of each
//! [`crate::FaultKind`] (its fault took effect and the service handled it); and path
//! facts — the races and orderings a failing run once went through (a frame in flight
//! when a process died, a client ahead of an orphan's EOF, …). A regression entry pins
//! the facts of the path it caught, so it fails loudly when its seed stops reaching them.

// Branches scenario goals name.
pub const LEASE_REVOKED_ON_DEATH: &str = "lease revoked on death";
pub const LOG_DROPPED: &str = "log queue dropped under the drop policy";
pub const BROKER_SATURATED: &str = "broker saturation rejected";
pub const HANG_KILLED: &str = "hang killed";
pub const HANG_WHILE_DRAINING_KILLED: &str = "hang while draining killed";
pub const RECYCLE_ABORTED: &str = "recycle aborted kept the old worker";

// The goal of each fault kind.
pub const CRASHED_WORKER_REPLACED: &str = "crashed worker replaced";
pub const HUNG_WORKER_KILLED: &str = "hung worker killed";
pub const MALFORMED_FRAME_REPLACED: &str = "malformed frame replaced worker";
pub const LEASE_HOLDER_KILLED: &str = "lease holder killed";
pub const ORPHAN_EXITED: &str = "orphaned worker drained and exited";
pub const STALLED_PARENT_RESUMED: &str = "stalled parent resumed";
pub const STARTUP_ERROR_REPORTED: &str = "startup error reported";
pub const CRASHED_AT_BOOT: &str = "crashed at boot";
pub const CRASH_BETWEEN_PREPARE_AND_COMMIT: &str = "crash between prepare and commit";
pub const HUNG_BOOT_ENDED: &str = "hung boot ended by the parent";
pub const SLOW_BOOT_FINISHED: &str = "slow boot finished";
pub const CRASHED_AFTER_REQUESTS: &str = "crashed after serving requests";
/// A worker crashed at the end of the lifetime its workload drew.
pub const CRASHED_AFTER_UPTIME: &str = "crashed after its drawn lifetime";
/// A worker a pause fault stopped was continued, alive, and ran on.
pub const PAUSED_WORKER_RESUMED: &str = "paused worker resumed";
/// A worker a pause fault stopped was killed before its pause ended.
pub const PAUSED_WORKER_KILLED: &str = "paused worker killed before it resumed";
/// A paused worker resumed with a TERM pending and ran its handler then.
pub const PAUSED_WORKER_RAN_PENDING_TERM: &str = "paused worker ran a pending term on resuming";
pub const WEDGED_DRAIN_KILLED: &str = "wedged drain killed";
pub const EXITED_DURING_DRAIN: &str = "exited during drain";
/// A spawn failed, and the supervisor then spawned the slot again, rejected the reload,
/// suspended recycling or failed the service.
pub const SPAWN_FAILURE_HANDLED: &str = "a failed spawn was retried or given up on";
/// The parent's write to a worker failed, and the worker was then ended and reaped.
pub const CONTROL_WRITE_FAILED_ENDED: &str = "a worker whose control write failed was ended";
/// A decoder (the parent's or a worker's) took a frame whole after part of it had arrived
/// alone.
pub const FRAME_IN_PIECES_DECODED: &str = "a frame that arrived in pieces was decoded whole";
/// A connection waited in the backlog while the worker that could take it failed accept
/// with EMFILE, and was served later.
pub const BACKLOG_WAITED_OUT_EMFILE: &str =
    "a connection waited out EMFILE in the backlog and was served";
/// After a clock jump past the heartbeat timeout, the parent noticed the time it did not
/// run (decision 0017).
pub const CLOCK_JUMP_NOTICED: &str = "the parent noticed a clock jump";
/// An upload's temp-file write failed with ENOSPC; the upload ended and its temp file
/// was gone.
pub const UPLOAD_ENOSPC_CLEANED: &str = "an upload hit ENOSPC and left no temp file";
/// The rename that publishes an upload failed; the target was untouched and the temp
/// file gone.
pub const RENAME_FAILED_CLEANED: &str = "a failed rename published nothing and left no temp file";
/// The worker that answered a granted WebDAV LOCK was killed, its grants were revoked,
/// and the lock was still in the broker's table.
pub const DAV_LOCK_OUTLIVED_GRANTER: &str = "a dav lock outlived the worker that granted it";
/// While control channels were delayed, a frame reached the parent after one another
/// worker wrote later ([`crate::Fault::ChannelDelay`]).
pub const DELAYED_FRAME_OVERTAKEN: &str =
    "a delayed frame was overtaken by a later one on another channel";
/// A worker whose clock drifted ran through its drift, beating on its own clock, and the
/// parent, judging on its own clock, did not end it ([`crate::Fault::ClockDrift`]).
pub const DRIFTING_WORKER_KEPT: &str = "a worker whose clock drifted was kept";
/// The fsync of an upload's temp file failed (EIO); the target was untouched and the temp
/// file gone ([`crate::Fault::FsyncFails`]).
pub const FSYNC_FAILED_CLEANED: &str = "a failed fsync published nothing and left no temp file";
/// The fsync of a directory after a publishing rename failed (EIO), and the write was
/// answered as failed, every grant back ([`crate::Fault::DirSyncFails`]).
pub const DIR_SYNC_FAILED_ANSWERED: &str =
    "a rename whose directory fsync failed was answered as a failure";
/// The power went between a publishing rename and its directory's fsync, and the name
/// showed the old file or the whole new one ([`crate::Fault::TornRename`]).
pub const TORN_RENAME_WHOLE: &str = "a torn rename showed the old file or the whole new one";
/// A resumable chunk met ENOSPC part-way through its append: what reached the file was
/// kept, made durable, and the chunk answered 507.
pub const CHUNK_ENOSPC_KEPT: &str = "a chunk hit ENOSPC part-way and kept what it wrote";
/// The fsync of a resumable chunk failed: the partial's files were discarded.
pub const CHUNK_FSYNC_DISCARDED: &str = "a chunk whose fsync failed discarded the partial";
/// A WebDAV COPY's staging copy met ENOSPC or a failing fsync: nothing was placed.
pub const DAV_COPY_STORAGE_FAULT_PLACED_NOTHING: &str =
    "a dav copy that could not be written or synced placed nothing";

// Path facts.
/// While control channels were delayed, a worker's exit reached the parent before a
/// frame another worker wrote earlier.
pub const EXIT_OVERTOOK_DELAYED_FRAME: &str =
    "a worker's exit overtook a frame another worker wrote earlier";
/// While control channels were delayed, one look found what several channels carried.
pub const DELAYED_LOOK_GATHERED: &str = "one look gathered what several delayed channels carried";
/// A worker whose clock ran slow, or fast, was told to drain and exited on its own
/// clock before the parent's deadline ended it.
pub const DRIFTING_WORKER_DRAINED: &str = "a worker whose clock drifted drained and exited";
/// A worker meant to die between PREPARED and COMMIT received the COMMIT first.
pub const COMMIT_REACHED_DOOMED_WORKER: &str = "commit reached a worker about to crash";
/// A worker died while its PREPARED was still on the way to the parent.
pub const DIED_WITH_PREPARED_IN_FLIGHT: &str = "a worker died with its PREPARED in flight";
/// A worker died while its READY was still on the way to the parent.
pub const DIED_WITH_READY_IN_FLIGHT: &str = "a worker died with its READY in flight";
/// The parent told a worker to drain, or terminated or killed it, while the worker's
/// READY was still on the way.
pub const ENDED_WITH_READY_IN_FLIGHT: &str = "a worker was told to end with its READY in flight";
/// After the parent died, a client arrived while an orphan had not yet seen its EOF.
pub const CLIENT_BEFORE_ORPHAN_EOF: &str = "a client arrived before an orphan saw its EOF";
/// A crash fault killed a worker of a generation that had not committed, after the
/// first commit: a reload candidate.
pub const CRASH_HIT_RELOAD_CANDIDATE: &str = "a crash fault hit a reload candidate";
pub const RELOAD_REJECTED: &str = "reload rejected";
pub const RELOAD_COMMITTED: &str = "reload committed";
/// A reload to a port another program holds was rejected before any candidate started.
pub const PORT_BUSY_RELOAD_REJECTED: &str = "a reload to a busy port rejected with nothing started";
/// A reload moved the listeners: its generation committed on the new set and the parent
/// released the old one.
pub const LISTENERS_MOVED: &str = "a reload moved the listeners and released the old set";
/// A steering closed HTTP/3 sockets at the groups' end (their readers were reaped).
pub const QUIC_TRAILING_SOCKETS_CLOSED: &str = "trailing HTTP/3 sockets closed";
/// A steering kept a socket read by a worker the parent had let go but not yet reaped.
pub const QUIC_SOCKET_KEPT_UNTIL_REAPED: &str =
    "an HTTP/3 socket stayed its reader's after its channel went, until the reap";
/// A later generation's HELLO carried a heartbeat interval other than the previous
/// generation's.
pub const CANDIDATE_OWN_TIMINGS: &str = "a reload candidate got its own heartbeat timings";
/// A parent resumed from a stall longer than the heartbeat timeout with worker frames
/// waiting to be read.
pub const RESUMED_WITH_OVERDUE_BEATS: &str = "a stalled parent resumed with overdue beats waiting";
/// The restart limit failed a service whose first generation had committed.
pub const LIMIT_FAILED_COMMITTED_SERVICE: &str = "the restart limit failed a committed service";
/// A slot whose spawn failed was spawned again (and the new process was created).
pub const SPAWN_RETRIED: &str = "a slot whose spawn failed was spawned again";
/// Spawns failing one after another failed the service.
pub const SPAWN_FAILURES_FAILED_SERVICE: &str = "spawn failures failed the service";
/// The parent's failed write was a broker reply (the worker was waiting for an answer).
pub const WRITE_FAILED_ON_BROKER_REPLY: &str = "a control write failed on a broker reply";
/// A heartbeat arrived in pieces.
pub const HEARTBEAT_IN_PIECES: &str = "a heartbeat arrived in pieces";
/// Every worker failed accept with EMFILE while connections waited.
pub const EVERY_WORKER_OUT_OF_DESCRIPTORS: &str =
    "every worker was out of descriptors with connections waiting";
/// A worker hung before a clock jump was still ended for its silence after it.
pub const HUNG_ACROSS_CLOCK_JUMP_KILLED: &str = "a worker hung across a clock jump was killed";
/// A PUT without the lock's token was refused (423) by a worker other than the one that
/// granted the lock.
pub const DAV_REFUSED_ELSEWHERE: &str =
    "a dav write without the token was refused by another worker";
/// A PUT with a lock's token was published through a worker other than the one that
/// granted the lock.
pub const DAV_TOKEN_WRITE_ELSEWHERE: &str =
    "a dav write with the token succeeded through another worker";
/// The broker answered a LOCK `Saturated`: its lock table was full.
pub const DAV_TABLE_SATURATED: &str = "the dav lock table was full and refused a lock";
/// A LOCK was refused because another lock conflicts (423).
pub const DAV_LOCK_CONFLICT: &str = "a dav lock conflicted with one held";
/// A refresh pushed a lock's expiry out.
pub const DAV_LOCK_REFRESHED: &str = "a dav lock was refreshed";
/// A write of the lock journal failed on a full disk, and a lock it did not hold yet was
/// refused (decision 0084).
pub const DAV_JOURNAL_REFUSED: &str = "a dav lock the journal could not hold was refused";
/// An UNLOCK ended a lock before its timeout.
pub const DAV_LOCK_UNLOCKED: &str = "a dav lock was unlocked";
/// A lock left the table at its timeout, no UNLOCK.
pub const DAV_LOCK_EXPIRED: &str = "a dav lock expired";
/// A PUT carrying the token of a lock that had ended was refused (412).
pub const DAV_STALE_TOKEN_REFUSED: &str =
    "a dav write with an ended lock's token failed its precondition";

// WebDAV tree requests (`crate::dav_tree`).
/// A worker killed between two steps of a tree request had its private names swept by
/// the parent and its leases revoked (the goal of `FaultKind::CrashDavTreeStep`).
pub const DAV_TREE_KILL_SWEPT: &str = "a worker killed mid tree request was swept";
/// A worker was killed just before this step of a tree request (by `TreeStep` order).
pub const DAV_TREE_KILLED_BEFORE: [&str; 16] = [
    "dav tree: killed before a lease",
    "dav tree: killed before looking",
    "dav tree: killed before staging a copy",
    "dav tree: killed before filling the copy",
    "dav tree: killed before syncing the copy",
    "dav tree: killed before confirming the leases",
    "dav tree: killed before moving the destination aside",
    "dav tree: killed before moving the source aside",
    "dav tree: killed before placing",
    "dav tree: killed before syncing the directory",
    "dav tree: killed before the properties",
    "dav tree: killed before putting the destination back",
    "dav tree: killed before removing the trash",
    "dav tree: killed before removing the copy",
    "dav tree: killed before giving a lease back",
    "dav tree: killed before answering",
];

// Resumable uploads (`crate::chunks`).
/// A worker killed between two steps of a chunk had its private temp files swept by the
/// parent and its leases and reservations revoked (the goal of
/// `FaultKind::CrashChunkStep`).
pub const CHUNK_KILL_SWEPT: &str = "a worker killed mid chunk was swept";
/// A partial left untouched past the partial TTL was discarded by the next chunk.
pub const CHUNK_STALE_DISCARDED: &str = "a stale partial upload was discarded";
/// A chunk took the partial reservation over from another live worker idle on it.
pub const CHUNK_TAKEN_OVER: &str = "a chunk took the partial reservation over";
/// A worker was killed just before this step of a chunk (by `ChunkStep` order).
pub const CHUNK_KILLED_BEFORE: [&str; 22] = [
    "chunk: killed before reserving",
    "chunk: killed before the lease",
    "chunk: killed before looking at the target",
    "chunk: killed before looking at the partial",
    "chunk: killed before discarding a stale partial",
    "chunk: killed before taking the partial reservation",
    "chunk: killed before taking the partial over",
    "chunk: killed before recording the meta file",
    "chunk: killed with the meta file's temp not yet renamed",
    "chunk: killed before opening the partial",
    "chunk: killed before appending",
    "chunk: killed with part of the chunk appended",
    "chunk: killed before syncing",
    "chunk: killed before confirming the lease",
    "chunk: killed before publishing",
    "chunk: killed before syncing the directory",
    "chunk: killed before removing the partial",
    "chunk: killed before keeping the partial reservation",
    "chunk: killed before giving the partial reservation back",
    "chunk: killed before giving the lease back",
    "chunk: killed before giving the reservation back",
    "chunk: killed before answering",
];

// The certificate manager and the TLS hand-off (`crate::certs`).
/// The simulated CA issued a certificate the plan got wrong (older, expired, a name
/// missing).
pub const CA_MISISSUED: &str = "the ca issued a wrong certificate";
/// A worker spawned after a renewal was installed got the renewed identity first.
pub const WORKER_STARTED_WITH_RENEWED_IDENTITY: &str =
    "a worker started after a renewal got the renewed identity";

/// A worker whose application's interpreter wedged stopped beating and was replaced.
pub const APP_WEDGE_REPLACED: &str = "a worker whose application wedged was replaced";
/// A worker was recycled because its memory stayed above `worker_max_rss`.
pub const RECYCLED_BY_MEMORY: &str = "recycled by memory";
/// A passing memory peak above `worker_max_rss` at one beat recycled nothing.
pub const MEMORY_PEAK_PASSED: &str = "a passing memory peak recycled nothing";

/// An application's shutdown ran after the drain's last request and the worker exited
/// when it ended.
pub const APP_SHUTDOWN_COMPLETED: &str = "an application's shutdown completed inside the drain";
/// An application's shutdown overran the drain deadline and was cut there.
pub const APP_SHUTDOWN_CUT: &str = "an application's shutdown was cut at the drain deadline";

/// A worker's application failed its startup (import or lifespan) and the worker's
/// startup failure carried the application's reason to the parent.
pub const APP_STARTUP_FAILURE_REPORTED: &str = "an application's startup failure was reported";
/// An application failed its import.
pub const APP_IMPORT_FAILED: &str = "an application failed its import";
/// An application failed its lifespan startup.
pub const APP_LIFESPAN_FAILED: &str = "an application failed its lifespan startup";
/// An application's lifespan startup overran the worker's `--lifespan-timeout` and was
/// cancelled there: a startup failure saying so, before the parent's start timeout.
pub const APP_LIFESPAN_TIMED_OUT: &str =
    "an application's lifespan startup overran --lifespan-timeout and was cut there";
/// An application started in more than half the start timeout, and its worker served.
pub const APP_SLOW_START_FINISHED: &str = "an application started close to the start timeout";
/// A reload whose application failed to start was rejected with the application's
/// reason while the old generation served every request.
pub const APP_RELOAD_REJECTED: &str =
    "a reload whose application failed to start was rejected, the old generation serving";
/// The first generation's application failed to start: the service failed with its
/// reason, restarting nothing.
pub const APP_FIRST_START_FAILED: &str =
    "the first generation's application failed to start and the service failed with its reason";

/// Every label above.
/// One look found a first-rollout READY together with another worker's end (its EOF or
/// its reap): the intake rule's race.
pub const READY_AND_END_IN_ONE_LOOK: &str = "a READY and another worker's end found in one look";

// The reverse proxy and CGI ([`crate::ProxyPlan`]).
/// The parent's verdict marked an upstream down.
pub const UPSTREAM_MARKED_DOWN: &str = "an upstream marked down by the parent";
/// With probes, the verdict matched the upstreams' state when the plan judged it.
pub const UPSTREAM_VERDICT_CONVERGED: &str = "the upstream verdict converged to the truth";
/// A worker sent to a down upstream of several before it learned the verdict (the
/// failures the health rule allows).
pub const UPSTREAM_FAILED_BEFORE_VERDICT: &str =
    "a request went to a down upstream before the verdict";
/// A request found every upstream of its prefix down and was answered 502.
pub const EVERY_UPSTREAM_DOWN_ANSWERED: &str = "every upstream down answered 502";
/// A worker died holding proxy admission grants.
pub const PROXY_GRANT_HOLDER_KILLED: &str = "a worker killed holding proxy grants";
/// A worker died with a script running.
pub const SCRIPT_OUTLIVED_ITS_WORKER: &str = "a worker died with a CGI script running";
/// The parent killed the script groups a dead worker left.
pub const SCRIPT_GROUP_KILLED_FOR_DEAD_WORKER: &str =
    "a dead worker's script groups killed by the parent";

/// A reload that changed the proxy's upstreams committed.
pub const PROXY_ROUTES_RELOADED: &str = "a reload changed the upstream set and committed";
/// A reload that changed the upstream health policy committed (decision 0118).
pub const UPSTREAM_POLICY_RELOADED: &str =
    "a reload changed the upstream health policy and committed";
/// A reload that changed the balance committed, and a worker of the new generation
/// chose an upstream under it (decision 0118).
pub const PROXY_BALANCE_RELOADED: &str =
    "a reload changed the balance and the new generation balanced by it";
/// An upstream request ended at a timeout a reload had changed (decision 0118).
pub const PROXY_TIMEOUT_RELOADED: &str = "an upstream request timed out by a reloaded timeout";
/// An upstream no live generation names left the parent's health table.
pub const UPSTREAM_LEFT_THE_TABLE: &str = "an upstream left the parent's health table";
/// A later worker of a pinned slot (a crash or recycle replacement) started on the
/// slot's CPUs (decision 0122).
pub const PINNED_SLOT_REPLACED: &str = "a pinned slot's replacement started on its CPUs";
/// A generation of another worker count than the last pinned one shared the CPUs out
/// again (decision 0122).
pub const CPUS_SHARED_OUT_AGAIN: &str =
    "a reload to another worker count shared the CPUs out again";
pub const ALL: &[&str] = &[
    PINNED_SLOT_REPLACED,
    CPUS_SHARED_OUT_AGAIN,
    DELAYED_FRAME_OVERTAKEN,
    DRIFTING_WORKER_KEPT,
    FSYNC_FAILED_CLEANED,
    DIR_SYNC_FAILED_ANSWERED,
    TORN_RENAME_WHOLE,
    CHUNK_ENOSPC_KEPT,
    CHUNK_FSYNC_DISCARDED,
    DAV_COPY_STORAGE_FAULT_PLACED_NOTHING,
    EXIT_OVERTOOK_DELAYED_FRAME,
    DELAYED_LOOK_GATHERED,
    DRIFTING_WORKER_DRAINED,
    UPSTREAM_MARKED_DOWN,
    UPSTREAM_VERDICT_CONVERGED,
    UPSTREAM_FAILED_BEFORE_VERDICT,
    EVERY_UPSTREAM_DOWN_ANSWERED,
    PROXY_GRANT_HOLDER_KILLED,
    SCRIPT_OUTLIVED_ITS_WORKER,
    SCRIPT_GROUP_KILLED_FOR_DEAD_WORKER,
    PROXY_ROUTES_RELOADED,
    UPSTREAM_POLICY_RELOADED,
    PROXY_BALANCE_RELOADED,
    PROXY_TIMEOUT_RELOADED,
    UPSTREAM_LEFT_THE_TABLE,
    READY_AND_END_IN_ONE_LOOK,
    APP_STARTUP_FAILURE_REPORTED,
    APP_IMPORT_FAILED,
    APP_LIFESPAN_FAILED,
    APP_LIFESPAN_TIMED_OUT,
    APP_SLOW_START_FINISHED,
    APP_RELOAD_REJECTED,
    APP_FIRST_START_FAILED,
    APP_SHUTDOWN_COMPLETED,
    APP_SHUTDOWN_CUT,
    APP_WEDGE_REPLACED,
    RECYCLED_BY_MEMORY,
    MEMORY_PEAK_PASSED,
    LEASE_REVOKED_ON_DEATH,
    LOG_DROPPED,
    BROKER_SATURATED,
    HANG_KILLED,
    HANG_WHILE_DRAINING_KILLED,
    RECYCLE_ABORTED,
    CRASHED_WORKER_REPLACED,
    HUNG_WORKER_KILLED,
    MALFORMED_FRAME_REPLACED,
    LEASE_HOLDER_KILLED,
    ORPHAN_EXITED,
    STALLED_PARENT_RESUMED,
    STARTUP_ERROR_REPORTED,
    CRASHED_AT_BOOT,
    CRASH_BETWEEN_PREPARE_AND_COMMIT,
    HUNG_BOOT_ENDED,
    SLOW_BOOT_FINISHED,
    CRASHED_AFTER_REQUESTS,
    CRASHED_AFTER_UPTIME,
    PAUSED_WORKER_RESUMED,
    PAUSED_WORKER_KILLED,
    PAUSED_WORKER_RAN_PENDING_TERM,
    WEDGED_DRAIN_KILLED,
    EXITED_DURING_DRAIN,
    SPAWN_FAILURE_HANDLED,
    CONTROL_WRITE_FAILED_ENDED,
    FRAME_IN_PIECES_DECODED,
    BACKLOG_WAITED_OUT_EMFILE,
    CLOCK_JUMP_NOTICED,
    UPLOAD_ENOSPC_CLEANED,
    RENAME_FAILED_CLEANED,
    DAV_LOCK_OUTLIVED_GRANTER,
    COMMIT_REACHED_DOOMED_WORKER,
    DIED_WITH_PREPARED_IN_FLIGHT,
    DIED_WITH_READY_IN_FLIGHT,
    ENDED_WITH_READY_IN_FLIGHT,
    CLIENT_BEFORE_ORPHAN_EOF,
    CRASH_HIT_RELOAD_CANDIDATE,
    RELOAD_REJECTED,
    RELOAD_COMMITTED,
    QUIC_TRAILING_SOCKETS_CLOSED,
    QUIC_SOCKET_KEPT_UNTIL_REAPED,
    PORT_BUSY_RELOAD_REJECTED,
    LISTENERS_MOVED,
    CANDIDATE_OWN_TIMINGS,
    RESUMED_WITH_OVERDUE_BEATS,
    LIMIT_FAILED_COMMITTED_SERVICE,
    SPAWN_RETRIED,
    SPAWN_FAILURES_FAILED_SERVICE,
    WRITE_FAILED_ON_BROKER_REPLY,
    HEARTBEAT_IN_PIECES,
    EVERY_WORKER_OUT_OF_DESCRIPTORS,
    HUNG_ACROSS_CLOCK_JUMP_KILLED,
    DAV_REFUSED_ELSEWHERE,
    DAV_TOKEN_WRITE_ELSEWHERE,
    DAV_TABLE_SATURATED,
    DAV_JOURNAL_REFUSED,
    DAV_LOCK_CONFLICT,
    DAV_LOCK_REFRESHED,
    DAV_LOCK_UNLOCKED,
    DAV_LOCK_EXPIRED,
    DAV_STALE_TOKEN_REFUSED,
    CA_MISISSUED,
    WORKER_STARTED_WITH_RENEWED_IDENTITY,
    DAV_TREE_KILL_SWEPT,
    DAV_TREE_KILLED_BEFORE[0],
    DAV_TREE_KILLED_BEFORE[1],
    DAV_TREE_KILLED_BEFORE[2],
    DAV_TREE_KILLED_BEFORE[3],
    DAV_TREE_KILLED_BEFORE[4],
    DAV_TREE_KILLED_BEFORE[5],
    DAV_TREE_KILLED_BEFORE[6],
    DAV_TREE_KILLED_BEFORE[7],
    DAV_TREE_KILLED_BEFORE[8],
    DAV_TREE_KILLED_BEFORE[9],
    DAV_TREE_KILLED_BEFORE[10],
    DAV_TREE_KILLED_BEFORE[11],
    DAV_TREE_KILLED_BEFORE[12],
    DAV_TREE_KILLED_BEFORE[13],
    DAV_TREE_KILLED_BEFORE[14],
    DAV_TREE_KILLED_BEFORE[15],
    CHUNK_KILL_SWEPT,
    CHUNK_STALE_DISCARDED,
    CHUNK_TAKEN_OVER,
    CHUNK_KILLED_BEFORE[0],
    CHUNK_KILLED_BEFORE[1],
    CHUNK_KILLED_BEFORE[2],
    CHUNK_KILLED_BEFORE[3],
    CHUNK_KILLED_BEFORE[4],
    CHUNK_KILLED_BEFORE[5],
    CHUNK_KILLED_BEFORE[6],
    CHUNK_KILLED_BEFORE[7],
    CHUNK_KILLED_BEFORE[8],
    CHUNK_KILLED_BEFORE[9],
    CHUNK_KILLED_BEFORE[10],
    CHUNK_KILLED_BEFORE[11],
    CHUNK_KILLED_BEFORE[12],
    CHUNK_KILLED_BEFORE[13],
    CHUNK_KILLED_BEFORE[14],
    CHUNK_KILLED_BEFORE[15],
    CHUNK_KILLED_BEFORE[16],
    CHUNK_KILLED_BEFORE[17],
    CHUNK_KILLED_BEFORE[18],
    CHUNK_KILLED_BEFORE[19],
    CHUNK_KILLED_BEFORE[20],
    CHUNK_KILLED_BEFORE[21],
];
