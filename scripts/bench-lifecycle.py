#!/usr/bin/env python3
"""Lifecycle measurements of the real multi-process runtime (release binary, loopback only,
every wait bounded).

    scripts/bench-lifecycle.py [--runs 10] [--recycles 1000] [--only start,kill,rss,recycle]

(a) start -> READY: spawn `servery --workers 4` and time until it prints
    `servery: ready (generation 1)` (every worker of generation 1 READY), median of --runs.
(b) kill -9 of a worker -> its replacement READY: the kill time against the replacement's
    `accepting` log line (wall-clock timestamps on both sides), minus the configured
    restart backoff, median of --runs; and each phase from the parent's own log (kill ->
    exit seen, the backoff, spawn -> PREPARED, PREPARED -> READY, kill -> READY minus the
    backoff), once for each feature set in KILL_FEATURES (files; TLS; TLS and HTTP/3;
    WebDAV and uploads). --restart-stable-period is short and each kill waits
    it out, so every kill meets the initial backoff, not a doubled one.
(c) RSS per worker next to an nginx worker (2 workers each) started in the same run, idle
    (after 20 requests) and again after load (wrk on the loopback for --load-seconds, 64
    connections, then two seconds idle): VmRSS, RssFile, RssAnon and Pss (smaps_rollup;
    shared pages split between sharers), and each worker's resident memory by mapping
    (`smaps`: the executable's text, its read-only data, the pages its relocation or its
    writes made private, the heap, the stacks, other anonymous maps, libraries).
(d) --recycles consecutive recycles under load (--max-requests-per-worker 20) with a
    threaded client opening a new connection per request (Connection: close) and checking
    every status and body length; recycles counted from the worker ids the control
    socket reports (ids are never reused), failures counted by the client. A second,
    shorter run with wrk on keep-alive connections reports wrk's error counts.
"""
import argparse
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
import threading
import time
from datetime import datetime

from release_binary import release_binary

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
READY_LINE = "servery: ready (generation 1)"
ACCEPTING = re.compile(r"^(\S+Z)\s+INFO\s+accepting worker=(\d+)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def log_time(stamp):
    """A tracing timestamp (`2026-11-30T05:20:09.260859Z`) as Unix seconds."""
    head, frac = stamp.rstrip("Z").split(".")
    t = datetime.strptime(head, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=__import__("datetime").timezone.utc)
    return t.timestamp() + float("0." + frac)


class Servery:
    """One servery parent with its stdout/stderr read by threads."""

    def __init__(self, binary, root, workers, extra=(), env=None):
        self.sock = os.path.join(tempfile.mkdtemp(prefix="svb-"), "ctl.sock")
        cmd = [binary, root, "--port", "0", "--workers", str(workers),
               "--control-socket", self.sock, *extra]
        e = dict(os.environ, SERVERY_LOG="info", **(env or {}))
        self.lines, self.errs = [], []
        self.cond = threading.Condition()
        self.spawned = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=e, start_new_session=True)
        threading.Thread(target=self._read, args=(self.proc.stdout, self.lines), daemon=True).start()
        threading.Thread(target=self._read, args=(self.proc.stderr, self.errs), daemon=True).start()
        self.port = None

    def _read(self, pipe, into):
        for line in pipe:
            with self.cond:
                into.append((time.monotonic(), time.time(), ANSI.sub("", line.rstrip("\n"))))
                self.cond.notify_all()

    def wait_line(self, pred, source="out", bound=20.0):
        """The first line matching pred: (monotonic time, wall time, text)."""
        end = time.monotonic() + bound
        lines = self.lines if source == "out" else self.errs
        with self.cond:
            while True:
                for entry in lines:
                    if pred(entry[2]):
                        return entry
                left = end - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    tail = "\n".join(l for _, _, l in self.errs[-20:])
                    raise RuntimeError(f"no matching {source} line within {bound}s\n{tail}")
                self.cond.wait(min(left, 0.2))

    def wait_ready(self, bound=30.0):
        at = self.wait_line(lambda l: l == READY_LINE, bound=bound)
        listen = self.wait_line(lambda l: l.startswith("servery: listening on "))
        self.port = int(listen[2].rstrip("/").rsplit(":", 1)[1])
        return at[0] - self.spawned

    def ctl(self, request, bound=10.0):
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(bound)
            s.connect(self.sock)
            s.sendall((json.dumps(request) + "\n").encode())
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        return json.loads(data)

    def status(self):
        return self.ctl({"cmd": "status"})["status"]

    def stop(self, bound=40.0):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=bound)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(os.path.dirname(self.sock), ignore_errors=True)
        return self.proc.returncode


