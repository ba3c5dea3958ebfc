"""The project's Keras model trained under the JAX backend: recipe sweeps and base-size timing.

For a machine with a GPU and JAX but no TensorFlow. The model, loss and schedule are the
project's own (`app.model.transformer`, `app.training.losses`, `app.training.schedule` use `keras.ops` only); the input
pipeline is train.py's own bucketing (`data.buckets`, numpy only) over ids written by
`export_token_ids.py`, so a seed trains on train.py's batches (`batches.py`); validation
is greedy decoding (full forward pass per step, no cache) scored by sacreBLEU, and the
teacher-forced validation loss. It exists to tune the recipe quickly: the figures a user is promised come from
`train.py` + `python -m app.evaluate` on TensorFlow. It runs on a CPU too (`pip install
jax`), slowly. Its runs are in docs/lab-notebook/2026-11-24-the-base-model-on-a-gpu-under-jax.md
(`time-base`) and docs/lab-notebook/2026-11-26-tiny-recipe-eight-seeds-at-a-time-on-a-gpu.md
(`sweep`). `sweep`'s recipes start from tiny's as `train.py` trains it
(`app.training.recipes`, in mixed bfloat16) and change what they name; a recipe's `seeds`
train side by side as one vmapped group, the way to tell a recipe's effect from the
spread between seeds; validation is greedy, so its figures compare recipes with each
other, not with `train.py`'s beam.

    # a sweep of recipes; one JSON object per recipe (keys: see Recipe)
    python benchmarks/gpu/train_jax.py sweep --data runs/gpu-data/en-de-8000 \
        --recipes '[{"name": "p0.3", "dropout": 0.3, "seeds": [1, 2, 3, 4]}]'
    # several recipes files side by side on one GPU, each in its own process
    bash benchmarks/gpu/sweep_side_by_side.sh 540 runs/gpu-sweep runs/gpu-data/en-de-8000 \
        benchmarks/gpu/recipes/default-8-seeds.json benchmarks/gpu/recipes/24k-steps-8-seeds.json
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

from app.model.config import ModelConfig  # noqa: E402  (TensorFlow-free)
from app.training.recipes import RECIPES  # noqa: E402  (TensorFlow-free)
from app.cli.flag_types import int_at_least, positive_int  # noqa: E402  (TensorFlow-free)
from app.training.fused_adam import NOT_DECAYED  # noqa: E402  (TensorFlow-free at import)
from app.training.losses import summed_loss  # noqa: E402
from app.model.transformer import build_transformer  # noqa: E402
from app.training.schedule import WarmupInverseSqrt, cooldown_steps, resolve_warmup_steps  # noqa: E402
from keras_hub_peer import training_flops  # noqa: E402  (TensorFlow-free)

from batches import LockstepBatches, load_ids, padded  # noqa: E402  (numpy only)
from data.config import DEFAULT_MAX_LENGTH  # noqa: E402  (TensorFlow-free)
from layers.special_tokens import END_ID, PAD_ID, START_ID  # noqa: E402  (TensorFlow-free)

# What a recipe changes nothing of trains as `python train.py` trains tiny.
TINY = RECIPES["tiny"]
# time-base's Keras dtype policies: the matrix-multiply peak each is measured against.
TIMED_PRECISIONS = ("float32", "mixed_bfloat16")
SWEEP_PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
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
    normalization: Optional[str] = None  # "layer" or "scale" (ScaleNorm)
    num_heads: Optional[int] = None
    key_dim: Optional[int] = None
    num_layers: Optional[int] = None
    positional: Optional[str] = None
    # The defaults are tiny's as `python train.py` trains it (app/training/recipes.py).
    batch_tokens: int = TINY.batch_tokens
    train_steps: int = TINY.train_steps
    warmup_steps: Optional[int] = None  # None: as train.py, 8% of the run up to 4,000
    learning_rate_scale: float = TINY.learning_rate_scale
    # The final fraction of the steps, over which the rate anneals linearly to zero.
    cooldown_fraction: float = TINY.cooldown_fraction
    weight_decay: float = TINY.weight_decay  # decoupled (AdamW), not on biases and normalization
    seed: int = 0
    # Seeds trained side by side as one vmapped group (one compile, one dispatch a step);
    # None trains `seed` alone. Each seed has its own initial weights, dropout masks and
    # train.py's batches for that seed; the group takes the first seed's order of bucket
    # shapes (batches.LockstepBatches).
    seeds: Optional[List[int]] = None
    # Keras dtype policy; train.py's `auto` picks mixed_bfloat16 on a CPU with bfloat16
    # instructions (the 2-core machines of docs/lab-notebook/).
    precision: str = "mixed_bfloat16"
    # train.py orders each bucket's pairs by length before cutting it into batches, so
    # about half of a pair's batch-mates recur every epoch; False draws them afresh.
    sort_by_length: bool = True
    # Weight snapshots every this many steps; the last K are averaged for each K.
    snapshot_every: int = TINY.checkpoint_every
    average: List[int] = dataclasses.field(default_factory=lambda: [5, 10])
    eval_every: int = TINY.eval_every
    eval_sentences: Optional[int] = None  # validation sentences decoded (default: all)
    data: Optional[str] = None  # overrides --data


def read_recipes(text):
    """The `Recipe`s of `--recipes`' JSON list, all checked before the first one trains.

    Raises:
        ValueError: naming the recipe (by its place and name) and what is wrong with it:
            JSON that does not parse or is not a non-empty list, an entry that is not an
            object, a field `Recipe` does not have, an `average` that is not a list of
            counts of at least 1, `seeds` that are not a non-empty list of distinct
            integers, a precision that is not a Keras policy name of SWEEP_PRECISIONS, or a
            name used twice.
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
        if recipe.seeds is not None and not (
            isinstance(recipe.seeds, list) and recipe.seeds and all(type(seed) is int for seed in recipe.seeds)
            and len(set(recipe.seeds)) == len(recipe.seeds)
        ):
            raise ValueError(
                f"recipe {number} ({recipe.name}): seeds must be a non-empty list of distinct integers, "
                f"got {json.dumps(recipe.seeds)}"
            )
        if recipe.precision not in SWEEP_PRECISIONS:
            raise ValueError(
                f"recipe {number} ({recipe.name}): precision must be one of {', '.join(SWEEP_PRECISIONS)}, "
                f"got {json.dumps(recipe.precision)}"
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
# Steps.


def make_train_step(model, optimizer, label_smoothing):
    """`(state, source, target) -> (state, loss_sum, tokens)`, not jitted; state = variables.

    Pure, so callers jit it as it is (time-base) or vmapped over a group of seeds (sweep).
    """

    def loss_fn(trainable, non_trainable, source, target):
        logits, non_trainable = model.stateless_call(
            trainable, non_trainable, [source, target[:, :-1]], training=True
        )
        loss_sum, tokens = summed_loss(target[:, 1:], logits, label_smoothing)
        return loss_sum / jnp.maximum(tokens, 1.0), (non_trainable, loss_sum, tokens)

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def step(state, source, target):
        trainable, non_trainable, optimizer_vars = state
        (_, (non_trainable, loss_sum, tokens)), grads = grad_fn(trainable, non_trainable, source, target)
        trainable, optimizer_vars = optimizer.stateless_apply(optimizer_vars, grads, trainable)
        return (trainable, non_trainable, optimizer_vars), loss_sum, tokens

    return step


def make_validation_loss(model, label_smoothing):
    """jitted `(trainable, non_trainable, source [N, S], target [N, T]) -> (loss_sum, tokens)`.

    Teacher-forced and without dropout; the loss is label-smoothed as in training, the
    figure train.py logs as `valid_loss`.
    """

    @jax.jit
    def validation_loss(trainable, non_trainable, source, target):
        logits, _ = model.stateless_call(trainable, non_trainable, [source, target[:, :-1]], training=False)
        return summed_loss(target[:, 1:], logits, label_smoothing)

    return validation_loss


def make_greedy(model):
    """jitted `(trainable, non_trainable, source [N, S], max_lengths [N]) -> ids [N, T]`.

    Each step runs the whole decoder again (no cache); the loop stops as soon as every
    sentence has ended, so a step costs what the longest translation needs, not
    MAX_DECODE_LENGTH steps.
    """

    @jax.jit
    def greedy(trainable, non_trainable, source, max_lengths):
        count = source.shape[0]
        ids = jnp.zeros((count, MAX_DECODE_LENGTH + 1), jnp.int32).at[:, 0].set(START_ID)

        def not_finished(carry):
            t, _, done = carry
            return (t < MAX_DECODE_LENGTH) & ~jnp.all(done)

        def body(carry):
            t, ids, done = carry
            logits, _ = model.stateless_call(trainable, non_trainable, [source, ids[:, :-1]], training=False)
            next_ids = jnp.argmax(jnp.take(logits, t, axis=1), axis=-1).astype(jnp.int32)
            next_ids = jnp.where(t + 1 >= max_lengths, END_ID, next_ids)
            next_ids = jnp.where(done, PAD_ID, next_ids)
            return t + 1, ids.at[:, t + 1].set(next_ids), done | (next_ids == END_ID)

        carry = (jnp.int32(0), ids, jnp.zeros((count,), bool))
        _, ids, _ = jax.lax.while_loop(not_finished, body, carry)
        return ids[:, 1:]

    return greedy


def validation_bleu(greedy, variables, source, references, sentencepiece_model):
    """(cased BLEU, lowercased BLEU, length ratio, hypotheses) of greedy translations of
    every validation sentence.

    The length ratio is the translations' 13a tokens over the references' (sacreBLEU's
    sys_len / ref_len, lowercased): on test the whole gap to the published figure is
    length (docs/lab-notebook/2026-11-24-en-de-where-a-point-of-the-gap-goes.md), so a recipe's effect on it
    is worth seeing beside its BLEU.
    """
    import sacrebleu

    batch = padded(source)
    max_lengths = np.minimum(np.array([len(s) for s in source]) + 50, MAX_DECODE_LENGTH)
    ids = np.asarray(greedy(variables[0], variables[1], batch, max_lengths))
    hypotheses = []
    for row in ids:
        row = list(row)
        row = row[: row.index(END_ID)] if END_ID in row else row
        hypotheses.append(sentencepiece_model.decode([int(i) for i in row if i not in (PAD_ID, START_ID, END_ID)]))
    cased = sacrebleu.corpus_bleu(hypotheses, [references]).score
    lowercased = sacrebleu.corpus_bleu(hypotheses, [references], lowercase=True)
    return cased, lowercased.score, lowercased.sys_len / lowercased.ref_len, hypotheses


# ---------------------------------------------------------------------------------------
# Sweep.


def stacked(trees):
    """K pytrees of arrays with one structure as one pytree of [K, ...] arrays."""
    return jax.tree_util.tree_map(lambda *leaves: jnp.stack(leaves), *trees)


def member(tree, index):
    """Member `index`'s slice of a stacked pytree."""
    return jax.tree_util.tree_map(lambda leaf: leaf[index], tree)


def mean_and_spread(values):
    """`{"mean": ..., "sd": ..., "values": [...]}` of per-seed figures (sd 0 for one seed)."""
    values = [float(v) for v in values]
    sd = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
    return dict(mean=round(float(np.mean(values)), 3), sd=round(sd, 3), values=[round(v, 3) for v in values])


PACE_EVERY = 2000


def reports_pace(step):
    """Whether the sweep logs the time at `step`: at 100 (compiling done), at 1,000 (steady
    steps), then every PACE_EVERY steps, so that a run a time limit cuts short before its
    next evaluation still says how far it got and how fast. Waiting for the step there
    costs one pipeline drain per 2,000 steps."""
    return step in (100, 1000) or step % PACE_EVERY == 0


def run_recipe(recipe: Recipe, data_folder: str, log, on_evaluation=None):
    """Trains the recipe's seeds side by side; returns their curves and final figures.

    `on_evaluation(partial_result)`, if given, is called after every evaluation with the
    result so far (the curve, `"finished": False`), so that a run cut short by a time limit
    still leaves its per-seed figures behind.

    Every seed starts from its own initial weights (Keras's global seed set to it before
    the model is built) and trains on `train.py`'s batches for that seed, the first seed
    in their order (`batches.LockstepBatches`). Figures at each evaluation: training
    loss since the last one, validation loss (label-smoothed, teacher-forced), greedy
    validation BLEU and the greedy translations' length against the references', per
    seed; at the end the same for the average of the last K weight
    snapshots, for each K in `recipe.average`.
    """
    import sentencepiece

    folder = recipe.data or data_folder
    splits = load_ids(folder)
    sentencepiece_model = sentencepiece.SentencePieceProcessor(model_file=os.path.join(folder, "subwords.model"))
    with open(os.path.join(folder, "validation.target.txt"), encoding="utf-8") as f:
        references = [line.rstrip("\n") for line in f]
    validation_source = splits["validation"][0][: recipe.eval_sentences]
    validation_target = splits["validation"][1][: recipe.eval_sentences]
    references = references[: recipe.eval_sentences]
    overrides = {
        key: getattr(recipe, key)
        for key in ("dropout", "attention_dropout", "inner_dropout", "norm_first",
                    "normalization", "num_heads", "key_dim", "num_layers", "positional")
    }
    seeds = recipe.seeds if recipe.seeds else [recipe.seed]
    keras.mixed_precision.set_global_policy(recipe.precision)
    config = ModelConfig.from_size(recipe.size, vocab_size=sentencepiece_model.get_piece_size(), **overrides)
    warmup = resolve_warmup_steps(recipe.warmup_steps, recipe.train_steps)
    schedule = WarmupInverseSqrt(config.d_model, warmup, recipe.learning_rate_scale, total_steps=recipe.train_steps,
                                 cooldown_steps=cooldown_steps(recipe.train_steps, recipe.cooldown_fraction))
    initial_states = []
    for seed in seeds:
        # The first seed's model and optimizer are the ones the steps call; the others
        # only lend their initial values (the same variables in the same order).
        keras.utils.set_random_seed(seed)
        seed_model = build_transformer(config)
        seed_optimizer = keras.optimizers.Adam(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9,
                                               weight_decay=recipe.weight_decay or None)
        if recipe.weight_decay:
            seed_optimizer.exclude_from_weight_decay(var_names=NOT_DECAYED)
        seed_optimizer.build(seed_model.trainable_variables)
        initial_states.append((
            [v.value for v in seed_model.trainable_variables],
            [v.value for v in seed_model.non_trainable_variables],
            [v.value for v in seed_optimizer.variables],
        ))
        if seed == seeds[0]:
            model, optimizer = seed_model, seed_optimizer
    state = stacked(initial_states)
    del initial_states
    # A training setting, as train.py's --label-smoothing: the size's recipe's unless given.
    label_smoothing = RECIPES[recipe.size].label_smoothing if recipe.label_smoothing is None else recipe.label_smoothing
    train_step = jax.jit(jax.vmap(make_train_step(model, optimizer, label_smoothing)), donate_argnums=0)
    validation_loss = make_validation_loss(model, label_smoothing)
    greedy = make_greedy(model)
    batches = LockstepBatches(*splits["train"], recipe.batch_tokens, DEFAULT_MAX_LENGTH, seeds,
                              sort_by_length=recipe.sort_by_length)
    log(f"  {recipe.name}: batches padded to (rows, length) {batches.shapes()}")
    validation_batch = (padded(validation_source), padded(validation_target))

    def evaluate(trainable, non_trainable):
        """`{valid_loss, bleu, lc_bleu, length}`, each `mean_and_spread` over the seeds."""
        figures = []
        for index in range(len(seeds)):
            weights = (member(trainable, index), member(non_trainable, index))
            loss_sum, tokens = validation_loss(*weights, *validation_batch)
            cased, lower, length, _ = validation_bleu(
                greedy, weights, validation_source, references, sentencepiece_model
            )
            figures.append((float(loss_sum / tokens), cased, lower, length))
        names = ("valid_loss", "bleu", "lc_bleu", "length")
        return {name: mean_and_spread(column) for name, column in zip(names, zip(*figures))}

    snapshots, curve = [], []
    step, epoch, loss_window = 0, 0, []
    started = time.perf_counter()
    # Training time between evaluations (evaluation excluded; the first span includes
    # compiling the step for each padded batch shape).
    span_started, span_first_step = started, 0
    while step < recipe.train_steps:
        for source, target in batches.epoch(epoch):
            state, loss_sum, tokens = train_step(state, source, target)
            step += 1
            loss_window.append((loss_sum, tokens))
            if reports_pace(step):
                loss_sum.block_until_ready()
                log(f"  {recipe.name} step {step} ({time.perf_counter() - started:.0f}s)")
            if step % recipe.snapshot_every == 0:
                # A copy: the step donates (reuses) the state's buffers.
                snapshots.append(jax.tree_util.tree_map(jnp.copy, state[0]))
                snapshots = snapshots[-max(recipe.average + [1]):]
            if step % recipe.eval_every == 0 or step == recipe.train_steps:
                train_loss = np.sum([l for l, _ in loss_window], axis=0) / np.sum([t for _, t in loss_window], axis=0)
                loss_window = []
                steps_per_second = (step - span_first_step) / (time.perf_counter() - span_started)
                curve.append(dict(step=step, epoch=epoch, train_loss=mean_and_spread(train_loss),
                                  **evaluate(state[0], state[1])))
                point = curve[-1]
                if on_evaluation:
                    on_evaluation(dict(recipe=dataclasses.asdict(recipe), seeds=seeds, curve=curve, finished=False))
                log(f"  {recipe.name} step {step} epoch {epoch} loss {point['train_loss']['mean']:.3f} "
                    f"valid {point['valid_loss']['mean']:.3f} greedy BLEU {point['bleu']['mean']:.2f} "
                    f"lc {point['lc_bleu']['mean']:.2f} length {point['length']['mean']:.3f} "
                    f"(sd {point['lc_bleu']['sd']:.2f} over {len(seeds)} seeds; "
                    f"{time.perf_counter() - started:.0f}s; {steps_per_second:.1f} steps/s since the last; "
                    f"lc per seed {point['lc_bleu']['values']})")
                span_started, span_first_step = time.perf_counter(), step
            if step >= recipe.train_steps:
                break
        epoch += 1
    train_seconds = time.perf_counter() - started
    final = curve[-1]
    result = dict(recipe=dataclasses.asdict(recipe), seeds=seeds, curve=curve, finished=True, epochs=epoch,
                  final_valid_loss=final["valid_loss"], final_bleu=final["bleu"], final_lc_bleu=final["lc_bleu"],
                  seconds=round(train_seconds, 1))
    for k in recipe.average:
        if len(snapshots) < k:
            continue
        averaged = jax.tree_util.tree_map(lambda *xs: sum(xs) / len(xs), *snapshots[-k:])
        result[f"avg{k}"] = evaluate(averaged, state[1])
        log(f"  {recipe.name} average of last {k} snapshots ({recipe.snapshot_every} apart): "
            f"valid {result[f'avg{k}']['valid_loss']['mean']:.3f} BLEU {result[f'avg{k}']['bleu']['mean']:.2f} "
            f"lc {result[f'avg{k}']['lc_bleu']['mean']:.2f} length {result[f'avg{k}']['length']['mean']:.3f} "
            f"(per seed {result[f'avg{k}']['lc_bleu']['values']})")
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
        step = jax.jit(make_train_step(model, optimizer, RECIPES["base"].label_smoothing))
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


def write_json(path, value):
    """`value` as JSON at `path`, replaced whole: a run killed mid-write leaves the last file."""
    temporary = f"{path}.partial"
    with open(temporary, "w") as f:
        json.dump(value, f, indent=1)
    os.replace(temporary, path)


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
        # What export_token_ids.py writes, all of it read by every recipe: checked before the
        # first one trains, not when a later recipe's folder turns out to lack a file.
        for folder in sorted({recipe.data or args.data for recipe in recipes}):
            missing = [name for name in ("ids.npz", "subwords.model", "validation.target.txt")
                       if not os.path.isfile(os.path.join(folder, name))]
            if missing:
                parser.error(f"no {', '.join(missing)} in {folder}: write the folder with "
                             "benchmarks/gpu/export_token_ids.py")

    def log(line):
        print(line, flush=True)

    log(f"JAX {jax.__version__} on {jax.devices()[0]}, Keras {keras.__version__}")
    if args.command == "time-base":
        results = time_base(args, log)
    else:
        results = []

        def save_with(unfinished):
            if args.output:
                write_json(args.output, results + [unfinished])

        for recipe in recipes:
            log(f"recipe {json.dumps(dataclasses.asdict(recipe))}")
            results.append(run_recipe(recipe, args.data, log, on_evaluation=save_with))
            if args.output:
                write_json(args.output, results)
        # A column per number of snapshots any recipe averaged ("-" where another did not);
        # each figure is the mean over the recipe's seeds, its standard deviation after it.
        averaged = sorted({k for recipe in recipes for k in recipe.average})

        def figure(entry):
            return f"{entry['mean']:.2f} ± {entry['sd']:.2f}"

        log("\nname | seeds | steps | final valid loss | final greedy lc BLEU | "
            + " | ".join(f"avg{k} valid loss, lc BLEU" for k in averaged))
        for r in results:
            log(f"{r['recipe']['name']} | {len(r['seeds'])} | {r['recipe']['train_steps']} | "
                f"{figure(r['final_valid_loss'])} | {figure(r['final_lc_bleu'])} | "
                + " | ".join(f"{figure(r[f'avg{k}']['valid_loss'])}, {figure(r[f'avg{k}']['lc_bleu'])}"
                             if f"avg{k}" in r else "-" for k in averaged))
    if args.output:
        write_json(args.output, results)


if __name__ == "__main__":
    main()
