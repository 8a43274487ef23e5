//! Ports claimed across test processes, and waiting on an observable condition with a bound.

use std::collections::BTreeSet;
use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A loopback port free on TCP and on UDP now, for a program a test starts that must be
/// told its port. A port the kernel handed out with `bind(0)` and taken back is not safe
/// for that: until the program binds it, the kernel may give the same number to another
/// test's `bind(0)` or to any client connection as its source port (both come from the
/// ephemeral range), and the program then fails with "address in use". So the port is
/// drawn at random from below that range, where neither happens, and checked free on both
/// protocols; only if the range leaves no room below it does this fall back to `bind(0)`.
/// A port is handed out once per test process: two calls whose ports are not bound yet
/// (a CA's three ports) never get the same one; and once per run, since test binaries
/// run side by side (see [`claim_port_across_processes`]).
pub fn free_port() -> u16 {
    use std::hash::BuildHasher;
    use std::net::{TcpListener, UdpSocket};
    static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    const FLOOR: u16 = 10_000;
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    let free = |port: u16| {
        TcpListener::bind(("127.0.0.1", port)).is_ok()
            && UdpSocket::bind(("127.0.0.1", port)).is_ok()
            && HANDED_OUT
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(port)
            && claim_port_across_processes(port)
    };
    if ephemeral_low > FLOOR + 1_000 {
        let span = u64::from(ephemeral_low - FLOOR);
        for _ in 0..1_000 {
            // Each `RandomState` hashes with fresh keys: a draw nobody else repeats.
            let draw = std::collections::hash_map::RandomState::new().hash_one(0u8);
            let port = FLOOR + (draw % span) as u16;
            if free(port) {
                return port;
            }
        }
    }
    (0..100)
        .find_map(|_| {
            let port = TcpListener::bind("127.0.0.1:0")
                .ok()?
                .local_addr()
                .ok()?
                .port();
            free(port).then_some(port)
        })
        .expect("a free port")
}

/// Claims `port` against the other test processes of a run, which may draw the same free
/// number before either program binds it: an advisory lock on a file named after the
/// port, held until this process ends (the kernel drops it then, however the process
/// ends, so a file an earlier run left behind claims nothing).
fn claim_port_across_processes(port: u16) -> bool {
    static HELD: Mutex<Vec<std::fs::File>> = Mutex::new(Vec::new());
    let dir = std::env::temp_dir().join("servery-test-ports");
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    let path = dir.join(port.to_string());
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {
            HELD.lock().unwrap_or_else(|p| p.into_inner()).push(file);
            true
        }
        Err(_) => false,
    }
}

/// Poll `condition` until it yields a value, at most `bound`; returns the value and how
/// long it took. Panics naming `what` when the bound passes.
pub fn wait_until<T>(
    bound: Duration,
    what: &str,
    condition: impl FnMut() -> Option<T>,
) -> (T, Duration) {
    wait_until_or(bound, condition, || format!("waiting for {what}"))
}

/// [`wait_until`], with the panic's message made by `describe` when the bound passes (what
/// was seen meanwhile, say).
pub fn wait_until_or<T>(
    bound: Duration,
    mut condition: impl FnMut() -> Option<T>,
    describe: impl FnOnce() -> String,
) -> (T, Duration) {
    let start = Instant::now();
    loop {
        if let Some(v) = condition() {
            return (v, start.elapsed());
        }
        if start.elapsed() > bound {
            panic!("timed out after {bound:?} {}", describe());
        }
        std::thread::sleep(Duration::from_millis(15));
    }
}

/// A thread appending what `pipe` carries to a shared text until its end of file.
pub fn capture_text(
    mut pipe: impl Read + Send + 'static,
) -> (Arc<Mutex<String>>, std::thread::JoinHandle<()>) {
    let text = Arc::new(Mutex::new(String::new()));
    let sink = Arc::clone(&text);
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    (text, reader)
}
