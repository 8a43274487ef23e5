//! The one module that calls the OS directly, for what neither std nor rustix offers (and
//! the few calls through rustix that belong with them, such as the CPU affinity).
//! Every `unsafe` block here says why it is sound; the rest of the crate denies `unsafe`.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::AsFd;

/// `setsockopt(socket, level, name, value)` with `value`'s size as the option length.
///
/// # Safety
/// `value` must be the type the kernel expects for `level`/`name`, and every pointer it
/// holds must point at memory that is valid, initialised and large enough for the
/// length it declares, for the length of the call. (The descriptor is borrowed for the
/// call, so it stays open; the kernel copies the value and keeps no pointer to it.)
#[cfg(any(target_os = "linux", target_os = "android"))]
unsafe fn set_socket_option<T>(
    socket: impl AsFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let len = libc::socklen_t::try_from(size_of::<T>())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "socket option too large"))?;
    // SAFETY: `value` is a live `T` of exactly `len` bytes; the caller vouches for its type
    // and for whatever it points at.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_fd().as_raw_fd(),
            level,
            name,
            std::ptr::from_ref(value).cast(),
            len,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Have the kernel hand a listener's connection to `accept` only once the client's first
/// bytes have arrived, or after about `seconds` without any (the connection is then
/// accepted as usual, and the header-read timeout takes over).
///
/// A client of this server always speaks first (an HTTP request line, a TLS ClientHello,
/// the HTTP/2 preface), so the only connections this holds back are ones that would sit
/// idle in a worker. What it saves is a wake-up of the serving worker per connection:
/// without it a worker is woken for the accept, sleeps again before the request arrives,
/// and is woken for that too — and on loopback both wake-ups are paid by the client.
/// std's `set_deferaccept` is unstable and rustix has no setter, hence the raw call.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn set_defer_accept(listener: impl AsFd, seconds: u32) -> io::Result<()> {
    let value = libc::c_int::try_from(seconds).unwrap_or(libc::c_int::MAX);
    // SAFETY: TCP_DEFER_ACCEPT takes a `c_int`, which holds no pointer.
    unsafe { set_socket_option(listener, libc::IPPROTO_TCP, libc::TCP_DEFER_ACCEPT, &value) }
}

/// Other systems have no such option (the BSDs' accept filters are set up differently);
/// connections are accepted as soon as they are established.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn set_defer_accept(_listener: impl AsFd, _seconds: u32) -> io::Result<()> {
    Ok(())
}

/// Shows that `listener` defers accepts: a connected, silent client is not accepted; the
/// same client is accepted at once after its first byte, which the accepted socket reads.
#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
pub(crate) fn assert_defers_accept(listener: &std::net::TcpListener) {
    use std::io::{Read, Write};
    use std::time::{Duration, Instant};

    listener.set_nonblocking(true).expect("nonblocking");
    let addr = listener.local_addr().expect("addr");
    let mut client = std::net::TcpStream::connect(addr).expect("connect");
    // The handshake is complete on the client's side; give the loopback final ACK ample
    // time to be processed, then the listener must still have nothing to accept.
    std::thread::sleep(Duration::from_millis(200));
    let err = listener
        .accept()
        .expect_err("accepted a client that sent nothing");
    assert_eq!(err.kind(), io::ErrorKind::WouldBlock);

    client.write_all(b"G").expect("write");
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut accepted = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("not accepted after the first byte: {e}"),
        }
    };
    accepted.set_nonblocking(false).expect("blocking");
    let mut byte = [0u8; 1];
    accepted.read_exact(&mut byte).expect("read");
    assert_eq!(&byte, b"G");
}

#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests {
    use super::*;

    #[test]
    fn a_silent_connection_waits_in_the_kernel_until_it_sends() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        set_defer_accept(&listener, 5).expect("setsockopt");
        assert_defers_accept(&listener);
    }
}

/// `SO_ATTACH_REUSEPORT_CBPF` (asm-generic/socket.h; libc defines it for Android only).
/// MIPS, PA-RISC and SPARC number their socket options differently; the program is not
/// attached there.
#[cfg(all(
    any(target_os = "linux", target_os = "android"),
    not(any(
        target_arch = "mips",
        target_arch = "mips64",
        target_arch = "sparc",
        target_arch = "sparc64"
    ))
))]
const SO_ATTACH_REUSEPORT_CBPF: libc::c_int = 51;

