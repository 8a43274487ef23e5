#!/usr/bin/env python3
"""WebDAV benchmark: servery `--dav` against Apache mod_dav and `rclone serve webdav`, in
one run. Loopback only, bounded in count and time.

    scripts/bench-dav.py [--servery BINARY] [--seconds 10] [--rounds 3] [--only propfind,put,lock]

Peers: apt-get install wrk apache2 rclone. A peer that is not installed or does not start
is skipped and said so; servery failing to start, or a tree no server lists whole, is a
setup failure (exit 2). Every server gets its own copy of the same tree.

1. propfind: `PROPFIND /list/` with `Depth: 1` and an allprop body, on a directory of
   --files (1,000) files of 1 KiB; wrk -t2 -c8 (a Lua script for the method) for --seconds
   per server, servers alternated over --rounds, median req/s and server CPU µs per
   request (whole process tree). Before measuring, one PROPFIND per server must answer 207
   with a <response> for the directory and each file. Also shown: how the server's
   processes shared wrk's connections (sampled with ss 1 s into each run).
2. put: `curl -T` of a 64 MiB file to servery `--dav --upload` and to servery `--upload`
   (no --dav), --puts (10) times each, alternated, over the same name (--allow-overwrite);
   median MB/s (10^6 bytes / s, whole request) and server CPU per upload. servery only:
   the question is what --dav costs an upload. servery fsyncs every upload, so on a disk
   shared with builds the spread is wide; `--dir /dev/shm` takes the disk out.
3. lock: --cycles (500) sequential LOCK (exclusive, Depth 0) + PUT of 1 KiB with
   `If: (<token>)` + UNLOCK of an existing file over one keep-alive connection
   (http.client), per server and round; median over the rounds of the mean cycle time,
   the median time of each method and server CPU per cycle.

Servers: servery DIR --workers 2 --dav --upload --allow-overwrite; Apache 2.4 with its
own config (mpm_event with Debian's default sizes, mod_dav + mod_dav_fs, a DAVLockDB,
unlimited keep-alive requests, no logging of requests); rclone serve webdav with its
defaults (its VFS caches directory listings for 5 minutes).

Before each of the three measurements the script waits (up to --load-wait seconds) until
the 1-minute load average is below --max-load: the machine is shared with builds. If it
never drops, it measures anyway and says so.

Exit status: 0; 2 on a setup failure; 1 if any servery request was answered other than
2xx (or a wrk socket error) — printed loudly. Peers' non-2xx answers are counted, not
fatal.
"""
import argparse
import http.client
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import importlib

from release_binary import release_binary

bench = importlib.import_module("bench-http")

PROPFIND_BODY = ('<?xml version="1.0" encoding="utf-8"?>'
                 '<D:propfind xmlns:D="DAV:"><D:allprop/></D:propfind>')
LOCK_BODY = ('<?xml version="1.0" encoding="utf-8"?>'
             '<D:lockinfo xmlns:D="DAV:"><D:lockscope><D:exclusive/></D:lockscope>'
             '<D:locktype><D:write/></D:locktype><D:owner>bench-dav</D:owner></D:lockinfo>')
RESPONSE = re.compile(rb"<(?:[A-Za-z][\w.-]*:)?response[\s>]")


class SetupError(Exception):
    pass


def load1():
    return float(open("/proc/loadavg").read().split()[0])


def wait_for_quiet(max_load, bound):
    """Polls the 1-minute load average until it is below `max_load`, at most `bound`
    seconds. Returns a note for the report."""
    start = time.time()
    while True:
        now = load1()
        if now < max_load:
            waited = time.time() - start
            return f"load {now:.2f}" + (f" after waiting {waited:.0f} s" if waited >= 1 else "")
        if time.time() - start >= bound:
            print(f"!! load average still {now:.2f} after {bound:.0f} s: measuring anyway", flush=True)
            return f"load {now:.2f}, NOT below {max_load} after {bound:.0f} s"
        time.sleep(5)


# ---------------------------------------------------------------- trees and servers

