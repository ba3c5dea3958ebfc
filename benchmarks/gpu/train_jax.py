"""The project's Keras model trained under the JAX backend: recipe sweeps and base-size timing.

For a machine with a GPU and JAX but no TensorFlow. The model, loss and schedule are the
project's own (`app.model`, `app.losses`, `app.schedule` use `keras.ops` only); the input
pipeline is a numpy re-implementation of the project's token-budget buckets over ids
written by `export_token_ids.py`; validation is greedy decoding (full forward pass per
step, no cache) scored by sacreBLEU. It exists to tune the recipe quickly: the figures a
user is promised come from `train.py` + `python -m app.evaluate` on TensorFlow. It runs
on a CPU too (`pip install jax`), slowly. `time-base` was run on one H100 on 2026-11-24
(docs/results.md, "The base model on a GPU, under JAX"). `sweep`'s recipes start from
tiny's default (weight decay, final cooldown, half batch) and change what they name;
validation is greedy, so its figures compare recipes with each other, not with
`train.py`'s beam.

    # a sweep of recipes; one JSON object per recipe (keys: see Recipe)
    python benchmarks/gpu/train_jax.py sweep --data runs/gpu-data/en-de-8000 \
        --recipes '[{"name": "p0.3", "dropout": 0.3}]'
    # the base model's training step: tokens/s and model FLOPs utilization
    python benchmarks/gpu/train_jax.py time-base
"""

import argparse
import dataclasses
import json
import os
import sys
import time
from typing import List, Optional

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from app.config import ModelConfig  # noqa: E402
from app.flag_types import int_at_least, positive_int  # noqa: E402  (TensorFlow-free)
from app.fused_adam import NOT_DECAYED  # noqa: E402  (TensorFlow-free at import)
from app.losses import summed_loss  # noqa: E402
from app.model import build_transformer  # noqa: E402
from app.schedule import WarmupInverseSqrt, cooldown_steps, resolve_warmup_steps  # noqa: E402
from keras_hub_peer import training_flops  # noqa: E402  (TensorFlow-free)

START_ID, END_ID = 1, 2
# Padded lengths of the numpy buckets: few shapes, so XLA compiles each once.
BUCKET_LENGTHS = (8, 12, 16, 20, 24, 28, 32, 40, 48, 64, 96, 128, 256)
# time-base's Keras dtype policies: the matrix-multiply peak each is measured against.
TIMED_PRECISIONS = ("float32", "mixed_bfloat16")
MAX_DECODE_LENGTH = 96  # validation targets are far shorter; input + 50 is capped here


@dataclasses.dataclass
class Recipe:
    """One training run: the knobs `train.py` also has, under the same names."""

    name: str = "default"
    size: str = "tiny"
    dropout: Optional[float] = None
    attention_dropout: Optional[float] = None
    inner_dropout: Optional[float] = None
    label_smoothing: Optional[float] = None
    norm_first: Optional[bool] = None
    num_heads: Optional[int] = None
    key_dim: Optional[int] = None
    num_layers: Optional[int] = None
    positional: Optional[str] = None
    # The defaults are tiny's as `python train.py` trains it (app/train_command.py).
    batch_tokens: int = 2048
    train_steps: int = 16000
    warmup_steps: Optional[int] = None  # None: as train.py, 8% of the run up to 4,000
    learning_rate_scale: float = 1.0
    cooldown_fraction: float = 0.2  # the last 20% of the steps anneal linearly to zero
    weight_decay: float = 0.2  # decoupled (AdamW), not on biases and normalization
    seed: int = 0
    # Weight snapshots every this many steps; the last K are averaged for each K.
    snapshot_every: int = 250
    average: List[int] = dataclasses.field(default_factory=lambda: [5, 10])
    eval_every: int = 2000
    eval_sentences: Optional[int] = None  # validation sentences decoded (default: all)
    data: Optional[str] = None  # overrides --data


