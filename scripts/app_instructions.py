#!/usr/bin/env python3
"""Instructions per request of a Python application's worker: servery against granian.

Throughput on a shared machine moves with the neighbours' load; the instructions a worker
executes per request do not. This counts them with callgrind (valgrind), for servery and
granian in the same run, on the WSGI and ASGI applications of scripts/bench_apps.py
(`GET /` hello, `GET /json` 1 KiB of JSON encoded per request), one worker each.

Each server is started under `valgrind --tool=callgrind --trace-children=yes
--fair-sched=yes` (so its worker process is counted too), warmed up, and then for each
endpoint: counters zeroed (`vgdb --pid=WORKER zero`), K keep-alive requests, dumped
(`vgdb --pid=WORKER dump`); zeroed, 2K requests, dumped. The figure is the worker's
(instructions after 2K - instructions after K) / K: what a request costs, with whatever a
batch costs once (the dump itself, the first and last wake-ups) cancelled. The client is
this script (not counted): `--connections` keep-alive connections, one request in flight
on each.

Needs valgrind (Debian package), a servery built with Python
(`cargo build --release -p servery --features python`) and granian (and uvloop, which both
servers pick for ASGI when installed) for the same python3:

    python3 -m pip install 'granian==2.8.9' 'uvloop==0.23.0'

    scripts/app_instructions.py [--servery BINARY] [--requests 500] [--connections 8]
                                [--only servery,granian] [--interfaces wsgi,asgi]
                                [--kernel [--seconds 5]] [--annotate DIR] [--json FILE]

`--kernel` adds what callgrind cannot see, with every server run natively (not under
valgrind): `wrk -t1 -c64` for `--seconds` per endpoint after a 2 s warm-up, and per
request the worker's context switches (all its threads, from /proc) and its user and
system CPU time. Those move with the machine's load; the instructions do not.

`--annotate DIR` keeps each server's 2K-request profile there, for `callgrind_annotate
--inclusive=yes DIR/FILE`. servery is given its default application pool; granian its
defaults (one runtime thread, its default blocking threads).
"""
import argparse
import glob
import importlib.metadata
import json
import os
import re
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_apps  # noqa: E402  (the applications and process helpers)

ROOT = bench_apps.ROOT
ENDPOINTS = {
    "wsgi": (("hello", "/"), ("json", "/json")),
    # The sleep endpoint: a 10 ms `asyncio.sleep` per request (a timer, a future and a
    # wake-up each), the benchmark whose throughput is furthest behind granian.
    "asgi": (("hello", "/"), ("json", "/json"), ("sleep", "/sleep")),
}
WARMUP = 200


def request_bytes(path):
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()


def drive(port, path, total, connections):
    """`total` keep-alive GETs of `path` over `connections` connections, one in flight on
    each; every response read to its end (Content-Length) and checked to be a 200."""
    req = request_bytes(path)
    sel = selectors.DefaultSelector()
    conns = []
    for _ in range(min(connections, total)):
        c = socket.create_connection(("127.0.0.1", port), timeout=600)
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c.setblocking(False)
        conns.append(c)
    sent = done = 0
    state = {}
    for c in conns:
        c.send(req)
        sent += 1
        state[c] = b""
        sel.register(c, selectors.EVENT_READ)
    deadline = time.time() + 1800
    while done < total:
        if time.time() > deadline:
            raise RuntimeError(f"{done} of {total} responses in 30 minutes")
        for key, _ in sel.select(timeout=5):
            c = key.fileobj
            chunk = c.recv(65536)
            if not chunk:
                raise RuntimeError("the server closed a keep-alive connection")
            buf = state[c] + chunk
            while True:
                head_end = buf.find(b"\r\n\r\n")
                if head_end < 0:
                    break
                head = buf[:head_end]
                if not head.startswith(b"HTTP/1.1 200"):
                    raise RuntimeError(f"answered {head[:40]!r}")
                m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
                if not m:
                    raise RuntimeError(f"no Content-Length in {head!r}")
                end = head_end + 4 + int(m.group(1))
                if len(buf) < end:
                    break
                buf = buf[end:]
                done += 1
                if sent < total:
                    c.send(req)
                    sent += 1
            state[c] = buf
    for c in conns:
        sel.unregister(c)
        c.close()


def counted(dump):
    """The instructions a callgrind dump counted (its `summary:` line: the events since the counters were zeroed)."""
    with open(dump) as f:
        text = f.read()
    m = re.search(r"^summary:\s*(\d+)", text, re.M)
    if not m:
        raise RuntimeError(f"no totals in {dump}")
    return int(m.group(1))


