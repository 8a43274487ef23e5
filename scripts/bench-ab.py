#!/usr/bin/env python3
"""A/B comparison of servery binaries (and optionally nginx), runs interleaved.

On a shared two-core machine a single run of a row moves by ±20 %; alternating the
servers round by round and taking medians puts them under the same neighbours' load.

    scripts/bench-ab.py OLD_BINARY NEW_BINARY [--nginx] [--nginx-deferred] [--peer NAME]... [--rounds 5]
                        [--seconds 3] [--tests 1k,100k,churn,64m] [--workers 2]

--peer takes a name prefix of a peer bench-http.py knows (static-web-server, caddy, …).

Prints, per test and server, the median req/s, server CPU µs per request (whole process
tree) and the client's (wrk's) CPU µs per request, and each round's figures. When the
client is the bottleneck (a new connection per request), what the server makes its client
spend decides req/s as much as its own CPU does. Loopback only; every run bounded in time.
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import importlib

bench = importlib.import_module("bench-http")

TESTS = {
    # name: (file, connections, new connection per request)
    "1k": ("1k.bin", 64, False),
    "100k": ("100k.bin", 64, False),
    "churn": ("1k.bin", 32, True),
    "64m": ("64m.bin", 4, False),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binaries", nargs="+", help="servery binaries to compare")
    ap.add_argument("--nginx", action="store_true", help="also run nginx (2 workers)")
    ap.add_argument("--nginx-deferred", action="store_true",
                    help="also run nginx with `listen ... deferred` (TCP_DEFER_ACCEPT, as servery)")
    ap.add_argument("--peer", action="append", default=[],
                    help="also run the installed peer whose name starts with this")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--tests", default="1k,churn")
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    tests = a.tests.split(",")
    for t in tests:
        if t not in TESTS:
            sys.exit(f"unknown test {t}; known: {', '.join(TESTS)}")
    if not shutil.which("wrk"):
        sys.exit("wrk is not installed (apt-get install wrk)")
    tmp = tempfile.mkdtemp(prefix="servery-ab-")
    root = os.path.join(tmp, "www")
    os.makedirs(root)
    files = [("1k.bin", 1024), ("100k.bin", 100 * 1024)]
    if "64m" in tests:
        files.append(("64m.bin", 64 * 1024 * 1024))
    for name, size in files:
        with open(os.path.join(root, name), "wb") as f:
            f.write(os.urandom(size))
    bench.let_settle([os.path.join(root, name) for name, _ in files])

    def servers():
        for i, binary in enumerate(a.binaries):
            port = bench.free_port()
            yield (f"{i}:{os.path.basename(binary)}",
                   lambda b=binary, p=port: bench.Server(
                       "servery", [b, "--workers", str(a.workers), "--port", str(p), root], p),
                   port)
        if a.nginx:
            port = bench.free_port()
            yield ("nginx", lambda p=port: bench.nginx_server(root, p, tmp), port)
        if a.nginx_deferred:
            port = bench.free_port()
            yield ("nginx deferred", lambda p=port: bench.nginx_server(root, p, tmp, deferred=True), port)
        for peer in chosen_peers:
            yield (peer.name, lambda s=peer: s, peer.port)

    chosen_peers = [s for s in bench.peers(root, tmp)
                    if any(s.name.startswith(want) for want in a.peer)]
    missing = [w for w in a.peer if not any(s.name.startswith(w) for s in chosen_peers)]
    if missing:
        sys.exit(f"not installed: {', '.join(missing)}")
    results = {}
    for r in range(a.rounds):
        order = list(servers())
        if r % 2:
            order.reverse()
        for name, make, port in order:
            with make() as srv:
                pid = srv.proc.pid
                for t in tests:
                    file, conns, close = TESTS[t]
                    res = bench.wrk(f"http://127.0.0.1:{port}/{file}", a.seconds, conns,
                                    close=close, pid=pid)
                    results.setdefault((t, name), []).append(res)
                    print(f"round {r} {t:6} {name:24} {res['rps']:10.1f} req/s "
                          f"{res['cpu_us']:6.1f} µs/req  client {res['client_us']:6.1f} µs/req "
                          f"{res['socket_errors']}", flush=True)
    print()
    print(f"medians of {a.rounds} rounds, {a.seconds} s each, --workers {a.workers}")
    for t in tests:
        for name, _, _ in servers():
            rows = results[(t, name)]
            print(f"{t:6} {name:24} {statistics.median(r['rps'] for r in rows):10.1f} req/s "
                  f"{statistics.median(r['cpu_us'] for r in rows):6.1f} µs/req  client "
                  f"{statistics.median(r['client_us'] for r in rows):6.1f} µs/req")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
