#!/usr/bin/env python3
"""Directory-listing benchmark: a folder of 10,000 entries as HTML and as JSON, servery
against dufs and miniserve when they are installed (cargo install dufs miniserve, outside
this repository; skipped and said so otherwise).

Loopback only, bounded in time (wrk, one thread, 16 connections, SECONDS per row).

    scripts/bench-listing.py [--seconds 5] [--entries 10000] [--binary PATH]

Without --binary the release build is used (scripts/release_binary.py builds it).
Each server gets the same tree; requests carry no Accept-Encoding (every server answers
identity), so the figure is the cost of reading the directory and rendering it.
"""
import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
_spec = importlib.util.spec_from_file_location("bench_http", os.path.join(HERE, "bench-http.py"))
bench_http = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_http)


def make_tree(root, entries):
    os.makedirs(root, exist_ok=True)
    # What bench-http.py's readiness probe asks for.
    with open(os.path.join(root, "1k.bin"), "wb") as f:
        f.write(b"x" * 1024)
    for i in range(entries):
        if i % 10 == 0:
            os.makedirs(os.path.join(root, f"dir-{i:05}"), exist_ok=True)
        else:
            with open(os.path.join(root, f"file-{i:05}.txt"), "wb") as f:
                f.write(b"x" * (i % 4096))


def servers(binary, root):
    out = []
    p = bench_http.free_port()
    out.append((bench_http.Server("servery", [binary, root, "--port", str(p), "--workers", "2"], p),
                "/", "/?format=json"))
    if shutil.which("dufs"):
        p = bench_http.free_port()
        out.append((bench_http.Server("dufs", ["dufs", root, "-b", "127.0.0.1", "-p", str(p)], p),
                    "/", "/?json"))
    else:
        print("dufs: not installed, skipped", file=sys.stderr)
    if shutil.which("miniserve"):
        p = bench_http.free_port()
        out.append((bench_http.Server("miniserve", ["miniserve", root, "-i", "127.0.0.1", "-p", str(p)], p),
                    "/", None))
    else:
        print("miniserve: not installed, skipped", file=sys.stderr)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--entries", type=int, default=10_000)
    ap.add_argument("--binary")
    args = ap.parse_args()
    binary = args.binary or bench_http.release_binary()
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "root")
        make_tree(root, args.entries)
        rows = []
        for srv, html, json in servers(binary, root):
            with srv:
                row = {"server": srv.name}
                for kind, path in (("html", html), ("json", json)):
                    if path is None:
                        row[kind] = None
                        continue
                    url = f"http://127.0.0.1:{srv.port}{path}"
                    size = len(subprocess.run(["curl", "-s", url], capture_output=True).stdout)
                    result = bench_http.wrk(url, args.seconds, 16, pid=srv.proc.pid)
                    row[kind] = (result["rps"], size)
                rows.append(row)
        print(f"| server | {args.entries:,} entries, HTML req/s (bytes) | JSON req/s (bytes) |")
        print("|---|---|---|")
        for row in rows:
            cells = [f"{r[0]:,.0f} ({r[1]:,})" if r else "-" for r in (row["html"], row["json"])]
            print(f"| {row['server']} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
