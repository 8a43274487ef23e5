#!/usr/bin/env python3
"""Directory-listing benchmark: a folder of 10,000 entries as HTML and as JSON, servery
against dufs and miniserve when they are installed (cargo install dufs miniserve, outside
this repository; skipped and said so otherwise).

Loopback only, bounded in time (wrk, one thread, 16 connections, SECONDS per row).

    scripts/bench-listing.py [--seconds 5] [--entries 10000] [--binary PATH]
    scripts/bench-listing.py --archive [--files 1000] [--file-mib 1] [--rounds 3]

With --archive it measures folder downloads instead: a folder of FILES files of FILE_MIB
MiB of random bytes each (1 GiB by default), fetched whole as a zip by curl, ROUNDS
times per server in turn (servery `?archive=zip`; dufs `--allow-archive`, `?zip`;
miniserve `--enable-zip`, `?download=zip`), MB/s of archive received, the median.

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


# Each server: its command without the port, the flag that takes the port, the flags its
# folder archive needs, the listing's HTML and JSON paths (None: it has no JSON), and the
# folder's zip.
def peers(binary, root):
    return [
        ("servery", [binary, root, "--workers", "2"], "--port", [],
         "/", "/?format=json", "/folder/?archive=zip"),
        ("dufs", ["dufs", root, "-b", "127.0.0.1"], "-p", ["--allow-archive"],
         "/", "/?json", "/folder?zip"),
        ("miniserve", ["miniserve", root, "-i", "127.0.0.1"], "-p", ["--enable-zip"],
         "/", None, "/folder/?download=zip"),
    ]


def installed(binary, root, archive):
    """(name, server, entry) for servery and every peer installed."""
    out = []
    for entry in peers(binary, root):
        name, cmd, port_flag, archive_flags = entry[:4]
        if name != "servery" and not shutil.which(name):
            print(f"{name}: not installed, skipped", file=sys.stderr)
            continue
        p = bench_http.free_port()
        cmd = cmd + [port_flag, str(p)] + (archive_flags if archive else [])
        out.append((bench_http.Server(name, cmd, p), entry))
    return out


def servers(binary, root):
    """(server, HTML path, JSON path or None) for every server installed."""
    return [(srv, e[4], e[5]) for srv, e in installed(binary, root, archive=False)]


def archive_servers(binary, root):
    """(server, path of the folder's zip) for every server installed."""
    return [(srv, e[6]) for srv, e in installed(binary, root, archive=True)]


def archive(binary, files, mib, rounds):
    import statistics
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "root")
        folder = os.path.join(root, "folder")
        os.makedirs(folder)
        with open(os.path.join(root, "1k.bin"), "wb") as f:
            f.write(b"x" * 1024)
        for i in range(files):
            with open(os.path.join(folder, f"file-{i:05}.bin"), "wb") as f:
                f.write(os.urandom(mib << 20))
        print(f"| server | zip of {files:,} files, {files * mib:,} MiB: MB/s (bytes) |")
        print("|---|---|")
        for srv, path in archive_servers(binary, root):
            with srv:
                url = f"http://127.0.0.1:{srv.port}{path}"
                speeds, size = [], 0
                for _ in range(rounds):
                    out = subprocess.run(
                        ["curl", "-sf", "--max-time", "300", "-o", "/dev/null", "-w",
                         "%{size_download} %{time_total}", url],
                        capture_output=True, text=True, check=True).stdout.split()
                    size, took = int(out[0]), float(out[1])
                    speeds.append(size / took / 1e6)
                print(f"| {srv.name} | {statistics.median(speeds):,.0f} ({size:,}) |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--entries", type=int, default=10_000)
    ap.add_argument("--binary")
    ap.add_argument("--archive", action="store_true")
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--file-mib", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    binary = args.binary or bench_http.release_binary()
    if args.archive:
        return archive(binary, args.files, args.file_mib, args.rounds)
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
