#!/usr/bin/env python3
"""WSGI application benchmark: servery's workers against granian and gunicorn, in one run.

Issue 36's speed goals for WSGI: at least 1.0x granian and 2x gunicorn, on a hello-world
and a 1 KiB JSON endpoint, keep-alive, 64 connections, the same worker count for every
server. The application is plain WSGI (no framework), so what is measured is the server's
cost per request, not a framework's.

Loopback only, bounded in time: every measured run is `--seconds` (default 10) after a
`--warmup` (default 2) that is thrown away; each server is started by this script on a
free port and stopped after its turn. Servers take turns round by round, the order
reversed every other round (ABC CBA ...), so a neighbour's load drifting over the run
weighs on all of them alike; the ratios are of medians over the same rounds.

For each server and endpoint: requests/s, p99 latency (wrk --latency), server CPU time per
request (utime + stime of the whole process tree, from /proc: on a shared machine it moves
less than throughput) and RSS per worker (the sum of the worker processes' VmRSS after the
runs, divided by the worker count, read once it has stopped falling, at most 5 s after
the load: servery trims at its next heartbeat; the master/parent's own RSS is given apart).

Needs: wrk (Debian package), a servery binary built with Python
(`cargo build --release -p servery --features python`; the static release binary has
none), and the peers from PyPI, for the same python3 that servery was built against:

    python3 -m pip install 'granian==2.8.9' 'gunicorn==27.0.1'

    scripts/bench_apps.py [--workers 1,2] [--threads 64] [--rounds 2] [--seconds 10]
                          [--warmup 2] [--only servery,granian] [--json FILE|-]
                          [--servery BINARY --servery-rev COMMIT]

`--threads` is servery's application pool (`--max-blocking-threads`, default 64), and is
given to the peers as gunicorn's `--threads` (gthread worker class) and granian's
`--blocking-threads`. Anything else is each server's default (granian: one runtime thread
per worker; servery: the CPUs shared out among its workers).
"""
import argparse
import importlib.metadata
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The application every server runs. The JSON body is built and encoded on every request,
# as a real endpoint's would be; its size is checked below.
APP = r'''
import json

HELLO = b"Hello, World!"
ITEMS = [{"id": i, "name": "item %d" % i, "price": i * 1.25, "tags": ["a", "b"]} for i in range(16)]


def app(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/":
        start_response("200 OK", [("Content-Type", "text/plain"),
                                  ("Content-Length", str(len(HELLO)))])
        return [HELLO]
    if path == "/json":
        body = json.dumps({"status": "ok", "count": len(ITEMS), "items": ITEMS}).encode()
        start_response("200 OK", [("Content-Type", "application/json"),
                                  ("Content-Length", str(len(body)))])
        return [body]
    start_response("404 Not Found", [("Content-Type", "text/plain"), ("Content-Length", "0")])
    return [b""]
'''

ENDPOINTS = (("hello", "/"), ("json", "/json"))
# How long RSS may take to settle after the load (see Server.settled_rss).
RSS_SETTLE_S = 5.0
PYTHON_MARKER = b"servery_wsgi.py"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port, path, timeout=1.0):
    """One GET with Connection: close; (status, body) or None if nothing answered."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as c:
            c.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
            raw = b""
            while True:
                chunk = c.recv(65536)
                if not chunk:
                    break
                raw += chunk
    except OSError:
        return None
    head, _, body = raw.partition(b"\r\n\r\n")
    m = re.match(rb"HTTP/1\.[01] (\d{3})", head)
    return (int(m.group(1)), body) if m else None


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def tree_pids(pid):
    pids, frontier = {pid}, [pid]
    while frontier:
        for k in children(frontier.pop()):
            if k not in pids:
                pids.add(k)
                frontier.append(k)
    return pids


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            m = re.search(r"VmRSS:\s+(\d+)", f.read())
            return int(m.group(1)) if m else 0
    except OSError:
        return 0


def tree_cpu_s(pid):
    """utime + stime of a process tree, in seconds (live processes only)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for p in tree_pids(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return total / ticks


def loadavg():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def duration_ms(value, unit):
    return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}[unit]


