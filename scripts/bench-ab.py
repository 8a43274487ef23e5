#!/usr/bin/env python3
"""A/B comparison of servery binaries (and optionally nginx), runs interleaved.

On a shared two-core machine a single run of a row moves by ±20 %; alternating the
servers round by round and taking medians puts them under the same neighbours' load.

    scripts/bench-ab.py [OLD_BINARY NEW_BINARY ...] [--servery-args ARGS]... [--nginx]
                        [--nginx-deferred] [--nginx-access-log] [--peer NAME]... [--rounds 5]
                        [--seconds 3] [--tests 1k,100k,churn,64m] [--workers 2]
                        [--wait-load 1.0] [--root-link]

Without binaries it measures the release build (scripts/release_binary.py, built if
stale). --peer takes a name prefix of a peer bench-http.py knows (static-web-server,
caddy, …). --root-link serves servery the directory through a symbolic link
(`{tmp}/site/current -> {tmp}/www`), as a deploy by link flip does: each request then
follows the link (decision 0058). The served-root benchmark (docs/benchmarks.md):

    scripts/bench-ab.py OLD NEW --root-link --tests 1k,churn --rounds 7 --seconds 3

--servery-args (repeatable) runs every binary once per ARGS, with ARGS added to its
command line (split like a shell would; "" is the plain server). `{tmp}` in ARGS is the
run's temporary directory, removed at the end. When ARGS has `--access-log PATH`, the
lines the file gained over each server's life are checked against the requests wrk
reported (see "Access log" in docs/benchmarks.md). --nginx-access-log adds nginx
(2 workers) writing the `combined` log with `access_log PATH buffer=64k`, checked the same
way. The access-log benchmark (docs/benchmarks.md):

    scripts/bench-ab.py --servery-args "" \\
        --servery-args "--access-log {tmp}/combined.log" \\
        --servery-args "--access-log {tmp}/json.log --access-log-format json" \\
        --nginx-access-log --nginx --tests 1k --rounds 7 --seconds 3 --wait-load 1.0

Prints, per test and server, the median req/s, server CPU µs per request (whole process
tree) and the client's (wrk's) CPU µs per request, and each round's figures; then each
server's median req/s as a ratio of every other's. When the client is the bottleneck (a
new connection per request), what the server makes its client spend decides req/s as
much as its own CPU does. Loopback only; every run bounded in time.
"""
import argparse
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, NamedTuple, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import importlib

bench = importlib.import_module("bench-http")
from release_binary import release_binary

TESTS = {
    # name: (file, connections, new connection per request)
    "1k": ("1k.bin", 64, False),
    "100k": ("100k.bin", 64, False),
    "churn": ("1k.bin", 32, True),
    "64m": ("64m.bin", 4, False),
}


class _KeepOutput:
    """Stands in for bench-http.py's `subprocess` during one `wrk()` call and keeps wrk's
    output: that helper returns rates, and the log check needs wrk's request count."""

    def __init__(self):
        self.stdout = ""

    def __getattr__(self, name):
        return getattr(subprocess, name)

    def run(self, *args, **kwargs):
        done = subprocess.run(*args, **kwargs)
        self.stdout = done.stdout or ""
        return done


def wrk(url, seconds, conns, close, pid):
    """bench-http.py's wrk(), plus "requests": how many wrk counted."""
    keep = _KeepOutput()
    bench.subprocess = keep
    try:
        res = bench.wrk(url, seconds, conns, close=close, pid=pid)
    finally:
        bench.subprocess = subprocess
    res["requests"] = int(re.search(r"(\d+) requests in", keep.stdout).group(1))
    return res


def load1():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def wait_for_load(below, bound):
    """Polls the 1-minute load average until it is below `below`, at most `bound` s."""
    start = time.time()
    while load1() >= below and time.time() - start < bound:
        print(f"load {load1():.2f} ≥ {below}: waiting ({time.time() - start:.0f} s of at most {bound} s)",
              flush=True)
        time.sleep(15)
    ok = load1() < below
    print(f"load {load1():.2f} after {time.time() - start:.0f} s"
          f"{'' if ok else f' (not below {below}: measuring anyway)'}", flush=True)


def count_lines(path):
    """Lines in a log file (0 when it does not exist yet)."""
    try:
        with open(path, "rb") as f:
            n = 0
            while chunk := f.read(1 << 20):
                n += chunk.count(b"\n")
            return n
    except FileNotFoundError:
        return 0


def access_log_path(args):
    """The file `--access-log PATH` (or `--access-log=PATH`) names, if any but stdout."""
    for i, arg in enumerate(args):
        if arg == "--access-log" and i + 1 < len(args):
            path = args[i + 1]
        elif arg.startswith("--access-log="):
            path = arg.split("=", 1)[1]
        else:
            continue
        return None if path == "-" else path
    return None