def make_tree(root, files):
    """The same tree for every server: list/ with `files` files of 1 KiB, lock/small.txt,
    up/ for uploads and 1k.bin (what bench-http's start check GETs)."""
    os.makedirs(os.path.join(root, "list"))
    os.makedirs(os.path.join(root, "lock"))
    os.makedirs(os.path.join(root, "up"))
    block = bytes(range(256)) * 4
    for i in range(files):
        with open(os.path.join(root, "list", f"file-{i:04d}.txt"), "wb") as f:
            f.write(block)
    for name in ("1k.bin", os.path.join("lock", "small.txt")):
        with open(os.path.join(root, name), "wb") as f:
            f.write(block)


def servery_server(binary, root, tmp, dav=True):
    p = bench.free_port()
    name = "servery" if dav else "servery (--upload, no --dav)"
    cmd = [binary, root, "--workers", "2", "--upload", "--allow-overwrite", "--port", str(p),
           "--control-socket", os.path.join(tmp, f"ctl-{p}.sock")]
    if dav:
        cmd.insert(4, "--dav")
    return bench.Server(name, cmd, p)


def apache_server(root, tmp):
    if not shutil.which("apache2"):
        return None
    p = bench.free_port()
    modules = "/usr/lib/apache2/modules"
    needed = ["mpm_event", "authz_core", "dav", "dav_fs"]
    for m in needed:
        if not os.path.exists(f"{modules}/mod_{m}.so"):
            return None
    locks = os.path.join(tmp, "apache-locks")
    os.makedirs(locks, exist_ok=True)
    user = ""
    if os.geteuid() == 0:
        # Apache will not serve as root: its children run as www-data, which must reach
        # and write the tree and the lock database.
        import pwd
        pw = pwd.getpwnam("www-data")
        os.chmod(tmp, 0o755)
        for d in (root, locks):
            for dirpath, dirs, names in os.walk(d):
                os.chown(dirpath, pw.pw_uid, pw.pw_gid)
                for n in names:
                    os.chown(os.path.join(dirpath, n), pw.pw_uid, pw.pw_gid)
        user = "User www-data\nGroup www-data\n"
    conf = os.path.join(tmp, "apache.conf")
    with open(conf, "w") as f:
        f.write(f"""ServerRoot /usr/lib/apache2
ServerName 127.0.0.1
Listen 127.0.0.1:{p}
PidFile {tmp}/apache.pid
ErrorLog {tmp}/apache-error.log
LogLevel warn
{user}""" + "".join(f"LoadModule {m}_module {modules}/mod_{m}.so\n" for m in needed) + f"""
StartServers 2
MinSpareThreads 25
MaxSpareThreads 75
ThreadLimit 64
ThreadsPerChild 25
MaxRequestWorkers 150
MaxConnectionsPerChild 0
KeepAlive On
MaxKeepAliveRequests 0
DAVLockDB {locks}/DAVLock
DocumentRoot {root}
<Directory />
  AllowOverride None
  Require all denied
</Directory>
<Directory {root}>
  Dav On
  AllowOverride None
  Require all granted
</Directory>
""")
    return bench.Server("Apache mod_dav", ["apache2", "-f", conf, "-DFOREGROUND"], p)


def rclone_server(root, tmp):
    if not shutil.which("rclone"):
        return None
    p = bench.free_port()
    conf = os.path.join(tmp, "rclone.conf")
    open(conf, "w").close()
    return bench.Server("rclone serve webdav",
                        ["rclone", "serve", "webdav", root, "--addr", f"127.0.0.1:{p}",
                         "--config", conf, "--log-level", "ERROR"], p)


def version(cmd, pattern):
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        m = re.search(pattern, out.stdout + out.stderr)
        return m.group(1) if m else "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


# ---------------------------------------------------------------- 1. PROPFIND