def wrk(url, seconds, conns, pid):
    """One wrk run: req/s, p99 latency in ms, errors, server CPU µs per request."""
    cmd = ["wrk", "-t1", f"-c{conns}", f"-d{seconds}s", "--latency", url]
    cpu0 = tree_cpu_s(pid)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 30).stdout
    cpu = tree_cpu_s(pid) - cpu0
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    total = int(re.search(r"(\d+) requests in", out).group(1))
    p99 = re.search(r"^\s+99%\s+([\d.]+)(us|ms|s|m)\s*$", out, re.M)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket_errors = re.search(r"Socket errors: (.*)", out)
    return {
        "rps": rps,
        "requests": total,
        "p99_ms": duration_ms(*p99.groups()) if p99 else float("nan"),
        "cpu_us": cpu * 1e6 / total if total else float("nan"),
        "non2xx": int(non2xx.group(1)) if non2xx else 0,
        "socket_errors": socket_errors.group(1).strip() if socket_errors else "",
    }


class Server:
    """A server under test: its command, and which of its processes are workers."""

    def __init__(self, name, kind, cmd, port, workers, cwd):
        self.name, self.kind, self.cmd, self.port = name, kind, cmd, port
        self.workers, self.cwd = workers, cwd

    def __enter__(self):
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(self.cmd, cwd=self.cwd, stdout=self.log, stderr=self.log,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            self.wait_serving()
        except BaseException:
            self.__exit__()
            raise
        return self

    def wait_serving(self, bound=60.0):
        """Until both endpoints answer right from every worker the server reports (a
        listening socket alone may be a backlog with workers still importing)."""
        end = time.time() + bound
        while time.time() < end:
            if self.proc.poll() is not None:
                self.log.seek(0)
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n"
                                   + self.log.read().decode(errors="replace")[-2000:])
            hello, js = get(self.port, "/"), get(self.port, "/json")
            if hello and js and len(self.worker_pids()) == self.workers:
                check_answers(self.name, hello, js)
                self.json_bytes = len(js[1])
                return
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not serve within {bound:.0f} s "
                           f"(workers seen: {self.worker_pids()})")

    def worker_pids(self):
        kids = children(self.proc.pid)
        if self.kind == "granian":
            # The workers are the master's children (Python's multiprocessing), besides
            # its resource tracker when one runs.
            kids = [k for k in kids if "resource_tracker" not in cmdline(k)]
        return kids

    def rss(self):
        """(KiB per worker: the workers' summed VmRSS / their count, KiB of the master)."""
        workers = self.worker_pids()
        total = sum(rss_kib(p) for p in workers)
        return (total / len(workers) if workers else float("nan"), rss_kib(self.proc.pid))

    def settled_rss(self, bound=RSS_SETTLE_S):
        """`rss()` once it has stopped falling after the load: servery's workers return
        freed memory at their next heartbeat (1 s by default), so a read as wrk ends sees
        the peak. Read every 0.25 s until a read is not lower than the one before, at most
        `bound` seconds; every server is read the same way."""
        end = time.time() + bound
        last = self.rss()
        while time.time() < end:
            time.sleep(0.25)
            now = self.rss()
            if now[0] >= last[0]:
                # Not falling any more: wait one more heartbeat's worth to be sure.
                time.sleep(1.0)
                later = self.rss()
                if later[0] >= now[0]:
                    return later
                now = later
            last = now
        return last

    def __exit__(self, *exc):
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=15)
        except Exception:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)
            except Exception:
                pass
        self.log.close()


def check_answers(name, hello, js):
    status, body = hello
    if (status, body) != (200, b"Hello, World!"):
        raise RuntimeError(f"{name}: / answered {status} {body[:80]!r}")
    status, body = js
    if status != 200 or json.loads(body)["count"] != 16:
        raise RuntimeError(f"{name}: /json answered {status} {body[:80]!r}")
    if not 900 <= len(body) <= 1200:
        raise RuntimeError(f"{name}: /json is {len(body)} bytes, not about 1 KiB")