/// Attaches the classic-BPF `program` (opcode, jump-if-true, jump-if-false, constant per
/// instruction) to the reuseport group `socket` belongs to: the kernel runs it on every
/// datagram for the group's address and delivers the datagram to the socket whose index
/// (the order sockets joined the group) it returns, or by its hash for an index past the
/// end. The socket must already be bound; every socket of the group shares the program,
/// including those bound later.
#[cfg(all(
    any(target_os = "linux", target_os = "android"),
    not(any(
        target_arch = "mips",
        target_arch = "mips64",
        target_arch = "sparc",
        target_arch = "sparc64"
    ))
))]
pub fn attach_reuseport_cbpf(socket: impl AsFd, program: &[(u16, u8, u8, u32)]) -> io::Result<()> {
    let mut filter: Vec<libc::sock_filter> = program
        .iter()
        .map(|&(code, jt, jf, k)| libc::sock_filter { code, jt, jf, k })
        .collect();
    let len = u16::try_from(filter.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "BPF program too long"))?;
    let fprog = libc::sock_fprog {
        len,
        filter: filter.as_mut_ptr(),
    };
    // SAFETY: SO_ATTACH_REUSEPORT_CBPF takes a `sock_fprog`, whose `filter` points at `len`
    // initialised instructions in `filter`, which outlives the call. The kernel checks and
    // copies the program during the call and keeps no pointer to our memory.
    unsafe { set_socket_option(socket, libc::SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &fprog) }
}

/// Elsewhere there is no reuseport program: the kernel's hash alone picks the socket.
#[cfg(not(all(
    any(target_os = "linux", target_os = "android"),
    not(any(
        target_arch = "mips",
        target_arch = "mips64",
        target_arch = "sparc",
        target_arch = "sparc64"
    ))
)))]
pub fn attach_reuseport_cbpf(
    _socket: impl AsFd,
    _program: &[(u16, u8, u8, u32)],
) -> io::Result<()> {
    Ok(())
}

/// A listening socket the service manager passed us (systemd socket activation), with
/// the name `LISTEN_FDNAMES` gave it (`FileDescriptorName=`, default `unknown`).
#[derive(Debug)]
pub struct InheritedListener {
    pub listener: std::net::TcpListener,
    pub name: String,
}

/// The listening sockets passed by a service manager (`LISTEN_FDS`, `LISTEN_PID`,
/// `LISTEN_FDNAMES`, read by `sd-notify`), taken over as owned listeners; empty when none
/// were passed to this process. The variables are removed, so workers never see them.
/// Must be called before any thread is started (it changes the environment).
///
/// Each must be a listening TCP socket: anything else is an error naming it.
pub fn inherited_listeners() -> io::Result<Vec<InheritedListener>> {
    use std::os::fd::{FromRawFd, OwnedFd};
    // Without LISTEN_PID, or with one that is not ours, nothing was passed to us.
    let passed = sd_notify::listen_fds_with_names(true)?;
    let mut listeners = Vec::new();
    for (fd, name) in passed {
        // SAFETY: sd_listen_fds' protocol hands this process the descriptors from 3 up to
        // 3 + LISTEN_FDS, open and owned by nobody else in it (it checked LISTEN_PID is
        // ours); each is taken over once, here, and nothing else in servery refers to it.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        let listening = rustix::net::sockopt::socket_acceptconn(&owned).unwrap_or(false);
        let stream = rustix::net::sockopt::socket_type(&owned)
            .is_ok_and(|t| t == rustix::net::SocketType::STREAM);
        let inet = rustix::net::sockopt::socket_domain(&owned).is_ok_and(|d| {
            d == rustix::net::AddressFamily::INET || d == rustix::net::AddressFamily::INET6
        });
        if !(listening && stream && inet) {
            return Err(io::Error::other(format!(
                "the passed descriptor {fd} ({name}) is not a listening TCP socket"
            )));
        }
        listeners.push(InheritedListener {
            listener: std::net::TcpListener::from(owned),
            name,
        });
    }
    Ok(listeners)
}

/// The CPUs this process may run on (`sched_getaffinity`): what `taskset` and the
/// cgroup's cpuset leave it, which `worker_cpu_affinity = auto` shares out among the
/// application workers (decision 0122). Through rustix: no `unsafe` here.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn allowed_cpus() -> io::Result<servery_core::cpu_affinity::CpuSet> {
    let set = rustix::thread::sched_getaffinity(None)?;
    let max = rustix::thread::CpuSet::MAX_CPU.min(servery_core::cpu_affinity::MAX_CPUS as usize);
    Ok(servery_core::cpu_affinity::CpuSet::new(
        (0..max)
            .filter(|&cpu| set.is_set(cpu))
            .filter_map(|cpu| u32::try_from(cpu).ok()),
    ))
}

