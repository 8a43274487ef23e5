#!/usr/bin/env python3
"""Record which functions servery runs and write them to io-real/link/symbol-order.txt.

Runs a release build of the parent and one worker under callgrind (valgrind), drives the
worker through startup, idling and plain GETs (phase one, dumped apart), then a mix of
requests (HTTP/1.1 and h2c: files, ranges, conditionals, listings, encodings, digests,
errors) and the parent through status and reload, then lists every function either
process executed: the worker's phase one first, then the rest of the worker's, then the
parent's, each hottest first. Release links lay the binary out in that order (io-real/build.rs),
so the pages a worker touches are few and adjacent. Rerun after changing dependencies, the
compiler or the release profile — symbol names carry a hash of those; names the binary no
longer has are skipped at link time (`--check` says how many still match).

Usage: scripts/order-symbols.py [--check]     (needs valgrind and curl; builds --release)
       SERVERY_RELEASE_BIN=PATH scripts/order-symbols.py --check   (checks PATH, builds nothing)
"""
import argparse
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from release_binary import release_binary

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ORDER = os.path.join(ROOT, "io-real/link/symbol-order.txt")
HEADER = """\
# Functions servery's worker runs at start-up and on plain GETs (first), then the rest
# of what it runs, then the parent's, each hottest first; written by
# scripts/order-symbols.py from a callgrind run of a release build. Release links on
# x86_64 Linux place them in this order (io-real/build.rs). Do not edit by hand.
"""


def text_symbols(binary):
    """Defined function symbols of the binary: name -> size."""
    out = subprocess.run(["nm", "-S", "--defined-only", binary], check=True,
                         capture_output=True, text=True).stdout
    syms = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] in "tTwW":
            syms.setdefault(parts[3], int(parts[1], 16))
    return syms


def check(binary):
    syms = text_symbols(binary)
    wanted = [l.strip() for l in open(ORDER) if l.strip() and not l.startswith("#")]
    found = [w for w in wanted if w in syms]
    print(f"symbol order: {len(found)} of {len(wanted)} listed functions are in {binary} "
          f"({sum(syms[f] for f in found)} bytes)")
    return len(found) >= 0.9 * len(wanted)


def self_costs(path):
    """Per function, its own instruction count, from a callgrind output file."""
    names, costs, current, skip = {}, {}, None, False
    fn_line = re.compile(r"^fn=\((\d+)\)(?: (.*))?$")
    for line in open(path, errors="replace"):
        line = line.rstrip("\n")
        if skip:
            skip = False
            continue
        m = fn_line.match(line)
        if m:
            if m.group(2):
                names[m.group(1)] = m.group(2)
            current = names.get(m.group(1))
            continue
        if line.startswith("calls="):
            skip = True  # the next line is the call's inclusive cost, not ours
            continue
        if line.startswith(("cfn=", "cfi=", "cfl=", "cob=")):
            m = re.match(r"^cfn=\((\d+)\) (.*)$", line)
            if m:
                names[m.group(1)] = m.group(2)
            continue
        if current and line[:1] in "0123456789+-*":
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                costs[current] = costs.get(current, 0) + int(parts[1])
    return costs, set(names.values())


CPU_VARIANT = re.compile(r"^(__\w+?)_(?:sse2|ssse3|sse4_1|sse4_2|avx|avx2|evex|avx512)")


def with_cpu_variants(order, syms):
    """libc picks a string routine's implementation (`__memmove_avx_unaligned_erms`, ...)
    for the CPU it runs on, and callgrind's virtual CPU is not the real one: next to each
    variant the profile saw, list its siblings."""
    listed, out = set(order), []
    for name in order:
        out.append(name)
        m = CPU_VARIANT.match(name)
        if m:
            for sibling in sorted(n for n in syms if n.startswith(m.group(1) + "_")):
                if sibling not in listed:
                    listed.add(sibling)
                    out.append(sibling)
    return out