def make_servers(kinds, workers, threads, servery, app_dir, tmp):
    out = []
    for kind in kinds:
        port = free_port()
        plural = "s" if workers > 1 else ""
        if kind == "servery":
            cmd = [servery, "--wsgi", "benchapp:app", "--app-dir", app_dir,
                   "--bind", "127.0.0.1", "--port", str(port), "--workers", str(workers),
                   "--max-blocking-threads", str(threads),
                   "--control-socket", os.path.join(tmp, f"ctl-{port}.sock")]
        elif kind == "granian":
            cmd = ["granian", "--interface", "wsgi", "--host", "127.0.0.1", "--port", str(port),
                   "--workers", str(workers), "--blocking-threads", str(threads),
                   "--working-dir", app_dir, "--log-level", "warning", "benchapp:app"]
        elif kind == "gunicorn":
            cmd = ["gunicorn", "--worker-class", "gthread", "--threads", str(threads),
                   "--workers", str(workers), "--bind", f"127.0.0.1:{port}",
                   "--chdir", app_dir, "--log-level", "warning", "benchapp:app"]
        else:
            raise ValueError(kind)
        out.append(Server(f"{kind} ({workers} worker{plural})", kind, cmd, port, workers, app_dir))
    return out


def measure(srv, args):
    base = f"http://127.0.0.1:{srv.port}"
    r = {}
    for name, path in ENDPOINTS:
        wrk(base + path, args.warmup, args.connections, srv.proc.pid)
        r[name] = wrk(base + path, args.seconds, args.connections, srv.proc.pid)
    r["rss_worker_kib"], r["rss_master_kib"] = srv.settled_rss()
    return r


