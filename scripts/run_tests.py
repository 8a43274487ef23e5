#!/usr/bin/env python3
"""The workspace's tests, as `cargo test --workspace --no-fail-fast` runs them, but with
several test executables running side by side.

Most of the real-process tests spend their time waiting on servers, timers and child
processes rather than computing, so one executable at a time leaves the machine idle
(see docs/decisions/0036-tests-run-side-by-side.md). This builds every test executable
with cargo, runs them JOBS at a time (the slowest known ones first, so none starts
last), prints each one's output whole once it ends (never interleaved with another's)
with how long it took, and exits non-zero naming every executable that failed. (The
documentation tests are left to `cargo test --doc`.)

    scripts/run_tests.py [--jobs N] [--bound SECONDS] [--built FILE]

Each executable runs as cargo would run it: in its package's directory, with the
package's CARGO_* variables. Tests draw their ports through servery_tests::free_port,
which claims each port across processes, so executables running together never share
one. An executable still running after --bound seconds is killed and counted failed.
A test that cannot run here (a tool missing, not root) says so through
servery_tests::skipped, which this runner collects and lists as skipped at the end."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Started first, slowest first: their run time, not the build, bounds the whole phase.
# (From a CI run's "ok in N s" lines: scenarios 125 s, apps 80, http3 72, webdav 57,
# hardening 55, browser 33, proxy 32, uploads 31; research_docs about 80 since its
# findings are made by the tool (decision 0126); everything else less.)
SLOWEST_FIRST = ("scenarios", "research_docs", "apps", "http3", "webdav", "hardening",
                 "browser", "proxy", "uploads", "webdav_clients", "gates", "slow_peers",
                 "singletons")


def build():
    """Builds every test executable; returns cargo's messages."""
    cmd = ["cargo", "test", "--workspace", "--locked", "--no-run",
           "--message-format=json-render-diagnostics"]
    return subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.PIPE, text=True).stdout


def executables(messages):
    """(label, path, package directory, target name, message) of each test executable."""
    found = []
    for line in messages.splitlines():
        msg = json.loads(line)
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
            continue
        if not msg["profile"]["test"]:
            continue
        target = msg["target"]
        package_dir = os.path.dirname(msg["manifest_path"])
        package = os.path.basename(package_dir)
        kind = target["kind"][0]
        label = f"{package} {kind} {target['name']}"
        found.append((label, msg["executable"], package_dir, target["name"], msg))
    return found


def package_env(package_dir, msg):
    """The variables cargo gives a test it runs (the ones these tests read)."""
    # A package id reads "path+file:///…/tests#servery-tests@0.1.0".
    name = msg["package_id"].rsplit("#", 1)[-1].split("@", 1)[0]
    env = dict(os.environ)
    env.update({
        "CARGO": shutil.which("cargo") or "cargo",
        "CARGO_MANIFEST_DIR": package_dir,
        "CARGO_PKG_NAME": name,
        "CARGO_CRATE_NAME": msg["target"]["name"].replace("-", "_"),
    })
    return env


def order(found):
    """The slowest known executables first, then the rest as cargo listed them."""
    def rank(entry):
        name = entry[3]
        return SLOWEST_FIRST.index(name) if name in SLOWEST_FIRST else len(SLOWEST_FIRST)
    return sorted(found, key=rank)


def run_one(entry, bound, results, lock):
    label, exe, package_dir, _, msg = entry
    started = time.monotonic()
    with tempfile.TemporaryFile(mode="w+") as log, \
            tempfile.NamedTemporaryFile(mode="r", prefix="servery-skips-") as skips:
        env = package_env(package_dir, msg)
        # servery_tests::skipped appends "test: why" here (libtest has no skipped outcome).
        env["SERVERY_SKIP_LOG"] = skips.name
        proc = subprocess.Popen([exe], cwd=package_dir, env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        # Reaped with wait4 rather than Popen.wait, for the CPU time the executable and
        # every process it waited for used: the machine's CPUs are shared with the release
        # builds and the sweeps, so the tests' own CPU is what a CI run's length is made of.
        expired = threading.Event()

        def kill():
            expired.set()
            os.killpg(proc.pid, 9)
        timer = threading.Timer(bound, kill)
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        timer.cancel()
        code = os.waitstatus_to_exitcode(status)
        proc.returncode = code
        timed_out = expired.is_set()
        cpu = usage.ru_utime + usage.ru_stime
        took = time.monotonic() - started
        log.seek(0)
        output = log.read()
        skipped = [line.rstrip("\n") for line in skips if line.strip()]
    ok = code == 0 and not timed_out
    verdict = "ok" if ok else (f"KILLED after {bound} s" if timed_out else f"FAILED (exit {code})")
    noted = f", {len(skipped)} skipped" if skipped else ""
    with lock:
        print(f"---- {label}: {verdict} in {took:.1f} s, CPU {cpu:.1f} s{noted}", flush=True)
        sys.stdout.write(output)
        sys.stdout.flush()
        results.append((label, ok, took, skipped, cpu))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=3, help="executables at once (default 3)")
    parser.add_argument("--bound", type=float, default=1200.0,
                        help="seconds an executable may run before it is killed (default 1200)")
    parser.add_argument("--built", metavar="FILE",
                        help="cargo's JSON messages of a build already made (`cargo test "
                             "--workspace --no-run --message-format=json`), instead of building")
    args = parser.parse_args()

    started = time.monotonic()
    if args.built:
        with open(args.built) as f:
            messages = f.read()
    else:
        messages = build()
    pending = order(executables(messages))
    print(f"running {len(pending)} test executables, {args.jobs} at a time", flush=True)
    results, lock, running = [], threading.Lock(), []
    while pending or running:
        running = [t for t in running if t.is_alive()]
        while pending and len(running) < args.jobs:
            t = threading.Thread(target=run_one, args=(pending.pop(0), args.bound, results, lock))
            t.start()
            running.append(t)
        if running:
            running[0].join(timeout=0.2)

    total_cpu = sum(r[4] for r in results)
    print(f"\ntest executables: {time.monotonic() - started:.0f} s in all, CPU {total_cpu:.0f} s; "
          "the slowest:")
    for label, ok, took, _, cpu in sorted(results, key=lambda r: -r[2])[:8]:
        print(f"  {took:7.1f} s  {label}")
    print("the most CPU (user + system, with the processes each one waited for):")
    for label, ok, took, _, cpu in sorted(results, key=lambda r: -r[4])[:12]:
        print(f"  {cpu:7.1f} s  {label}")
    skipped = [f"{label}: {line}" for label, _, _, lines, _ in results for line in lines]
    if skipped:
        print(f"\n{len(skipped)} tests skipped in whole or in part (they passed what they "
              "could run; not counted as passed):\n  " + "\n  ".join(skipped))
    failed = [label for label, ok, _, _, _ in results if not ok]
    if failed:
        print(f"\n{len(failed)} failed:\n  " + "\n  ".join(failed))
        return 1
    print(f"all {len(results)} test executables passed, {len(skipped)} skips listed above")
    return 0


if __name__ == "__main__":
    sys.exit(main())
