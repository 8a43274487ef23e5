//! The floor under the broker round trip: two processes ping-ponging a 64-byte message over
//! a Unix socketpair with blocking reads and writes — no runtime, no framing, no broker.
//! `scripts/bench-broker.sh` runs it in the same session as the real round trip so the
//! broker figure is reported against what this machine's process wake-ups cost at all.
//!
//! Usage: `cargo run --release --example socketpair_rtt -- [ROUNDS] [PAIRS]` — PAIRS
//! parent threads, each with its own child process, time their rounds at once (as the
//! workers of `servery --workers N` do).
#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MESSAGE: usize = 64;
const ECHO_ARG: &str = "--echo";

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    match args.next().as_deref() {
        Some(ECHO_ARG) => echo(),
        rounds => {
            let rounds = rounds.and_then(|r| r.parse().ok()).unwrap_or(20_000usize);
            let pairs = args.next().and_then(|p| p.parse().ok()).unwrap_or(1usize);
            let timers: Vec<_> = (0..pairs.max(1))
                .map(|_| std::thread::spawn(move || time_rounds(rounds)))
                .collect();
            for (pair, timer) in timers.into_iter().enumerate() {
                let mut times = timer
                    .join()
                    .map_err(|_| std::io::Error::other("a timing thread panicked"))??;
                times.sort_unstable();
                let pct = |p: usize| {
                    times[(times.len() * p / 100).min(times.len() - 1)].as_secs_f64() * 1e6
                };
                println!(
                    "socketpair-rtt pair={} rounds={rounds} rtt_us median={:.1} p99={:.1}",
                    pair + 1,
                    pct(50),
                    pct(99)
                );
            }
            Ok(())
        }
    }
}

/// The child: answer every message with itself until the parent closes its end.
fn echo() -> std::io::Result<()> {
    let mut channel = UnixStream::from(std::io::stdin().as_fd().try_clone_to_owned()?);
    let mut buf = [0u8; MESSAGE];
    loop {
        match channel.read_exact(&mut buf) {
            Ok(()) => channel.write_all(&buf)?,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}

fn time_rounds(rounds: usize) -> std::io::Result<Vec<Duration>> {
    let (mut ours, theirs) = UnixStream::pair()?;
    let mut child = Command::new(std::env::current_exe()?)
        .arg(ECHO_ARG)
        .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
        .spawn()?;
    let mut buf = [7u8; MESSAGE];
    let mut round = |buf: &mut [u8; MESSAGE]| -> std::io::Result<Duration> {
        let t0 = Instant::now();
        ours.write_all(buf)?;
        ours.read_exact(buf)?;
        Ok(t0.elapsed())
    };
    for _ in 0..rounds.min(1_000) {
        round(&mut buf)?;
    }
    let times = (0..rounds)
        .map(|_| round(&mut buf))
        .collect::<std::io::Result<Vec<_>>>()?;
    drop(ours);
    child.wait()?;
    Ok(times)
}