def versions(servery_rev):
    v = {"python": sys.version.split()[0]}
    for pkg in ("granian", "gunicorn"):
        try:
            v[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            v[pkg] = None
    v["servery"] = servery_rev
    return v


def checkout_rev():
    """The commit of this checkout, marked when its sources have uncommitted changes (a
    binary built here then holds more than the commit)."""
    git = ["git", "-C", ROOT]
    rev = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(git + ["status", "--porcelain", "--", "core", "io-real"],
                           capture_output=True, text=True).stdout.strip()
    return (rev or "?") + (" with uncommitted changes" if dirty else "")


def summarize(runs, kinds, workers):
    """Medians per server and endpoint, and ratios servery / peer of those medians."""
    rows, ratios = [], []
    for w in workers:
        med = {}
        for kind in kinds:
            rs = runs.get((kind, w), [])
            if not rs:
                continue
            row = {"server": kind, "workers": w, "rounds": len(rs)}
            for ep, _ in ENDPOINTS:
                row[ep] = {f: statistics.median(r[ep][f] for r in rs)
                           for f in ("rps", "p99_ms", "cpu_us")}
                row[ep]["errors"] = sum(r[ep]["non2xx"] for r in rs)
                row[ep]["socket_errors"] = [r[ep]["socket_errors"] for r in rs if r[ep]["socket_errors"]]
                row[ep]["rps_runs"] = [r[ep]["rps"] for r in rs]
            row["rss_worker_kib"] = max(r["rss_worker_kib"] for r in rs)
            row["rss_master_kib"] = max(r["rss_master_kib"] for r in rs)
            rows.append(row)
            med[kind] = row
        sv = med.get("servery")
        for kind in kinds:
            if kind == "servery" or kind not in med or not sv:
                continue
            peer = med[kind]
            ratio = {"peer": kind, "workers": w}
            for ep, _ in ENDPOINTS:
                # Per round as well: servery's run and the peer's in the same round.
                pairs = list(zip(sv[ep]["rps_runs"], peer[ep]["rps_runs"]))
                ratio[ep] = sv[ep]["rps"] / peer[ep]["rps"]
                ratio[ep + "_rounds"] = [a / b for a, b in pairs]
            ratios.append(ratio)
    return rows, ratios


def render(rows, ratios, meta):
    lines = [
        f"wrk -t1 -c{meta['connections']} keep-alive, {meta['seconds']} s after a "
        f"{meta['warmup']} s warm-up, loopback; medians over {meta['rounds']} alternated rounds; "
        f"{meta['threads']} application threads per worker for every server; "
        f"the JSON body is {meta.get('json_bytes', '?')} bytes.",
        "",
        "| server | workers | hello req/s | hello p99 ms | hello CPU µs/req | JSON req/s | "
        "JSON p99 ms | JSON CPU µs/req | RSS per worker KiB | master KiB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        h, j = r["hello"], r["json"]
        err = ""
        if h["errors"] or j["errors"] or h["socket_errors"] or j["socket_errors"]:
            err = f" (errors: {h['errors'] + j['errors']} non-2xx, " \
                  f"{h['socket_errors'] + j['socket_errors']})"
        lines.append(
            f"| {r['server']}{err} | {r['workers']} | {h['rps']:,.0f} | {h['p99_ms']:.2f} | "
            f"{h['cpu_us']:.0f} | {j['rps']:,.0f} | {j['p99_ms']:.2f} | {j['cpu_us']:.0f} | "
            f"{r['rss_worker_kib']:,.0f} | {r['rss_master_kib']:,.0f} |")
    if ratios:
        lines += ["", "Throughput ratios, servery / peer (of the medians; per round in brackets):", "",
                  "| peer | workers | hello | JSON |", "|---|---|---|---|"]
        for q in ratios:
            def cell(ep):
                rounds = ", ".join(f"{x:.2f}" for x in q[ep + "_rounds"])
                return f"{q[ep]:.2f}× [{rounds}]"
            lines.append(f"| {q['peer']} | {q['workers']} | {cell('hello')} | {cell('json')} |")
    lines += ["", f"nproc {meta['nproc']}; load average (1 min) before {meta['load_before']}, "
                  f"after {meta['load_after']}; versions {meta['versions']}"]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_bin = os.path.join(ROOT, "target/release/servery")
    ap.add_argument("--servery", default=default_bin,
                    help="a servery binary built with --features python (default: this checkout's release build)")
    ap.add_argument("--servery-rev",
                    help="the commit the --servery binary was built from, for the report "
                         "(default: this checkout's, when the binary is its release build)")
    ap.add_argument("--workers", default="1,2", help="worker counts, comma-separated")
    ap.add_argument("--threads", type=int, default=64,
                    help="application threads per worker, for every server (servery's default pool)")
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--only", help="comma-separated servers: servery,granian,gunicorn")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON (- for stdout)")
    args = ap.parse_args()

    if not shutil.which("wrk"):
        sys.exit("wrk is not installed (apt-get install wrk)")
    try:
        with open(args.servery, "rb") as f:
            if PYTHON_MARKER not in f.read():
                sys.exit(f"{args.servery} was built without Python: "
                         "cargo build --release -p servery --features python")
    except OSError as e:
        sys.exit(f"no servery binary ({e}): cargo build --release -p servery --features python")
    kinds = ["servery", "granian", "gunicorn"]
    if args.only:
        kinds = [k for k in kinds if k in args.only.split(",")]
    for kind in kinds:
        if kind != "servery" and not shutil.which(kind):
            print(f"{kind} is not installed: skipped (python3 -m pip install {kind})", file=sys.stderr)
    kinds = [k for k in kinds if k == "servery" or shutil.which(k)]
    workers = [int(w) for w in args.workers.split(",")]

    tmp = tempfile.mkdtemp(prefix="servery-bench-apps-")
    app_dir = os.path.join(tmp, "app")
    os.makedirs(app_dir)
    with open(os.path.join(app_dir, "benchapp.py"), "w") as f:
        f.write(APP)
    meta = {"nproc": os.cpu_count(), "load_before": loadavg(), "seconds": args.seconds,
            "warmup": args.warmup, "rounds": args.rounds, "connections": args.connections,
            "threads": args.threads,
            "versions": versions(args.servery_rev or (checkout_rev() if args.servery == default_bin else "?")),
            "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    runs = {}
    try:
        for w in workers:
            for round_no in range(args.rounds):
                # Fresh ports every round: no server binds where another just closed.
                servers = make_servers(kinds, w, args.threads, args.servery, app_dir, tmp)
                order = servers if round_no % 2 == 0 else servers[::-1]
                for srv in order:
                    with srv:
                        r = measure(srv, args)
                        meta["json_bytes"] = srv.json_bytes
                    runs.setdefault((srv.kind, w), []).append(r)
                    print(f"round {round_no + 1}/{args.rounds} {srv.name}: "
                          f"hello {r['hello']['rps']:,.0f} req/s p99 {r['hello']['p99_ms']:.2f} ms, "
                          f"json {r['json']['rps']:,.0f} req/s p99 {r['json']['p99_ms']:.2f} ms, "
                          f"RSS/worker {r['rss_worker_kib']:,.0f} KiB, load {loadavg()}",
                          file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    meta["load_after"] = loadavg()
    rows, ratios = summarize(runs, kinds, workers)
    print(render(rows, ratios, meta))
    if args.json:
        doc = json.dumps({"meta": meta, "rows": rows, "ratios": ratios}, indent=2)
        if args.json == "-":
            print(doc)
        else:
            with open(args.json, "w") as f:
                f.write(doc + "\n")


# ---------------------------------------------------------------------------------------
# ASGI: `scripts/bench_apps.py asgi [...]` (issue 36's ASGI goals). Kept apart from the
# WSGI run above; it reuses only its helpers (free_port, get, wrk, Server, ...).
# ---------------------------------------------------------------------------------------

ASGI_DOC = """ASGI application benchmark: servery's workers against granian, uvicorn and gunicorn
with uvicorn's workers, in one run.

Issue 36's speed goals for ASGI: at least 1.0x granian on a hello-world and a 1 KiB JSON
endpoint (keep-alive, 64 connections) and on a 10 ms `asyncio.sleep` endpoint at 1,000
connections, the same worker count for every server. The application is plain ASGI (no
framework). Rounds, warm-up, alternation and columns are the WSGI run's (see the top of
this file).

Needs, besides wrk and a servery built with Python, from PyPI for the same python3:

    python3 -m pip install 'granian==2.8.9' 'uvicorn==0.55.0' 'httptools==0.9.0' \\
        'uvloop==0.23.0' 'gunicorn==27.0.1'

    scripts/bench_apps.py asgi [--workers 1] [--rounds 2] [--seconds 10] [--warmup 2]
                               [--only servery,granian,uvicorn,gunicorn] [--json FILE|-]
                               [--servery BINARY --servery-rev COMMIT]

Every server runs uvloop: servery's `--loop auto` and granian's `--loop auto` pick it when
installed, uvicorn is given `--loop uvloop --http httptools`, and gunicorn runs
`uvicorn.workers.UvicornWorker` (which picks uvloop and httptools when installed).
"""

ASGI_APP = r'''
import asyncio
import json

HELLO = b"Hello, World!"
ITEMS = [{"id": i, "name": "item %d" % i, "price": i * 1.25, "tags": ["a", "b"]} for i in range(16)]
HELLO_HEAD = {"type": "http.response.start", "status": 200,
              "headers": [(b"content-type", b"text/plain"),
                          (b"content-length", str(len(HELLO)).encode())]}


async def lifespan(receive, send):
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        return await lifespan(receive, send)
    path = scope["path"]
    if path == "/":
        await send(HELLO_HEAD)
        await send({"type": "http.response.body", "body": HELLO})
        return
    if path == "/json":
        body = json.dumps({"status": "ok", "count": len(ITEMS), "items": ITEMS}).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
        return
    if path == "/sleep":
        await asyncio.sleep(0.01)
        await send(HELLO_HEAD)
        await send({"type": "http.response.body", "body": HELLO})
        return
    await send({"type": "http.response.start", "status": 404,
                "headers": [(b"content-length", b"0")]})
    await send({"type": "http.response.body", "body": b""})
'''

# (name, path, connections): the keep-alive endpoints at 64 connections, the sleep at 1,000.
ASGI_ENDPOINTS = (("hello", "/", 64), ("json", "/json", 64), ("sleep", "/sleep", 1000))
ASGI_KINDS = ("servery", "granian", "uvicorn", "gunicorn")


class AsgiServer(Server):
    def worker_pids(self):
        if self.kind == "uvicorn" and self.workers == 1:
            # One process: uvicorn serves in its main process without a supervisor.
            return [self.proc.pid]
        kids = children(self.proc.pid)
        if self.kind in ("granian", "uvicorn"):
            kids = [k for k in kids if "resource_tracker" not in cmdline(k)]
        return kids


def asgi_servers(kinds, workers, servery, app_dir, tmp):
    out = []
    for kind in kinds:
        port = free_port()
        plural = "s" if workers > 1 else ""
        if kind == "servery":
            cmd = [servery, "--asgi", "benchasgi:app", "--app-dir", app_dir,
                   "--bind", "127.0.0.1", "--port", str(port), "--workers", str(workers),
                   "--control-socket", os.path.join(tmp, f"ctl-{port}.sock")]
        elif kind == "granian":
            cmd = ["granian", "--interface", "asgi", "--host", "127.0.0.1", "--port", str(port),
                   "--workers", str(workers), "--working-dir", app_dir,
                   "--log-level", "warning", "--no-access-log", "benchasgi:app"]
        elif kind == "uvicorn":
            cmd = ["uvicorn", "--loop", "uvloop", "--http", "httptools", "--host", "127.0.0.1",
                   "--port", str(port), "--workers", str(workers), "--app-dir", app_dir,
                   "--log-level", "warning", "--no-access-log", "benchasgi:app"]
        elif kind == "gunicorn":
            cmd = ["gunicorn", "--worker-class", "uvicorn.workers.UvicornWorker",
                   "--workers", str(workers), "--bind", f"127.0.0.1:{port}",
                   "--chdir", app_dir, "--log-level", "warning", "benchasgi:app"]
        else:
            raise ValueError(kind)
        out.append(AsgiServer(f"{kind} ({workers} worker{plural})", kind, cmd, port, workers, app_dir))
    return out


def asgi_measure(srv, args):
    base = f"http://127.0.0.1:{srv.port}"
    r = {}
    for name, path, conns in ASGI_ENDPOINTS:
        wrk(base + path, args.warmup, conns, srv.proc.pid)
        r[name] = wrk(base + path, args.seconds, conns, srv.proc.pid)
    r["rss_worker_kib"], r["rss_master_kib"] = srv.settled_rss()
    return r


def asgi_summarize(runs, kinds, workers):
    rows, ratios = [], []
    for w in workers:
        med = {}
        for kind in kinds:
            rs = runs.get((kind, w), [])
            if not rs:
                continue
            row = {"server": kind, "workers": w, "rounds": len(rs)}
            for ep, _, _ in ASGI_ENDPOINTS:
                row[ep] = {f: statistics.median(r[ep][f] for r in rs)
                           for f in ("rps", "p99_ms", "cpu_us")}
                row[ep]["errors"] = sum(r[ep]["non2xx"] for r in rs)
                row[ep]["socket_errors"] = [r[ep]["socket_errors"] for r in rs if r[ep]["socket_errors"]]
                row[ep]["rps_runs"] = [r[ep]["rps"] for r in rs]
            row["rss_worker_kib"] = max(r["rss_worker_kib"] for r in rs)
            row["rss_master_kib"] = max(r["rss_master_kib"] for r in rs)
            rows.append(row)
            med[kind] = row
        sv = med.get("servery")
        for kind in kinds:
            if kind == "servery" or kind not in med or not sv:
                continue
            peer = med[kind]
            ratio = {"peer": kind, "workers": w}
            for ep, _, _ in ASGI_ENDPOINTS:
                ratio[ep] = sv[ep]["rps"] / peer[ep]["rps"]
                ratio[ep + "_rounds"] = [a / b for a, b in zip(sv[ep]["rps_runs"], peer[ep]["rps_runs"])]
            ratios.append(ratio)
    return rows, ratios


def asgi_render(rows, ratios, meta):
    lines = [
        f"wrk -t1 keep-alive, {meta['seconds']} s after a {meta['warmup']} s warm-up, loopback; "
        f"hello and JSON ({meta.get('json_bytes', '?')} bytes) at 64 connections, the 10 ms sleep "
        f"at 1,000; medians over {meta['rounds']} alternated rounds.",
        "",
        "| server | workers | hello req/s | hello p99 ms | hello CPU µs/req | JSON req/s | JSON p99 ms "
        "| JSON CPU µs/req | sleep req/s | sleep p99 ms | RSS per worker KiB | master KiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        h, j, s = r["hello"], r["json"], r["sleep"]
        errors = sum(x["errors"] for x in (h, j, s))
        sockets = h["socket_errors"] + j["socket_errors"] + s["socket_errors"]
        err = f" (errors: {errors} non-2xx, {sockets})" if errors or sockets else ""
        lines.append(
            f"| {r['server']}{err} | {r['workers']} | {h['rps']:,.0f} | {h['p99_ms']:.2f} | "
            f"{h['cpu_us']:.0f} | {j['rps']:,.0f} | {j['p99_ms']:.2f} | {j['cpu_us']:.0f} | "
            f"{s['rps']:,.0f} | {s['p99_ms']:.2f} | "
            f"{r['rss_worker_kib']:,.0f} | {r['rss_master_kib']:,.0f} |")
    if ratios:
        lines += ["", "Throughput ratios, servery / peer (of the medians; per round in brackets):", "",
                  "| peer | workers | hello | JSON | sleep, 1,000 connections |", "|---|---|---|---|---|"]
        for q in ratios:
            def cell(ep):
                rounds = ", ".join(f"{x:.2f}" for x in q[ep + "_rounds"])
                return f"{q[ep]:.2f}× [{rounds}]"
            lines.append(f"| {q['peer']} | {q['workers']} | {cell('hello')} | {cell('json')} | {cell('sleep')} |")
    lines += ["", f"nproc {meta['nproc']}; load average (1 min) before {meta['load_before']}, "
                  f"after {meta['load_after']}; RLIMIT_NOFILE {meta['nofile']}; versions {meta['versions']}"]
    return "\n".join(lines) + "\n"


def asgi_main(argv):
    ap = argparse.ArgumentParser(prog="bench_apps.py asgi", description=ASGI_DOC.split("\n\n")[0])
    default_bin = os.path.join(ROOT, "target/release/servery")
    ap.add_argument("--servery", default=default_bin)
    ap.add_argument("--servery-rev")
    ap.add_argument("--workers", default="1", help="worker counts, comma-separated")
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--only", help="comma-separated servers: " + ",".join(ASGI_KINDS))
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON (- for stdout)")
    args = ap.parse_args(argv)

    if not shutil.which("wrk"):
        sys.exit("wrk is not installed (apt-get install wrk)")
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = max(c for _, _, c in ASGI_ENDPOINTS) + 64
    if soft < need:
        sys.exit(f"RLIMIT_NOFILE is {soft}: run under `prlimit --nofile=65536:65536` "
                 f"(the 1,000-connection endpoint needs more than {need} descriptors)")
    kinds = list(ASGI_KINDS)
    if args.only:
        kinds = [k for k in kinds if k in args.only.split(",")]
    missing = {"granian": "granian", "uvicorn": "uvicorn", "gunicorn": "gunicorn"}
    for kind in kinds:
        if kind != "servery" and not shutil.which(missing[kind]):
            print(f"{kind} is not installed: skipped", file=sys.stderr)
    kinds = [k for k in kinds if k == "servery" or shutil.which(missing[k])]
    workers = [int(w) for w in args.workers.split(",")]

    tmp = tempfile.mkdtemp(prefix="servery-bench-asgi-")
    app_dir = os.path.join(tmp, "app")
    os.makedirs(app_dir)
    with open(os.path.join(app_dir, "benchasgi.py"), "w") as f:
        f.write(ASGI_APP)
    v = versions(args.servery_rev or (checkout_rev() if args.servery == default_bin else "?"))
    for pkg in ("uvicorn", "httptools", "uvloop"):
        try:
            v[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            v[pkg] = None
    meta = {"nproc": os.cpu_count(), "load_before": loadavg(), "seconds": args.seconds,
            "warmup": args.warmup, "rounds": args.rounds, "nofile": f"{soft}:{hard}",
            "versions": v, "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    runs = {}
    try:
        for w in workers:
            for round_no in range(args.rounds):
                servers = asgi_servers(kinds, w, args.servery, app_dir, tmp)
                order = servers if round_no % 2 == 0 else servers[::-1]
                for srv in order:
                    with srv:
                        r = asgi_measure(srv, args)
                        meta["json_bytes"] = srv.json_bytes
                    runs.setdefault((srv.kind, w), []).append(r)
                    print(f"round {round_no + 1}/{args.rounds} {srv.name}: "
                          + ", ".join(f"{ep} {r[ep]['rps']:,.0f} req/s p99 {r[ep]['p99_ms']:.2f} ms"
                                      + (f" errors {r[ep]['non2xx']} {r[ep]['socket_errors']}"
                                         if r[ep]["non2xx"] or r[ep]["socket_errors"] else "")
                                      for ep, _, _ in ASGI_ENDPOINTS)
                          + f", RSS/worker {r['rss_worker_kib']:,.0f} KiB, load {loadavg()}",
                          file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    meta["load_after"] = loadavg()
    rows, ratios = asgi_summarize(runs, kinds, workers)
    print(asgi_render(rows, ratios, meta))
    if args.json:
        doc = json.dumps({"meta": meta, "rows": rows, "ratios": ratios}, indent=2)
        if args.json == "-":
            print(doc)
        else:
            with open(args.json, "w") as f:
                f.write(doc + "\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["asgi"]:
        asgi_main(sys.argv[2:])
    else:
        main()
