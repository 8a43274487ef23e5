#!/usr/bin/env python3
"""The mutation campaign over `core`, file by file, each mutant judged only by the checks
that drive its file (docs/mutation-testing.md, "The per-file campaign").

    scripts/mutants.py [--shard K/N] [--files GLOB ...] [--list] [--no-scenarios]

For each core source file (all of `core/src`, or those the globs match, then every Nth
from the Kth when sharded) it runs cargo-mutants twice:

1. every mutant of the file against the core's unit tests named for it in
   `scripts/mutants-map.toml` (`cargo test -p servery-core --lib -- FILTER…`);
2. what that missed, by exact name, against the same tests and the scenarios the map
   names for the file (`scenarios/tests/mutant_gate.rs`, both platform models,
   `--seeds` each). A file the map does not list takes the whole core suite, then every
   scenario.

A mutant caught in either pass is caught; one left after both is missed. Results go to
`target/mutants/results.json` (merged across runs, one entry per file, the names of the
survivors kept) and the summary rows are printed in the format of
docs/mutation-testing.md. Installs cargo-mutants if it is missing. Run from anywhere in
the workspace with a clean `core/src`: mutants are applied in place, one at a time (one
job), so the build reuses the target directory; cargo-mutants restores each file, and a
run killed outright may leave one mutant applied, which the next run refuses (`git
checkout core/src`). Builds run under `nice -n 10`.
"""

import argparse
import fnmatch
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
MAP = ROOT / "scripts/mutants-map.toml"
TARGET = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
OUT = TARGET / "mutants"
RESULTS = OUT / "results.json"


def cargo_mutants() -> str:
    found = shutil.which("cargo-mutants")
    if found:
        return found
    subprocess.run(["cargo", "install", "cargo-mutants", "--locked"], check=True)
    found = shutil.which("cargo-mutants")
    if not found:
        sys.exit("cargo-mutants is not on PATH after `cargo install` (add ~/.cargo/bin)")
    return found


def is_source(path: pathlib.Path) -> bool:
    """Production code only: the unit-test files the modules include are not mutated."""
    rel = path.relative_to(ROOT).as_posix()
    return not (
        path.name.endswith("_tests.rs")
        or path.name == "tests.rs"
        or "/tests/" in rel
    )


def core_files(globs: list[str]) -> list[str]:
    files = sorted(
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "core/src").rglob("*.rs")
        if is_source(p)
    )
    if globs:
        files = [f for f in files if any(fnmatch.fnmatch(f, g) for g in globs)]
    return files


def checks_for(mapping: dict, file: str) -> tuple[list[str], list[str]]:
    entry = mapping.get(file, mapping["default"])
    return list(entry.get("tests", [])), list(entry.get("scenarios", []))


def names_in(path: pathlib.Path) -> list[str]:
    if not path.exists():
        return []
    return [line for line in path.read_text().splitlines() if line.strip()]