def nginx_logging(root, port, tmp, log):
    """nginx (2 workers, as bench-http's) writing the `combined` log to `log` through a
    64 KiB buffer per worker (written when full, and at exit)."""
    srv = bench.nginx_server(root, port, tmp)
    if srv is None:
        return None
    # A configuration of its own in the same directory: nginx hands its temporary paths
    # (`tmp` here) to its unprivileged workers, which is what lets them reach `root`.
    plain = srv.cmd[-1]
    conf = os.path.join(tmp, "nginx-access-log.conf")
    with open(plain) as f:
        text = f.read()
    if "access_log off;" not in text or f"pid {plain}.pid;" not in text:
        sys.exit("bench-http.py's nginx configuration changed; update nginx_logging()")
    with open(conf, "w") as f:
        f.write(text.replace("access_log off;", f"access_log {log} combined buffer=64k;")
                .replace(f"pid {plain}.pid;", f"pid {conf}.pid;"))
    srv.cmd[-1] = conf
    srv.name = "nginx (2 workers, access_log buffer=64k)"
    return srv


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binaries", nargs="*",
                    help="servery binaries to compare (default: the release build)")
    ap.add_argument("--servery-args", action="append", default=None, metavar="ARGS",
                    help="run every binary with these extra arguments (repeatable; \"\" for "
                         "none; {tmp} is the run's temporary directory)")
    ap.add_argument("--nginx", action="store_true", help="also run nginx (2 workers)")
    ap.add_argument("--nginx-deferred", action="store_true",
                    help="also run nginx with `listen ... deferred` (TCP_DEFER_ACCEPT, as servery)")
    ap.add_argument("--nginx-access-log", action="store_true",
                    help="also run nginx with `access_log {tmp}/nginx.log combined buffer=64k`")
    ap.add_argument("--peer", action="append", default=[],
                    help="also run the installed peer whose name starts with this")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--tests", default="1k,churn")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--wait-load", type=float, metavar="LOAD",
                    help="first wait (at most --wait-load-bound s) until the 1-minute load "
                         "average is below LOAD")
    ap.add_argument("--wait-load-bound", type=int, default=600)
    ap.add_argument("--root-link", action="store_true",
                    help="serve servery the directory through a symbolic link, as a deploy "
                         "by link flip does")
    a = ap.parse_args()
    tests = a.tests.split(",")
    for t in tests:
        if t not in TESTS:
            sys.exit(f"unknown test {t}; known: {', '.join(TESTS)}")
    if not shutil.which("wrk"):
        sys.exit("wrk is not installed (apt-get install wrk)")
    if (a.nginx or a.nginx_deferred or a.nginx_access_log) and not shutil.which("nginx"):
        sys.exit("nginx is not installed (apt-get install nginx-light)")
    binaries = a.binaries or [release_binary()]
    variants = a.servery_args if a.servery_args is not None else [""]
    tmp = tempfile.mkdtemp(prefix="servery-ab-")
    try:
        run(a, tests, binaries, variants, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class Entry(NamedTuple):
    name: str
    make: Callable
    port: int
    log: Optional[str] = None  # the access-log file, checked after each run
    ctl: Optional[str] = None  # a servery binary, to ask for the requests its workers counted


def servery_requests(binary, port, bound=6.0):
    """The requests servery's workers served, from `servery ctl status` (counts reach the
    parent with heartbeats, every second by default): polled until two readings a
    heartbeat apart agree. None when status cannot be read."""
    end, last = time.time() + bound, None
    while time.time() < end:
        out = subprocess.run([binary, "ctl", "--port", str(port), "status"],
                             capture_output=True, text=True, timeout=10).stdout
        rows = [line.split() for line in out.splitlines() if re.match(r"w\d+\s", line)]
        now = sum(int(r[-2]) for r in rows) if rows else None
        if now is not None and now == last:
            return now
        last = now
        time.sleep(1.1)
    return None


def run(a, tests, binaries, variants, tmp):
    # Copies, so that a rebuild during the run (cargo replaces the file) cannot change
    # what the later rounds measure.
    copies = []
    for i, binary in enumerate(binaries):
        os.makedirs(os.path.join(tmp, f"bin{i}"))
        copies.append(shutil.copy2(binary, os.path.join(tmp, f"bin{i}", os.path.basename(binary))))
    binaries = copies
    root = os.path.join(tmp, "www")
    os.makedirs(root)
    files = [("1k.bin", 1024), ("100k.bin", 100 * 1024)]
    if "64m" in tests:
        files.append(("64m.bin", 64 * 1024 * 1024))
    for name, size in files:
        with open(os.path.join(root, name), "wb") as f:
            f.write(os.urandom(size))
    bench.let_settle([os.path.join(root, name) for name, _ in files])
    servery_root = root
    if a.root_link:
        os.makedirs(os.path.join(tmp, "site"))
        servery_root = os.path.join(tmp, "site", "current")
        os.symlink(root, servery_root)

    entries = []
    for i, binary in enumerate(binaries):
        for extra in variants:
            port = bench.free_port()
            args = shlex.split(extra.replace("{tmp}", tmp))
            log = access_log_path(args)
            entries.append(Entry(
                f"{i}:{os.path.basename(binary)}" + (f" {extra}" if extra.strip() else ""),
                lambda b=binary, p=port, x=args, d=servery_root: bench.Server(
                    "servery", [b, "--workers", str(a.workers), "--port", str(p), d, *x], p),
                port, log, binary if log else None))
    if a.nginx_access_log:
        port = bench.free_port()
        log = os.path.join(tmp, "nginx.log")
        entries.append(Entry("nginx access_log buffer=64k",
                             lambda p=port: nginx_logging(root, p, tmp, log), port, log))
    if a.nginx:
        port = bench.free_port()
        entries.append(Entry("nginx", lambda p=port: bench.nginx_server(root, p, tmp), port))
    if a.nginx_deferred:
        port = bench.free_port()
        entries.append(Entry("nginx deferred",
                             lambda p=port: bench.nginx_server(root, p, tmp, deferred=True), port))
    chosen_peers = [s for s in bench.peers(root, tmp)
                    if any(s.name.startswith(want) for want in a.peer)]
    missing = [w for w in a.peer if not any(s.name.startswith(w) for s in chosen_peers)]
    if missing:
        sys.exit(f"not installed: {', '.join(missing)}")
    for peer in chosen_peers:
        entries.append(Entry(peer.name, lambda s=peer: s, peer.port))
    width = max(24, *(len(e.name) for e in entries))

    if a.wait_load is not None:
        wait_for_load(a.wait_load, a.wait_load_bound)
    load0, loads = load1(), []
    results, checks = {}, []
    for r in range(a.rounds):
        order = list(entries)
        if r % 2:
            order.reverse()
        for e in order:
            before = count_lines(e.log) if e.log else 0
            requests, in_flight, served = 0, 0, None
            with e.make() as srv:
                pid = srv.proc.pid
                for t in tests:
                    file, conns, close = TESTS[t]
                    res = wrk(f"http://127.0.0.1:{e.port}/{file}", a.seconds, conns,
                              close=close, pid=pid)
                    loads.append(load1())
                    results.setdefault((t, e.name), []).append(res)
                    requests += res["requests"]
                    # When wrk stops, each of its connections may have a request out that
                    # the server answers (and logs) but wrk no longer counts.
                    in_flight += conns
                    print(f"round {r} {t:6} {e.name:{width}} {res['rps']:10.1f} req/s "
                          f"{res['cpu_us']:6.1f} µs/req  client {res['client_us']:6.1f} µs/req "
                          f"{res['socket_errors']}", flush=True)
                if e.ctl:
                    served = servery_requests(e.ctl, e.port)
            if e.log:
                # Counted once the server has stopped: servery's workers send what they
                # hold and its parent writes its queue out; nginx writes its buffers out.
                total = count_lines(e.log) - before
                # Less the one request of bench-http.py's readiness check.
                lines = total - 1
                ok_wrk = 0 <= lines - requests <= in_flight
                ok_served = served is None or total == served
                checks.append((r, e.name, lines, requests, in_flight, total, served,
                               ok_wrk and ok_served))
                print(f"round {r} log    {e.name:{width}} {lines} lines, wrk counted {requests} "
                      f"requests ({lines - requests:+d}; up to {in_flight} in flight at its stop)"
                      + ("" if served is None else
                         f"; {total} lines with the readiness check, servery served {served}")
                      + ("" if ok_wrk and ok_served else "  MISMATCH"), flush=True)
    load_after = load1()

    print()
    print(f"medians of {a.rounds} rounds, {a.seconds} s each, --workers {a.workers}; "
          f"1-minute load {load0:.2f} before, {load_after:.2f} after, "
          f"{min(loads):.2f}–{max(loads):.2f} after each wrk run")
    medians = {}
    for t in tests:
        for e in entries:
            rows = results[(t, e.name)]
            medians[(t, e.name)] = statistics.median(r["rps"] for r in rows)
            print(f"{t:6} {e.name:{width}} {medians[(t, e.name)]:10.1f} req/s "
                  f"{statistics.median(r['cpu_us'] for r in rows):6.1f} µs/req  client "
                  f"{statistics.median(r['client_us'] for r in rows):6.1f} µs/req")
    if len(entries) > 1:
        names = [e.name for e in entries]
        for t in tests:
            print()
            print(f"{t}: median req/s of the row / of the column")
            print(" " * width + "".join(f" {f'[{j}]':>7}" for j in range(len(names))))
            for row in names:
                cells = "".join(f" {medians[(t, row)] / medians[(t, col)]:6.3f}×" for col in names)
                print(f"{row:{width}}{cells}")
            print("columns: " + "; ".join(f"[{j}] {n}" for j, n in enumerate(names)))
    if checks:
        bad = [c for c in checks if not c[7]]
        print()
        print(f"access-log lines: {len(checks)} server runs checked, "
              + (f"{len(bad)} MISMATCHED" if bad else "all consistent")
              + " (lines = wrk's count + requests in flight at its stop; "
              "with the readiness check = what servery's workers served)")
        for r, name, lines, requests, _, total, served, _ in bad:
            print(f"  MISMATCH round {r} {name}: {lines} lines, wrk counted {requests}; "
                  f"{total} lines with the readiness check, servery served {served}")


if __name__ == "__main__":
    main()
