"""Training speed and loss curves under each precision and with XLA, side by side.

    python benchmarks/bench_training.py                       # tiny, 60 timed steps each
    python benchmarks/bench_training.py --size small --steps 40
    python benchmarks/bench_training.py --warmup-epoch --settings float32,float32+xla
    python benchmarks/bench_training.py --settings float32,float32+plain-loss   # the fused loss
    python benchmarks/bench_training.py --settings mixed_bfloat16+keras-dropout,mixed_bfloat16+dropout
    python benchmarks/bench_training.py --settings mixed_bfloat16+dropout+keras-layernorm,mixed_bfloat16+dropout
    python benchmarks/bench_training.py --size small --settings float32+dropout+attention-bias,float32+dropout
    python benchmarks/bench_training.py --settings mixed_bfloat16+dropout,mixed_bfloat16+dropout+scale-norm

Every setting trains the same model from the same initial weights on the same Multi30k
batches, each in a fresh process (the precision policy is process-wide). Printed: non-
padding target tokens per second after the first (tracing/compiling) steps, the ratio to
float32 (or to the first setting, when float32 is not among them), and the loss curve's
largest gap to that setting's.

Settings train without dropout, so that their loss curves compare, except the "dropout"
ones: they train with the size's dropout, drawn by `layers/dropout.py` (16 random bits a
decision) or, in "keras-dropout", by Keras's own `Dropout` (32 bits), and their loss gaps
include dropout's noise. The "keras-layernorm" ones normalize with Keras's own
`LayerNormalization` (gradient by autodiff) instead of `layers/layer_normalization.py`
(gradient written out). The "attention-bias" ones give the four attention projections
biases (`--attention-bias`), which the paper's sizes, small among them, leave out (tiny
has them by default, so for tiny the setting changes nothing).
The "scale-norm" ones normalize with ScaleNorm (`--normalization scale`) instead of layer
norm.
The "keras-adam" ones update with Keras's `Adam` instead of `app.training.fused_adam.FusedAdam`.
The "1-thread-per-op" ones give each op one CPU thread (`train.py --intra-op-threads 1`)
where TensorFlow gives it every core; TensorFlow still runs one op at a time per core
(`app.runtime.threads`).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from app.training.recipes import RECIPES  # noqa: E402
from app.cli.flag_types import int_at_least, name_list, positive_int  # noqa: E402

# Every setting but the "plain loss" ones projects onto the vocabulary inside the loss,
# a slice of rows at a time (`app.training.output_loss`); XLA always takes the plain path.
SETTINGS = {
    "float32": dict(precision="float32", jit=False, fused_loss=True),
    "float32+plain-loss": dict(precision="float32", jit=False, fused_loss=False),
    "mixed_bfloat16": dict(precision="mixed_bfloat16", jit=False, fused_loss=True),
    "mixed_bfloat16+plain-loss": dict(precision="mixed_bfloat16", jit=False, fused_loss=False),
    "mixed_float16": dict(precision="mixed_float16", jit=False, fused_loss=True),
    "float32+xla": dict(precision="float32", jit=True, fused_loss=False),
    "mixed_bfloat16+xla": dict(precision="mixed_bfloat16", jit=True, fused_loss=False),
    "float32+dropout": dict(precision="float32", jit=False, fused_loss=True, dropout="project"),
    "float32+keras-dropout": dict(precision="float32", jit=False, fused_loss=True, dropout="keras"),
    "mixed_bfloat16+dropout": dict(precision="mixed_bfloat16", jit=False, fused_loss=True, dropout="project"),
    "mixed_bfloat16+keras-dropout": dict(precision="mixed_bfloat16", jit=False, fused_loss=True, dropout="keras"),
    "float32+keras-layernorm": dict(precision="float32", jit=False, fused_loss=True, layer_norm="keras"),
    "mixed_bfloat16+keras-layernorm": dict(precision="mixed_bfloat16", jit=False, fused_loss=True, layer_norm="keras"),
    "float32+dropout+keras-layernorm": dict(
        precision="float32", jit=False, fused_loss=True, dropout="project", layer_norm="keras"
    ),
    "mixed_bfloat16+dropout+keras-layernorm": dict(
        precision="mixed_bfloat16", jit=False, fused_loss=True, dropout="project", layer_norm="keras"
    ),
    "float32+dropout+keras-adam": dict(
        precision="float32", jit=False, fused_loss=True, dropout="project", optimizer="keras"
    ),
    "mixed_bfloat16+dropout+keras-adam": dict(
        precision="mixed_bfloat16", jit=False, fused_loss=True, dropout="project", optimizer="keras"
    ),
    "float32+dropout+attention-bias": dict(
        precision="float32", jit=False, fused_loss=True, dropout="project", attention_bias=True
    ),
    "mixed_bfloat16+dropout+attention-bias": dict(
        precision="mixed_bfloat16", jit=False, fused_loss=True, dropout="project", attention_bias=True
    ),
    "float32+dropout+scale-norm": dict(
        precision="float32", jit=False, fused_loss=True, dropout="project", normalization="scale"
    ),
    "mixed_bfloat16+dropout+scale-norm": dict(
        precision="mixed_bfloat16", jit=False, fused_loss=True, dropout="project", normalization="scale"
    ),
    "float32+dropout+1-thread-per-op": dict(
        precision="float32", jit=False, fused_loss=True, dropout="project", intra_op_threads=1
    ),
    "mixed_bfloat16+dropout+1-thread-per-op": dict(
        precision="mixed_bfloat16", jit=False, fused_loss=True, dropout="project", intra_op_threads=1
    ),
}

def run_one(args):
    """Trains one setting and prints a JSON line (runs in its own process)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

    import keras
    import tensorflow as tf

    from app.runtime.threads import set_cpu_threads

    # Before any op: TensorFlow makes its thread pools once, at its first.
    set_cpu_threads(intra_op=SETTINGS[args.setting].get("intra_op_threads"))

    from app.model.config import ModelConfig
    from app.model.transformer import build_transformer
    from app.training.config import TrainConfig
    from app.training.optimizer import make_optimizer
    from app.training.step import make_train_step
    from data.config import DataConfig
    from data.dataset import prepare_data
    from layers.dropout import Dropout
    from layers.layer_normalization import LayerNormalization

    setting = SETTINGS[args.setting]
    data = prepare_data(DataConfig(batch_tokens=args.batch_tokens), args.vocab_dir)
    dropout = setting.get("dropout")
    if dropout == "keras":
        # This process only: the model's dropouts draw as Keras's own Dropout does.
        Dropout.call = keras.layers.Dropout.call
    if setting.get("layer_norm") == "keras":
        # This process only: the model's layer norms differentiate as Keras's own do.
        LayerNormalization.call = keras.layers.LayerNormalization.call
    overrides = {} if dropout else {"dropout": 0.0}
    if setting.get("optimizer") == "keras":
        # This process only: Keras's own Adam, a dozen ops per variable, in place of the
        # fused one.
        import app.training.optimizer

        app.training.optimizer.FusedAdam = keras.optimizers.Adam
    if setting.get("attention_bias"):
        overrides["attention_bias"] = True
    if setting.get("normalization"):
        overrides["normalization"] = setting["normalization"]
    config = ModelConfig.from_size(args.size, vocab_size=data.tokenizer.vocab_size, **overrides)
    keras.config.set_dtype_policy(setting["precision"])
    keras.utils.set_random_seed(0)
    model = build_transformer(config)
    # A realistic early-training learning rate, the same for every setting.
    train_config = TrainConfig(
        train_steps=args.warmup + args.steps, warmup_steps=400, precision=setting["precision"], jit=setting["jit"]
    )
    optimizer = make_optimizer(config, train_config, args.warmup + args.steps)
    optimizer.build(model.trainable_variables)
    step = make_train_step(
        model, optimizer, tf.distribute.get_strategy(), train_config.label_smoothing,
        jit=setting["jit"], fused_loss=setting["fused_loss"],
    )

    if args.warmup_epoch:
        # Steady state: one untimed pass over the whole first epoch traces (and, with XLA,
        # compiles) every bucket shape; then the same batches again, timed from the start.
        epoch = list(data.train_batches(epoch=0, seed=0))
        if len(epoch) < args.steps:
            raise SystemExit(f"an epoch has only {len(epoch)} batches, fewer than --steps {args.steps}")
        batches = epoch + epoch[: args.steps]
        warmup = len(epoch)
    else:
        batches = list(data.train_batches(epoch=0, seed=0).take(args.warmup + args.steps))
        warmup = args.warmup
        if len(batches) < args.warmup + args.steps:
            # One epoch is all there is: fewer timed steps than asked would be reported as if not.
            raise SystemExit(
                f"an epoch has only {len(batches)} batches, fewer than --warmup {args.warmup} + --steps {args.steps}"
            )
    losses, tokens, started = [], 0.0, None
    for index, batch in enumerate(batches):
        if index == warmup:
            started = time.perf_counter()
        loss_sum, batch_tokens = step((batch,))
        losses.append(float(loss_sum) / float(batch_tokens))
        if index >= warmup:
            tokens += float(batch_tokens)
    elapsed = time.perf_counter() - started
    print(json.dumps({"setting": args.setting, "tokens_per_second": tokens / elapsed, "losses": losses}))