/// Elsewhere the CPUs are not known, and no worker is pinned.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn allowed_cpus() -> io::Result<servery_core::cpu_affinity::CpuSet> {
    Ok(servery_core::cpu_affinity::CpuSet::default())
}

/// Keep the calling thread, and every thread it starts from now on, to `cpus`
/// (`sched_setaffinity` of the caller; threads inherit it). A worker calls it before its
/// runtime or its interpreter starts a thread, so the whole process is held to them.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn pin_to_cpus(cpus: &servery_core::cpu_affinity::CpuSet) -> io::Result<()> {
    let mut set = rustix::thread::CpuSet::new();
    for &cpu in cpus.as_slice() {
        let cpu = usize::try_from(cpu).unwrap_or(usize::MAX);
        if cpu >= rustix::thread::CpuSet::MAX_CPU {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "CPU {cpu} is beyond the {} a set holds",
                    rustix::thread::CpuSet::MAX_CPU
                ),
            ));
        }
        set.set(cpu);
    }
    Ok(rustix::thread::sched_setaffinity(None, &set)?)
}

/// Elsewhere a worker runs where the system puts it.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn pin_to_cpus(_cpus: &servery_core::cpu_affinity::CpuSet) -> io::Result<()> {
    Ok(())
}

/// Schedule the calling thread, and every thread it starts from now on, as SCHED_BATCH:
/// woken, it does not preempt the thread running on its CPU (decision 0129). A worker
/// calls it before its runtime or its interpreter starts a thread. No privilege is
/// needed: the policy only lowers the thread's claim, and its nice value is kept.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn schedule_as_batch() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 names the calling thread; `param` is a live `sched_param` the kernel
    // only reads during the call.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &raw const param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Elsewhere the system's scheduling stays as it is.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn schedule_as_batch() -> io::Result<()> {
    Ok(())
}

/// Give the allocator's free pages back to the system: glibc keeps memory a burst of
/// connections freed (in every thread's arena, and in the middle of a heap, where its own
/// trimming at the top never reaches), so a worker's resident set stays at its peak. Only
/// glibc has the call; other allocators return memory on their own or not at all.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn release_free_heap() {
    // SAFETY: malloc_trim takes a size, no pointer, and changes nothing but the
    // allocator's own state, under the locks of its arenas; it may be called from any
    // thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Without glibc there is nothing to ask.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn release_free_heap() {}

/// Show `title` for this process in `ps` and `top`: as its command line (`ps -f`,
/// `/proc/PID/cmdline`), within the room the original arguments took, and its first 15
/// bytes as its name (`ps -e`, `top`), as nginx and PostgreSQL name their processes.
/// Rust offers no pointer to the arguments, so the bytes are written through
/// `/proc/self/mem` at the addresses `/proc/self/stat` gives (no `unsafe`: the kernel
/// checks the range). The space after the title is zeroed, so every argument the standard
/// library may still point at stays a terminated (now empty) string.
#[cfg(target_os = "linux")]
pub fn set_process_title(title: &str) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "unexpected /proc/self/stat");
    // Fields after the command name (which may hold spaces and parentheses) start with the
    // state, field 3; arg_start and arg_end are fields 48 and 49 (proc(5)).
    let after = stat.rsplit_once(')').ok_or_else(bad)?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |n: usize| -> io::Result<u64> {
        fields
            .get(n - 3)
            .and_then(|f| f.parse().ok())
            .ok_or_else(bad)
    };
    let (start, end) = (field(48)?, field(49)?);
    let room = usize::try_from(end.saturating_sub(start)).map_err(|_| bad())?;
    if room < 2 {
        return Err(bad());
    }
    let mut shown = truncated(title, room - 1).as_bytes().to_vec();
    shown.resize(room, 0);
    std::fs::OpenOptions::new()
        .write(true)
        .open("/proc/self/mem")?
        .write_all_at(&shown, start)?;
    let name = std::ffi::CString::new(truncated(title, 15)).map_err(|_| bad())?;
    rustix::thread::set_name(&name)?;
    Ok(())
}

/// Elsewhere the process keeps the name it was started with.
#[cfg(not(target_os = "linux"))]
pub fn set_process_title(_title: &str) -> io::Result<()> {
    Ok(())
}

