#!/usr/bin/env python3
"""TFTP benchmark: a 64 MiB read with blksize 1468 from servery `--tftp` and from tftpd-hpa
(`in.tftpd`), both started here on loopback, in one run; and whether the parent's
heartbeat judging stays on time while the transfers run.

    scripts/bench-tftp.py [--servery BINARY] [--size-mib 64] [--rounds 5] [--blksize 1468]

Peers: apt-get install tftpd-hpa curl (`in.tftpd` is started by this script on its own
port and root, in the foreground; the Debian service is not used). The client is curl
(`--tftp-blksize`), one download at a time, servers alternated for --rounds; every
download is compared with the file. Reported: the median MB/s (10^6 bytes / s, whole
transfer) per server and their ratio (servery / tftpd-hpa), and the median server CPU per
read (servery's parent; in.tftpd with the child serving the transfer, from /proc).

servery runs with two workers, `--heartbeat-interval 0.25 --heartbeat-timeout 1`: the
TFTP service runs on the parent's host runtime, the heartbeat judging on the driver
thread, so the transfers must not make a worker look hung. After the run the script
checks that both workers still have the pids they started with and that servery's log
names no hang, restart or kill; any such event is a failure.

Exit status: 0; 1 if a download differs, a worker was restarted or judged hung; 2 on a
setup failure.
"""
import argparse
import hashlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from release_binary import release_binary


class SetupError(Exception):
    pass


def free_udp_port():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ctl(binary, sock, *args):
    out = subprocess.run([binary, "ctl", "--socket", sock, *args], capture_output=True,
                         text=True, timeout=30)
    if out.returncode != 0:
        raise SetupError(f"servery ctl {' '.join(args)}: {out.stderr.strip()}")
    return out.stdout


def status(binary, sock):
    return json.loads(ctl(binary, sock, "status", "--json"))


def start_servery(binary, root, work, port):
    sock = os.path.join(work, "ctl.sock")
    log = open(os.path.join(work, "servery.log"), "w")
    proc = subprocess.Popen(
        [binary, root, "--port", "0", "--workers", "2", "--control-socket", sock,
         "--heartbeat-interval", "0.25", "--heartbeat-timeout", "1",
         "--tftp", "--tftp-port", str(port)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 30
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SetupError(f"servery exited ({proc.returncode}); see {log.name}")
        try:
            s = status(binary, sock)
            if s["state"] == "ready" and len(s["workers"]) == 2 and all(
                    w["state"] == "ready" for w in s["workers"]):
                text = open(log.name).read()
                if "servery: TFTP on udp" in text:
                    return proc, sock, log.name
        except (SetupError, json.JSONDecodeError, subprocess.TimeoutExpired):
            pass
        time.sleep(0.1)
    proc.kill()
    raise SetupError("servery did not become ready in 30 s")


def start_tftpd(root, port):
    tftpd = shutil.which("in.tftpd") or "/usr/sbin/in.tftpd"
    if not os.path.exists(tftpd):
        raise SetupError("in.tftpd not found (apt-get install tftpd-hpa)")
    cmd = [tftpd, "-L", "-s", root, "-a", f"127.0.0.1:{port}"]
    if os.geteuid() == 0:
        cmd += ["-u", "nobody"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    time.sleep(0.3)
    if proc.poll() is not None:
        raise SetupError(f"in.tftpd exited ({proc.returncode})")
    return proc


def cpu_seconds(pid):
    """User + system CPU of `pid` (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(x) for x in fields[11:13]) / os.sysconf("SC_CLK_TCK")


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def download(server_pid, port, name, blksize, out):
    """Seconds for one download, and the server's CPU seconds for it: the server process's
    own, plus that of the children it forks (in.tftpd serves each transfer from a child,
    which is sampled every 20 ms while it lives, so its last few ms are not counted)."""
    before = cpu_seconds(server_pid)
    kids = {}
    start = time.perf_counter()
    curl = subprocess.Popen(
        ["curl", "-sS", "--max-time", "120", "--tftp-blksize", str(blksize), "-o", out,
         f"tftp://127.0.0.1:{port}/{name}"], stderr=subprocess.PIPE, text=True)
    while curl.poll() is None:
        for kid in children(server_pid):
            kids[kid] = max(kids.get(kid, 0.0), cpu_seconds(kid))
        time.sleep(0.02)
    elapsed = time.perf_counter() - start
    if curl.returncode != 0:
        raise RuntimeError(f"curl: {curl.stderr.read().strip()}")
    return elapsed, cpu_seconds(server_pid) - before + sum(kids.values())


def digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--servery", help="servery binary [default: the release build]")
    ap.add_argument("--size-mib", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--blksize", type=int, default=1468)
    args = ap.parse_args()
    if shutil.which("curl") is None:
        print("setup failure: curl not found", file=sys.stderr)
        return 2
    binary = args.servery or release_binary()
    work = tempfile.mkdtemp(prefix="bench-tftp-")
    os.chmod(work, 0o755)
    root = os.path.join(work, "root")
    os.mkdir(root)
    os.chmod(root, 0o755)
    name = "image.bin"
    path = os.path.join(root, name)
    with open(path, "wb") as f:
        for _ in range(args.size_mib):
            f.write(os.urandom(1 << 20))
    os.chmod(path, 0o644)
    want = digest(path)
    size = os.path.getsize(path)
    servers = {}
    failed = False
    try:
        sv_port, hpa_port = free_udp_port(), free_udp_port()
        sv, sock, log = start_servery(binary, root, work, sv_port)
        servers["servery"] = (sv, sv_port)
        servers["tftpd-hpa"] = (start_tftpd(root, hpa_port), hpa_port)
        before = {w["slot"]: w["pid"] for w in status(binary, sock)["workers"]}
        times = {k: [] for k in servers}
        cpu = {k: [] for k in servers}
        out = os.path.join(work, "got.bin")
        for _ in range(args.rounds):
            for label, (proc, port) in servers.items():
                elapsed, used = download(proc.pid, port, name, args.blksize, out)
                cpu[label].append(used)
                if digest(out) != want:
                    print(f"FAIL: {label}'s download differs from the file", file=sys.stderr)
                    failed = True
                times[label].append(elapsed)
                os.remove(out)
        s = status(binary, sock)
        after = {w["slot"]: w["pid"] for w in s["workers"]}
        text = open(log).read().lower()
        events = [w for w in ("hang", "restart", "killing") if w in text]
        print(f"{args.size_mib} MiB read, blksize {args.blksize}, curl, {args.rounds} rounds "
              f"(servers alternated), loopback")
        medians = {}
        for label, ts in times.items():
            mbps = [size / t / 1e6 for t in ts]
            medians[label] = statistics.median(mbps)
            print(f"  {label:10s} median {medians[label]:7.1f} MB/s  "
                  f"server CPU {statistics.median(cpu[label]):.2f} s per read  "
                  f"(runs: {', '.join(f'{m:.1f}' for m in mbps)})")
        print(f"  ratio servery / tftpd-hpa: {medians['servery'] / medians['tftpd-hpa']:.2f}")
        print(f"  heartbeat judging: workers {'unchanged' if before == after else 'CHANGED'}"
              f" ({before} -> {after}), restarts {s['restarts']}, "
              f"log events: {', '.join(events) if events else 'none'}")
        if before != after or s["restarts"] != 0 or events:
            print("FAIL: a worker was restarted or judged hung during the transfers",
                  file=sys.stderr)
            failed = True
    except SetupError as e:
        print(f"setup failure: {e}", file=sys.stderr)
        return 2
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
