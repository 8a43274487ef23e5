#!/usr/bin/env python3
"""The mutation campaign of `core::dav_lock` (decision 0117): each numbered mutant is a
deliberate break of one WebDAV lock rule. For each: apply it to the source, build the
scenarios in release, sweep the WebDAV scenarios, put the source back; then print, per
mutant, how many runs of each scenario failed and the first failure's message.

    scripts/dav-lock-mutants.py [--seeds 0..300] [N ...]

Run from the workspace root with a clean `core/src/dav_lock` (the script refuses
otherwise, and restores the files it changed even when interrupted). One build at a
time: about two minutes a mutant on two cores. The results are recorded in
docs/mutation-testing.md ("Every method's lock check in the scenarios")."""

import argparse
import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DAV_LOCK = ROOT / "core/src/dav_lock"

SCENARIOS = [
    "dav-lock-checks",
    "dav-lock-checks-read-only",
    "dav-lock-survives-recycle",
    "dav-lock-table-saturation",
    "dav-journal-full",
    "dav-journal-full-quiet",
    "dav-move-crash-between-steps",
]

# number: (file, rule broken, text, its replacement)
MUTANTS = {
    1: ("mod.rs", "applies: a lock above applies whatever its depth",
        "|| (lock.depth == DavDepth::Infinity && covers(&lock.resource, resource))",
        "|| (lock.depth == lock.depth && covers(&lock.resource, resource))"),
    2: ("flow.rs", "require: the parent collection's locks ignored",
        "        if reach.membership\n", "        if false && reach.membership\n"),
    3: ("flow.rs", "require: the locks below a tree write ignored",
        ".filter(|l| applies(l, resource) || (reach.tree && covers(resource, &l.resource)))",
        ".filter(|l| applies(l, resource))"),
    4: ("flow.rs", "require: a submitted token never satisfies a lock",
        ".any(|l| l.resource == lock.resource && submitted.contains(&l.token));",
        ".any(|l| l.resource == lock.resource && submitted.contains(&l.token) && false);"),
    5: ("flow.rs", "IfCheck: the If header never fails",
        "        if !header.evaluate(&*self) {", "        if false && !header.evaluate(&*self) {"),
    6: ("flow.rs", "IfCheck: the If header submits no token",
        "IfStep::Done(Ok(submitted.filter_map(parse_token).collect()))",
        "IfStep::Done(Ok(submitted.filter_map(parse_token).take(0).collect()))"),
    7: ("flow.rs", "IfCheck: every lock the query returns counts, those below too",
        "let applying = around.iter().filter(|l| applies(l, k));",
        "let applying = around.iter().filter(|_| true);"),
    8: ("mod.rs", "refresh_target: any lock that applies, token or not",
        ".find(|l| applies(l, resource) && submitted.contains(&l.token))",
        ".find(|l| applies(l, resource) && (true || submitted.contains(&l.token)))"),
    9: ("mod.rs", "unlock_target: the named lock wherever it is rooted",
        ".find(|l| l.token == id && applies(l, resource))",
        ".find(|l| l.token == id && (true || applies(l, resource)))"),
    10: ("mod.rs", "refusal_of: a LOCK conflict answered as Locked",
         "            DavRefusal::ConflictingLock(vec![resource.to_owned()])",
         "            DavRefusal::Locked(vec![resource.to_owned()])"),
    11: ("mod.rs", "new_resource_lock: a LOCK of an unmapped URL allowed on a read-only share",
         "    if writable {", "    if true || writable {"),
    12: ("flow.rs", "IfCheck::new: a malformed If header taken as none",
         "Some(Err(e)) => Err(DavRefusal::BadIf(e)),", "Some(Err(_)) => Ok(None),"),
    13: ("mod.rs", "lock_checks: a MOVE checks only its destination",
         "Write::Move { from, to } => vec![(from, reach::TREE), (to, reach::TREE)],",
         "Write::Move { to, .. } => vec![(to, reach::TREE)],"),
    14: ("mod.rs", "lock_checks: a DELETE checks only its membership, not its tree",
         "Write::Delete(r) => vec![(r, reach::TREE)],",
         "Write::Delete(r) => vec![(r, reach::MEMBER)],"),
}


def sweep(binary, scenario, seeds):
    run = subprocess.run(
        [binary, "sweep", "--seeds", seeds, "--only", scenario],
        capture_output=True, text=True, check=False)
    out = run.stdout + run.stderr
    failed = sum(int(m) for m in re.findall(rf"^{scenario} +\S+ +runs=\d+ +failed=(\d+)", out, re.M))
    runs = sum(int(m) for m in re.findall(rf"^{scenario} +\S+ +runs=(\d+)", out, re.M))
    first = next((l for l in out.splitlines() if l.startswith("FAILED")), "")
    return failed, runs, first


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0..300")
    ap.add_argument("mutants", nargs="*", type=int, default=sorted(MUTANTS))
    args = ap.parse_args()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", str(DAV_LOCK)],
                           cwd=ROOT, capture_output=True, text=True, check=True).stdout
    if dirty.strip():
        sys.exit(f"core/src/dav_lock has uncommitted changes:\n{dirty}")
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    binary = str(target / "release/servery-scenarios")
    survivors = []
    for n in args.mutants:
        name, rule, text, replacement = MUTANTS[n]
        path = DAV_LOCK / name
        original = path.read_text()
        if original.count(text) != 1:
            sys.exit(f"mutant {n}: its text is not found once in {name}; update the table")
        try:
            path.write_text(original.replace(text, replacement))
            build = subprocess.run(
                ["cargo", "build", "--release", "-q", "-p", "servery-scenarios"],
                cwd=ROOT, capture_output=True, text=True, check=False)
            if build.returncode != 0:
                print(f"mutant {n} ({rule}): does not build\n{build.stderr[-2000:]}")
                continue
            caught = False
            for scenario in SCENARIOS:
                failed, runs, first = sweep(binary, scenario, args.seeds)
                caught |= failed > 0
                line = f"mutant {n} ({rule}): {scenario} {failed} of {runs} failed"
                print(line + (f"\n    {first[:600]}" if first else ""), flush=True)
            if not caught:
                survivors.append(n)
        finally:
            path.write_text(original)
    print(f"survived: {survivors or 'none'}")
    sys.exit(1 if survivors else 0)


if __name__ == "__main__":
    main()