def wait_for(pred, bound, what):
    end = time.monotonic() + bound
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.01)
    raise RuntimeError(f"timed out after {bound}s waiting for {what}")


def mem(pid):
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "RssAnon", "RssFile", "Threads"):
                    out[k] = int(v.split()[0])
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    out["Pss"] = int(line.split()[1])
    except OSError:
        pass
    return out


def by_mapping(pid):
    """Resident KiB of `pid` by kind of mapping: (Rss, Pss) of each kind."""
    kinds, kind = {}, None
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                head = line.split(None, 5)
                if re.match(r"^[0-9a-f]+-[0-9a-f]+$", head[0]):
                    perms = head[1]
                    name = head[5].strip() if len(head) > 5 else ""
                    if name == exe:
                        kind = "exe text" if "x" in perms else "exe data"
                    elif name == "[heap]":
                        kind = "heap"
                    elif name == "[stack]":
                        kind = "main stack"
                    elif name.startswith("/"):
                        kind = "libraries"
                    elif name:
                        kind = name
                    else:
                        kind = "anonymous maps"
                    continue
                key, _, value = line.partition(":")
                if key not in ("Rss", "Pss", "Private_Dirty"):
                    continue
                kb = int(value.split()[0])
                if kind == "exe data" and key == "Private_Dirty":
                    # Written pages of the file's data (relocated, or .data/.bss):
                    # private to this process, unlike its clean read-only pages.
                    moved = kinds.setdefault("exe data written", [0, 0])
                    moved[0] += kb
                    moved[1] += kb
                    clean = kinds.setdefault("exe data", [0, 0])
                    clean[0] -= kb
                    clean[1] -= kb
                    continue
                if key == "Private_Dirty":
                    continue
                entry = kinds.setdefault(kind, [0, 0])
                entry[0 if key == "Rss" else 1] += kb
    except OSError:
        pass
    return {k: tuple(v) for k, v in sorted(kinds.items()) if v[0]}


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


# ------------------------------------------------------------------------------- (a)
def bench_start(binary, root, runs):
    times = []
    for _ in range(runs):
        s = Servery(binary, root, 4)
        try:
            times.append(s.wait_ready())
        finally:
            s.stop()
    return times


# ------------------------------------------------------------------------------- (b)
# The parent's log line of each step of a replacement, as (event, worker id, timestamp).
EVENT = re.compile(r'^(\S+)\s+\S+\s.*\bevent="(worker_exit|spawn|prepared|ready)" worker=(\d+)')

# The feature sets (b) is run with: what a worker sets up before it reports PREPARED.
KILL_FEATURES = {
    "files": [],
    "tls": ["--tls-self-signed"],
    "tls+http3": ["--tls-self-signed", "--http3"],
    "dav+upload": ["--dav", "--upload"],
}


def bench_kill(binary, root, runs, backoff=0.25, stable=0.3, extra=()):
    """Per kill: (kill -> the replacement's `accepting` line minus the backoff, and the
    phases from the parent's log: kill -> exit seen, exit -> spawn (the backoff), spawn ->
    PREPARED, PREPARED -> READY, kill -> READY minus the backoff), with the restarts."""
    s = Servery(binary, root, 4, ["--restart-backoff-initial", str(backoff),
                                  "--restart-stable-period", str(stable),
                                  "--worker-restart-limit", "1000", *extra])
    out = []
    try:
        s.wait_ready()
        for i in range(runs):
            workers = [w for w in s.status()["workers"] if w["state"] == "ready"]
            victim = workers[i % len(workers)]
            seen = max(w["id"] for w in workers)
            killed = time.time()
            os.kill(victim["pid"], signal.SIGKILL)
            entry = s.wait_line(lambda l: (m := ACCEPTING.match(l)) and int(m.group(2)) > seen,
                                source="err", bound=10)
            new = int(ACCEPTING.match(entry[2]).group(2))
            accepting = log_time(ACCEPTING.match(entry[2]).group(1))
            s.wait_line(lambda l: (m := EVENT.match(l)) and m.group(2) == "ready"
                        and int(m.group(3)) == new, source="err", bound=10)
            at = {}
            with s.cond:
                for _, _, line in s.errs:
                    m = EVENT.match(line)
                    # The victim's exit; the replacement's spawn, PREPARED and READY.
                    whose = victim["id"] if m and m.group(2) == "worker_exit" else new
                    if m and int(m.group(3)) == whose:
                        at.setdefault(m.group(2), log_time(m.group(1)))
            out.append({
                "accepting": accepting - killed - backoff,
                "reaped": at["worker_exit"] - killed,
                "backoff": at["spawn"] - at["worker_exit"],
                "prepared": at["prepared"] - at["spawn"],
                "ready": at["ready"] - at["prepared"],
                "total": at["ready"] - killed - backoff,
            })
            # Let the replacement become stable so the next kill meets the initial backoff.
            wait_for(lambda: sum(w["state"] == "ready" for w in s.status()["workers"]) == 4, 10, "4 ready")
            time.sleep(stable + 0.1)
        st = s.status()
        restarts = st["restarts"]
    finally:
        s.stop()
    return out, restarts


