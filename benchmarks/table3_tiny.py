"""The paper's Table 3 variations at tiny scale on Multi30k, one short run each.

    python benchmarks/table3_tiny.py                        # every row, 1,000 steps each
    python benchmarks/table3_tiny.py --steps 2000 --rows base,A1,D3
    python benchmarks/table3_tiny.py --print-only           # the table from finished runs
    python benchmarks/table3_tiny.py --rows base,A1 --seeds 1,2,3   # each row 3 times: mean and range

Each row is `python train.py` (tiny, en->de, the default recipe) with one change, for the
same number of steps, warmup and seed, so every row sees the same batches in the same
order. Runs live in `runs/table3/<row>/` and resume, so an interrupted study continues
where it stopped and a finished row is not trained again. The table prints validation
perplexity (per subword, without label smoothing: comparable across rows, as in the
paper's Table 3) and greedy validation BLEU at the last step, with each row's parameters.

Short runs answer "which learns faster on 29k sentence pairs", not "which ends better
after convergence": read the table with its step count.

One run per row cannot tell a change from luck: at 1,000 steps the base row alone varies
over seeds as much as most rows change it
(docs/lab-notebook/2026-11-26-records-moved-from-code-comments.md). `--seeds`
trains every row once per seed (the seed sets the initial weights, the batch order and
dropout's masks) and prints each figure as the mean over the seeds, with their range,
and, when the base row is among the rows, each row's difference from it seed by seed.
Seed 1, train.py's default, keeps a row's plain directory, so rows trained before seeds
were a flag still count; seed N trains in `<row>-seedN/`.
"""

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from app.cli.flag_types import int_at_least, positive_int  # noqa: E402

# Tiny is h = 4 heads of d_k = d_v = 32 over d_model = 128 (see app/model/config.py). Rows
# change what the paper's rows change, scaled to that width.
ROWS = {
    "base": ("tiny, the recipe pinned below (P_drop 0.3, Adam, 4,096-token batches)", []),
    "A1": ("(A) 1 head, d_k = d_v = 128", ["--num-heads", "1"]),
    "A3": ("(A) 8 heads, d_k = d_v = 16", ["--num-heads", "8"]),
    "A4": ("(A) 16 heads, d_k = d_v = 8", ["--num-heads", "16"]),
    "B1": ("(B) d_k = 16, d_v = 32", ["--key-dim", "16", "--value-dim", "32"]),
    "D1": ("(D) P_drop = 0.0", ["--dropout", "0.0"]),
    "D2": ("(D) P_drop = 0.1", ["--dropout", "0.1"]),
    "D3": ("(D) epsilon_ls = 0.0", ["--label-smoothing", "0.0"]),
    "D4": ("(D) epsilon_ls = 0.2", ["--label-smoothing", "0.2"]),
    "E": ("(E) learned positional embedding", ["--positional", "learned"]),
}


# The schedule every row trains on: the paper's, warmed up over 720 steps (8% of the
# 9,000-step default run the README's rows were measured against; their base row
# matches that run's step-1,000 evaluation) and without the default's final cooldown,
# which would make a short row's last steps unlike the default run's.
ROW_WARMUP_STEPS = 720
# And that run's vocabulary, pinned for the same reason: a row trained before must keep
# its vocabulary, or its checkpoints could not be resumed.
ROW_VOCAB_SIZE = 8000
# And that run's dropout, 0.3: tiny's default then. The dropout rows
# (D1, D2) override it, since their flags come later on the command line.
ROW_DROPOUT = 0.3
# And that run's attention projections, with biases (tiny's default; the paper's sizes
# have none): should tiny's default change, a row trained before still resumes.
ROW_ATTENTION_BIAS = ["--attention-bias"]
# And that run's optimizer, the paper's Adam without weight decay (tiny's default then;
# tiny has since trained with AdamW's decay).
ROW_WEIGHT_DECAY = 0.0
# And that run's batches, 4,096 tokens (tiny's default then).
ROW_BATCH_TOKENS = 4096


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--rows", default=",".join(ROWS), help=f"comma-separated rows (default: all of {', '.join(ROWS)})"
    )
    parser.add_argument("--steps", type=positive_int, default=1000, help="training steps per row")
    parser.add_argument(
        "--warmup-steps", type=int_at_least(0), default=ROW_WARMUP_STEPS,
        help=f"warmup of every row (default: {ROW_WARMUP_STEPS}, as the README's rows)",
    )
    parser.add_argument(
        "--vocab-size", type=int, default=ROW_VOCAB_SIZE,
        help=f"subword vocabulary of every row (default: {ROW_VOCAB_SIZE}, as the README's rows)",
    )
    parser.add_argument(
        "--seeds", default="1", help="comma-separated seeds: every row is trained once per seed (default: 1)"
    )
    parser.add_argument("--runs-dir", default=os.path.join(ROOT, "runs", "table3"))
    parser.add_argument("--print-only", action="store_true", help="print the table from finished runs; train nothing")
    parser.add_argument("extra", nargs=argparse.REMAINDER, help="after --: more train.py flags for every row")
    args = parser.parse_args(argv)
    args.rows = [row.strip() for row in args.rows.split(",") if row.strip()]
    unknown = [row for row in args.rows if row not in ROWS]
    if unknown:
        parser.error(f"unknown rows {unknown}; known: {', '.join(ROWS)}")
    try:
        args.seeds = [int(seed) for seed in args.seeds.split(",") if seed.strip()]
    except ValueError:
        parser.error(f"--seeds must be comma-separated integers, got {args.seeds!r}")
    if not args.seeds or len(set(args.seeds)) != len(args.seeds):
        parser.error(f"--seeds must name at least one seed, each once; got {args.seeds}")
    # Here, not in the first row's train.py, whose error would be in its log behind a traceback.
    from data.config import DataConfig
    from data.errors import DataError

    try:
        DataConfig(vocab_size=args.vocab_size)
    except DataError as error:
        parser.error(f"--vocab-size: {error}")
    if args.extra and args.extra[0] == "--":
        args.extra = args.extra[1:]
    return args


