#!/usr/bin/env python3
"""Time to serve a normal request while hostile connections hold the server, servery
against nginx with its default timeouts, in one run. Loopback only, bounded in time.

    scripts/bench-hostile.py [--servery BINARY] [--seconds 20] [--attackers 500,3000]
                             [--kinds silent,slowloris] [--no-nginx]

Two kinds of attacker, each holding N connections and reopening every one the server
closes, as fast as it is closed:

- silent: connect and send nothing;
- slowloris: send a request head one byte every 5 seconds, never finishing it.

Meanwhile a prober sends one ordinary `GET /1k.bin` (new connection, 5 s timeout) every
100 ms and records how long each took. Both servers run 2 workers with 1024 connections
each (servery's default `--max-connections`; nginx's `worker_connections` set to match)
and their own default deadlines (nginx: client_header_timeout 60 s, keepalive_timeout
75 s). Prints, per server and attack: probes, failures, median / p99 / max latency.
"""
import argparse
import os
import selectors
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import importlib

bench = importlib.import_module("bench-http")


class Attack:
    """N connections of one kind, reopened as soon as the server closes one."""

    def __init__(self, port, n, kind):
        self.port, self.n, self.kind = port, n, kind
        self.stop = threading.Event()
        self.reopened = 0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def open(self, sel):
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect(("127.0.0.1", self.port))
        except BlockingIOError:
            pass
        except OSError:
            s.close()
            return
        sel.register(s, selectors.EVENT_READ, 0)

    def run(self):
        sel = selectors.DefaultSelector()
        for _ in range(self.n):
            self.open(sel)
        head = b"GET /1k.bin HTTP/1.1\r\nHost: localhost\r\nX-a: " + b"a" * 4000
        next_drip = time.time() + 5
        while not self.stop.is_set():
            for key, _ in sel.select(timeout=0.2):
                s = key.fileobj
                try:
                    data = s.recv(4096)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data = b""
                if not data:
                    sel.unregister(s)
                    s.close()
                    self.reopened += 1
                    self.open(sel)
            if self.kind == "slowloris" and time.time() >= next_drip:
                next_drip = time.time() + 5
                for key in list(sel.get_map().values()):
                    s, sent = key.fileobj, key.data
                    try:
                        s.send(head[sent:sent + 1])
                        sel.modify(s, selectors.EVENT_READ, min(sent + 1, len(head) - 1))
                    except OSError:
                        pass
        for key in list(sel.get_map().values()):
            key.fileobj.close()


def probe(port, seconds):
    """(latencies of answered probes, failures)."""
    lat, failed = [], 0
    end = time.time() + seconds
    while time.time() < end:
        t = time.time()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
                c.settimeout(5)
                c.sendall(b"GET /1k.bin HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                got = b""
                while True:
                    d = c.recv(65536)
                    if not d:
                        break
                    got += d
                if got.startswith(b"HTTP/1.1 200") and len(got) > 1024:
                    lat.append(time.time() - t)
                else:
                    failed += 1
        except OSError:
            failed += 1
        time.sleep(max(0.0, 0.1 - (time.time() - t)))
    return lat, failed


def report(name, attack, n, lat, failed, reopened):
    if lat:
        lat.sort()
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
        cells = f"median {statistics.median(lat) * 1e3:8.1f} ms  p99 {p99 * 1e3:8.1f} ms  max {lat[-1] * 1e3:8.1f} ms"
    else:
        cells = "no probe answered"
    total = len(lat) + failed
    print(f"{name:28} {attack:9} N={n:<5} probes {total:4}  failed {failed:4}  {cells}  (attacker reopened {reopened})",
          flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--servery")
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--attackers", default="500,3000")
    ap.add_argument("--kinds", default="silent,slowloris")
    ap.add_argument("--no-nginx", action="store_true", help="servery alone (e.g. an older binary)")
    a = ap.parse_args()
    servery = a.servery or bench.release_binary()
    tmp = tempfile.mkdtemp(prefix="servery-hostile-")
    root = os.path.join(tmp, "www")
    os.makedirs(root)
    with open(os.path.join(root, "1k.bin"), "wb") as f:
        f.write(os.urandom(1024))
    servers = []
    p = bench.free_port()
    servers.append(lambda p=p: bench.Server("servery (2 workers)", [servery, root, "--port", str(p), "--workers", "2",
                                                                   "--control-socket", os.path.join(tmp, "ctl.sock")], p))
    if shutil.which("nginx") and not a.no_nginx:
        def nginx(p=bench.free_port()):
            conf = os.path.join(tmp, "nginx.conf")
            with open(conf, "w") as f:
                f.write(f"""worker_processes 2; daemon off; pid {conf}.pid; error_log /dev/null;
events {{ worker_connections 1024; }}
http {{ access_log off; sendfile on;
  client_body_temp_path {tmp}; proxy_temp_path {tmp}; fastcgi_temp_path {tmp}; uwsgi_temp_path {tmp}; scgi_temp_path {tmp};
  server {{ listen 127.0.0.1:{p}; root {root}; }} }}
""")
            return bench.Server("nginx (2 workers, defaults)", ["nginx", "-c", conf], p)
        servers.append(nginx)
    elif not a.no_nginx:
        print("nginx not installed: servery alone", file=sys.stderr)
    for make in servers:
        for kind in a.kinds.split(","):
            for n in (int(x) for x in a.attackers.split(",")):
                with make() as srv:
                    attack = Attack(srv.port, n, kind)
                    attack.thread.start()
                    time.sleep(3)  # let the attack take hold
                    lat, failed = probe(srv.port, a.seconds)
                    attack.stop.set()
                    attack.thread.join(timeout=10)
                    report(srv.name, kind, n, lat, failed, attack.reopened)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
