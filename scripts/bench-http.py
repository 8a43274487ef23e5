#!/usr/bin/env python3
"""HTTP benchmark: servery against the servers people would otherwise pick, in one run.

Loopback only, bounded in time. Peers that are not installed are skipped (and said so).
Install them with: apt-get install wrk nghttp2-client nginx-light caddy, and
cargo install static-web-server dufs miniserve (outside this repository).

    scripts/bench-http.py [--seconds 8] [--rounds 3] [--out FILE]

Besides requests per second it reports the CPU time the server's whole process tree spent
per request (utime + stime from /proc, parent and workers): on a machine shared with
other work, throughput moves with the neighbours' load, CPU per request much less.
"""
import argparse
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from release_binary import release_binary

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def let_settle(paths, settle=2.1):
    """Waits until every path was last changed `settle` seconds ago. servery's file cache
    keeps only files whose last change is 2 s old (docs/decisions/0009-small-file-cache.md);
    a served tree is not being written, so neither is the benchmark's."""
    newest = max(os.stat(p).st_ctime for p in paths)
    time.sleep(max(0.0, newest + settle - time.time()))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, bound=15.0):
    end = time.time() + bound
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} never opened")


def tree_pids(pid):
    pids, frontier = {pid}, [pid]
    while frontier:
        p = frontier.pop()
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                kids = [int(x) for x in f.read().split()]
        except OSError:
            kids = []
        for k in kids:
            if k not in pids:
                pids.add(k)
                frontier.append(k)
    return pids


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


def tree_rss_kib(pid):
    """RSS of a process and all its descendants, in KiB."""
    total, workers = 0, []
    for p in tree_pids(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                m = re.search(r"VmRSS:\s+(\d+)", f.read())
                if m:
                    total += int(m.group(1))
                    workers.append(int(m.group(1)))
        except OSError:
            pass
    return total, sorted(workers)


def wrk(url, seconds, conns, close=False, pid=None):
    cmd = ["wrk", "-t1", f"-c{conns}", f"-d{seconds}s", "--latency"]
    if close:
        cmd += ["-H", "Connection: close"]
    cpu0 = tree_cpu_s(pid) if pid else 0
    # wrk's own CPU (user + system, every thread), from the rusage of reaped children.
    # On loopback the client's system time includes delivering its packets to the server,
    # waking a sleeping server among it, so it says what the server costs its peer too.
    client0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd + [url], capture_output=True, text=True, timeout=seconds + 30).stdout
    client1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = tree_cpu_s(pid) - cpu0 if pid else 0
    client = (client1.ru_utime - client0.ru_utime) + (client1.ru_stime - client0.ru_stime)
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    total = int(re.search(r"(\d+) requests in", out).group(1))
    m = re.search(r"Transfer/sec:\s+([\d.]+)(\w+)", out)
    scale = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9}[m.group(2)]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket_errors = re.search(r"Socket errors: (.*)", out)
    return {"rps": rps, "bps": float(m.group(1)) * scale,
            "cpu_us": cpu * 1e6 / total if total else float("nan"),
            "client_us": client * 1e6 / total if total else float("nan"),
            "non2xx": int(errors.group(1)) if errors else 0,
            "socket_errors": socket_errors.group(1) if socket_errors else ""}


def h2load(url, seconds, conns=16, streams=8):
    """req/s of successful h2c requests; None when h2load is missing or the server does
    not speak h2c (nothing succeeded)."""
    if not shutil.which("h2load"):
        return None
    out = subprocess.run(["h2load", "-D", str(seconds), "-c", str(conns), "-m", str(streams), url],
                         capture_output=True, text=True, timeout=seconds + 30).stdout
    m = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
    ok = re.search(r"(\d+) succeeded", out)
    if not m or not ok or int(ok.group(1)) == 0:
        return None
    return float(m.group(1))


