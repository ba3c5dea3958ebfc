"""Training speed against keras-hub's translation example at the same model size, in one run.

    python benchmarks/bench_vs_keras_hub_training.py                       # tiny and small
    python benchmarks/bench_vs_keras_hub_training.py --sizes small --steps 60 --warmup-steps 20
    python benchmarks/bench_vs_keras_hub_training.py --precision mixed_bfloat16 --jit

Two ways to train the same-size model on the bundled Multi30k en->de, with the same
subword ids (the project's vocabulary), in one process, side by side:

- project: `build_transformer` and `make_train_step` (app/training/step.py: label-smoothed
  loss over non-padding tokens, Adam on the paper's schedule, the size's dropout), on
  `prepare_data`'s token-budget batches bucketed by length (the size's batch as train.py
  trains it, app/training/recipes.py; `--batch-tokens`).
  `--precision` and `--jit` apply to this side only.
- keras-hub: the model of keras-hub's English-Spanish example at the same N, d_model,
  d_ff, h and vocabulary (benchmarks/keras_hub_peer.py), trained the example's way:
  every sentence padded to 40, batches of 64 sentences, `compile("rmsprop",
  loss="sparse_categorical_crossentropy", metrics=["accuracy"])` and `fit`, float32.
  Keras leaves XLA off on a CPU-only machine (`jit_compile="auto"`), as for the example.

Weights are untrained and seeded; only speed is measured. After `--warmup-steps` untimed
steps each (tracing), `--steps` timed steps each, run in `--rounds` alternating chunks so
that a change in the machine's load falls on both sides. Timing covers the steps and
their input, not `fit`'s per-call setup. Printed per side: non-padding target (label)
tokens per second, the ratio project / keras-hub, the share of label positions that are
real tokens, and the model FLOPs utilization: training FLOPs of the non-padding tokens
(`keras_hub_peer.forward_flops`, x 3) per second, over this machine's matrix-multiply
peak measured at the start of the run (2048 x 2048 `tf.linalg.matmul`, float32, and
bfloat16 when the project trains in it).
"""

import argparse
import atexit
import os
import shutil
import sys
import tempfile
import time
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from app.model.config import ModelConfig  # noqa: E402
from app.cli.flag_types import int_at_least, name_list, positive_int  # noqa: E402
from app.model.transformer import build_transformer  # noqa: E402
from app.training.precision import matmul_peak  # noqa: E402
from app.training.config import TrainConfig  # noqa: E402
from app.training.optimizer import make_optimizer  # noqa: E402
from app.training.step import make_train_step  # noqa: E402
from app.training.recipes import RECIPES, recipe_for  # noqa: E402
from benchmarks.keras_hub_peer import (  # noqa: E402
    BATCH_SIZE,
    MAX_SEQUENCE_LENGTH,
    build_keras_hub_transformer,
    fixed_length_arrays,
    lengths,
    machine_header,
    training_flops,
    useful_fraction,
)
from app.cli.flags import batch_tokens as batch_tokens_flag  # noqa: E402
from data.config import DataConfig  # noqa: E402
from data.dataset import prepare_data  # noqa: E402

# fit's default shuffle=True does not apply to a tf.data input, and says so every call.
warnings.filterwarnings("ignore", message="`shuffle=True` was passed")