class Counted:
    """A server under callgrind, and its one worker process."""

    def __init__(self, kind, interface, cmd, port, out_dir, env):
        self.kind, self.interface, self.cmd, self.port = kind, interface, cmd, port
        self.out_dir, self.env = out_dir, env

    def __enter__(self):
        self.log = tempfile.TemporaryFile()
        vg = ["valgrind", "--tool=callgrind", "--trace-children=yes", "--fair-sched=yes",
              "--dump-instr=no", "--dump-line=no", "--vgdb=yes",
              f"--callgrind-out-file={self.out_dir}/callgrind.out.%p"]
        self.proc = subprocess.Popen(vg + self.cmd, cwd=self.out_dir, stdout=self.log,
                                     stderr=self.log, stdin=subprocess.DEVNULL,
                                     start_new_session=True, env=self.env)
        try:
            self.wait_serving()
        except BaseException:
            self.__exit__()
            raise
        return self

    def wait_serving(self, bound=600.0):
        end = time.time() + bound
        while time.time() < end:
            if self.proc.poll() is not None:
                self.log.seek(0)
                raise RuntimeError(f"{self.kind} exited with {self.proc.returncode}:\n"
                                   + self.log.read().decode(errors="replace")[-3000:])
            workers = self.workers()
            if len(workers) == 1 and bench_apps.get(self.port, "/", timeout=60):
                self.worker = workers[0]
                return
            time.sleep(1)
        raise RuntimeError(f"{self.kind} did not serve within {bound:.0f} s")

    def workers(self):
        kids = bench_apps.children(self.proc.pid)
        return [k for k in kids if "resource_tracker" not in bench_apps.cmdline(k)]

    def control(self, command):
        # vgdb rather than callgrind_control: the latter finds its processes by their
        # command line, which servery's worker rewrites to its process title.
        subprocess.run(["vgdb", f"--pid={self.worker}", command], check=True,
                       capture_output=True, timeout=600)

    def phase(self, path, requests, connections):
        """The worker's instructions over `requests` requests."""
        pattern = f"{self.out_dir}/callgrind.out.{self.worker}.*"  # the dumps, numbered
        before = set(glob.glob(pattern))
        self.control("zero")
        drive(self.port, path, requests, connections)
        self.control("dump")
        new = set(glob.glob(pattern)) - before
        if len(new) != 1:
            raise RuntimeError(f"expected one new dump, found {sorted(new)}")
        dump = new.pop()
        return counted(dump), dump

    def __exit__(self, *exc):
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=120)
        except Exception:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
            except Exception:
                pass
        self.log.close()


def worker_counters(pid):
    """(context switches of all the worker's threads, user s, system s)."""
    switches = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/status") as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        switches += int(line.split()[1])
        except OSError:
            pass
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return switches, int(fields[11]) / ticks, int(fields[12]) / ticks


def kernel_side(kind, interface, cmd, port, seconds, app_dir):
    """Per endpoint: requests/s, and per request context switches, user µs, system µs."""
    out = {}
    with bench_apps.Server(kind, kind, cmd, port, 1, app_dir) as srv:
        worker = srv.worker_pids()[0]
        for name, path in ENDPOINTS[interface]:
            url = f"http://127.0.0.1:{port}{path}"
            bench_apps.wrk(url, 2, 64, srv.proc.pid)
            s0, u0, k0 = worker_counters(worker)
            r = bench_apps.wrk(url, seconds, 64, srv.proc.pid)
            s1, u1, k1 = worker_counters(worker)
            n = r["requests"]
            out[name] = {"rps": r["rps"], "switches": (s1 - s0) / n,
                         "user_us": (u1 - u0) * 1e6 / n, "system_us": (k1 - k0) * 1e6 / n}
            print(f"{interface} {name} {kind} natively: {r['rps']:,.0f} req/s, "
                  f"{out[name]['switches']:.2f} switches, {out[name]['user_us']:.1f} µs user, "
                  f"{out[name]['system_us']:.1f} µs system per request, load {bench_apps.loadavg()}",
                  file=sys.stderr, flush=True)
    return out