def answers(port, bound=15.0):
    """Wait until GET /1k.bin is answered 200 (a listening socket alone may only be the
    backlog of workers still starting)."""
    end = time.time() + bound
    while time.time() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as c:
                c.sendall(b"GET /1k.bin HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                if c.recv(64).startswith(b"HTTP/1.1 200"):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"port {port} never answered 200")


class Server:
    def __init__(self, name, cmd, port, cwd=None, cleanup=None, h2_port=None):
        self.name, self.cmd, self.port, self.cwd, self.cleanup = name, cmd, port, cwd, cleanup
        # Where h2c is served, when not on the main port (nginx before 1.25.1).
        self.h2_port = h2_port or port

    def __enter__(self):
        self.proc = subprocess.Popen(self.cmd, cwd=self.cwd, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        wait_port(self.port, self.proc)
        answers(self.port)
        return self

    def __exit__(self, *exc):
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)
        except Exception:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except Exception:
                pass
        if self.cleanup:
            self.cleanup()


def nginx_version():
    out = subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr
    m = re.search(r"nginx/(\d+)\.(\d+)\.(\d+)", out)
    return tuple(int(x) for x in m.groups()) if m else (0, 0, 0)


def nginx_server(root, port, tmp, deferred=False):
    """nginx with 2 workers; `deferred` adds `listen ... deferred` (TCP_DEFER_ACCEPT), which
    servery sets on its listeners and nginx leaves off unless asked."""
    if not shutil.which("nginx"):
        return None
    conf = os.path.join(tmp, "nginx-deferred.conf" if deferred else "nginx.conf")
    opt = " deferred" if deferred else ""
    # `http2 on` (1.25.1+) serves HTTP/1.1 and h2c on one port; older nginx needs
    # `listen ... http2`, which speaks only HTTP/2 there, so h2c gets a port of its own.
    if nginx_version() >= (1, 25, 1):
        h2_port, listen = port, f"listen 127.0.0.1:{port}{opt}; http2 on;"
    else:
        h2_port = free_port()
        listen = f"listen 127.0.0.1:{port}{opt}; listen 127.0.0.1:{h2_port}{opt} http2;"
    with open(conf, "w") as f:
        f.write(f"""worker_processes 2; daemon off; pid {conf}.pid; error_log /dev/null;
events {{ worker_connections 4096; }}
http {{ access_log off; sendfile on; tcp_nopush on; tcp_nodelay on; keepalive_requests 100000;
  client_body_temp_path {tmp}; proxy_temp_path {tmp}; fastcgi_temp_path {tmp}; uwsgi_temp_path {tmp}; scgi_temp_path {tmp};
  server {{ {listen} root {root}; autoindex on; }} }}
""")
    name = "nginx (2 workers, deferred)" if deferred else "nginx (2 workers)"
    return Server(name, ["nginx", "-c", conf], port, h2_port=h2_port)


def peers(root, tmp):
    out = []
    p = free_port()
    n = nginx_server(root, p, tmp)
    if n:
        out.append(n)
        # The same nginx with `listen ... deferred`: the TCP_DEFER_ACCEPT servery sets.
        out.append(nginx_server(root, free_port(), tmp, deferred=True))
    if shutil.which("caddy"):
        p = free_port()
        out.append(Server("caddy", ["caddy", "file-server", "--root", root, "--listen", f"127.0.0.1:{p}"], p))
    if shutil.which("static-web-server"):
        p = free_port()
        out.append(Server("static-web-server", ["static-web-server", "--root", root, "--host", "127.0.0.1",
                                                "--port", str(p), "--log-level", "error"], p))
    if shutil.which("dufs"):
        p = free_port()
        out.append(Server("dufs", ["dufs", root, "-b", "127.0.0.1", "-p", str(p)], p))
    if shutil.which("miniserve"):
        p = free_port()
        out.append(Server("miniserve", ["miniserve", root, "-i", "127.0.0.1", "-p", str(p)], p))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--servery", default=None,
                    help="servery binary (default: the release build, built if stale)")
    ap.add_argument("--out")
    ap.add_argument("--rounds", type=int, default=3,
                    help="run every server this many times, interleaved, and report medians")
    ap.add_argument("--only", help="comma-separated name prefixes of the servers to run, e.g. servery,nginx")
    args = ap.parse_args()
    args.servery = args.servery or release_binary()
    if not shutil.which("wrk"):
        sys.exit("wrk is not installed (apt-get install wrk)")
    tmp = tempfile.mkdtemp(prefix="servery-bench-")
    root = os.path.join(tmp, "www")
    os.makedirs(root)
    files = [("1k.bin", 1024), ("100k.bin", 100 * 1024), ("64m.bin", 64 * 1024 * 1024)]
    for name, size in files:
        with open(os.path.join(root, name), "wb") as f:
            f.write(os.urandom(size))
    let_settle([os.path.join(root, name) for name, _ in files])
    servers = []
    for workers in (1, 2):
        p = free_port()
        servers.append(Server(f"servery ({workers} worker{'s' if workers > 1 else ''})",
                              [args.servery, root, "--port", str(p), "--workers", str(workers)], p))
    servers += peers(root, tmp)
    if args.only:
        wanted = [w.strip() for w in args.only.split(",")]
        servers = [x for x in servers if any(x.name.startswith(w) for w in wanted)]
    s = args.seconds
    load0 = open("/proc/loadavg").read().split()[0]
    runs = {srv.name: [] for srv in servers}
    for round_no in range(args.rounds):
        # Alternate the order so that no server always follows the same neighbour.
        for srv in (servers if round_no % 2 == 0 else servers[::-1]):
            try:
                with srv:
                    r = measure(srv, s)
                    runs[srv.name].append(r)
                    print(f"round {round_no + 1}/{args.rounds} {srv.name}: "
                          f"{r['1k_keepalive']['rps']:.0f} req/s 1k, "
                          f"{r['100k_keepalive']['rps']:.0f} req/s 100k, "
                          f"{r['64m']['bps'] / 1e9:.2f} GB/s 64m, "
                          f"{r['1k_close']['rps']:.0f} req/s churn, h2c {r['h2c_1k']}, "
                          f"idle RSS {r['idle_rss_kib']} KiB {r['proc_rss_kib']}", flush=True)
            except Exception as e:  # a peer that fails to start is reported, not fatal
                print(f"{srv.name}: skipped ({e})", flush=True)
    rows = [median_row(runs[srv.name]) for srv in servers if runs[srv.name]]
    shutil.rmtree(tmp, ignore_errors=True)
    report = render(rows, s)
    report += (f"\n{time.strftime('%Y-%m-%d')}, `scripts/bench-http.py --seconds {s} "
               f"--rounds {args.rounds}`; "
               f"load average before/after: {load0} / {open('/proc/loadavg').read().split()[0]}\n")
    print(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report)