def _batch_tokens(text):
    # Imported here: the data package loads TensorFlow, which only the settings' processes use.
    from app.cli.flags import batch_tokens

    return batch_tokens(text)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="tiny", choices=sorted(RECIPES))
    parser.add_argument("--steps", type=positive_int, default=60, help="timed steps per setting")
    parser.add_argument(
        "--warmup", type=int_at_least(0), default=60, help="untimed steps first (tracing, XLA compiles)"
    )
    parser.add_argument("--batch-tokens", type=_batch_tokens, default=4096)
    parser.add_argument(
        "--warmup-epoch", action="store_true",
        help="warm up on the whole first epoch (every bucket shape), then time --steps of it again: XLA's steady state",
    )
    parser.add_argument("--settings", type=name_list(SETTINGS, "setting"), default=",".join(SETTINGS))
    parser.add_argument("--setting", choices=SETTINGS, help=argparse.SUPPRESS)
    parser.add_argument("--vocab-dir", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.setting:
        return run_one(args)

    names = args.settings
    results = {}
    # The settings share one vocabulary, trained by the first; removed with its directory at the end.
    with tempfile.TemporaryDirectory(prefix="bench_training_") as vocab_dir:
        for name in names:
            command = [
                sys.executable, __file__, "--setting", name, "--vocab-dir", vocab_dir, "--size", args.size,
                "--steps", str(args.steps), "--warmup", str(args.warmup), "--batch-tokens", str(args.batch_tokens),
            ]
            if args.warmup_epoch:
                command.append("--warmup-epoch")
            output = subprocess.run(
                command, capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
            )
            if output.returncode != 0:
                print(f"{name}: failed\n{output.stderr[-2000:]}")
                continue
            results[name] = json.loads(output.stdout.strip().splitlines()[-1])

    if not results:
        return 1
    # Ratios and loss gaps are against float32, or against the first setting without it.
    reference_name = "float32" if "float32" in results else next(iter(results))
    reference = results[reference_name]
    warmup = "the whole first epoch" if args.warmup_epoch else args.warmup
    print(f"{args.size}, {args.batch_tokens} tokens per batch, {args.steps} timed steps after {warmup}; "
          f"the reference is {reference_name}")
    print(
        f"{'setting':<40}{'target tok/s':>14}{'vs reference':>14}{'max |loss - reference loss|':>30}{'final loss':>12}"
    )
    for name, result in results.items():
        ratio = result["tokens_per_second"] / reference["tokens_per_second"]
        gap = max(abs(a - b) for a, b in zip(result["losses"], reference["losses"]))
        print(f"{name:<40}{result['tokens_per_second']:>14,.0f}{ratio:>14.2f}{gap:>30.4f}{result['losses'][-1]:>12.4f}")

if __name__ == "__main__":
    sys.exit(main())
