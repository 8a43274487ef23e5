#!/usr/bin/env python3
"""Where an ASGI worker's memory goes: servery's against granian's, idle and after load.

Starts one server at a time on the ASGI benchmark's application (`bench_apps.py asgi`),
one worker, and reads the worker's /proc/PID/smaps (grouped by kind: the executable,
libpython, other libraries, glibc's malloc arenas, thread stacks, other anonymous
mappings such as Python's object arenas and mimalloc's segments) and its threads:

  - idle, once it answers;
  - after load: wrk on `/` and `/json` at 64 connections, then `/sleep` at 1,000, each for
    --seconds; read --settle seconds after the last run ended (a worker may give freed
    memory back a moment after its connections close), with the peak (VmHWM) of the run.

Usage:
    scripts/worker_memory.py [--servery target/release/servery] [--only servery,granian]
        [--seconds 5] [--settle 2]
"""

import argparse
import collections
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
_spec = importlib.util.spec_from_file_location("bench_apps", os.path.join(HERE, "bench_apps.py"))
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

ARENA = 64 << 20  # glibc reserves (and aligns) each secondary arena's heap at 64 MiB


def status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if v.strip().endswith("kB"):
                out[k] = int(v.split()[0])
    return out


def threads(pid):
    names = collections.Counter()
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/comm") as f:
                names[f.read().strip()] += 1
        except OSError:
            pass
    return dict(names)


def mappings(pid):
    out, cur = [], None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            m = re.match(r"^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \S+\s*(.*)$", line)
            if m:
                cur = {"start": int(m[1], 16), "end": int(m[2], 16), "perm": m[3], "name": m[4].strip()}
                out.append(cur)
            else:
                k, _, v = line.partition(":")
                if v.strip().endswith(" kB"):
                    cur[k] = int(v.split()[0])
    return out


def kind_of(ms, i):
    m = ms[i]
    name = m["name"]
    if name.startswith("/"):
        base = os.path.basename(name)
        if "libpython" in base:
            return "libpython (file)"
        if base.startswith("servery") or "_granian" in base:
            return "server's code (file)"
        return "other files and libraries"
    if name == "[heap]":
        return "malloc: main arena ([heap])"
    if name.startswith("[stack"):
        return "main thread's stack"
    if name.startswith("["):
        return "other"
    if m["perm"] == "---p":
        return "reserved, not resident (---p)"
    nxt = ms[i + 1] if i + 1 < len(ms) else None
    prv = ms[i - 1] if i > 0 else None
    if m["start"] % ARENA == 0 and (nxt is None or nxt["start"] != m["end"] or nxt["perm"] == "---p"):
        return "malloc: thread arenas (64 MiB heaps)"
    if prv and prv["perm"] == "---p" and prv["end"] == m["start"] and prv["end"] - prv["start"] <= 65536:
        return "thread stacks (behind a guard page)"
    return "other anonymous (Python's arenas, mimalloc, large blocks)"


def breakdown(pid):
    ms = mappings(pid)
    groups = collections.defaultdict(lambda: [0, 0])
    for i, m in enumerate(ms):
        g = groups[kind_of(ms, i)]
        g[0] += m.get("Rss", 0)
        g[1] += (m["end"] - m["start"]) // 1024
    return groups


def report(pid, label, seen):
    st = status(pid)
    anon = sum(m.get("Anonymous", 0) for m in mappings(pid))
    print(f"{label}: VmRSS {st['VmRSS']:,} KiB (anonymous {anon:,}, file-backed {st['VmRSS'] - anon:,}), "
          f"peak VmHWM {st['VmHWM']:,} KiB; threads {threads(pid)}")
    for k, (rss, size) in sorted(breakdown(pid).items(), key=lambda kv: -kv[1][0]):
        if rss >= 64:
            print(f"    {k:58s} {rss:8,} KiB resident of {size:10,} KiB mapped")
    seen[label] = st


def run(kind, servery, app_dir, tmp, args):
    port = bench.free_port()
    if kind == "servery":
        cmd = [servery, "--asgi", "benchasgi:app", "--app-dir", app_dir, "--bind", "127.0.0.1",
               "--port", str(port), "--workers", "1",
               "--control-socket", os.path.join(tmp, f"ctl-{port}.sock")]
    else:
        cmd = ["granian", "--interface", "asgi", "--host", "127.0.0.1", "--port", str(port),
               "--workers", "1", "--working-dir", app_dir, "--log-level", "warning",
               "--no-access-log", "benchasgi:app"]
    proc = subprocess.Popen(cmd, cwd=app_dir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1).read()
                break
            except OSError:
                if time.time() > deadline or proc.poll() is not None:
                    raise SystemExit(f"{kind} did not start: {cmd}")
                time.sleep(0.2)
        time.sleep(args.settle)
        workers = [k for k in bench.children(proc.pid) if "resource_tracker" not in bench.cmdline(k)]
        pid = workers[0]
        seen = {}
        report(pid, f"{kind} idle", seen)
        for path, conns in (("/", 64), ("/json", 64), ("/sleep", 1000)):
            r = subprocess.run(["wrk", "-t1", f"-c{conns}", f"-d{args.seconds}s",
                                f"http://127.0.0.1:{port}{path}"], capture_output=True, text=True)
            rps = next((l.split()[-1] for l in r.stdout.splitlines() if "Requests/sec" in l), "?")
            print(f"    wrk {path} at {conns} connections: {rps} req/s")
        time.sleep(args.settle)
        report(pid, f"{kind} after load", seen)
        return seen
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--servery", default=os.path.join(ROOT, "target/release/servery"))
    ap.add_argument("--only", default="servery,granian")
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--settle", type=float, default=2.0)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="servery-worker-memory-")
    app_dir = os.path.join(tmp, "app")
    os.makedirs(app_dir)
    with open(os.path.join(app_dir, "benchasgi.py"), "w") as f:
        f.write(bench.ASGI_APP)
    print(f"load average {bench.loadavg()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    results = {k: run(k, args.servery, app_dir, tmp, args) for k in args.only.split(",")}
    if "servery" in results and "granian" in results:
        s, g = results["servery"], results["granian"]
        for label, key in (("idle", "idle"), ("after load", "after load")):
            a, b = s[f"servery {key}"]["VmRSS"], g[f"granian {key}"]["VmRSS"]
            print(f"servery / granian, {label}: {a:,} / {b:,} KiB = {a / b:.2f}x")
        a, b = s["servery after load"]["VmHWM"], g["granian after load"]["VmHWM"]
        print(f"servery / granian, peak (VmHWM): {a:,} / {b:,} KiB = {a / b:.2f}x")


if __name__ == "__main__":
    main()