def measure(srv, s):
    """One pass of every test against a running server."""
    idle, per = tree_rss_kib(srv.proc.pid)
    base = f"http://127.0.0.1:{srv.port}"
    r = {"name": srv.name, "idle_rss_kib": idle, "proc_rss_kib": per}
    pid = srv.proc.pid
    r["1k_keepalive"] = wrk(base + "/1k.bin", s, 64, pid=pid)
    r["100k_keepalive"] = wrk(base + "/100k.bin", s, 64, pid=pid)
    r["64m"] = wrk(base + "/64m.bin", s, 4, pid=pid)
    r["1k_close"] = wrk(base + "/1k.bin", s, 32, close=True, pid=pid)
    r["h2c_1k"] = h2load(f"http://127.0.0.1:{srv.h2_port}/1k.bin", s)
    r["loaded_rss_kib"] = tree_rss_kib(srv.proc.pid)[0]
    return r


def median_row(runs):
    """The median of each figure over a server's rounds (RSS: the first round's idle
    figures, the largest loaded one)."""
    row = dict(runs[0])
    for k in ("1k_keepalive", "100k_keepalive", "64m", "1k_close"):
        row[k] = {f: statistics.median(r[k][f] for r in runs) for f in ("rps", "bps", "cpu_us")}
    h2 = [r["h2c_1k"] for r in runs if r["h2c_1k"] is not None]
    row["h2c_1k"] = statistics.median(h2) if h2 else None
    row["loaded_rss_kib"] = max(r["loaded_rss_kib"] for r in runs)
    return row


def render(rows, seconds):
    if not rows:
        return "no results\n"
    lines = [f"wrk -t1 (c64 keep-alive, c4 for 64 MiB, c32 new connection per request), "
             f"h2load -c16 -m8 for h2c, {seconds} s each, loopback, same run; medians over the "
             f"interleaved rounds. "
             f"In brackets: server CPU µs per request (all its processes).\n",
             "| server | 1 KiB req/s | 100 KiB req/s | 64 MiB GB/s | churn req/s | h2c 1 KiB req/s | idle RSS KiB (per process) | loaded RSS KiB |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        def cell(k, f="rps"):
            v = r[k][f] / 1e9 if f == "bps" else r[k][f]
            return f"{v:.2f} [{r[k]['cpu_us']:.0f}]" if f == "bps" else f"{v:.0f} [{r[k]['cpu_us']:.0f}]"
        h2 = f"{r['h2c_1k']:.0f}" if r["h2c_1k"] is not None else "-"
        lines.append(f"| {r['name']} | {cell('1k_keepalive')} | {cell('100k_keepalive')} | "
                     f"{cell('64m', 'bps')} | {cell('1k_close')} | {h2} | "
                     f"{r['idle_rss_kib']} {r['proc_rss_kib']} | {r['loaded_rss_kib']} |")
    servery = [r for r in rows if r["name"].startswith("servery (2")]
    if servery:
        sv = servery[0]
        lines += ["", "Ratios servery (2 workers) / peer:", "",
                  "| peer | 1 KiB | 100 KiB | 64 MiB | churn | h2c |", "|---|---|---|---|---|---|"]
        for r in rows:
            if r["name"].startswith("servery"):
                continue
            def ratio(k, f="rps"):
                return sv[k][f] / r[k][f] if r[k][f] else float("nan")
            h2 = (f"{sv['h2c_1k'] / r['h2c_1k']:.2f}×" if sv["h2c_1k"] and r["h2c_1k"] else "-")
            lines.append(f"| {r['name']} | {ratio('1k_keepalive'):.2f}× | {ratio('100k_keepalive'):.2f}× | "
                         f"{ratio('64m', 'bps'):.2f}× | {ratio('1k_close'):.2f}× | {h2} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
