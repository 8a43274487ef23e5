#!/usr/bin/env python3
"""Server CPU per request of servery (one worker) against the floor of its HTTP stack
(io-real/examples/hyper_floor.rs: tokio current-thread + hyper-util, 1 KiB from memory)
and nginx, split into user and kernel time. Keep-alive (c64) and a new connection per
request (c32), interleaved rounds, medians. Loopback only, bounded in time.

    scripts/bench-floor.py [--rounds 6] [--seconds 4]

Builds the example itself (release). Needs wrk; nginx is run when installed.
"""
import argparse
import importlib
import os
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
bench = importlib.import_module("bench-http")
from release_binary import release_binary, release_executable  # noqa: E402


def ticks(pid):
    """utime and stime of one process, in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=int, default=4)
    a = ap.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk is not installed (apt-get install wrk)")
    servery, floor = release_binary(), release_executable("--example", "hyper_floor")
    tmp = tempfile.mkdtemp(prefix="servery-floor-")
    root = os.path.join(tmp, "www")
    os.makedirs(root)
    with open(os.path.join(root, "1k.bin"), "wb") as f:
        f.write(b"x" * 1024)
    bench.let_settle([os.path.join(root, "1k.bin")])

    def servers():
        p = bench.free_port()
        yield bench.Server("servery (1 worker)", [servery, root, "--port", str(p), "--workers", "1"], p)
        p = bench.free_port()
        yield bench.Server("hyper floor (auto)", [floor, str(p)], p)
        p = bench.free_port()
        yield bench.Server("hyper floor (http1)", [floor, str(p), "--http1-only"], p)
        p = bench.free_port()
        nginx = bench.nginx_server(root, p, tmp)
        if nginx:
            yield nginx

    results = {}
    for r in range(a.rounds):
        order = list(servers())
        if r % 2:
            order.reverse()
        for srv in order:
            with srv:
                pids = bench.tree_pids(srv.proc.pid)
                for test, conns, close in (("keep-alive", 64, False), ("churn", 32, True)):
                    before = {p: ticks(p) for p in pids}
                    res = bench.wrk(f"http://127.0.0.1:{srv.port}/1k.bin", a.seconds, conns,
                                    close=close)
                    after = {p: ticks(p) for p in pids}
                    n = res["rps"] * a.seconds
                    tick_us = 1e6 / os.sysconf("SC_CLK_TCK")
                    user = sum(after[p][0] - before[p][0] for p in pids) * tick_us / n
                    kernel = sum(after[p][1] - before[p][1] for p in pids) * tick_us / n
                    results.setdefault((test, srv.name), []).append((res["rps"], user, kernel))
                    print(f"round {r} {test:10} {srv.name:20} {res['rps']:8.0f} req/s "
                          f"user {user:5.1f} kernel {kernel:5.1f} µs/req", flush=True)
    print()
    print(f"medians of {a.rounds} rounds, {a.seconds} s each (server CPU µs per request)")
    for (test, name), rows in results.items():
        rps = statistics.median(x[0] for x in rows)
        user = statistics.median(x[1] for x in rows)
        kernel = statistics.median(x[2] for x in rows)
        print(f"{test:10} {name:20} {rps:8.0f} req/s  user {user:5.1f}  kernel {kernel:5.1f}  "
              f"total {user + kernel:5.1f}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