/// `text` cut to at most `max` bytes, at a character boundary.
#[cfg(target_os = "linux")]
fn truncated(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Counters in memory shared between the parent and one worker (the worker's scoreboard,
/// as Apache httpd keeps one per child): the worker adds to them as it serves, and the
/// parent reads them once the worker is gone, so what the worker counted after its last
/// heartbeat is not lost with it when it is killed (`kill -9`, a crash).
///
/// The memory is a sealed memfd mapped shared in both processes and only ever touched
/// as `AtomicU64`s, which every bit pattern is valid for: whatever a worker writes there,
/// the parent reads numbers, never undefined values.
#[derive(Debug)]
pub struct SharedCounters {
    ptr: std::ptr::NonNull<std::sync::atomic::AtomicU64>,
    len: usize,
}

// SAFETY: the mapping is owned by this value alone (unmapped on drop) and is only accessed
// through `&[AtomicU64]`, which is safe to share and send between threads.
unsafe impl Send for SharedCounters {}
// SAFETY: as above: shared access is atomic access.
unsafe impl Sync for SharedCounters {}

impl SharedCounters {
    /// `len` zeroed counters in a new memfd, mapped here, and the descriptor to pass to
    /// the process that will add to them. The memfd is sealed against shrinking: a
    /// worker that truncated it would otherwise make the parent's next read of it a
    /// `SIGBUS`.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub fn create(name: &str, len: usize) -> io::Result<(SharedCounters, std::os::fd::OwnedFd)> {
        use rustix::fs::{MemfdFlags, SealFlags};
        let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
        rustix::fs::ftruncate(&fd, Self::bytes(len)? as u64)?;
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)?;
        let counters = Self::map(&fd, len)?;
        Ok((counters, fd))
    }

    /// Other systems have no memfd: a worker's counts then travel in its heartbeats only.
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    pub fn create(_name: &str, _len: usize) -> io::Result<(SharedCounters, std::os::fd::OwnedFd)> {
        Err(io::ErrorKind::Unsupported.into())
    }

    /// Maps the counters the parent passed: `fd` must hold at least `len` of them (a
    /// descriptor that is not such a memory file is refused, not mapped short).
    pub fn open(fd: &std::os::fd::OwnedFd, len: usize) -> io::Result<SharedCounters> {
        let size = rustix::fs::fstat(fd)?.st_size;
        if u64::try_from(size).unwrap_or(0) < Self::bytes(len)? as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the shared counters are smaller than their layout",
            ));
        }
        Self::map(fd, len)
    }

    fn bytes(len: usize) -> io::Result<usize> {
        len.checked_mul(size_of::<u64>())
            .filter(|b| *b > 0)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no counters to share"))
    }

    fn map(fd: &std::os::fd::OwnedFd, len: usize) -> io::Result<SharedCounters> {
        use std::os::fd::AsRawFd;
        let bytes = Self::bytes(len)?;
        // SAFETY: a fresh shared mapping of `bytes` bytes of `fd` at an address the kernel
        // chooses, overlapping nothing; the file holds at least that many (checked or set
        // by the caller, and sealed against shrinking when created here). The kernel
        // keeps the file referenced while mapped, so `fd` may close after.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if at == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = std::ptr::NonNull::new(at.cast::<std::sync::atomic::AtomicU64>())
            .ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(SharedCounters { ptr, len })
    }

    /// The counters, to add to (relaxed) or read.
    pub fn counters(&self) -> &[std::sync::atomic::AtomicU64] {
        // SAFETY: `ptr` is a page-aligned (so 8-byte aligned) mapping of `len` u64s, live
        // until `self` drops; it is only accessed atomically, and every bit pattern is a
        // valid `AtomicU64`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for SharedCounters {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, of the size it was made with; no reference to
        // it outlives `self` (`counters` borrows `self`).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len * size_of::<u64>());
        }
    }
}

#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod shared_counters_tests {
    use super::SharedCounters;
    use std::sync::atomic::Ordering::Relaxed;

    #[test]
    fn what_one_mapping_adds_the_other_reads_and_a_short_file_is_refused() {
        let (parent, fd) = SharedCounters::create("test-counters", 209).expect("create");
        let worker = SharedCounters::open(&fd, 209).expect("open");
        drop(fd);
        worker.counters()[208].fetch_add(7, Relaxed);
        worker.counters()[0].fetch_add(1, Relaxed);
        drop(worker);
        assert_eq!(parent.counters()[208].load(Relaxed), 7);
        assert_eq!(parent.counters()[0].load(Relaxed), 1);
        assert_eq!(parent.counters()[100].load(Relaxed), 0, "zeroed");
        let (_, fd) = SharedCounters::create("test-short", 8).expect("create");
        assert!(SharedCounters::open(&fd, 209).is_err(), "mapped short");
        assert!(
            rustix::fs::ftruncate(&fd, 0).is_err(),
            "the parent's mapping cannot be cut under it"
        );
    }
}