class ProjectSide:
    """The project's model, train step and bucketed batches."""

    def __init__(self, data, config, size, args, total_steps):
        self.config = config
        keras.config.set_dtype_policy(args.precision)
        keras.utils.set_random_seed(0)
        self.model = build_transformer(config)
        train_config = TrainConfig(
            train_steps=total_steps,
            precision=args.precision,
            jit=args.jit,
            learning_rate_scale=recipe_for(size).learning_rate_scale,
        )
        optimizer = make_optimizer(config, train_config, total_steps)
        optimizer.build(self.model.trainable_variables)
        self.step = make_train_step(
            self.model, optimizer, tf.distribute.get_strategy(), train_config.label_smoothing, jit=args.jit
        )
        keras.config.set_dtype_policy("float32")
        self.batches = list(data.train_batches(epoch=0, seed=0).take(total_steps))
        if len(self.batches) < total_steps:
            raise SystemExit(f"an epoch has only {len(self.batches)} batches; ask for fewer steps")
        targets = [target.numpy() for _, target in self.batches]
        self.rows = np.mean([t.shape[0] for t in targets])
        self.useful = sum(int((t[:, 1:] != 0).sum()) for t in targets) / sum(t[:, 1:].size for t in targets)

    def run(self, indices):
        """Trains on the batches at `indices`: (seconds, label tokens, training FLOPs)."""
        tokens = flops = 0.0
        start = time.perf_counter()
        for index in indices:
            loss_sum, _ = self.step((self.batches[index],))
            float(loss_sum)  # waits for the step
        seconds = time.perf_counter() - start
        for index in indices:
            source, target = (x.numpy() for x in self.batches[index])
            source_lengths, target_lengths = lengths(source, target[:, 1:])
            tokens += target_lengths.sum()
            flops += training_flops(self.config, source_lengths, target_lengths)
        return seconds, tokens, flops


class _StepClock(keras.callbacks.Callback):
    """Times `fit` from the start of its first batch to the end of its last."""

    def on_train_batch_begin(self, batch, logs=None):
        if batch == 0:
            self.start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.end = time.perf_counter()


class KerasHubSide:
    """The example's model, fixed-length pipeline, compile and fit."""

    def __init__(self, data, config, total_steps):
        self.config = config
        keras.utils.set_random_seed(0)
        self.model = build_keras_hub_transformer(config)
        self.model.compile("rmsprop", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
        train = data.tokens["train"]
        arrays = fixed_length_arrays(train.source.to_list(), train.target.to_list())
        # The example shuffles; a fixed permutation makes the timed batches known.
        order = np.random.default_rng(0).permutation(len(train))[: total_steps * BATCH_SIZE]
        if len(order) < total_steps * BATCH_SIZE:
            raise SystemExit(f"train has only {len(train)} pairs; ask for fewer steps")
        self.arrays = {key: value[order] for key, value in arrays.items()}
        self.useful = useful_fraction(self.arrays["labels"])
        self.rows = BATCH_SIZE
        self.clock = _StepClock()

    def run(self, indices):
        """Fits on the batches at `indices` (consecutive): (seconds, label tokens, FLOPs)."""
        rows = slice(indices[0] * BATCH_SIZE, (indices[-1] + 1) * BATCH_SIZE)
        chunk = {key: value[rows] for key, value in self.arrays.items()}
        inputs = {"encoder_inputs": chunk["encoder_inputs"], "decoder_inputs": chunk["decoder_inputs"]}
        dataset = tf.data.Dataset.from_tensor_slices((inputs, chunk["labels"])).batch(BATCH_SIZE).prefetch(16)
        self.model.fit(dataset, epochs=1, verbose=0, callbacks=[self.clock])
        source_lengths, target_lengths = lengths(chunk["encoder_inputs"], chunk["labels"])
        flops = training_flops(self.config, source_lengths, target_lengths)
        return self.clock.end - self.clock.start, float(target_lengths.sum()), flops


def measure(size, args, peaks, vocab_dir):
    """Trains both sides of one size; returns a row of figures per side."""
    batch_tokens = args.batch_tokens or recipe_for(size).batch_tokens
    data = prepare_data(DataConfig(batch_tokens=batch_tokens), vocab_dir)
    config = ModelConfig.from_size(size, vocab_size=data.tokenizer.vocab_size)
    total = args.warmup_steps + args.steps
    sides = {
        "project": ProjectSide(data, config, size, args, total),
        "keras-hub": KerasHubSide(data, config, total),
    }
    for side in sides.values():
        side.run(list(range(args.warmup_steps)))  # tracing, first steps

    timed = np.array_split(np.arange(args.warmup_steps, total), args.rounds)
    totals = {name: np.zeros(3) for name in sides}  # seconds, tokens, FLOPs
    for chunk in timed:
        for name, side in sides.items():
            totals[name] += side.run(list(chunk))

    rows = []
    for name, side in sides.items():
        seconds, tokens, flops = totals[name]
        peak = peaks["bfloat16"] if name == "project" and args.precision == "mixed_bfloat16" else peaks["float32"]
        if name == "project":
            pipeline = f"bucketed, {batch_tokens} tokens"
            setting = args.precision + (" + XLA" if args.jit else "")
        else:
            pipeline = f"padded to {MAX_SEQUENCE_LENGTH}, {BATCH_SIZE} rows"
            setting = "float32" + (" + XLA" if side.model.jit_compile else "")
        rows.append(
            dict(
                size=size, side=name, pipeline=pipeline, setting=setting, rows=side.rows, useful=side.useful,
                parameters=side.model.count_params(), tokens_per_second=tokens / seconds,
                flops_per_second=flops / seconds, mfu=flops / seconds / peak,
            )
        )
    return rows


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--sizes", type=name_list(RECIPES, "size"), default="tiny,small",
        help=f"comma-separated model sizes ({', '.join(RECIPES)})",
    )
    parser.add_argument("--steps", type=positive_int, default=40, help="timed steps per side")
    parser.add_argument(
        "--warmup-steps", type=int_at_least(2), default=10,
        help="untimed steps per side first; at least 2: the project's step traces once more at its second batch shape",
    )
    parser.add_argument("--rounds", type=positive_int, default=2, help="alternating timed chunks per side")
    parser.add_argument("--precision", default="float32", choices=["float32", "mixed_bfloat16"], help="project side")
    parser.add_argument("--jit", action="store_true", help="project side: XLA")
    parser.add_argument(
        "--batch-tokens", type=batch_tokens_flag, help="project side (default: train.py's for the size)"
    )
    parser.add_argument("--vocab-dir", help="directory with subwords.model (default: train one, as train.py does)")
    args = parser.parse_args(argv)
    if args.steps < args.rounds:
        parser.error(f"--steps {args.steps} is fewer than --rounds {args.rounds}: each round times at least one step")
    return args


