#!/usr/bin/env python3
"""Reverse-proxy benchmark: servery's `--proxy` against nginx `proxy_pass` (with a
keep-alive upstream pool) and Caddy `reverse_proxy`, in front of the same upstream, in
one run (issue 40).

Loopback only, bounded in time. The upstream is nginx serving static files (one worker of
its own, so that it is not what limits); a proxy that is not installed is skipped (and
said so). Install with: apt-get install wrk nginx-light caddy.

    scripts/bench-proxy.py [--seconds 8] [--rounds 3] [--out FILE]

For each proxy: 1 KiB over keep-alive connections (wrk -c64) and a 64 MiB body streamed
(wrk -c4), requests per second and GB/s, and in brackets the CPU time the proxy's whole
process tree spent per request (utime + stime from /proc; the upstream's is not counted).
The goal the issue states is servery ≥ 1.0× nginx on both. Do not run it while other
builds or benchmarks run: they share the cores.
"""
import argparse
import importlib.util
import os
import shutil
import statistics
import sys
import tempfile
import time

from release_binary import release_binary

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("bench_http", os.path.join(HERE, "bench-http.py"))
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def upstream_nginx(root, port, tmp):
    conf = os.path.join(tmp, "upstream.conf")
    with open(conf, "w") as f:
        f.write(f"""worker_processes 1; daemon off; pid {conf}.pid; error_log /dev/null;
events {{ worker_connections 4096; }}
http {{ access_log off; sendfile on; tcp_nopush on; tcp_nodelay on; keepalive_requests 1000000;
  client_body_temp_path {tmp}; proxy_temp_path {tmp}; fastcgi_temp_path {tmp}; uwsgi_temp_path {tmp}; scgi_temp_path {tmp};
  server {{ listen 127.0.0.1:{port}; root {root}; }} }}
""")
    return bench.Server("upstream nginx", ["nginx", "-c", conf], port)


def nginx_proxy(up_port, port, tmp):
    """nginx proxy_pass with 2 workers and an upstream keep-alive pool (`keepalive 64`,
    HTTP/1.1, `Connection` cleared), as its documentation recommends."""
    conf = os.path.join(tmp, "proxy.conf")
    with open(conf, "w") as f:
        f.write(f"""worker_processes 2; daemon off; pid {conf}.pid; error_log /dev/null;
events {{ worker_connections 4096; }}
http {{ access_log off; tcp_nodelay on; keepalive_requests 1000000;
  client_body_temp_path {tmp}; proxy_temp_path {tmp}; fastcgi_temp_path {tmp}; uwsgi_temp_path {tmp}; scgi_temp_path {tmp};
  upstream up {{ server 127.0.0.1:{up_port}; keepalive 64; keepalive_requests 1000000; }}
  server {{ listen 127.0.0.1:{port};
    location / {{ proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_buffering off; proxy_buffers 4 64k; proxy_buffer_size 64k; }} }} }}
""")
    return bench.Server("nginx proxy_pass (2 workers, keepalive 64)", ["nginx", "-c", conf], port)


def caddy_proxy(up_port, port, tmp):
    """Caddy's `reverse_proxy` from a Caddyfile: plain HTTP on loopback (`auto_https off`;
    `caddy reverse-proxy --from http://...` still sets up TLS for an IP address), any Host,
    no admin endpoint."""
    conf = os.path.join(tmp, "Caddyfile")
    with open(conf, "w") as f:
        f.write(f"""{{
	admin off
	auto_https off
}}
:{port} {{
	bind 127.0.0.1
	reverse_proxy 127.0.0.1:{up_port}
}}
""")
    return bench.Server("caddy reverse_proxy",
                        ["caddy", "run", "--config", conf, "--adapter", "caddyfile"], port)


