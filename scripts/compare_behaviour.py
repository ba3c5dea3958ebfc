"""Checks that a change of structure changed no behaviour: the same short run, at two revisions.

    python scripts/compare_behaviour.py --base 8311c0e            # that commit against the working tree
    python scripts/compare_behaviour.py --base main --head HEAD~3  # two commits
    python scripts/compare_behaviour.py --base 8311c0e --steps 100 --keep /tmp/compare

At each revision (a commit is checked out with `git worktree`; the working tree as it is)
it runs, in that checkout and in a fresh process each:

    python train.py --train-steps N --eval-every N --time-budget 0 --precision float32 --model-dir RUN
    python export.py --model-dir RUN --output EXPORT
    python -m app.evaluate --saved-model EXPORT/1 --split validation --output translations.txt

and compares the two sides: every record of metrics.jsonl (losses, learning rates, validation
loss, perplexity and BLEU; the wall-clock speed left out), the evaluation lines the training
printed, and the export's translations of Multi30k validation, line by line. Exits 0 when all
are equal to the last digit, 1 otherwise, naming the first difference. About 5 minutes a side on
a 2-core CPU at the default 300 steps.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Measured wall-clock speed: differs between any two runs.
TIMING_KEYS = ("tokens_per_second",)
EVALUATION_LINE = re.compile(r"^step \d+: validation loss .*$", re.MULTILINE)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the revision before the change (a commit, branch or tag)")
    parser.add_argument("--head", help="the revision after it (default: the working tree as it is)")
    parser.add_argument("--steps", type=int, default=300, help="training steps of each run (default 300)")
    parser.add_argument("--keep", help="keep both sides' runs under this directory (default: a removed scratch one)")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    return args


def checkout(revision, directory):
    """A detached worktree of `revision` at `directory`; its path. Exits naming `revision`
    if this repository has no such commit."""
    found = subprocess.run(["git", "-C", ROOT, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}"],
                           capture_output=True)
    if found.returncode != 0:
        sys.exit(f"error: {revision!r} is not a commit of {ROOT}")
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", directory, revision], check=True,
                   capture_output=True)
    return directory


def run_side(name, source_dir, work_dir, steps):
    """Trains, exports and translates validation in `source_dir`; returns what is compared."""
    run_dir, export_dir = os.path.join(work_dir, "run"), os.path.join(work_dir, "export")
    translations = os.path.join(work_dir, "translations.txt")
    commands = [
        ["train.py", "--train-steps", str(steps), "--eval-every", str(steps), "--time-budget", "0",
         "--precision", "float32", "--model-dir", run_dir],
        ["export.py", "--model-dir", run_dir, "--output", export_dir],
        ["-m", "app.evaluate", "--saved-model", os.path.join(export_dir, "1"), "--split", "validation",
         "--output", translations],
    ]
    printed = ""
    for command in commands:
        print(f"[{name}] python {' '.join(command)}", flush=True)
        result = subprocess.run([sys.executable, *command], cwd=source_dir, capture_output=True, text=True)
        if result.returncode != 0:
            sys.exit(f"[{name}] failed ({result.returncode}):\n{result.stderr[-3000:]}")
        printed += result.stdout
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        records = [{k: v for k, v in json.loads(line).items() if k not in TIMING_KEYS} for line in f if line.strip()]
    with open(translations, encoding="utf-8") as f:
        lines = f.read().split("\n")
    return {"records": records, "evaluation lines": EVALUATION_LINE.findall(printed), "translations": lines}


def first_difference(before, after):
    """`None` if the two sides are equal, else a message naming the first difference."""
    for key in before:
        a, b = before[key], after[key]
        if a == b:
            continue
        if len(a) != len(b):
            return f"{key}: {len(a)} before, {len(b)} after"
        index = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
        return f"{key}, item {index + 1}:\n  before: {a[index]}\n  after:  {b[index]}"
    return None


def main(argv=None):
    args = parse_args(argv)
    scratch = os.path.abspath(args.keep or tempfile.mkdtemp(prefix="compare-behaviour-"))
    os.makedirs(scratch, exist_ok=True)
    worktrees = []
    try:
        sides = {}
        for name, revision in (("before", args.base), ("after", args.head)):
            work_dir = os.path.join(scratch, name)
            if os.path.exists(work_dir):
                shutil.rmtree(work_dir)
            os.makedirs(work_dir)
            source = ROOT
            if revision is not None:
                source = checkout(revision, os.path.join(work_dir, "source"))
                worktrees.append(source)
            sides[name] = run_side(name, source, work_dir, args.steps)
    finally:
        for worktree in worktrees:
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", worktree], capture_output=True)
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    before, after = sides["before"], sides["after"]
    for line in after["evaluation lines"]:
        print(line)
    difference = first_difference(before, after)
    if difference:
        print(f"DIFFERENT: {difference}")
        return 1
    print(
        f"same: {len(after['records'])} metrics records, {len(after['evaluation lines'])} evaluation line(s) and "
        f"{len(after['translations'])} validation translations, to the last digit"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
