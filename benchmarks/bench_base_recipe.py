"""The paper's base recipe end to end on a CPU: a synthetic WMT-length corpus, prepared,
trained over mirrored CPU replicas, killed and resumed, averaged, exported and scored.

    python benchmarks/bench_base_recipe.py                        # 1M pairs, 2 replicas, 300 steps
    python benchmarks/bench_base_recipe.py --pairs 2000 --train-steps 20 --kill-at 10 --batch-tokens 512 \\
        --vocab-size 500 --test-sentences 20                       # a quick look (its test)

What a GPU run of `python train.py --size base` does, at a size a 2-core CPU finishes in
about an hour: the paper's model and vocabulary (37,000 subwords), dropout on, `--steps-
per-loop 10`, over `--cpu-replicas 2`, with `--batch-tokens` cut from 25,000 so that a
step takes seconds, not a minute. In order, each command in a fresh process, measured:

1. `python -m app.prepare --size base` on `--pairs` synthetic en-de pairs of WMT-like
   lengths (bench_data_scale.write_corpus): wall and CPU time, peak memory.
2. `python train.py --size base ...` uninterrupted ("straight"), then the same command in
   another directory, SIGKILLed after step --kill-at and run again to the end ("killed"):
   its step time, tokens/s and peak memory, the checkpoints' sizes, and whether the
   killed run's last checkpoint equals the straight one's to the last bit.
3. `python export.py` of the straight run (its last 5 checkpoints averaged, alpha 0.6),
   and `python -m app.evaluate` on --test-sentences held-out synthetic pairs: the paper's
   BLEU among the rest.

Prints every figure with the command that made it; exits 1 if a run's resumption was not
exact. What it made stays in --work.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.bench_data_scale import pair_counts, run_measured, write_corpus  # noqa: E402
from app.cli.flag_types import positive_int  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=lambda text: pair_counts(text)[0], default="1M", help="training pairs")
    parser.add_argument("--replicas", type=positive_int, default=2, help="--cpu-replicas (default 2)")
    parser.add_argument("--batch-tokens", type=positive_int, default=1024, help="tokens a side per step (1024)")
    parser.add_argument("--train-steps", type=positive_int, default=300, help="steps of each run (300)")
    parser.add_argument("--kill-at", type=positive_int, default=150, help="SIGKILL the second run after this step")
    parser.add_argument("--vocab-size", type=positive_int, help="subwords (default: base's, 37,000 for en-de)")
    parser.add_argument("--test-sentences", type=positive_int, default=200, help="held-out pairs scored (200)")
    parser.add_argument("--cache-dir", default=os.path.join(os.path.expanduser("~"), ".cache", "bench_data_scale"),
                        help="where the synthetic corpora are written once (bench_data_scale's)")
    parser.add_argument("--work", default="/tmp/bench-base-recipe", help="model directories, export, logs")
    args = parser.parse_args(argv)
    if args.kill_at >= args.train_steps:
        parser.error(f"--kill-at {args.kill_at} must come before the run's end, --train-steps {args.train_steps}")
    return args


def write_test_set(cache_dir, work, count):
    """`count` held-out pairs (another seed than train's), non-empty and under 60 words a side."""
    paths = write_corpus(cache_dir, max(4 * count, 1000), seed=1)
    with open(paths["en"], encoding="utf-8") as en, open(paths["de"], encoding="utf-8") as de:
        pairs = [(s.strip(), t.strip()) for s, t in zip(en, de)
                 if s.strip() and t.strip() and len(s.split()) < 60 and len(t.split()) < 60][:count]
    test = {lang: os.path.join(work, f"test.{lang}") for lang in ("en", "de")}
    for side, lang in enumerate(("en", "de")):
        with open(test[lang], "w", encoding="utf-8") as file:
            file.write("".join(pair[side] + "\n" for pair in pairs))
    return test


def train_command(args, dataset, model_dir):
    command = [
        sys.executable, "train.py", "--size", "base", "--dataset", dataset, "--cpu-replicas", str(args.replicas),
        "--steps-per-loop", "10", "--batch-tokens", str(args.batch_tokens), "--train-steps", str(args.train_steps),
        "--checkpoint-every", str(max(args.train_steps // 6, 1)), "--keep-checkpoints", "5", "--log-every", "10",
        "--eval-every", str(max(args.train_steps // 3, 1)), "--eval-sentences", "50", "--time-budget", "0",
        "--precision", "float32", "--seed", "1", "--model-dir", model_dir,
    ]
    return command + (["--vocab-size", str(args.vocab_size)] if args.vocab_size else [])


def kill_after(command, model_dir, step, log_path):
    """Runs `command`, SIGKILLs it once metrics.jsonl records a step at or past `step`."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    records = os.path.join(model_dir, "metrics.jsonl")
    while True:
        if process.poll() is not None:
            raise SystemExit(f"bench_base_recipe: the run to be killed ended first ({process.returncode})")
        if os.path.exists(records):
            with open(records) as file:
                if any(json.loads(line).get("step", 0) >= step for line in file if line.endswith("\n")):
                    break
        time.sleep(0.2)
    process.send_signal(signal.SIGKILL)
    process.wait()


def newest_checkpoint(model_dir):
    from app.model_dir.checkpoints import checkpoint_paths

    return checkpoint_paths(model_dir)[-1]


def resume_state(path):
    """Every variable of a checkpoint a resumed step depends on (not its clock or save count)."""
    from app.runtime.quiet_tensorflow import import_tensorflow

    import_tensorflow()  # without its start-up lines in the benchmark's output
    import tensorflow as tf

    reader = tf.train.load_checkpoint(path)
    left_out = ("_CHECKPOINTABLE_OBJECT_GRAPH", "save_counter/", "progress/seconds/")
    names = [name for name in reader.get_variable_to_shape_map() if not name.startswith(left_out)]
    return {name: reader.get_tensor(name) for name in names}


def checkpoint_bytes(model_dir):
    """`{checkpoint file prefix: bytes}` of the kept checkpoints (full and weights-only)."""
    directory = os.path.join(model_dir, "checkpoints")
    sizes = {}
    for name in os.listdir(directory):
        if ".index" in name or ".data-" in name:
            prefix = name.split(".index")[0].split(".data-")[0]
            sizes[prefix] = sizes.get(prefix, 0) + os.path.getsize(os.path.join(directory, name))
    return sizes


def records(model_dir):
    with open(os.path.join(model_dir, "metrics.jsonl")) as file:
        return [json.loads(line) for line in file]


def main(argv=None):
    args = parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    corpus = write_corpus(args.cache_dir, args.pairs)
    test = write_test_set(args.cache_dir, args.work, args.test_sentences)
    dataset = f"files:{corpus['en']},{corpus['de']}"
    straight, killed = (os.path.join(args.work, name) for name in ("straight", "killed"))
    for directory in (straight, killed):
        shutil.rmtree(directory, ignore_errors=True)
    say = lambda line: print(line, flush=True)  # noqa: E731

    prepare = [sys.executable, "-m", "app.prepare", "--size", "base", "--dataset", dataset, "--model-dir", straight]
    prepare += ["--vocab-size", str(args.vocab_size)] if args.vocab_size else []
    measured = run_measured(prepare, ROOT, os.path.join(args.work, "prepare.log"))
    say(f"$ {' '.join(prepare[1:])}")
    say(f"prepare: {args.pairs:,} pairs in {measured.wall_s:.0f} s wall, {measured.cpu_s:.0f} s CPU, "
        f"peak memory {measured.peak / 2**30:.2f} GB")
    shutil.copytree(straight, killed)  # the same vocabulary and shards: the killed run prepares nothing

    command = train_command(args, dataset, straight)
    measured = run_measured(command, ROOT, os.path.join(args.work, "straight.log"))
    say(f"$ {' '.join(command[1:])}")
    history = records(straight)
    losses = [record for record in history if "loss" in record]
    speeds = [record["tokens_per_second"] for record in losses[1:]] or [losses[0]["tokens_per_second"]]
    speeds.sort()
    tokens_per_second = speeds[len(speeds) // 2]
    # A step's real target tokens: the batch's tokens less its padding (the data summary's share).
    efficiency = float(next(line.split(":")[1] for line in measured.output.splitlines()
                            if "padding efficiency:" in line))
    per_step = args.batch_tokens * efficiency / tokens_per_second
    say(f"train: {args.train_steps} steps in {measured.wall_s / 60:.1f} min wall (data summary, evaluations and "
        f"checkpoints included); median {tokens_per_second:,.0f} target tokens/s between records, about "
        f"{per_step:.2f} s a step of {args.batch_tokens} tokens a side (padding efficiency {efficiency:.3f}); "
        f"peak memory {measured.peak / 2**30:.2f} GB")
    say(f"loss: {losses[0]['loss']:.3f} at step {losses[0]['step']} -> {losses[-1]['loss']:.3f} at step "
        f"{losses[-1]['step']}; validation: " + ", ".join(
            f"step {r['step']} loss {r['valid_loss']:.3f}" for r in history if "valid_loss" in r))
    sizes = checkpoint_bytes(straight)
    say("checkpoints kept: " + ", ".join(f"{name} {size / 2**20:.0f} MiB" for name, size in sorted(sizes.items())))

    kill_after(train_command(args, dataset, killed), killed, args.kill_at, os.path.join(args.work, "killed.log"))
    measured = run_measured(train_command(args, dataset, killed), ROOT, os.path.join(args.work, "resumed.log"))
    resumed_line = [line for line in measured.output.splitlines() if line.startswith("resumed from")]
    expected, actual = resume_state(newest_checkpoint(straight)), resume_state(newest_checkpoint(killed))
    different = sorted(name for name in expected if name not in actual or (expected[name] != actual[name]).any())
    exact = sorted(actual) == sorted(expected) and not different
    say(f"killed after step {args.kill_at}, {resumed_line[0] if resumed_line else 'did not resume'}; "
        f"last checkpoint {'equal to the straight run' if exact else 'DIFFERS'} "
        f"({len(expected)} variables" + (f", e.g. {', '.join(different[:3])})" if different else ")"))

    export_dir = os.path.join(args.work, "export")
    shutil.rmtree(export_dir, ignore_errors=True)
    export = [sys.executable, "export.py", "--model-dir", straight, "--alpha", "0.6", "--output", export_dir]
    measured = run_measured(export, ROOT, os.path.join(args.work, "export.log"))
    say(f"$ {' '.join(export[1:])}")
    say(f"export: {measured.wall_s:.0f} s; " + next(
        (line for line in measured.output.splitlines() if "average" in line.lower()), "weights as export.py chose"))
    evaluate = [sys.executable, "-m", "app.evaluate", "--saved-model", export_dir, "--source", test["en"],
                "--reference", test["de"]]
    measured = run_measured(evaluate, ROOT, os.path.join(args.work, "evaluate.log"))
    say(f"$ {' '.join(evaluate[1:])}")
    for line in measured.output.splitlines():
        if line.startswith(("BLEU", "chrF", "paper BLEU", "length", "speed")):
            say(f"  {line}")
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