def check_propfind(port, files):
    """One PROPFIND; its status and how many resources it answered for."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("PROPFIND", "/list/", PROPFIND_BODY,
              {"Depth": "1", "Content-Type": "application/xml; charset=utf-8"})
    r = c.getresponse()
    body = r.read()
    c.close()
    n = len(RESPONSE.findall(body))
    if r.status != 207 or n != files + 1:
        raise SetupError(f"PROPFIND /list/ on port {port}: {r.status}, {n} responses "
                         f"(want 207 and {files + 1})")
    return len(body)


def connections_per_process(port):
    """How the server's processes share the client's connections now, e.g. "8+0": a
    listening socket shared by processes does not spread a few long-lived connections
    evenly. "?" without ss."""
    try:
        out = subprocess.run(["ss", "-tnpH", "state", "established", f"( sport = :{port} )"],
                             capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return "?"
    counts = {}
    for pid in re.findall(r"pid=(\d+)", out):
        counts[pid] = counts.get(pid, 0) + 1
    return "+".join(str(n) for n in sorted(counts.values(), reverse=True)) or "?"


def wrk_propfind(port, seconds, threads, conns, script, pid):
    cmd = ["wrk", f"-t{threads}", f"-c{conns}", f"-d{seconds}s", "--timeout", "10s",
           "-s", script, f"http://127.0.0.1:{port}/list/"]
    cpu0 = bench.tree_cpu_s(pid)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    time.sleep(min(1.0, seconds / 2))
    spread = connections_per_process(port)
    out = proc.communicate(timeout=seconds + 60)[0]
    cpu = bench.tree_cpu_s(pid) - cpu0
    try:
        rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
        total = int(re.search(r"(\d+) requests in", out).group(1))
    except AttributeError:
        raise SetupError(f"wrk printed no result:\n{out}")
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    return {"rps": rps, "total": total, "cpu_us": cpu * 1e6 / total if total else float("nan"),
            "spread": spread,
            "non2xx": int(non2xx.group(1)) if non2xx else 0,
            "socket_errors": sum(int(x) for x in sock.groups()) if sock else 0}


def bench_propfind(servers, a, tmp):
    script = os.path.join(tmp, "propfind.lua")
    with open(script, "w") as f:
        f.write(f'wrk.method = "PROPFIND"\n'
                f'wrk.headers["Depth"] = "1"\n'
                f'wrk.headers["Content-Type"] = "application/xml; charset=utf-8"\n'
                f"wrk.body = [[{PROPFIND_BODY}]]\n")
    sizes = {}
    for srv in servers:
        sizes[srv.name] = check_propfind(srv.port, a.files)
        # Warm-up, not counted: caches, threads, the first connections.
        wrk_propfind(srv.port, 2, a.threads, a.connections, script, srv.proc.pid)
    note = wait_for_quiet(a.max_load, a.load_wait)
    runs = {srv.name: [] for srv in servers}
    for rnd in range(a.rounds):
        for srv in (servers if rnd % 2 == 0 else servers[::-1]):
            r = wrk_propfind(srv.port, a.seconds, a.threads, a.connections, script, srv.proc.pid)
            runs[srv.name].append(r)
            print(f"propfind round {rnd + 1}/{a.rounds} {srv.name}: {r['rps']:.0f} req/s "
                  f"[{r['cpu_us']:.0f} µs CPU/req], connections per process {r['spread']}, non-2xx {r['non2xx']}, "
                  f"socket errors {r['socket_errors']}", flush=True)
    return runs, sizes, note


# ---------------------------------------------------------------- 2. PUT 64 MiB

def curl_put(port, src, name):
    out = subprocess.run(
        ["curl", "-sS", "-o", "/dev/null", "--max-time", "120", "-w", "%{http_code} %{time_total}",
         "-T", src, f"http://127.0.0.1:{port}/up/{name}"],
        capture_output=True, text=True, timeout=150)
    try:
        code, secs = out.stdout.split()
        return int(code), float(secs)
    except ValueError:
        return 0, float("nan")


def bench_put(dav_srv, plain_srv, a, tmp, roots):
    src = os.path.join(tmp, "64m.bin")
    size = a.put_mib * 1024 * 1024
    with open(src, "wb") as f:
        f.write(os.urandom(size))
    for srv in (dav_srv, plain_srv):  # warm-up and check, not counted
        code, _ = curl_put(srv.port, src, "big.bin")
        if code not in (200, 201, 204):
            raise SetupError(f"{srv.name}: PUT of {a.put_mib} MiB answered {code}")
    note = wait_for_quiet(a.max_load, a.load_wait)
    runs = {dav_srv.name: [], plain_srv.name: []}
    cpu = {dav_srv.name: [], plain_srv.name: []}
    bad = {dav_srv.name: 0, plain_srv.name: 0}
    for i in range(a.puts):
        for srv in ((dav_srv, plain_srv) if i % 2 == 0 else (plain_srv, dav_srv)):
            cpu0 = bench.tree_cpu_s(srv.proc.pid)
            code, secs = curl_put(srv.port, src, "big.bin")
            used = bench.tree_cpu_s(srv.proc.pid) - cpu0
            stored = os.path.getsize(os.path.join(roots[srv.name], "up", "big.bin"))
            if code not in (200, 201, 204) or stored != size:
                bad[srv.name] += 1
                print(f"!! {srv.name}: PUT answered {code}, stored {stored} bytes", flush=True)
                continue
            runs[srv.name].append(size / secs / 1e6)
            cpu[srv.name].append(used)
            print(f"put {i + 1}/{a.puts} {srv.name}: {code}, {size / secs / 1e6:.0f} MB/s, "
                  f"server CPU {used * 1e3:.0f} ms", flush=True)
    return runs, cpu, bad, note


# ---------------------------------------------------------------- 3. LOCK + PUT + UNLOCK

def lock_cycles(port, n, statuses, steps=None):
    """n sequential LOCK + PUT (with the token) + UNLOCK over one keep-alive connection;
    the time of each cycle (and of each request in `steps`, by method). Answers other than
    2xx are counted in `statuses`."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    path = "/lock/small.txt"
    payload = bytes(range(256)) * 4
    times = []

    def ask(method, body, headers):
        t = time.perf_counter()
        c.request(method, path, body, headers)
        r = c.getresponse()
        r.read()
        if steps is not None:
            steps.setdefault(method, []).append(time.perf_counter() - t)
        statuses[r.status] = statuses.get(r.status, 0) + 1
        return r

    for _ in range(n):
        t = time.perf_counter()
        r = ask("LOCK", LOCK_BODY, {"Depth": "0", "Timeout": "Second-60",
                                     "Content-Type": "application/xml; charset=utf-8"})
        token = r.getheader("Lock-Token")
        if r.status not in (200, 201) or not token:
            continue
        token = token.strip()
        if not token.startswith("<"):
            token = f"<{token}>"
        ask("PUT", payload, {"If": f"({token})", "Content-Type": "text/plain"})
        ask("UNLOCK", None, {"Lock-Token": token})
        times.append(time.perf_counter() - t)
    c.close()
    return times