def main(argv=None):
    args = parse_args(argv)

    for line in machine_header():
        print(line, flush=True)
    peaks = {"float32": matmul_peak("float32")}
    if args.precision == "mixed_bfloat16":
        peaks["bfloat16"] = matmul_peak("bfloat16")
    print("matmul peak (2048 x 2048): " + ", ".join(f"{k} {v / 1e9:,.0f} GFLOP/s" for k, v in peaks.items()))
    print(f"{args.steps} timed steps per side in {args.rounds} alternating chunks, after {args.warmup_steps} untimed")
    print("MFU: 3 x forward FLOPs of the non-padding tokens / s / peak (see keras_hub_peer.forward_flops)", flush=True)

    vocab_dir = args.vocab_dir
    if vocab_dir is None:
        # A vocabulary for this run only, shared by its sizes: removed when it ends.
        vocab_dir = tempfile.mkdtemp(prefix="bench_vs_keras_hub_")
        atexit.register(shutil.rmtree, vocab_dir, ignore_errors=True)
    header = (
        f"{'size':<6}{'side':<11}{'batches':<28}{'setting':<22}{'rows':>6}{'useful':>8}{'params':>11}"
        f"{'target tok/s':>14}{'ratio':>7}{'GFLOP/s':>9}{'MFU':>7}"
    )
    rows = []
    for size in args.sizes:
        size_rows = measure(size, args, peaks, vocab_dir)
        rows += size_rows
        if len(rows) == len(size_rows):
            print(header)
            print("-" * len(header))
        peer = size_rows[-1]["tokens_per_second"]
        for row in size_rows:
            print(
                f"{row['size']:<6}{row['side']:<11}{row['pipeline']:<28}{row['setting']:<22}{row['rows']:>6.0f}"
                f"{row['useful']:>8.2f}{row['parameters']:>11,}{row['tokens_per_second']:>14,.0f}"
                f"{row['tokens_per_second'] / peer:>6.2f}x{row['flops_per_second'] / 1e9:>9,.0f}{row['mfu']:>7.1%}",
                flush=True,
            )


if __name__ == "__main__":
    main()