def read_recipes(text):
    """The `Recipe`s of `--recipes`' JSON list, all checked before the first one trains.

    Raises:
        ValueError: naming the recipe (by its place and name) and what is wrong with it:
            JSON that does not parse or is not a non-empty list, an entry that is not an
            object, a field `Recipe` does not have, an `average` that is not a list of
            counts of at least 1, or a name used twice.
    """
    try:
        entries = json.loads(text)
    except ValueError as error:
        raise ValueError(f"--recipes is not JSON: {error}") from None
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"--recipes must be a non-empty JSON list of objects, got {text[:80]!r}")
    known = {field.name for field in dataclasses.fields(Recipe)}
    recipes = []
    for number, fields in enumerate(entries, start=1):
        if not isinstance(fields, dict):
            raise ValueError(f"recipe {number} must be a JSON object, got {json.dumps(fields)[:80]}")
        unknown = sorted(set(fields) - known)
        if unknown:
            raise ValueError(
                f"recipe {number} ({fields.get('name', 'default')}) has unknown field(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(known))}"
            )
        recipe = Recipe(**fields)
        if not (isinstance(recipe.average, list) and all(type(k) is int and k >= 1 for k in recipe.average)):
            raise ValueError(
                f"recipe {number} ({recipe.name}): average must be a list of snapshot counts of at least 1, "
                f"got {json.dumps(recipe.average)}"
            )
        recipes.append(recipe)
    names = [recipe.name for recipe in recipes]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(
            f"recipe name(s) {', '.join(repeated)} used more than once: the results would not tell them apart"
        )
    return recipes


# ---------------------------------------------------------------------------------------
# Data.


def load_ids(folder):
    """{split: (source list of int32 arrays, target list of int32 arrays)}."""
    arrays = np.load(os.path.join(folder, "ids.npz"))
    splits = {}
    for split in ("train", "validation"):
        sides = []
        for side in ("source", "target"):
            values, offsets = arrays[f"{split}_{side}_ids"], arrays[f"{split}_{side}_offsets"]
            sides.append([values[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)])
        splits[split] = tuple(sides)
    return splits