def drive(port, sock, full):
    """Start-up (the first answer), then twenty plain GETs of a file on new connections:
    what every worker runs, phase one. With `full`, then the request mix."""
    base = f"http://127.0.0.1:{port}"

    def get(path, headers=None, method="GET"):
        req = urllib.request.Request(base + path, headers=headers or {}, method=method)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                r.read()
                return r.status, dict(r.headers)
        except urllib.error.HTTPError as e:
            e.read()
            return e.code, dict(e.headers)

    deadline = time.monotonic() + 180
    while True:
        try:
            if get("/small.txt")[0] == 200:
                break
        except OSError:
            pass
        if time.monotonic() > deadline:
            sys.exit("servery did not answer within 180 s under callgrind")
        time.sleep(1)
    for _ in range(20):
        get("/small.txt")
    if not full:
        return
    etag = get("/small.txt", method="HEAD")[1].get("ETag", '"x"')
    for _ in range(3):
        get("/")
        get("/?format=json", {"Accept": "application/json"})
        get("/sub/")
        get("/small.txt")
        get("/small.txt", method="HEAD")
        get("/big.bin")
        get("/big.bin", {"Range": "bytes=100-199"})
        get("/big.bin", {"Range": "bytes=999999999-"})
        get("/small.txt", {"If-None-Match": etag})
        get("/small.txt", {"If-Match": '"other"'})
        for coding in ("gzip", "br", "zstd"):
            get("/page.html", {"Accept-Encoding": coding})
        get("/page.html", {"Want-Repr-Digest": "sha-256=1"})
        get("/missing")
        get("/.hidden")
        get("/small.txt", method="DELETE")
        if shutil.which("curl"):
            subprocess.run(["curl", "-s", "-o", "/dev/null", "--http2-prior-knowledge",
                            base + "/small.txt", base + "/big.bin"], check=False, timeout=60)
    servery = [BIN, "ctl", "--socket", sock]
    subprocess.run(servery + ["status", "--json"], check=False, capture_output=True, timeout=120)


def profile(full):
    """One run under callgrind, driven by `drive`: per function, its own instruction count
    in the worker, and in the parent."""
    work = tempfile.mkdtemp(prefix="servery-order-")
    tree = os.path.join(work, "tree")
    os.makedirs(os.path.join(tree, "sub"))
    with open(os.path.join(tree, "small.txt"), "w") as f:
        f.write("hello\n")
    with open(os.path.join(tree, "page.html"), "w") as f:
        f.write("<p>servery</p>\n" * 400)
    with open(os.path.join(tree, ".hidden"), "w") as f:
        f.write("no\n")
    with open(os.path.join(tree, "big.bin"), "wb") as f:
        f.write(os.urandom(300_000))
    sock = os.path.join(work, "ctl.sock")
    out = os.path.join(work, "cg.%p")
    env = dict(os.environ, SERVERY_WORKER_FROM_START_PATH="1", SERVERY_LOG="info")
    cmd = ["valgrind", "--tool=callgrind", "--trace-children=yes", "--demangle=no",
           f"--callgrind-out-file={out}", BIN, tree, "--port", "0", "--workers", "1",
           "--heartbeat-timeout", "120", "--worker-start-timeout", "300",
           "--control-socket", sock]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=env, start_new_session=True)
    port = None
    for line in proc.stdout:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)/", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        sys.exit("servery did not start under callgrind")
    try:
        drive(port, sock, full)
        if full:
            subprocess.run([BIN, "ctl", "--socket", sock, "reload"], check=False,
                           capture_output=True, timeout=300)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=600)

    worker, parent = {}, {}
    for path in glob.glob(os.path.join(work, "cg.*")):
        head = open(path, errors="replace").read(4096)
        costs, seen = self_costs(path)
        for name in seen:
            costs.setdefault(name, 0)
        into = worker if " __worker " in head else parent
        for name, cost in costs.items():
            into[name] = max(into.get(name, 0), cost)
    shutil.rmtree(work, ignore_errors=True)
    return worker, parent


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true",
                    help="only report how many listed functions the release binary has")
    args = ap.parse_args()
    global BIN
    if args.check:
        # The binary a caller already built (the release test passes it), else build one.
        sys.exit(0 if check(os.environ.get("SERVERY_RELEASE_BIN") or release_binary()) else 1)
    BIN = release_binary()
    if not shutil.which("valgrind"):
        sys.exit("needs valgrind (Debian package valgrind)")

    # Phase one's functions go first in the order, so an idle worker's pages are few and
    # adjacent; then the rest of what a worker runs, then the parent's.
    first, _ = profile(full=False)
    worker, parent = profile(full=True)
    syms = text_symbols(BIN)
    order = sorted((n for n in first if n in syms), key=lambda n: -first[n])
    order += sorted((n for n in worker if n in syms and n not in first),
                    key=lambda n: -worker[n])
    order += sorted((n for n in parent if n in syms and n not in worker and n not in first),
                    key=lambda n: -parent[n])
    order = with_cpu_variants(order, syms)
    with open(ORDER, "w") as f:
        f.write(HEADER)
        f.writelines(n + "\n" for n in order)
    size = sum(syms[n] for n in order)
    print(f"phase one (start-up and plain GETs): {len(first)} of the worker's functions")
    print(f"wrote {len(order)} functions ({size} bytes of {sum(syms.values())} in text) "
          f"to {os.path.relpath(ORDER, ROOT)}")


if __name__ == "__main__":
    main()
