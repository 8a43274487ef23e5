#!/usr/bin/env python3
"""Where release executables are: built (or found up to date) by cargo, which knows the
target directory.

On x86_64 Linux this is the shipped build, `cargo release-static` (.cargo/config.toml):
static, symbol-ordered, in target/x86_64-unknown-linux-gnu/release/ (see
docs/decisions/0008-static-binary-and-symbol-order.md). On any other host, or with
CARGO_BUILD_TARGET set, it is a plain release build for that target, dynamically linked.
Neither has the `test-hooks` feature unless it is asked for (`--features test-hooks`)."""
import json
import os
import platform
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def release_command():
    """The cargo command of the release build on this host."""
    if (platform.system() == "Linux" and platform.machine() == "x86_64"
            and not os.environ.get("CARGO_BUILD_TARGET")):
        return ["cargo", "release-static"]
    return ["cargo", "build", "--release", "-p", "servery"]


def shell_env():
    """The environment without what cargo sets for a test or build script that runs this
    (CARGO_PKG_NAME, CARGO_MANIFEST_DIR, ...): build scripts such as ring's watch some of
    them, and a build started from a test would otherwise rebuild ring and everything
    above it, and the next build from a shell would rebuild it all back."""
    inherited = ("CARGO_PKG_", "CARGO_MANIFEST_", "CARGO_BIN_")
    exact = ("CARGO_CRATE_NAME", "CARGO_PRIMARY_PACKAGE", "CARGO_TARGET_TMPDIR",
             # The test command's debug builds lint through clippy's driver; the release
             # build is compiled by rustc itself (the driver turns MIR optimizations off).
             "RUSTC_WORKSPACE_WRAPPER", "CLIPPY_ARGS")
    return {k: v for k, v in os.environ.items()
            if not k.startswith(inherited) and k not in exact}


def release_executables(*target):
    """The executables cargo builds for `target` (e.g. "--bin", "servery", "--example",
    "request_instructions"), in one cargo run, so their links proceed side by side."""
    out = subprocess.run(
        [*release_command(), "-q", *target, "--message-format=json-render-diagnostics"],
        # cargo's own messages (warnings, errors) pass through to stderr.
        cwd=ROOT, check=True, stdout=subprocess.PIPE, text=True, env=shell_env()).stdout
    found = [msg["executable"] for msg in map(json.loads, out.splitlines())
             if msg.get("reason") == "compiler-artifact" and msg.get("executable")]
    if not found:
        raise SystemExit(f"cargo built no executable for {' '.join(target)}")
    return found


def release_executable(*target):
    """The executable cargo builds for `target` (e.g. "--bin", "servery")."""
    return release_executables(*target)[0]


def release_binary(*extra):
    """The servery binary; `extra` cargo arguments such as "--features", "test-hooks"."""
    return release_executable("--bin", "servery", *extra)


if __name__ == "__main__":
    # scripts/release_binary.py [--example NAME | --bin NAME]... [--features F]: print the
    # path of each executable built, one a line.
    args = sys.argv[1:]
    named = any(a in ("--bin", "--example") for a in args)
    print("\n".join(release_executables(*args)) if named else release_binary(*args))
