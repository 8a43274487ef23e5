"""Where the release servery binary is: built (or found up to date) by cargo, which knows
the target directory and the target triple .cargo/config.toml names."""
import json
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def release_binary():
    out = subprocess.run(
        ["cargo", "build", "--release", "-q", "-p", "servery", "--bin", "servery",
         "--message-format=json-render-diagnostics"],
        cwd=ROOT, check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg.get("executable"):
            return msg["executable"]
    raise SystemExit("cargo built no servery executable")