def measure(srv, s):
    base = f"http://127.0.0.1:{srv.port}"
    pid = srv.proc.pid
    return {"1k": bench.wrk(base + "/1k.bin", s, 64, pid=pid),
            "64m": bench.wrk(base + "/64m.bin", s, 4, pid=pid)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--servery", default=None,
                    help="servery binary (default: the release build, built if stale)")
    ap.add_argument("--out")
    args = ap.parse_args()
    for tool in ("wrk", "nginx"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is not installed (apt-get install wrk nginx-light)")
    args.servery = args.servery or release_binary()
    tmp = tempfile.mkdtemp(prefix="servery-bench-proxy-")
    root = os.path.join(tmp, "www")
    os.makedirs(root)
    for name, size in (("1k.bin", 1024), ("64m.bin", 64 * 1024 * 1024)):
        with open(os.path.join(root, name), "wb") as f:
            f.write(os.urandom(size))
    up_port = bench.free_port()
    upstream = upstream_nginx(root, up_port, tmp)
    proxies = []
    p = bench.free_port()
    # Its own (empty) directory: every request goes to the upstream.
    empty = os.path.join(tmp, "empty")
    os.makedirs(empty)
    proxies.append(bench.Server("servery --proxy (2 workers)",
                                [args.servery, empty, "--port", str(p), "--workers", "2",
                                 "--proxy", f"/=http://127.0.0.1:{up_port}"], p))
    proxies.append(nginx_proxy(up_port, bench.free_port(), tmp))
    if shutil.which("caddy"):
        proxies.append(caddy_proxy(up_port, bench.free_port(), tmp))
    else:
        print("caddy: skipped (not installed)", flush=True)
    s = args.seconds
    load0 = open("/proc/loadavg").read().split()[0]
    runs = {x.name: [] for x in proxies}
    with upstream:
        for round_no in range(args.rounds):
            for srv in (proxies if round_no % 2 == 0 else proxies[::-1]):
                try:
                    with srv:
                        r = measure(srv, s)
                        runs[srv.name].append(r)
                        print(f"round {round_no + 1}/{args.rounds} {srv.name}: "
                              f"{r['1k']['rps']:.0f} req/s 1k [{r['1k']['cpu_us']:.0f} µs], "
                              f"{r['64m']['bps'] / 1e9:.2f} GB/s 64m [{r['64m']['cpu_us']:.0f} µs]",
                              flush=True)
                except Exception as e:
                    print(f"{srv.name}: skipped ({e})", flush=True)
    shutil.rmtree(tmp, ignore_errors=True)
    lines = [f"wrk -t1 (c64 keep-alive 1 KiB, c4 for 64 MiB), {s} s each, loopback, one nginx "
             f"upstream for all, medians over {args.rounds} interleaved rounds. In brackets: "
             f"the proxy's CPU µs per request (all its processes).\n",
             "| proxy | 1 KiB req/s | 64 MiB GB/s |", "|---|---|---|"]
    med = {}
    for name, rs in runs.items():
        if not rs:
            continue
        m = {k: {f: statistics.median(r[k][f] for r in rs) for f in ("rps", "bps", "cpu_us")}
             for k in ("1k", "64m")}
        med[name] = m
        lines.append(f"| {name} | {m['1k']['rps']:.0f} [{m['1k']['cpu_us']:.0f}] | "
                     f"{m['64m']['bps'] / 1e9:.2f} [{m['64m']['cpu_us']:.0f}] |")
    sv = next((m for n, m in med.items() if n.startswith("servery")), None)
    if sv:
        lines += ["", "| servery / peer | 1 KiB | 64 MiB |", "|---|---|---|"]
        for n, m in med.items():
            if not n.startswith("servery") and m["1k"]["rps"] and m["64m"]["bps"]:
                lines.append(f"| {n} | {sv['1k']['rps'] / m['1k']['rps']:.2f}× | "
                             f"{sv['64m']['bps'] / m['64m']['bps']:.2f}× |")
    report = "\n".join(lines) + (f"\n\n{time.strftime('%Y-%m-%d')}, `scripts/bench-proxy.py "
                                 f"--seconds {s} --rounds {args.rounds}`; load average "
                                 f"before/after: {load0} / {open('/proc/loadavg').read().split()[0]}\n")
    print(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report)


if __name__ == "__main__":
    main()
