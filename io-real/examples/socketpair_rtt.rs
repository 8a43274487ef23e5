//! The floor under the broker round trip: two processes ping-ponging a 64-byte message over
//! a Unix socketpair with blocking reads and writes — no runtime, no framing, no broker.
//! `scripts/bench-broker.sh` runs it in the same session as the real round trip so the
//! broker figure is reported against what this machine's process wake-ups cost at all.
//!
//! Usage: `cargo run --release --example socketpair_rtt -- [ROUNDS] [PAIRS] [--star]` —
//! PAIRS parent threads, each with its own child process, time their rounds at once (as the
//! workers of `servery --workers N` do). With `--star` the shape is servery's own: one
//! parent thread answers every child from a single poll loop (as the parent's driver
//! thread answers every worker), and the PAIRS children time their rounds at once.
#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MESSAGE: usize = 64;
const ECHO_ARG: &str = "--echo";
const STAR_ARG: &str = "--star";
const TIME_ARG: &str = "--time";

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    match args.next().as_deref() {
        Some(ECHO_ARG) => echo(),
        Some(TIME_ARG) => {
            let rounds = args
                .next()
                .and_then(|r| r.parse().ok())
                .unwrap_or(20_000usize);
            let channel = UnixStream::from(std::io::stdin().as_fd().try_clone_to_owned()?);
            let times = time_rounds_on(channel, rounds)?;
            let pair = args.next().unwrap_or_default();
            report(&pair, rounds, times);
            Ok(())
        }
        rounds => {
            let rounds = rounds.and_then(|r| r.parse().ok()).unwrap_or(20_000usize);
            let pairs = args.next().and_then(|p| p.parse().ok()).unwrap_or(1usize);
            if args.next().as_deref() == Some(STAR_ARG) {
                return star(rounds, pairs.max(1));
            }
            let timers: Vec<_> = (0..pairs.max(1))
                .map(|_| std::thread::spawn(move || time_rounds(rounds)))
                .collect();
            for (pair, timer) in timers.into_iter().enumerate() {
                let times = timer
                    .join()
                    .map_err(|_| std::io::Error::other("a timing thread panicked"))??;
                report(&(pair + 1).to_string(), rounds, times);
            }
            Ok(())
        }
    }
}

fn report(pair: &str, rounds: usize, mut times: Vec<Duration>) {
    times.sort_unstable();
    let pct = |p: usize| times[(times.len() * p / 100).min(times.len() - 1)].as_secs_f64() * 1e6;
    println!(
        "socketpair-rtt pair={pair} rounds={rounds} rtt_us median={:.1} p99={:.1}",
        pct(50),
        pct(99)
    );
}

/// One thread answers every child from one poll loop; the children time.
fn star(rounds: usize, clients: usize) -> std::io::Result<()> {
    let mut poll = mio::Poll::new()?;
    let mut channels = Vec::new();
    let mut children = Vec::new();
    for client in 0..clients {
        let (ours, theirs) = UnixStream::pair()?;
        children.push(
            Command::new(std::env::current_exe()?)
                .args([TIME_ARG, &rounds.to_string(), &(client + 1).to_string()])
                .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
                .spawn()?,
        );
        ours.set_nonblocking(true)?;
        let mut ours = mio::net::UnixStream::from_std(ours);
        poll.registry()
            .register(&mut ours, mio::Token(client), mio::Interest::READABLE)?;
        channels.push(Some(ours));
    }
    let mut events = mio::Events::with_capacity(16);
    let mut buf = [0u8; MESSAGE * 16];
    while channels.iter().any(Option::is_some) {
        poll.poll(&mut events, None)?;
        for event in &events {
            let Some(channel) = channels[event.token().0].as_mut() else {
                continue;
            };
            // Read until it would block (edge-triggered), echoing what came.
            loop {
                match channel.read(&mut buf) {
                    Ok(0) => {
                        channels[event.token().0] = None;
                        break;
                    }
                    Ok(n) => write_all_blocking(channel, &buf[..n])?,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e),
                }
            }
        }
    }
    for mut child in children {
        child.wait()?;
    }
    Ok(())
}

/// Echoes are 64 bytes into an empty socket buffer: a short write would mean the child
/// stopped reading, and then spinning until it reads again is what the floor should pay.
fn write_all_blocking(channel: &mut mio::net::UnixStream, mut data: &[u8]) -> std::io::Result<()> {
    while !data.is_empty() {
        match channel.write(data) {
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::yield_now(),
            Err(e) => return Err(e),
        }
    }
    Ok(())
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
    let (ours, theirs) = UnixStream::pair()?;
    let mut child = Command::new(std::env::current_exe()?)
        .arg(ECHO_ARG)
        .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
        .spawn()?;
    let times = time_rounds_on(ours, rounds)?;
    child.wait()?;
    Ok(times)
}

/// Times `rounds` round trips over `ours` (after a warm-up), then closes it.
fn time_rounds_on(mut ours: UnixStream, rounds: usize) -> std::io::Result<Vec<Duration>> {
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
    Ok(times)
}