def run_pass(
    tool: str,
    file: str,
    out: pathlib.Path,
    packages: str,
    filters: list[str],
    timeout: int,
    regex: str | None,
    env: dict,
) -> dict[str, list[str]]:
    """One cargo-mutants run over `file`; returns its mutants by outcome."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    cmd = [
        "nice", "-n", "10", tool, "mutants",
        "--package", "servery-core",
        "--test-package", packages,
        "--file", file,
        "--in-place",
        "--baseline", "skip",
        "--timeout", str(timeout),
        "--build-timeout", "1200",
        "--no-shuffle",
        "--output", str(out),
    ]
    if regex:
        cmd += ["--re", regex]
    if packages == "servery-core":
        # The unit tests alone, built alone: without `--lib` on the build too, every
        # mutant compiles the core twice (the library for the doc tests as well).
        cmd += ["--cargo-arg=--lib"]
    # The test binaries run the tests whose names contain any filter.
    cmd += ["--", "--"] + filters
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env)
    seconds = time.monotonic() - started
    found = out / "mutants.out"
    result = {
        kind: names_in(found / f"{kind}.txt")
        for kind in ("caught", "missed", "timeout", "unviable")
    }
    result["seconds"] = round(seconds)
    # Exit codes: 0 all caught, 2 some missed, 3 some timed out; others are failures of
    # the tool or the tree (4: the baseline failed, 1: usage).
    if proc.returncode not in (0, 2, 3):
        sys.exit(f"cargo-mutants failed on {file} (exit {proc.returncode}); see {found}")
    return result


def campaign(args) -> None:
    tool = cargo_mutants()
    mapping = tomllib.loads(MAP.read_text())
    files = core_files(args.files)
    if args.shard:
        k, n = (int(x) for x in args.shard.split("/"))
        files = files[k::n]
    if args.list:
        for f in files:
            tests, scenarios = checks_for(mapping, f)
            print(f"{f}\ttests={tests or 'all'}\tscenarios={scenarios}")
        return
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", "core/src"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout
    if dirty.strip():
        sys.exit(f"core/src has uncommitted changes; commit or stash them first:\n{dirty}")
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    for file in files:
        tests, scenarios = checks_for(mapping, file)
        slug = file.replace("/", "_")
        print(f"== {file}: core tests {tests or 'all'}", flush=True)
        first = run_pass(
            tool, file, OUT / slug / "core", "servery-core", tests,
            args.timeout, args.re, dict(os.environ),
        )
        missed = first["missed"]
        second = None
        if missed and scenarios and not args.no_scenarios:
            print(f"== {file}: {len(missed)} missed, now with scenarios {scenarios}", flush=True)
            env = dict(os.environ)
            env["SERVERY_MUTANT_SCENARIOS"] = ",".join(scenarios)
            env["SERVERY_MUTANT_SEEDS"] = str(args.seeds)
            regex = "|".join("^" + re.escape(m) + "$" for m in missed)
            second = run_pass(
                tool, file, OUT / slug / "scenarios",
                "servery-core,servery-scenarios",
                tests + ["the_scenarios_mapped_to_a_mutated_file_hold"],
                args.scenario_timeout, regex, env,
            )
            missed = second["missed"]
        caught = len(first["caught"]) + (len(second["caught"]) if second else 0)
        timeouts = len(first["timeout"]) + (len(second["timeout"]) if second else 0)
        unviable = len(first["unviable"]) + (len(second["unviable"]) if second else 0)
        if args.re and file in results:
            # A rerun of some of the file's mutants (its survivors, once a test is in):
            # those it caught leave the file's survivors; the rest of its row stands.
            kept = results[file]
            killed = [m for m in kept["survivors"] if m not in missed
                      and (m in first["caught"] or m in first["timeout"]
                           or (second and (m in second["caught"] or m in second["timeout"])))]
            kept["survivors"] = [m for m in kept["survivors"] if m not in killed]
            kept["missed"] -= len(killed)
            kept["caught"] += len(killed)
            kept.setdefault("killed_later", []).extend(killed)
            RESULTS.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
            print(f"{len(killed)} survivors of {file} now caught")
            print(row(file, kept), flush=True)
            continue
        results[file] = {
            "mutants": caught + timeouts + len(missed) + unviable,
            "caught": caught,
            "timeout": timeouts,
            "missed": len(missed),
            "unviable": unviable,
            "survivors": missed,
            "tests": tests,
            "scenarios": scenarios if second else [],
            "seconds": first["seconds"] + (second["seconds"] if second else 0),
            "date": time.strftime("%Y-%m-%d"),
        }
        OUT.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
        print(row(file, results[file]), flush=True)
    print_table(results, files)


def row(file: str, r: dict) -> str:
    viable = r["caught"] + r["timeout"] + r["missed"]
    judged = r["caught"] + r["timeout"]
    share = f"{100 * judged / viable:.1f} %" if viable else "n/a"
    return (
        f"| `{file.removeprefix('core/src/')}` | {r['mutants']} | {r['caught']} | "
        f"{r['timeout']} | {r['missed']} | {r['unviable']} | {judged} / {viable}, {share} |"
    )


def print_table(results: dict, files: list[str]) -> None:
    print("\n| file | mutants | caught | timed out (caught) | missed | unviable | caught / viable |")
    print("|---|---|---|---|---|---|---|")
    total = {k: 0 for k in ("mutants", "caught", "timeout", "missed", "unviable")}
    for file in files:
        if file in results:
            print(row(file, results[file]))
            for k in total:
                total[k] += results[file][k]
    print(row("**all above**", total).replace("`", ""))
    survivors = [(f, s) for f in files if f in results for s in results[f]["survivors"]]
    if survivors:
        print("\nsurvivors:")
        for f, s in survivors:
            print(f"  {s}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shard", help="K/N: every Nth file from the Kth")
    parser.add_argument("--files", nargs="*", default=[], help="globs over core/src paths")
    parser.add_argument("--list", action="store_true", help="list the files and their checks")
    parser.add_argument("--table", action="store_true",
                        help="print the table of target/mutants/results.json and stop")
    parser.add_argument("--re", help="only the mutants whose names match (cargo-mutants --re), "
                        "e.g. a file's survivors again once a test is in; the file's row is then "
                        "of those mutants alone")
    parser.add_argument("--no-scenarios", action="store_true",
                        help="the first pass only (core unit tests)")
    parser.add_argument("--timeout", type=int, default=60,
                        help="seconds per mutant's core tests (default 60)")
    parser.add_argument("--scenario-timeout", type=int, default=600,
                        help="seconds per mutant's tests with scenarios (default 600)")
    parser.add_argument("--seeds", type=int, default=20,
                        help="seeds per mapped scenario in the second pass (default 20)")
    args = parser.parse_args()
    if args.table:
        results = json.loads(RESULTS.read_text())
        print_table(results, core_files(args.files) if args.files else sorted(results))
        return
    campaign(args)


if __name__ == "__main__":
    main()
