#!/usr/bin/env python3
"""HTTPS benchmark: servery against nginx and Caddy in their default TLS configurations,
one run, the same ECDSA P-256 certificate, 2 workers each (Caddy is one process).

    scripts/bench-tls.py [--seconds 5] [--rounds 3] [--servery PATH]...

--servery may be given more than once (an A/B of two builds, alternated with the peers
round by round); each is compared with every other server.

Three rows, each a 1 KiB file:
  keep-alive   wrk, one TLS connection per client for the whole run;
  resumed      wrk with `Connection: close`: a new connection per request, which wrk's
               OpenSSL client resumes with the session (ticket) of its previous one;
  full         `openssl s_time -new`, two in parallel: a new connection per request and
               never a resumption (s_time -new discards every session).
Loopback only, bounded in time. Besides requests per second it reports the CPU time the
server's process tree spent per request (utime + stime from /proc).
"""
import argparse
import importlib.util
import os
import re
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time

from release_binary import release_binary

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("bench_http", os.path.join(HERE, "bench-http.py"))
bench_http = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_http)
free_port, wait_port, tree_cpu_s, wrk = (bench_http.free_port, bench_http.wait_port,
                                         bench_http.tree_cpu_s, bench_http.wrk)


def https_answers(port, bound=15.0):
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    end = time.time() + bound
    while time.time() < end:
        try:
            import http.client
            c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=2)
            c.request("GET", "/1k.bin")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"port {port} never answered 200 over TLS")


class Server(bench_http.Server):
    def __enter__(self):
        self.proc = subprocess.Popen(self.cmd, cwd=self.cwd, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        wait_port(self.port, self.proc)
        https_answers(self.port)
        return self


def certificate(tmp):
    cert, key = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True)
    return cert, key


def nginx(root, tmp, cert, key):
    port = free_port()
    conf = os.path.join(tmp, "nginx-tls.conf")
    # Only what serving TLS needs; every ssl_* setting at its default (session tickets on,
    # keys made once by the master and shared by its workers) except `ssl_protocols`:
    # nginx 1.22 (Debian's) defaults to TLS 1.2 and below, so without it every client
    # resumes with a TLS 1.2 abbreviated handshake, which has no key exchange at all, while
    # servery and Caddy resume TLS 1.3 (with one). Debian's packaged nginx.conf and
    # nginx 1.23.4 and later enable TLS 1.3, as here.
    with open(conf, "w") as f:
        f.write(f"""worker_processes 2; daemon off; pid {conf}.pid; error_log /dev/null;
events {{ worker_connections 4096; }}
http {{ access_log off; sendfile on; tcp_nopush on; tcp_nodelay on; keepalive_requests 100000;
  client_body_temp_path {tmp}; proxy_temp_path {tmp}; fastcgi_temp_path {tmp}; uwsgi_temp_path {tmp}; scgi_temp_path {tmp};
  server {{ listen 127.0.0.1:{port} ssl; ssl_protocols TLSv1.2 TLSv1.3;
    ssl_certificate {cert}; ssl_certificate_key {key};
    root {root}; }} }}
""")
    return Server("nginx (2 workers)", ["nginx", "-c", conf], port)


def caddy(root, tmp, cert, key):
    port = free_port()
    conf = os.path.join(tmp, "Caddyfile")
    # Caddy's TLS defaults (session tickets with its own key rotation); no admin endpoint
    # and no HTTP→HTTPS redirect listener, which need ports of their own.
    with open(conf, "w") as f:
        f.write(f"""{{
  admin off
  auto_https disable_redirects
  storage file_system {tmp}/caddy
}}
https://127.0.0.1:{port}, https://localhost:{port} {{
  tls {cert} {key}
  root * {root}
  file_server
}}
""")
    env_cmd = ["caddy", "run", "--config", conf, "--adapter", "caddyfile"]
    return Server("caddy", env_cmd, port)


