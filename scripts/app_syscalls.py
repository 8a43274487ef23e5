#!/usr/bin/env python3
"""System calls, context switches and CPU per request of the application servers, counted
by the kernel over a fixed number of requests: servery's workers against granian (and the
other peers of scripts/bench_apps.py), on the same applications, in one run.

Requests per second move with whatever else the machine runs; what the kernel counts per
request (`perf stat -e raw_syscalls:sys_enter,context-switches,task-clock` attached to the
workers while `h2load` sends exactly `--requests` requests over keep-alive connections)
moves far less, and says where a server's time goes that user-space instruction counts
(scripts/app_instructions.py) do not show: wake-ups between threads, and calls into the
kernel per request.

Needs perf (Debian linux-perf) with tracepoints readable, h2load (nghttp2-client), a
servery built with Python and the peers from PyPI, as scripts/bench_apps.py says.

    scripts/app_syscalls.py [asgi|wsgi] [--requests 40000] [--connections 64]
                            [--endpoints hello,json] [--only servery,granian]
                            [--workers 1] [--servery BINARY]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_apps  # noqa: E402  (the applications, the servers and their processes)

EVENTS = ("raw_syscalls:sys_enter", "context-switches", "task-clock")


def h2load(url, requests, conns):
    out = subprocess.run(["h2load", "--h1", "-t1", f"-c{conns}", f"-n{requests}", url],
                         check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("requests:"):
            # requests: N total, N started, N done, N succeeded, N failed, ...
            fields = line.split()
            succeeded = int(fields[fields.index("succeeded,") - 1])
            return succeeded
    raise RuntimeError(f"h2load printed no request count:\n{out}")


def counted(pids, url, requests, conns):
    """Each event's count over the workers' threads while `requests` requests run."""
    cmd = ["perf", "stat", "-x", ",", "-e", ",".join(EVENTS), "-p", ",".join(map(str, pids))]
    perf = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    try:
        done = h2load(url, requests, conns)
    finally:
        perf.send_signal(2)
        _, err = perf.communicate(timeout=30)
    counts = {}
    for line in err.splitlines():
        parts = line.split(",")
        if len(parts) > 2 and parts[2] in EVENTS:
            counts[parts[2]] = float(parts[0]) if parts[0][:1].isdigit() else float("nan")
    return done, counts


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("interface", nargs="?", default="asgi", choices=("asgi", "wsgi"))
    p.add_argument("--requests", type=int, default=40000)
    p.add_argument("--connections", type=int, default=64)
    p.add_argument("--endpoints", default="hello,json")
    p.add_argument("--only", default="servery,granian")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--threads", type=int, default=64, help="WSGI application threads")
    p.add_argument("--servery", default=os.path.join(bench_apps.ROOT, "target/release/servery"))
    args = p.parse_args()
    for tool in ("perf", "h2load"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is not installed")
    paths = {"hello": "/", "json": "/json", "sleep": "/sleep"}
    endpoints = args.endpoints.split(",")
    kinds = [k for k in args.only.split(",") if k == "servery" or shutil.which(k)]
    tmp = tempfile.mkdtemp(prefix="servery-syscalls-")
    app_dir = os.path.join(tmp, "app")
    os.makedirs(app_dir)
    if args.interface == "asgi":
        with open(os.path.join(app_dir, "benchasgi.py"), "w") as f:
            f.write(bench_apps.ASGI_APP)
        servers = bench_apps.asgi_servers(kinds, args.workers, args.servery, app_dir, tmp)
    else:
        with open(os.path.join(app_dir, "benchapp.py"), "w") as f:
            f.write(bench_apps.APP)
        servers = bench_apps.make_servers(kinds, args.workers, args.threads, args.servery,
                                          app_dir, tmp)
    print(f"{args.interface}, {args.workers} worker(s), {args.requests:,} requests over "
          f"{args.connections} keep-alive connections, counted on the workers' threads")
    print("| server | endpoint | syscalls/req | context switches/req | CPU µs/req |")
    print("|---|---|---|---|---|")
    for srv in servers:
        with srv:
            pids = srv.worker_pids()
            for name in endpoints:
                url = f"http://127.0.0.1:{srv.port}{paths[name]}"
                h2load(url, args.requests // 4, args.connections)  # warm-up, not counted
                done, c = counted(pids, url, args.requests, args.connections)
                print(f"| {srv.kind} | {name} | {c['raw_syscalls:sys_enter'] / done:.2f} | "
                      f"{c['context-switches'] / done:.3f} | "
                      f"{c['task-clock'] * 1000 / done:.1f} |", flush=True)


if __name__ == "__main__":
    main()