def server_cmd(kind, interface, servery, app_dir, port, tmp):
    module = "benchapp:app" if interface == "wsgi" else "benchasgi:app"
    if kind == "servery":
        # Generous timeouts: under valgrind everything runs tens of times slower.
        return [servery, f"--{interface}", module, "--app-dir", app_dir,
                "--bind", "127.0.0.1", "--port", str(port), "--workers", "1",
                "--worker-start-timeout", "600", "--heartbeat-timeout", "120",
                "--control-socket", os.path.join(tmp, f"ctl-{port}.sock")]
    if kind == "granian":
        return ["granian", "--interface", interface, "--host", "127.0.0.1", "--port", str(port),
                "--workers", "1", "--working-dir", app_dir, "--log-level", "warning",
                "--no-access-log", module]
    raise ValueError(kind)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_bin = os.path.join(ROOT, "target/release/servery")
    ap.add_argument("--servery", default=default_bin)
    ap.add_argument("--servery-rev")
    ap.add_argument("--requests", type=int, default=500, help="K: requests in the smaller batch")
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--only", default="servery,granian")
    ap.add_argument("--interfaces", default="wsgi,asgi")
    ap.add_argument("--annotate", metavar="DIR", help="keep the 2K-request profiles here")
    ap.add_argument("--kernel", action="store_true",
                    help="also run each server natively under wrk: switches and CPU per request")
    ap.add_argument("--seconds", type=int, default=5, help="wrk's run per endpoint with --kernel")
    ap.add_argument("--skip-instructions", action="store_true", help="only the --kernel part")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    for tool in ("valgrind", "vgdb"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is not installed (apt-get install valgrind)")
    kinds = args.only.split(",")
    if "granian" in kinds and not shutil.which("granian"):
        sys.exit("granian is not installed (python3 -m pip install 'granian==2.8.9')")

    tmp = tempfile.mkdtemp(prefix="servery-app-instructions-")
    app_dir = os.path.join(tmp, "app")
    os.makedirs(app_dir)
    with open(os.path.join(app_dir, "benchapp.py"), "w") as f:
        f.write(bench_apps.APP)
    with open(os.path.join(app_dir, "benchasgi.py"), "w") as f:
        f.write(bench_apps.ASGI_APP)
    env = dict(os.environ)
    # The parent runs under valgrind, where /proc/self/exe is valgrind's tool: start the
    # workers from the path the parent was started from.
    env["SERVERY_WORKER_FROM_START_PATH"] = "1"
    versions = bench_apps.versions(
        args.servery_rev or (bench_apps.checkout_rev() if args.servery == default_bin else "?"))
    versions["valgrind"] = subprocess.run(["valgrind", "--version"], capture_output=True,
                                          text=True).stdout.strip()
    try:
        versions["uvloop"] = importlib.metadata.version("uvloop")
    except importlib.metadata.PackageNotFoundError:
        versions["uvloop"] = None
    meta = {"requests": args.requests, "connections": args.connections,
            "load_before": bench_apps.loadavg(), "versions": versions,
            "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    results = {}
    kernel = {}
    try:
        for interface in args.interfaces.split(","):
            for kind in kinds:
                out_dir = os.path.join(tmp, f"{kind}-{interface}")
                os.makedirs(out_dir)
                port = bench_apps.free_port()
                cmd = server_cmd(kind, interface, args.servery, app_dir, port, tmp)
                if args.kernel:
                    native_port = bench_apps.free_port()
                    native = server_cmd(kind, interface, args.servery, app_dir, native_port, tmp)
                    kernel[(interface, kind)] = kernel_side(kind, interface, native, native_port,
                                                            args.seconds, app_dir)
                if args.skip_instructions:
                    continue
                with Counted(kind, interface, cmd, port, out_dir, env) as srv:
                    for name, path in ENDPOINTS[interface]:
                        drive(port, path, WARMUP, args.connections)
                        one, _ = srv.phase(path, args.requests, args.connections)
                        two, dump = srv.phase(path, 2 * args.requests, args.connections)
                        per = (two - one) / args.requests
                        results[(interface, name, kind)] = per
                        print(f"{interface} {name} {kind}: {per:,.0f} instructions/request "
                              f"({one:,} for {args.requests}, {two:,} for {2 * args.requests}), "
                              f"load {bench_apps.loadavg()}", file=sys.stderr, flush=True)
                        if args.annotate:
                            os.makedirs(args.annotate, exist_ok=True)
                            shutil.copy(dump, os.path.join(args.annotate,
                                                           f"{kind}-{interface}-{name}.callgrind"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    meta["load_after"] = bench_apps.loadavg()
    lines = [f"callgrind, one worker, {args.connections} keep-alive connections, "
             f"(2K − K) / K with K = {args.requests}:", "",
             "| interface | endpoint | servery | granian | servery / granian |", "|---|---|---|---|---|"]
    for interface in args.interfaces.split(","):
        for name, _ in ENDPOINTS[interface]:
            s = results.get((interface, name, "servery"))
            g = results.get((interface, name, "granian"))
            ratio = f"{s / g:.2f}" if s and g else "–"
            fmt = lambda x: f"{x:,.0f}" if x else "–"  # noqa: E731
            lines.append(f"| {interface.upper()} | {name} | {fmt(s)} | {fmt(g)} | {ratio} |")
    lines += ["", f"load average (1 min) before {meta['load_before']}, after {meta['load_after']}; "
                  f"versions {meta['versions']}"]
    if kernel:
        lines += ["", "Natively, wrk -t1 -c64, per request (the worker's threads):", "",
                  "| interface | endpoint | server | req/s | context switches | user µs | system µs |",
                  "|---|---|---|---|---|---|---|"]
        for (interface, kind), eps in kernel.items():
            for name, k in eps.items():
                lines.append(f"| {interface.upper()} | {name} | {kind} | {k['rps']:,.0f} | "
                             f"{k['switches']:.2f} | {k['user_us']:.1f} | {k['system_us']:.1f} |")
    print("\n".join(lines))
    if args.json:
        doc = {"meta": meta, "results": [
            {"interface": i, "endpoint": e, "server": k, "instructions_per_request": v}
            for (i, e, k), v in results.items()],
            "kernel": [{"interface": i, "server": k, **{e: v for e, v in eps.items()}}
                       for (i, k), eps in kernel.items()]}
        with open(args.json, "w") as f:
            f.write(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