def s_time(port, seconds, clients=2):
    """Full handshakes per second: `clients` parallel `openssl s_time -new`."""
    cmd = ["openssl", "s_time", "-connect", f"127.0.0.1:{port}", "-new",
           "-time", str(seconds), "-www", "/1k.bin"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
             for _ in range(clients)]
    total = 0.0
    for p in procs:
        out = p.communicate(timeout=seconds + 30)[0]
        m = re.search(r"(\d+) connections in (\d+) real seconds", out)
        if m and int(m.group(2)) > 0:
            total += int(m.group(1)) / int(m.group(2))
    return total


def measure(srv, seconds, conns):
    url = f"https://127.0.0.1:{srv.port}/1k.bin"
    row = {}
    for name, close in (("keep-alive", False), ("resumed", True)):
        r = wrk(url, seconds, conns, close=close, pid=srv.proc.pid)
        row[name] = (r["rps"], r["cpu_us"], r["non2xx"], r["socket_errors"], r["client_us"])
    cpu0 = tree_cpu_s(srv.proc.pid)
    t0 = time.time()
    rps = s_time(srv.port, seconds)
    n = rps * (time.time() - t0)
    row["full"] = (rps, (tree_cpu_s(srv.proc.pid) - cpu0) * 1e6 / n if n else float("nan"), 0, "",
                   float("nan"))
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--conns", type=int, default=16)
    ap.add_argument("--servery", action="append", default=None,
                    help="servery binary, repeatable (default: the release build, built if stale)")
    args = ap.parse_args()
    for tool in ("wrk", "openssl"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is required")
    binaries = args.servery or [release_binary()]
    tmp = tempfile.mkdtemp(prefix="servery-bench-tls-")
    root = os.path.join(tmp, "root")
    os.mkdir(root)
    with open(os.path.join(root, "1k.bin"), "wb") as f:
        f.write(os.urandom(1024))
    bench_http.let_settle([os.path.join(root, "1k.bin")])
    cert, key = certificate(tmp)
    servers = []
    for path in binaries:
        p = free_port()
        name = "servery (2 workers)" if len(binaries) == 1 else f"servery {os.path.basename(path)}"
        servers.append(Server(name, [path, root, "--port", str(p), "--bind", "127.0.0.1",
                                     "--workers", "2", "--tls-cert", cert, "--tls-key", key], p))
    ours_n = len(servers)
    for make, tool in ((nginx, "nginx"), (caddy, "caddy")):
        if shutil.which(tool):
            servers.append(make(root, tmp, cert, key))
        else:
            print(f"# {tool} not installed: skipped", file=sys.stderr)
    results = {s.name: [] for s in servers}
    for _ in range(args.rounds):
        for srv in servers:
            with srv:
                results[srv.name].append(measure(srv, args.seconds, args.conns))
    rows = ("keep-alive", "resumed", "full")
    print(f"HTTPS 1 KiB, ECDSA P-256, median of {args.rounds} rounds × {args.seconds} s, "
          f"wrk -t1 -c{args.conns}, s_time ×2; req/s [server CPU µs/request, "
          f"and wrk's where wrk is the client]")
    print("| server | " + " | ".join(rows) + " |")
    print("|---|" + "---|" * len(rows))
    med = {}
    for name, runs in results.items():
        med[name] = {k: (statistics.median(r[k][0] for r in runs),
                         statistics.median(r[k][1] for r in runs),
                         statistics.median(r[k][4] for r in runs)) for k in rows}
        errs = sum(r[k][2] for r in runs for k in rows)

        def cell(m):
            client = "" if m[2] != m[2] else f" / {m[2]:.0f}"
            return f"{m[0]:.0f} [{m[1]:.0f}{client}]"
        cells = " | ".join(cell(med[name][k]) for k in rows)
        print(f"| {name} | {cells} |" + (f" non-2xx {errs}" if errs else ""))
    for s in servers[:ours_n]:
        ours = med[s.name]
        for name in med:
            if name == s.name:
                continue
            ratios = " | ".join(f"{ours[k][0] / med[name][k][0]:.2f}×" for k in rows)
            print(f"| {s.name} / {name} | {ratios} |")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
