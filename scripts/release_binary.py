#!/usr/bin/env python3
"""Where release executables are: built (or found up to date) by cargo, which knows the
target directory and the target triple .cargo/config.toml names."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def release_executable(*target):
    """The executable cargo builds for `target` (e.g. "--bin", "servery")."""
    out = subprocess.run(
        ["cargo", "build", "--release", "-q", "-p", "servery", *target,
         "--message-format=json-render-diagnostics"],
        cwd=ROOT, check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg.get("executable"):
            return msg["executable"]
    raise SystemExit(f"cargo built no executable for {' '.join(target)}")


def release_binary():
    return release_executable("--bin", "servery")


if __name__ == "__main__":
    # scripts/release_binary.py [--example NAME | --bin NAME]: print the path.
    print(release_executable(*sys.argv[1:]) if len(sys.argv) > 1 else release_binary())