def bucket_batches(source, target, batch_tokens, rng):
    """One epoch of `(source [B, L], target [B, L])` int32 batches, B * L <= batch_tokens.

    Each pair goes to the shortest bucket length that holds both sides; every batch of a
    bucket has the same shape (a short last batch is filled with all-padding rows, which
    the loss ignores), so the jitted step sees one shape per bucket.
    """
    lengths = np.maximum([len(s) for s in source], [len(t) for t in target])
    bucket_of = np.searchsorted(BUCKET_LENGTHS, lengths)
    batches = []
    for bucket in np.unique(bucket_of):
        length = BUCKET_LENGTHS[bucket]
        rows = max(1, batch_tokens // length)
        members = rng.permutation(np.flatnonzero(bucket_of == bucket))
        for start in range(0, len(members), rows):
            batches.append((length, rows, members[start : start + rows]))
    order = rng.permutation(len(batches))
    for index in order:
        length, rows, members = batches[index]
        src = np.zeros((rows, length), np.int32)
        tgt = np.zeros((rows, length), np.int32)
        for row, pair in enumerate(members):
            src[row, : len(source[pair])] = source[pair]
            tgt[row, : len(target[pair])] = target[pair]
        yield src, tgt


# ---------------------------------------------------------------------------------------
# Steps.


def make_train_step(model, optimizer, label_smoothing):
    """jitted `(state, source, target) -> (state, loss_sum, tokens)`; state = variables."""

    def loss_fn(trainable, non_trainable, source, target):
        logits, non_trainable = model.stateless_call(
            trainable, non_trainable, [source, target[:, :-1]], training=True
        )
        loss_sum, tokens = summed_loss(target[:, 1:], logits, label_smoothing)
        return loss_sum / jnp.maximum(tokens, 1.0), (non_trainable, loss_sum, tokens)

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    @jax.jit
    def step(state, source, target):
        trainable, non_trainable, optimizer_vars = state
        (_, (non_trainable, loss_sum, tokens)), grads = grad_fn(trainable, non_trainable, source, target)
        trainable, optimizer_vars = optimizer.stateless_apply(optimizer_vars, grads, trainable)
        return (trainable, non_trainable, optimizer_vars), loss_sum, tokens

    return step


def make_greedy(model):
    """jitted `(trainable, non_trainable, source [N, S], max_lengths [N]) -> ids [N, T]`."""

    @jax.jit
    def greedy(trainable, non_trainable, source, max_lengths):
        count = source.shape[0]
        ids = jnp.zeros((count, MAX_DECODE_LENGTH + 1), jnp.int32).at[:, 0].set(START_ID)

        def body(t, carry):
            ids, done = carry
            logits, _ = model.stateless_call(trainable, non_trainable, [source, ids[:, :-1]], training=False)
            next_ids = jnp.argmax(logits[:, t], axis=-1).astype(jnp.int32)
            next_ids = jnp.where(t + 1 >= max_lengths, END_ID, next_ids)
            next_ids = jnp.where(done, 0, next_ids)
            return ids.at[:, t + 1].set(next_ids), done | (next_ids == END_ID)

        ids, _ = jax.lax.fori_loop(0, MAX_DECODE_LENGTH, body, (ids, jnp.zeros((count,), bool)))
        return ids[:, 1:]

    return greedy


def validation_bleu(greedy, variables, source, references, sentencepiece_model):
    """(cased BLEU, lowercased BLEU) of greedy translations of every validation sentence."""
    import sacrebleu

    width = max(len(s) for s in source)
    batch = np.zeros((len(source), width), np.int32)
    for row, ids in enumerate(source):
        batch[row, : len(ids)] = ids
    max_lengths = np.minimum(np.array([len(s) for s in source]) + 50, MAX_DECODE_LENGTH)
    ids = np.asarray(greedy(variables[0], variables[1], batch, max_lengths))
    hypotheses = []
    for row in ids:
        row = list(row)
        row = row[: row.index(END_ID)] if END_ID in row else row
        hypotheses.append(sentencepiece_model.decode([int(i) for i in row if i >= 3]))
    cased = sacrebleu.corpus_bleu(hypotheses, [references]).score
    lowercased = sacrebleu.corpus_bleu(hypotheses, [references], lowercase=True).score
    return cased, lowercased, hypotheses


# ---------------------------------------------------------------------------------------
# Sweep.


def run_recipe(recipe: Recipe, data_folder: str, log):
    import sentencepiece

    keras.utils.set_random_seed(recipe.seed)
    folder = recipe.data or data_folder
    splits = load_ids(folder)
    sentencepiece_model = sentencepiece.SentencePieceProcessor(model_file=os.path.join(folder, "subwords.model"))
    with open(os.path.join(folder, "validation.target.txt"), encoding="utf-8") as f:
        references = [line.rstrip("\n") for line in f]
    validation_source = splits["validation"][0][: recipe.eval_sentences]
    references = references[: recipe.eval_sentences]
    overrides = {
        key: getattr(recipe, key)
        for key in ("dropout", "attention_dropout", "inner_dropout", "label_smoothing", "norm_first",
                    "num_heads", "key_dim", "num_layers", "positional")
    }
    config = ModelConfig.from_size(recipe.size, vocab_size=sentencepiece_model.get_piece_size(), **overrides)
    model = build_transformer(config)
    warmup = resolve_warmup_steps(recipe.warmup_steps, recipe.train_steps)
    schedule = WarmupInverseSqrt(config.d_model, warmup, recipe.learning_rate_scale, total_steps=recipe.train_steps,
                                 cooldown_steps=cooldown_steps(recipe.train_steps, recipe.cooldown_fraction))
    optimizer = keras.optimizers.Adam(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9,
                                      weight_decay=recipe.weight_decay or None)
    if recipe.weight_decay:
        optimizer.exclude_from_weight_decay(var_names=NOT_DECAYED)
    optimizer.build(model.trainable_variables)
    state = (
        [v.value for v in model.trainable_variables],
        [v.value for v in model.non_trainable_variables],
        [v.value for v in optimizer.variables],
    )
    train_step = make_train_step(model, optimizer, config.label_smoothing)
    greedy = make_greedy(model)
    rng = np.random.default_rng(recipe.seed)

    snapshots, curve = [], []
    step, epoch, tokens_seen, loss_window = 0, 0, 0.0, []
    started = time.perf_counter()
    while step < recipe.train_steps:
        for source, target in bucket_batches(*splits["train"], recipe.batch_tokens, rng):
            state, loss_sum, tokens = train_step(state, source, target)
            step += 1
            loss_window.append((loss_sum, tokens))
            if step % recipe.snapshot_every == 0:
                snapshots.append(state[0])
                snapshots = snapshots[-max(recipe.average + [1]):]
            if step % recipe.eval_every == 0 or step == recipe.train_steps:
                loss = float(sum(l for l, _ in loss_window) / sum(t for _, t in loss_window))
                tokens_seen += float(sum(t for _, t in loss_window))
                loss_window = []
                cased, lower, _ = validation_bleu(greedy, state, validation_source, references, sentencepiece_model)
                curve.append(dict(step=step, train_loss=round(loss, 4), bleu=round(cased, 2), lc_bleu=round(lower, 2)))
                log(f"  {recipe.name} step {step} epoch {epoch} loss {loss:.3f} greedy BLEU {cased:.2f} lc {lower:.2f}"
                    f" ({time.perf_counter() - started:.0f}s)")
            if step >= recipe.train_steps:
                break
        epoch += 1
    train_seconds = time.perf_counter() - started
    result = dict(recipe=dataclasses.asdict(recipe), curve=curve, epochs=epoch,
                  final_bleu=curve[-1]["bleu"], final_lc_bleu=curve[-1]["lc_bleu"], seconds=round(train_seconds, 1))
    for k in recipe.average:
        if len(snapshots) < k:
            continue
        averaged = jax.tree_util.tree_map(lambda *xs: sum(xs) / len(xs), *snapshots[-k:])
        cased, lower, _ = validation_bleu(
            greedy, (averaged, state[1]), validation_source, references, sentencepiece_model
        )
        result[f"avg{k}_bleu"], result[f"avg{k}_lc_bleu"] = round(cased, 2), round(lower, 2)
        log(
            f"  {recipe.name} average of last {k} snapshots ({recipe.snapshot_every} apart): "
            f"BLEU {cased:.2f} lc {lower:.2f}"
        )
    return result


# ---------------------------------------------------------------------------------------
# Base-size timing.


def matmul_peak(dtype, size=8192, repeats=20):
    """Measured FLOP/s of one large square matrix product in `dtype`."""
    a = jnp.ones((size, size), dtype)
    b = jnp.ones((size, size), dtype)
    product = jax.jit(lambda a, b: a @ b)
    product(a, b).block_until_ready()
    started = time.perf_counter()
    for _ in range(repeats):
        out = product(a, b)
    out.block_until_ready()
    return 2 * size**3 * repeats / (time.perf_counter() - started)


def time_base(args, log):
    results = []
    peaks = {"float32": matmul_peak(jnp.float32), "bfloat16": matmul_peak(jnp.bfloat16)}
    log(f"matrix-multiply peak (8192^3): float32 {peaks['float32'] / 1e12:.0f} TFLOP/s, "
        f"bfloat16 {peaks['bfloat16'] / 1e12:.0f} TFLOP/s")
    for precision in args.precisions:
        keras.mixed_precision.set_global_policy(precision)
        overrides = {} if args.dropout is None else dict(dropout=args.dropout)
        config = ModelConfig.from_size("base", vocab_size=args.vocab_size, **overrides)
        model = build_transformer(config)
        optimizer = keras.optimizers.Adam(WarmupInverseSqrt(512, 4000), beta_1=0.9, beta_2=0.98, epsilon=1e-9)
        optimizer.build(model.trainable_variables)
        state = ([v.value for v in model.trainable_variables], [v.value for v in model.non_trainable_variables],
                 [v.value for v in optimizer.variables])
        step = make_train_step(model, optimizer, config.label_smoothing)
        rows = args.batch_tokens // args.length
        rng = np.random.default_rng(0)
        # Full-length random sentences: every token is a non-padding token.
        source = rng.integers(4, args.vocab_size, (rows, args.length)).astype(np.int32)
        target = rng.integers(4, args.vocab_size, (rows, args.length + 1)).astype(np.int32)
        target[:, 0] = START_ID
        for _ in range(3):
            state, loss, tokens = step(state, source, target)
        loss.block_until_ready()
        started = time.perf_counter()
        for _ in range(args.steps):
            state, loss, tokens = step(state, source, target)
        loss.block_until_ready()
        seconds = (time.perf_counter() - started) / args.steps
        flops = training_flops(config, [args.length] * rows, [args.length] * rows)
        peak = peaks["bfloat16" if "bfloat16" in precision else "float32"]
        result = dict(precision=precision, dropout=config.dropout, vocab_size=args.vocab_size, rows=rows,
                      length=args.length, step_ms=round(1000 * seconds, 2),
                      target_tokens_per_s=round(rows * args.length / seconds),
                      tflops=round(flops / seconds / 1e12, 1), mfu=round(flops / seconds / peak, 3),
                      peak_tflops=round(peak / 1e12), loss=float(loss / tokens))
        log(json.dumps(result))
        results.append(result)
    keras.mixed_precision.set_global_policy("float32")
    return dict(device=str(jax.devices()[0]), peaks_tflops={k: round(v / 1e12) for k, v in peaks.items()}, runs=results)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    sweep = commands.add_parser("sweep")
    sweep.add_argument("--data", required=True, help="a folder written by export_token_ids.py")
    sweep.add_argument("--recipes", required=True, help="JSON list of Recipe fields, or @FILE holding one")
    sweep.add_argument("--output", help="results JSON")
    base = commands.add_parser("time-base")
    base.add_argument("--precisions", nargs="+", choices=TIMED_PRECISIONS, default=["float32", "mixed_bfloat16"])
    base.add_argument("--batch-tokens", type=positive_int, default=25000, help="at least --length")
    base.add_argument("--length", type=positive_int, default=32)
    base.add_argument("--steps", type=positive_int, default=20, help="timed steps, after 3 untimed")
    base.add_argument(
        "--vocab-size", type=int_at_least(5), default=37000, help="the paper's shared en-de vocabulary"
    )
    base.add_argument("--dropout", type=float,
                      help="overrides the base size's 0.1 (0 measures what the dropout masks cost)")
    base.add_argument("--output", help="results JSON")
    args = parser.parse_args()
    if args.command == "time-base" and args.batch_tokens < args.length:
        # A step is batch_tokens // length sentences of `length` tokens: none would be timed.
        parser.error(f"--batch-tokens ({args.batch_tokens}) must be at least --length ({args.length})")
    if args.command == "sweep":
        text = args.recipes
        if text.startswith("@"):
            try:
                with open(text[1:], encoding="utf-8") as f:
                    text = f.read()
            except OSError as error:
                parser.error(f"--recipes {args.recipes}: {error.strerror}")
        try:
            # Checked whole before the first run: a typo in the last recipe of a sweep
            # would otherwise stop it hours in.
            recipes = read_recipes(text)
        except ValueError as error:
            parser.error(str(error))
        for folder in sorted({recipe.data or args.data for recipe in recipes}):
            if not os.path.isfile(os.path.join(folder, "ids.npz")):
                parser.error(f"no ids.npz in {folder}: write one with benchmarks/gpu/export_token_ids.py")

    def log(line):
        print(line, flush=True)

    log(f"JAX {jax.__version__} on {jax.devices()[0]}, Keras {keras.__version__}")
    if args.command == "time-base":
        results = time_base(args, log)
    else:
        results = []
        for recipe in recipes:
            log(f"recipe {json.dumps(dataclasses.asdict(recipe))}")
            results.append(run_recipe(recipe, args.data, log))
            if args.output:
                with open(args.output, "w") as f:
                    json.dump(results, f, indent=1)
        # A column per number of snapshots any recipe averaged ("-" where another did not).
        averaged = sorted({k for recipe in recipes for k in recipe.average})
        log("\nname | steps | final greedy BLEU / lc | " + " | ".join(f"avg{k}" for k in averaged))
        for r in results:
            log(f"{r['recipe']['name']} | {r['recipe']['train_steps']} | {r['final_bleu']} / {r['final_lc_bleu']} | "
                + " | ".join(f"{r.get(f'avg{k}_bleu', '-')} / {r.get(f'avg{k}_lc_bleu', '-')}" for k in averaged))
    if args.output:
        with open(args.output, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