def run_dir(args, row, seed=1):
    """Where `row` trains with `seed`: the row's own directory for seed 1, train.py's
    default, so that runs from before seeds were a flag still count."""
    return os.path.join(args.runs_dir, row if seed == 1 else f"{row}-seed{seed}")


def train_command(args, row, seed=1):
    _, flags = ROWS[row]
    return [
        sys.executable, os.path.join(ROOT, "train.py"),
        "--model-dir", run_dir(args, row, seed),
        "--train-steps", str(args.steps), "--warmup-steps", str(args.warmup_steps), "--cooldown-fraction", "0",
        "--vocab-size", str(args.vocab_size), "--dropout", str(ROW_DROPOUT), *ROW_ATTENTION_BIAS,
        "--weight-decay", str(ROW_WEIGHT_DECAY), "--batch-tokens", str(ROW_BATCH_TOKENS),
        # Only the final evaluation; two checkpoints are enough to resume.
        "--eval-every", "0", "--checkpoint-every", "250", "--keep-checkpoints", "2",
        "--seed", str(seed), *flags, *args.extra,
    ]


def final_evaluation(model_dir, steps):
    """The last evaluation record of a run that reached `steps`, or None."""
    from app.visualization.curves import read_metrics

    path = os.path.join(model_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return None
    records = read_metrics(path)
    evaluations = [r for r in records if "valid_loss" in r and r["step"] >= steps]
    return evaluations[-1] if evaluations else None


def parameter_count(model_dir):
    """Trainable parameters of a run's model, rebuilt from its settings.json."""
    from app.model.config import ModelConfig
    from app.model.transformer import build_transformer

    with open(os.path.join(model_dir, "settings.json")) as f:
        config = ModelConfig.from_dict(json.load(f)["model"])
    return build_transformer(config).count_params()


def summarize(values):
    """`12.34` for one value; `12.34 (11.00-13.50)`, the mean and the range, for several."""
    values = [v for v in values if v is not None]
    if not values:
        return ""
    mean = sum(values) / len(values)
    if len(values) == 1:
        return f"{mean:.2f}"
    return f"{mean:.2f} ({min(values):.2f}-{max(values):.2f})"


def markdown_row(cells):
    """`| a | b |`, with an empty cell as `| |`."""
    return "|" + "|".join(f" {cell} " if cell else " " for cell in cells) + "|"


def seed_by_seed(row_finals, base_finals, key):
    """A row's difference from the base row with each seed both finished: `+1.58, -0.46`.
    Seeds whose records lack `key` (BLEU, with train.py's --no-bleu) are left out, as
    `summarize` leaves them out of the mean.

    The spread between seeds is as large as most rows' effect (README), so the evidence
    is whether a row differs the same way with every seed, not its mean."""
    differences = [
        row_finals[seed].get(key) - base_finals[seed].get(key)
        for seed in row_finals
        if seed in base_finals and None not in (row_finals[seed].get(key), base_finals[seed].get(key))
    ]
    return ", ".join(f"{difference:+.2f}" for difference in differences)


def table(args):
    finals = {}  # row -> {seed: its final evaluation record}, for the seeds that finished
    for row in args.rows:
        finals[row] = {}
        for seed in args.seeds:
            entry = final_evaluation(run_dir(args, row, seed), args.steps)
            if entry is not None:
                finals[row][seed] = entry
    several = len(args.seeds) > 1
    # With several seeds and the base row, each row's difference from it seed by seed.
    against_base = several and "base" in args.rows
    header = [
        "row", "change", "params", *(["seeds"] if several else []), "perplexity", "BLEU",
        *(["perplexity - base, by seed", "BLEU - base, by seed"] if against_base else []),
    ]
    lines = [
        f"Multi30k en->de validation after {args.steps:,} steps (tiny, greedy decoding for BLEU)"
        + (f"; mean (range) over seeds {', '.join(map(str, args.seeds))}" if several else ""),
        "",
        markdown_row(header),
        markdown_row(["---"] * len(header)),
    ]
    for row in args.rows:
        finished = finals[row]
        seeds_cell = [", ".join(map(str, finished))] if several else []
        if not finished:
            cells = [row, ROWS[row][0], "", *seeds_cell, "not run", ""]
        else:
            params = parameter_count(run_dir(args, row, next(iter(finished)))) / 1e6
            perplexity = summarize([entry.get("valid_perplexity") for entry in finished.values()])
            bleu = summarize([entry.get("bleu") for entry in finished.values()])
            cells = [row, ROWS[row][0], f"{params:.2f}M", *seeds_cell, perplexity, bleu]
        if against_base:
            cells += [
                seed_by_seed(finished, finals["base"], key) if row != "base" else ""
                for key in ("valid_perplexity", "bleu")
            ]
        lines.append(markdown_row(cells))
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    if not args.print_only:
        os.makedirs(args.runs_dir, exist_ok=True)
        for row in args.rows:
            for seed in args.seeds:
                model_dir = run_dir(args, row, seed)
                name = os.path.basename(model_dir)
                if final_evaluation(model_dir, args.steps) is not None:
                    print(f"{name}: finished earlier, kept", flush=True)
                    continue
                command = train_command(args, row, seed)
                print(f"{name}: {' '.join(command[1:])}", flush=True)
                with open(os.path.join(args.runs_dir, f"{name}.log"), "a") as log:
                    subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    print(table(args))


if __name__ == "__main__":
    main()
