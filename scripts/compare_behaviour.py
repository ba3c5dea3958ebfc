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
printed, and the export's translations of Multi30k validation, line by line.

Then the same weights through both revisions' export: the "after" revision's export.py exports the
"before" run (at the alpha the before export chose), and every signature of both exports runs on
Multi30k test_2016_flickr: `serving_default`, `nbest`, `translate_with_options`, `sample` (seed =
line number) and `score` (the references) must give the same lines, and scores equal to float32
rounding; `greedy` is reported line by line, since a revision may change it by design.

Exits 0 when all are equal, 1 otherwise, naming the first difference. About 8 minutes a side on a
2-core CPU at the default 300 steps.
"""

import argparse
import gzip
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
# Scores of the same weights agree to float32 rounding, not to the bit: a search may run its
# products over a different number of rows.
SCORE_TOLERANCE = 1e-4
# Runs every signature of the export argv[1] on the sources argv[2] and references argv[3],
# and writes what they return as JSON to argv[4].
RUN_SIGNATURES = """
import json, sys
import tensorflow as tf
import tensorflow_text  # registers the tokenizer's ops the export holds
export, sources, references, output = sys.argv[1:5]
model = tf.saved_model.load(export)
sources = open(sources, encoding="utf-8").read().splitlines()
references = open(references, encoding="utf-8").read().splitlines()
results = {}
def run(name, **inputs):
    outputs, function = {}, model.signatures[name]
    specs = function.structured_input_signature[1]
    for start in range(0, len(sources), 64):
        batch = {key: tf.constant(value[start:start + 64], specs[key].dtype) for key, value in inputs.items()}
        for key, value in function(**batch).items():
            outputs.setdefault(key, []).extend(value.numpy().tolist())
    results[name] = {key: [v.decode() if isinstance(v, bytes) else
                           [x.decode() for x in v] if isinstance(v, list) and v and isinstance(v[0], bytes) else v
                           for v in values] for key, values in outputs.items()}
n = len(sources)
run("serving_default", inputs=sources)
run("nbest", inputs=sources)
run("greedy", inputs=sources)
run("translate_with_options", inputs=sources, alpha=[0.6] * n, max_extra_length=[50] * n)
run("sample", inputs=sources, seed=list(range(n)), top_k=[0] * n, top_p=[1.0] * n, temperature=[1.0] * n,
    max_extra_length=[50] * n)
run("score", inputs=sources, targets=references)
json.dump(results, open(output, "w"))
"""


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


def test_set(work_dir):
    """Multi30k test_2016_flickr's English sources and German references, as files."""
    paths = []
    for language in ("en", "de"):
        path = os.path.join(work_dir, f"test_2016_flickr.{language}")
        with gzip.open(os.path.join(ROOT, "data", "multi30k", f"test_2016_flickr.{language}.gz"), "rt") as f:
            text = f.read()
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        paths.append(path)
    return paths


def signatures_of(name, source_dir, export_dir, work_dir):
    """What every signature of `export_dir` returns on test_2016_flickr (`RUN_SIGNATURES`)."""
    output = os.path.join(work_dir, f"signatures-{name}.json")
    print(f"[{name}] every signature of {export_dir} on test_2016_flickr", flush=True)
    result = subprocess.run([sys.executable, "-c", RUN_SIGNATURES, export_dir, *test_set(work_dir), output],
                            cwd=source_dir, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"[{name}] failed ({result.returncode}):\n{result.stderr[-3000:]}")
    with open(output) as f:
        return json.load(f)


def export_same_weights(source_dir, before_work, work_dir):
    """Exports the "before" run with the export.py of `source_dir`, at the alpha the before
    export chose; returns the version's path."""
    with open(os.path.join(before_work, "export", "1", "export_info.json")) as f:
        alpha = json.load(f)["alpha"]
    command = ["export.py", "--model-dir", os.path.join(before_work, "run"), "--output",
               os.path.join(work_dir, "export-of-before"), "--alpha", str(alpha)]
    print(f"[after] python {' '.join(command)}", flush=True)
    result = subprocess.run([sys.executable, *command], cwd=source_dir, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"[after] failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return os.path.join(work_dir, "export-of-before", "1")


def compare_signatures(before, after):
    """Lines naming each signature's agreement; the first difference that is not allowed
    (None if none)."""
    lines, failure = [], None
    for signature, outputs in before.items():
        for key, values in outputs.items():
            other = after[signature][key]
            if key in ("translations", "target_lengths", "truncated") or not values:
                same = sum(a == b for a, b in zip(values, other))
                lines.append(f"{signature} {key}: {same} of {len(values)} the same")
                if same != len(values) and signature != "greedy" and failure is None:
                    index = next(i for i, (a, b) in enumerate(zip(values, other)) if a != b)
                    failure = f"{signature} {key}, line {index + 1}: {values[index]!r} -> {other[index]!r}"
                continue
            flat = lambda rows: [x for row in rows for x in (row if isinstance(row, list) else [row])]  # noqa: E731
            largest = max((abs(a - b) for a, b in zip(flat(values), flat(other))), default=0.0)
            lines.append(f"{signature} {key}: largest difference {largest:.2e}")
            if largest > SCORE_TOLERANCE and signature != "greedy" and failure is None:
                failure = f"{signature} {key} differ by {largest:.2e}"
    return lines, failure


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
            if name == "before":
                before_export = os.path.join(work_dir, "export", "1")
                before_signatures = signatures_of(name, source, before_export, work_dir)
            else:
                after_export = export_same_weights(source, os.path.join(scratch, "before"), work_dir)
                after_signatures = signatures_of(name, source, after_export, work_dir)
    finally:
        for worktree in worktrees:
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", worktree], capture_output=True)
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    before, after = sides["before"], sides["after"]
    for line in after["evaluation lines"]:
        print(line)
    difference = first_difference(before, after)
    signature_lines, signature_difference = compare_signatures(before_signatures, after_signatures)
    print("The same weights through both exports, on test_2016_flickr:")
    for line in signature_lines:
        print(f"  {line}")
    if difference or signature_difference:
        print(f"DIFFERENT: {difference or signature_difference}")
        return 1
    print(
        f"same: {len(after['records'])} metrics records, {len(after['evaluation lines'])} evaluation line(s) and "
        f"{len(after['translations'])} validation translations, to the last digit"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