# ------------------------------------------------------------------------------- (c)
def nginx_workers(root, tmp):
    if not shutil.which("nginx"):
        return None, None
    port = free_port()
    conf = os.path.join(tmp, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""worker_processes 2; daemon off; pid {tmp}/nginx.pid; error_log /dev/null;
events {{ worker_connections 1024; }}
http {{ access_log off; client_body_temp_path {tmp}; proxy_temp_path {tmp}; fastcgi_temp_path {tmp};
  uwsgi_temp_path {tmp}; scgi_temp_path {tmp};
  server {{ listen 127.0.0.1:{port}; root {root}; }} }}
""")
    proc = subprocess.Popen(["nginx", "-c", conf], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    return proc, port


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_ok(port, path="/1k.bin", expect=1024):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
        c.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while True:
            chunk = c.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head.startswith(b"HTTP/1.1 200") and len(body) == expect


def measure(pids):
    """Each process's figures and its resident memory by mapping."""
    return [dict(mem(p), mappings=by_mapping(p)) for p in pids]


def load(port, seconds):
    """wrk on the loopback for `seconds` (bounded), then two seconds for the workers'
    heartbeats to see their connections closed and give back what they freed."""
    if not shutil.which("wrk") or seconds <= 0:
        return None
    out = subprocess.run(["wrk", "-t2", "-c64", f"-d{seconds}s", f"http://127.0.0.1:{port}/1k.bin"],
                         capture_output=True, text=True, timeout=seconds + 30).stdout
    time.sleep(2.0)
    reqs = re.search(r"(\d+) requests in", out)
    return int(reqs.group(1)) if reqs else None


def bench_rss(binary, root, tmp, extra=(), load_seconds=5):
    res = {}
    s = Servery(binary, root, 2, list(extra))
    try:
        s.wait_ready()
        # A few requests, so lazily built state (runtime threads, the site) exists.
        for _ in range(20):
            http_ok(s.port)
        time.sleep(1.0)
        pids = [w["pid"] for w in s.status()["workers"]]
        res["servery_workers"] = measure(pids)
        res["servery_parent"] = mem(s.proc.pid)
        if load(s.port, load_seconds) is not None:
            res["servery_workers_loaded"] = measure(pids)
    finally:
        s.stop()
    proc, port = nginx_workers(root, tmp)
    if proc:
        try:
            wait_for(lambda: len(children(proc.pid)) == 2, 10, "nginx workers")
            wait_for(lambda: try_http(port), 10, "nginx to answer")
            for _ in range(20):
                http_ok(port)
            time.sleep(1.0)
            pids = children(proc.pid)
            res["nginx_workers"] = measure(pids)
            res["nginx_master"] = mem(proc.pid)
            if load(port, load_seconds) is not None:
                res["nginx_workers_loaded"] = measure(pids)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
    return res


def try_http(port):
    try:
        return http_ok(port)
    except OSError:
        return False


# ------------------------------------------------------------------------------- (d)
def bench_recycle(binary, root, target, clients=4, limit_s=240.0):
    # Request counts reach the parent with heartbeats, so the heartbeat interval bounds
    # how soon a worker past its limit is noticed (the default 1 s allows ~1 recycle/s).
    s = Servery(binary, root, 2, ["--max-requests-per-worker", "20",
                                  "--heartbeat-interval", "0.02", "--heartbeat-timeout", "2",
                                  "--restart-backoff-initial", "0.05",
                                  "--drain-timeout", "5"])
    ok = [0] * clients
    failed = [0] * clients
    failures = []
    stop = threading.Event()

    def client(i):
        while not stop.is_set():
            try:
                good = http_ok(s.port)
            except OSError as e:
                good = False
                if len(failures) < 20:
                    failures.append(repr(e))
            if good:
                ok[i] += 1
            else:
                failed[i] += 1
                time.sleep(0.005)

    try:
        s.wait_ready()
        start = time.monotonic()
        threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
        for t in threads:
            t.start()
        done = 0
        while time.monotonic() - start < limit_s:
            st = s.status()
            done = max(w["id"] for w in st["workers"]) - 2
            # Ids count spawns; a spawn still preparing is not a finished recycle yet.
            if done >= target and all(w["state"] == "ready" for w in st["workers"]):
                break
            time.sleep(0.05)
        stop.set()
        for t in threads:
            t.join(timeout=15)
        elapsed = time.monotonic() - start
        st = s.status()
        result = {"recycles": max(w["id"] for w in st["workers"]) - 2,
                  "restarts": st["restarts"], "last_failure": st["last_failure"],
                  "ok": sum(ok), "failed": sum(failed), "failures": failures[:5],
                  "seconds": elapsed}
    finally:
        code = s.stop()
    result["exit"] = code
    return result


def bench_recycle_wrk(binary, root, seconds=15):
    if not shutil.which("wrk"):
        return None
    s = Servery(binary, root, 2, ["--max-requests-per-worker", "2000",
                                  "--heartbeat-interval", "0.02", "--heartbeat-timeout", "2",
                                  "--restart-backoff-initial", "0.05"])
    try:
        s.wait_ready()
        out = subprocess.run(["wrk", "-t1", "-c8", f"-d{seconds}s", f"http://127.0.0.1:{s.port}/1k.bin"],
                             capture_output=True, text=True, timeout=seconds + 30).stdout
        st = s.status()
        recycles = max(w["id"] for w in st["workers"]) - 2
    finally:
        s.stop()
    reqs = re.search(r"(\d+) requests in", out)
    errs = re.search(r"Socket errors: (.*)", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {"requests": int(reqs.group(1)) if reqs else None, "recycles": recycles,
            "socket_errors": errs.group(1) if errs else "none",
            "non2xx": int(non2xx.group(1)) if non2xx else 0}


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--servery", default=None,
                    help="servery binary (default: the release build, built if stale)")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--recycles", type=int, default=1000)
    ap.add_argument("--only", default="start,kill,rss,recycle")
    ap.add_argument("--extra", default="", help="extra servery flags for the RSS run")
    ap.add_argument("--load-seconds", type=int, default=5,
                    help="wrk's run before the loaded RSS (0: idle figures only)")
    args = ap.parse_args()
    args.servery = args.servery or release_binary()
    only = set(args.only.split(","))
    tmp = tempfile.mkdtemp(prefix="servery-lifecycle-")
    root = os.path.join(tmp, "www")
    os.makedirs(root)
    with open(os.path.join(root, "1k.bin"), "wb") as f:
        f.write(os.urandom(1024))
    try:
        if "start" in only:
            t = bench_start(args.servery, root, args.runs)
            print(f"(a) start -> READY, 4 workers: median {med(t) * 1000:.1f} ms, "
                  f"min {min(t) * 1000:.1f}, max {max(t) * 1000:.1f} ({len(t)} runs)", flush=True)
        if "kill" in only:
            for name, extra in KILL_FEATURES.items():
                kills, restarts = bench_kill(args.servery, root, args.runs, extra=extra)
                t = [k["accepting"] for k in kills]
                print(f"(b) {name}: kill -9 -> replacement accepting minus 250 ms backoff: "
                      f"median {med(t) * 1000:.1f} ms, min {min(t) * 1000:.1f}, "
                      f"max {max(t) * 1000:.1f} ({len(t)} kills, restarts {restarts})", flush=True)
                print(f"    {name}, medians per phase (ms): " + ", ".join(
                    f"{phase} {med([k[phase] for k in kills]) * 1000:.1f}"
                    for phase in ("reaped", "backoff", "prepared", "ready", "total")), flush=True)
        if "rss" in only:
            r = bench_rss(args.servery, root, tmp, args.extra.split(), args.load_seconds)
            for k, v in r.items():
                if k.endswith(("workers", "loaded")):
                    for i, w in enumerate(v):
                        maps = w.pop("mappings")
                        print(f"(c) {k}[{i}]: {w}", flush=True)
                        print("      by mapping (Rss/Pss KiB): " + ", ".join(
                            f"{name} {rss}/{pss}" for name, (rss, pss) in maps.items()), flush=True)
                else:
                    print(f"(c) {k}: {v}", flush=True)
        if "recycle" in only:
            r = bench_recycle(args.servery, root, args.recycles)
            print(f"(d) recycles under load: {r}", flush=True)
            w = bench_recycle_wrk(args.servery, root)
            print(f"(d2) wrk keep-alive c8 15 s, --max-requests-per-worker 2000: {w}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