def bench_lock(servers, a):
    for srv in servers:  # warm-up and check, not counted
        st = {}
        if not lock_cycles(srv.port, 5, st) or any(s // 100 != 2 for s in st):
            raise SetupError(f"{srv.name}: LOCK/PUT/UNLOCK warm-up answered {st}")
    note = wait_for_quiet(a.max_load, a.load_wait)
    runs = {srv.name: [] for srv in servers}
    statuses = {srv.name: {} for srv in servers}
    steps = {srv.name: {} for srv in servers}
    cpu = {srv.name: [] for srv in servers}
    for rnd in range(a.rounds):
        for srv in (servers if rnd % 2 == 0 else servers[::-1]):
            cpu0 = bench.tree_cpu_s(srv.proc.pid)
            times = lock_cycles(srv.port, a.cycles, statuses[srv.name], steps[srv.name])
            if times:
                cpu[srv.name].append((bench.tree_cpu_s(srv.proc.pid) - cpu0) / len(times))
            mean = statistics.mean(times) if times else float("nan")
            runs[srv.name].append((mean, times))
            print(f"lock round {rnd + 1}/{a.rounds} {srv.name}: {len(times)}/{a.cycles} cycles, "
                  f"mean {mean * 1e3:.3f} ms, median {statistics.median(times) * 1e3:.3f} ms"
                  if times else f"lock round {rnd + 1} {srv.name}: no cycle completed", flush=True)
    return runs, statuses, steps, cpu, note


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--servery", help="servery binary (default: the release build, built if stale)")
    ap.add_argument("--only", default="propfind,put,lock")
    ap.add_argument("--seconds", type=int, default=10, help="wrk duration per PROPFIND run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="wrk threads")
    ap.add_argument("--connections", type=int, default=8, help="wrk connections")
    ap.add_argument("--files", type=int, default=1000, help="files in the PROPFIND directory")
    ap.add_argument("--puts", type=int, default=10, help="uploads per server")
    ap.add_argument("--put-mib", type=int, default=64)
    ap.add_argument("--cycles", type=int, default=500, help="LOCK+PUT+UNLOCK cycles per server and round")
    ap.add_argument("--max-load", type=float, default=1.0)
    ap.add_argument("--load-wait", type=float, default=600, help="longest wait for --max-load, seconds")
    ap.add_argument("--dir", help="where the trees go (default: the system's temporary directory)")
    a = ap.parse_args()
    tests = set(a.only.split(","))
    if "propfind" in tests and not shutil.which("wrk"):
        sys.exit("setup: wrk is not installed (apt-get install wrk)")
    if "put" in tests and not shutil.which("curl"):
        sys.exit("setup: curl is not installed")
    binary = a.servery or release_binary()
    tmp = tempfile.mkdtemp(prefix="servery-bench-dav-", dir=a.dir)
    started = []
    try:
        return run(a, tests, binary, tmp, started)
    except (SetupError, RuntimeError, OSError, subprocess.SubprocessError) as e:
        print(f"setup failure: {e}", file=sys.stderr)
        return 2
    finally:
        for srv in started:
            srv.__exit__(None, None, None)
        shutil.rmtree(tmp, ignore_errors=True)


def start(srv, started, required):
    try:
        srv.__enter__()
    except Exception as e:
        if required:
            raise SetupError(f"{srv.name} did not start: {e}")
        print(f"{srv.name}: skipped ({e})", flush=True)
        return None
    started.append(srv)
    return srv


def run(a, tests, binary, tmp, started):
    roots = {}

    def root_for(name):
        r = os.path.join(tmp, re.sub(r"\W+", "-", name).strip("-"))
        make_tree(r, a.files)
        roots[name] = r
        return r

    servery = servery_server(binary, root_for("servery"), tmp)
    servers = [start(servery, started, True)]
    if tests & {"propfind", "lock"}:
        for make, name in ((apache_server, "Apache mod_dav"), (rclone_server, "rclone serve webdav")):
            srv = make(root_for(name), tmp)
            if srv is None:
                print(f"{name}: not installed, skipped", flush=True)
                continue
            if start(srv, started, False):
                servers.append(srv)
    versions = {"Apache mod_dav": version(["apache2", "-v"], r"Apache/(\S+)"),
                "rclone serve webdav": version(["rclone", "version"], r"rclone (v\S+)")}
    date = time.strftime("%Y-%m-%d %H:%M")
    print(f"{date}, {os.cpu_count()} CPUs, load {load1():.2f}; servery {binary}; "
          + ", ".join(f"{s.name} {versions.get(s.name, '')}".strip() for s in servers[1:]), flush=True)
    servery_failures = []
    report = []

    if "propfind" in tests:
        runs, sizes, note = bench_propfind(servers, a, tmp)
        rows = {n: {"rps": statistics.median(r["rps"] for r in rs),
                    "cpu_us": statistics.median(r["cpu_us"] for r in rs),
                    "non2xx": sum(r["non2xx"] for r in rs),
                    "socket_errors": sum(r["socket_errors"] for r in rs),
                    "spread": " ".join(r["spread"] for r in rs)} for n, rs in runs.items()}
        report += ["", f"1. PROPFIND Depth 1, allprop, /list/ of {a.files} files; wrk -t{a.threads} "
                   f"-c{a.connections}, {a.seconds} s x {a.rounds} rounds alternated, median ({note})", "",
                   "| server | req/s | server CPU µs/req | response bytes | connections per process, by round | non-2xx | socket errors |",
                   "|---|---|---|---|---|---|---|"]
        for n, r in rows.items():
            report.append(f"| {n} | {r['rps']:.0f} | {r['cpu_us']:.0f} | {sizes[n]} | {r['spread']} | "
                          f"{r['non2xx']} | {r['socket_errors']} |")
        sv = rows["servery"]
        for n, r in rows.items():
            if n != "servery":
                report.append(f"servery / {n}: **{sv['rps'] / r['rps']:.2f}×** req/s"
                              + (" (goal ≥ 2× Apache)" if n.startswith("Apache") else ""))
        if sv["non2xx"] or sv["socket_errors"]:
            servery_failures.append(f"PROPFIND: {sv['non2xx']} non-2xx, {sv['socket_errors']} socket errors")

    if "put" in tests:
        plain = start(servery_server(binary, root_for("servery-plain"), tmp, dav=False), started, True)
        roots[plain.name] = roots.pop("servery-plain")
        runs, cpu, bad, note = bench_put(servery, plain, a, tmp, roots)
        med = {n: statistics.median(v) if v else float("nan") for n, v in runs.items()}
        report += ["", f"2. PUT of {a.put_mib} MiB with curl -T, {a.puts} each, alternated, "
                   f"median ({note})", "",
                   "| server | MB/s | runs (MB/s) | server CPU ms per upload, median | failed |",
                   "|---|---|---|---|---|"]
        for n in runs:
            c = f"{statistics.median(cpu[n]) * 1e3:.0f}" if cpu[n] else "-"
            report.append(f"| {n} | {med[n]:.0f} | "
                          f"{', '.join(f'{x:.0f}' for x in runs[n])} | {c} | {bad[n]} |")
        report.append(f"--dav / plain upload: **{med[servery.name] / med[plain.name]:.3f}×** (goal ≥ 0.95)")
        if bad[servery.name] or bad[plain.name]:
            servery_failures.append(f"PUT: {bad[servery.name]} + {bad[plain.name]} failed uploads")

    if "lock" in tests:
        runs, statuses, steps, cpu, note = bench_lock(servers, a)
        med = {n: statistics.median(m for m, _ in rs) for n, rs in runs.items()}
        report += ["", f"3. LOCK + PUT (If: token) + UNLOCK of a 1 KiB file, one keep-alive "
                   f"connection, {a.cycles} cycles x {a.rounds} rounds alternated; median of the "
                   f"rounds' mean cycle ({note})", "",
                   "| server | ms/cycle | median cycle ms | p99 ms | median LOCK / PUT / UNLOCK ms | "
                   "server CPU ms/cycle | statuses |", "|---|---|---|---|---|---|---|"]
        for n, rs in runs.items():
            every = sorted(t for _, ts in rs for t in ts)
            p50 = statistics.median(every) * 1e3 if every else float("nan")
            p99 = every[min(len(every) - 1, int(len(every) * 0.99))] * 1e3 if every else float("nan")
            st = ", ".join(f"{k}: {v}" for k, v in sorted(statuses[n].items()))
            per = " / ".join(f"{statistics.median(steps[n][m]) * 1e3:.3f}" if steps[n].get(m) else "-"
                             for m in ("LOCK", "PUT", "UNLOCK"))
            c = f"{statistics.median(cpu[n]) * 1e3:.3f}" if cpu[n] else "-"
            report.append(f"| {n} | {med[n] * 1e3:.3f} | {p50:.3f} | {p99:.3f} | {per} | {c} | {st} |")
        for n in runs:
            if n != "servery":
                report.append(f"{n} / servery time per cycle (> 1: servery faster): "
                              f"**{med[n] / med['servery']:.2f}×**"
                              + (" (goal ≥ 1.0)" if n.startswith("Apache") else ""))
        bad = {s: c for s, c in statuses["servery"].items() if s // 100 != 2}
        if bad or sum(len(ts) for _, ts in runs["servery"]) != a.cycles * a.rounds:
            servery_failures.append(f"LOCK cycles: servery answered {bad}")

    print("\n".join(report))
    print(f"\n`scripts/bench-dav.py {' '.join(sys.argv[1:])}`".rstrip() +
          f", {date}, {os.cpu_count()} CPUs, load at the end {load1():.2f}")
    if servery_failures:
        print("\n!!!! SERVERY ANSWERED NON-2xx: " + "; ".join(servery_failures) + " !!!!", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
