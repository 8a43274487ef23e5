#!/usr/bin/env python3
"""Instructions and system calls per small proxied request, counted where the machine's
load does not move them (issue 40's "CPU per small request").

One servery worker (`--workers 1 --proxy /=http://127.0.0.1:UP/`) in front of an nginx
upstream serving a 1 KiB file; the client is this script, over `--connections`
keep-alive connections, one request in flight on each (scripts/app_instructions.py's
driver).

- **Instructions** (callgrind, as scripts/app_instructions.py counts them): the worker's
  counters zeroed, K requests, dumped; zeroed, 2K requests, dumped; the figure is
  (2K − K) / K, so what a batch costs once cancels.
The worker is given one CPU (`taskset`), so that it runs one async thread, as each worker
does when the workers are as many as the cores.

- **System calls** (`--syscalls`, servery run natively): `strace -f -c` attached to the
  worker's threads over K requests and over 2K, each call counted by name; (2K − K) / K.

    scripts/proxy_instructions.py [--servery BINARY] [--requests 2000] [--connections 8]
                                  [--syscalls] [--annotate FILE]

Needs valgrind, nginx and (for `--syscalls`) strace. Build servery as for measurement
(`scripts/release_binary.py`) or, for quick comparisons, a release profile without LTO.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import app_instructions  # noqa: E402  (the driver and the callgrind harness)
import bench_apps  # noqa: E402

WARMUP = 200


def upstream(root, port, tmp):
    conf = os.path.join(tmp, "upstream.conf")
    with open(conf, "w") as f:
        f.write(f"""worker_processes 1; daemon off; pid {conf}.pid; error_log /dev/null;
events {{ worker_connections 1024; }}
http {{ access_log off; keepalive_requests 1000000;
  client_body_temp_path {tmp}; proxy_temp_path {tmp}; fastcgi_temp_path {tmp}; uwsgi_temp_path {tmp}; scgi_temp_path {tmp};
  server {{ listen 127.0.0.1:{port}; root {root}; }} }}
""")
    return subprocess.Popen(["nginx", "-c", conf], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def servery_cmd(servery, up_port, port, tmp, root):
    # One CPU: the worker runs one async thread, as each of two workers does on the
    # benchmark's two cores (its runtime is sized by the CPUs it may use).
    return ["taskset", "-c", "0", servery, root, "--bind", "127.0.0.1", "--port", str(port), "--workers", "1",
            "--proxy", f"/=http://127.0.0.1:{up_port}",
            "--worker-start-timeout", "600", "--heartbeat-timeout", "120",
            "--control-socket", os.path.join(tmp, f"ctl-{port}.sock")]


def strace_counts(worker, port, path, requests, connections):
    """Calls per name over `requests` requests, strace attached to every thread."""
    out = tempfile.NamedTemporaryFile(suffix=".strace", delete=False)
    out.close()
    tids = os.listdir(f"/proc/{worker}/task")
    cmd = ["strace", "-f", "-c", "-o", out.name]
    for t in tids:
        cmd += ["-p", t]
    tracer = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.0)  # attached (strace says so on stderr; a second is plenty here)
    app_instructions.drive(port, path, requests, connections)
    tracer.send_signal(signal.SIGINT)
    tracer.wait(timeout=60)
    counts = {}
    with open(out.name) as f:
        for line in f:
            m = re.match(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$", line)
            if m and m.group(2) != "total":
                counts[m.group(2)] = int(m.group(1))
    os.unlink(out.name)
    return counts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--servery", default=os.path.join(bench_apps.ROOT, "target/release/servery"))
    ap.add_argument("--requests", type=int, default=2000, help="K")
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--syscalls", action="store_true")
    ap.add_argument("--skip-instructions", action="store_true")
    ap.add_argument("--annotate", metavar="FILE", help="keep the 2K-request profile here")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="servery-proxy-instructions-")
    root = os.path.join(tmp, "root")
    os.makedirs(root)
    with open(os.path.join(root, "1k"), "wb") as f:
        f.write(b"x" * 1024)
    up_port = bench_apps.free_port()
    up = upstream(root, up_port, tmp)
    env = dict(os.environ)
    env["SERVERY_WORKER_FROM_START_PATH"] = "1"
    k = args.requests
    try:
        if args.syscalls:
            port = bench_apps.free_port()
            proc = subprocess.Popen(servery_cmd(args.servery, up_port, port, tmp, root),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    start_new_session=True)
            try:
                end = time.time() + 60
                while not bench_apps.get(port, "/1k", timeout=2) and time.time() < end:
                    time.sleep(0.2)
                worker = bench_apps.children(proc.pid)[0]
                app_instructions.drive(port, "/1k", WARMUP, args.connections)
                one = strace_counts(worker, port, "/1k", k, args.connections)
                two = strace_counts(worker, port, "/1k", 2 * k, args.connections)
                names = sorted(set(one) | set(two), key=lambda n: -(two.get(n, 0) - one.get(n, 0)))
                total = 0.0
                for n in names:
                    per = (two.get(n, 0) - one.get(n, 0)) / k
                    total += per
                    if abs(per) >= 0.005:
                        print(f"  {n}: {per:.2f} per request")
                print(f"system calls: {total:.2f} per request (K = {k})", flush=True)
            finally:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=60)
        if not args.skip_instructions:
            out_dir = os.path.join(tmp, "cg")
            os.makedirs(out_dir)
            port = bench_apps.free_port()
            cmd = servery_cmd(args.servery, up_port, port, tmp, root)
            with app_instructions.Counted("servery", "proxy", cmd, port, out_dir, env) as srv:
                app_instructions.drive(port, "/1k", WARMUP, args.connections)
                one, _ = srv.phase("/1k", k, args.connections)
                two, dump = srv.phase("/1k", 2 * k, args.connections)
                print(f"instructions: {(two - one) / k:,.0f} per request "
                      f"({one:,} for {k}, {two:,} for {2 * k})", flush=True)
                if args.annotate:
                    shutil.copy(dump, args.annotate)
    finally:
        os.killpg(up.pid, signal.SIGTERM)
        up.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
