#!/usr/bin/env bash
# Broker figures for docs/benchmarks.md ("Broker"), loopback only, bounded in time:
#  1. lease acquire + release round trip over the real control channel, measured inside a
#     real worker (SERVERY_BENCH_BROKER=N: the worker times N awaited AcquireLease +
#     ReleaseLease pairs through the parent's driver loop and prints the distribution);
#     and, as the peer, the floor: io-real/examples/socketpair_rtt.rs;
#  2. upload throughput (wrk, 64 KiB PUTs) with --workers 1 and --workers 2.
# Usage: scripts/bench-broker.sh [ROUNDS] [SECONDS]   (needs wrk; builds --release)
#
# SERVERY_BENCH_BROKER is a test hook: only a build with the `test-hooks` feature reads
# it. The release build here is the documented one plus that feature, in its own target
# directory (target/hooks), so the shipped binary's path never holds a build with hooks.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${1:-20000}"
SECONDS_RUN="${2:-8}"
BIN="$(CARGO_TARGET_DIR=target/hooks scripts/release_binary.py --bin servery --features test-hooks)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

wait_line() { # file pattern bound
    local end=$((SECONDS + $3))
    until grep -q "$2" "$1"; do
        ((SECONDS < end)) || { echo "timed out waiting for $2" >&2; cat "$1" >&2; return 1; }
        sleep 0.1
    done
}

# The peer: the cheapest round trip between two processes on this machine (blocking
# reads on a socketpair, no runtime, no broker), measured in the same session.
RTT_PEER="$(scripts/release_binary.py --example socketpair_rtt)"
for pairs in 1 2; do
    echo "== floor: $pairs pair(s) of processes ping-ponging 64 bytes over a socketpair ($ROUNDS rounds each)"
    "$RTT_PEER" "$ROUNDS" "$pairs"
done
# servery's own shape: one parent thread answering every worker from one poll loop.
for clients in 1 2; do
    echo "== floor, star: one poll loop answering $clients child process(es) ($ROUNDS rounds each)"
    "$RTT_PEER" "$ROUNDS" "$clients" --star
done

for workers in 1 2; do
    # With 2 workers on 2 CPUs each worker runs a single-threaded runtime (the production
    # shape for workers >= CPUs), and both time their round trips at once.
    echo "== broker round trip ($ROUNDS rounds per worker, --workers $workers)"
    mkdir -p "$WORK/rtt$workers"
    SERVERY_BENCH_BROKER="$ROUNDS" "$BIN" "$WORK/rtt$workers" --port 0 --workers "$workers" \
        --control-socket "$WORK/rtt$workers.sock" >"$WORK/rtt$workers.out" 2>"$WORK/rtt$workers.err" &
    for ((i = 1; i <= workers; i++)); do
        wait_line "$WORK/rtt$workers.err" "broker-bench worker=$i " 120
    done
    grep -o "broker-bench.*" "$WORK/rtt$workers.err"
    "$BIN" ctl --socket "$WORK/rtt$workers.sock" stop >/dev/null
    wait
done

for workers in 1 2; do
    echo "== upload throughput, --workers $workers (wrk -t2 -c8 -d${SECONDS_RUN}s, 64 KiB PUT)"
    mkdir -p "$WORK/up$workers/up"
    "$BIN" "$WORK/up$workers" --port 0 --workers "$workers" --upload --allow-overwrite \
        --control-socket "$WORK/up$workers.sock" >"$WORK/up$workers.out" 2>"$WORK/up$workers.err" &
    wait_line "$WORK/up$workers.out" "servery: ready" 30
    url=$(grep -o "http://[0-9.:]*/" "$WORK/up$workers.out" | head -1)
    wrk -t2 -c8 -d"${SECONDS_RUN}s" -s scripts/bench-upload.lua "$url" -- 65536 |
        grep -E "Requests/sec|Transfer/sec|Non-2xx|Latency"
    "$BIN" ctl --socket "$WORK/up$workers.sock" stop >/dev/null
    wait
done
