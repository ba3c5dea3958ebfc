"""Training: the paper's recipe as a custom loop under a `tf.distribute` strategy.

    python train.py                                  # tiny, Multi30k en->de, this CPU
    python train.py --size base                      # every visible GPU, the paper's model
    python train.py --cpu-replicas 8                 # 8 mirrored CPU replicas

`train()` orchestrates; the pieces are pure where they can be: the distributed step
(`make_train_step`), the checkpoint bookkeeping (`app.model_dir.checkpoints`), evaluation
(`app.training.validation`). A custom loop rather than `model.fit`, because the loss must be
normalized by the non-padding target tokens of the whole global batch (every replica,
every accumulated micro-batch), so that 1 replica and 8 give the same update.
"""

import dataclasses
import json
import math
import os
import signal
import time
import zlib
from typing import Optional

import keras
import tensorflow as tf

from app.model_dir import checkpoints
from app.model.config import ModelConfig
from app.model_dir.event_files import drop_events_after
from app.training.fused_adam import NOT_DECAYED, FusedAdam
from app.training.losses import summed_loss, summed_loss_and_nll
from app.model.transformer import Transformer, build_transformer
from app.training.output_loss import projected_loss_sum
from app.training.precision import PRECISIONS
from app.cli.progress import make_progress
from app.training.schedule import WarmupInverseSqrt, cooldown_steps, resolve_warmup_steps
from app.training.strategy import check_same_on_all_workers, is_chief, max_over_workers
from app.training.time_budget import PaceMeter, cooldown_for_new_end, cooldown_has_begun, describe_plan, plan_run_length
from data.atomic_files import write_atomically


# ---------------------------------------------------------------------------------------
# Configuration.


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """How to train; the model and the data have their own configurations."""

    # Optimizer updates to train for, in total across resumptions (None: use epochs).
    train_steps: Optional[int] = None
    # Passes over the training data (None: use train_steps; both: whichever ends first).
    epochs: Optional[int] = None
    # Micro-batches per optimizer update, to reach large token budgets on few devices.
    accumulate: int = 1
    # Linear warmup steps; None: the paper's 4000, shortened to 8% of a shorter run.
    warmup_steps: Optional[int] = None
    # Multiplier on the paper's learning-rate schedule.
    learning_rate_scale: float = 1.0
    # Fraction of the run, at its end, over which the learning rate falls linearly to zero
    # (0: the paper's schedule to the last step).
    cooldown_fraction: float = 0.0
    # Adam, as in the paper.
    adam_beta_1: float = 0.9
    adam_beta_2: float = 0.98
    adam_epsilon: float = 1e-9
    # Decoupled weight decay (AdamW, Loshchilov & Hutter, 2019): before each update, every
    # weight matrix and embedding is multiplied by (1 - learning rate * weight_decay);
    # biases and layer-norm parameters are not decayed. 0: the paper's plain Adam.
    weight_decay: float = 0.0
    # Bidirectional training (Ding et al., 2021, "Improving Neural Machine Translation
    # by Bidirectional Training"): the first epochs, as many whole ones as fit in this
    # fraction of the run, train on every pair in both directions, each reversed pair
    # target to source, in one model with the shared vocabulary and no language tag;
    # the rest of the run trains source to target only. 0: off.
    bidirectional_fraction: float = 0.0
    # "float32", "mixed_float16" (with dynamic loss scaling) or "mixed_bfloat16".
    precision: str = "float32"
    # Compile the forward and backward pass with XLA.
    jit: bool = False
    # Steps between progress records in metrics.jsonl and TensorBoard.
    log_every: int = 50
    # Steps between evaluations (validation loss and BLEU); None or 0: only at the end.
    eval_every: Optional[int] = 1000
    # Sentences of the validation set decoded for BLEU (None: all).
    eval_sentences: Optional[int] = None
    # Checkpoint every this many steps, and/or every this many minutes.
    checkpoint_every: Optional[int] = 1000
    checkpoint_minutes: Optional[float] = None
    # Checkpoints kept (the newest K); averaging needs at least as many.
    keep_checkpoints: int = 5
    # How `export.py` and `python -m app.evaluate --model-dir` pick this run's weights when
    # told neither --checkpoint nor --average-last: the average of the newest K kept
    # checkpoints, or, with None, the checkpoint with the best validation BLEU. Recorded
    # in settings.json, so the run's directory says how it is meant to be exported.
    average_last: Optional[int] = None
    # Stop after this many evaluations without a better BLEU (None: never).
    patience: Optional[int] = None
    # Seed for weights and data order.
    seed: int = 1
    # Wall-clock minutes the run may take, across resumptions, final evaluation included;
    # it ends early, cooldown and all, if train_steps would not fit (None: no limit).
    time_budget_minutes: Optional[float] = None

    def __post_init__(self):
        if self.train_steps is None and self.epochs is None:
            raise ValueError("give --train-steps or --epochs (or both)")
        for name in ("train_steps", "epochs"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        for name in ("warmup_steps", "checkpoint_every", "patience"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must not be negative, got {value}")
        if self.accumulate < 1:
            raise ValueError(f"accumulate must be at least 1, got {self.accumulate}")
        if not (math.isfinite(self.learning_rate_scale) and self.learning_rate_scale > 0):
            raise ValueError(f"learning_rate_scale must be a positive number, got {self.learning_rate_scale}")
        if self.log_every < 1:
            raise ValueError(f"log_every must be at least 1, got {self.log_every}")
        if self.eval_every is not None and self.eval_every < 0:
            raise ValueError(f"eval_every must not be negative (0: only at the end), got {self.eval_every}")
        # Patience counts evaluations during the run; with none but the last it would never act.
        if self.patience and not self.eval_every:
            raise ValueError(
                f"patience {self.patience} counts evaluations, and eval_every {self.eval_every} evaluates only at "
                "the end: give --eval-every too"
            )
        # A negative count would slice off the end of the validation set, not keep its start.
        if self.eval_sentences is not None and self.eval_sentences < 1:
            raise ValueError(f"eval_sentences must be at least 1 (or all, by default), got {self.eval_sentences}")
        if self.checkpoint_minutes is not None and not self.checkpoint_minutes > 0:
            raise ValueError(f"checkpoint_minutes must be positive, got {self.checkpoint_minutes}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision={self.precision!r}, expected one of {PRECISIONS}")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise ValueError(f"weight_decay must be a non-negative number, got {self.weight_decay}")
        if not 0.0 <= self.bidirectional_fraction < 1.0:
            raise ValueError(f"bidirectional_fraction must be in [0, 1), got {self.bidirectional_fraction}")
        if not 0.0 <= self.cooldown_fraction <= 1.0:
            raise ValueError(f"cooldown_fraction must be between 0 and 1, got {self.cooldown_fraction}")
        if self.keep_checkpoints < 1:
            raise ValueError(f"keep_checkpoints must be at least 1, got {self.keep_checkpoints}")
        if self.average_last is not None and not 1 <= self.average_last <= self.keep_checkpoints:
            raise ValueError(
                f"average_last must be between 1 and keep_checkpoints ({self.keep_checkpoints}), "
                f"got {self.average_last}"
            )
        if self.time_budget_minutes is not None and not self.time_budget_minutes > 0:
            raise ValueError(f"time_budget_minutes must be positive, got {self.time_budget_minutes}")

    def resolved_warmup(self, total_steps):
        return resolve_warmup_steps(self.warmup_steps, total_steps)

    def resolved_cooldown(self, total_steps):
        return cooldown_steps(total_steps, self.cooldown_fraction) if total_steps else 0


def make_optimizer(model_config: ModelConfig, config: TrainConfig, total_steps, progress=None):
    """Adam(0.9, 0.98, 1e-9), fused (`app.training.fused_adam`), on the warmup / inverse-square-
    root schedule, with the configured share of `total_steps` at the end annealed
    linearly to zero; with `config.weight_decay`, AdamW's decay of the weight matrices.

    With a `checkpoints.Progress`, the schedule reads the run's length from its
    variables instead, so that a time budget can move the end; the warmup stays that of
    `total_steps`.
    """
    length = dict(total_steps=total_steps, cooldown_steps=config.resolved_cooldown(total_steps))
    if progress is not None:
        length = dict(total_steps=progress.planned_steps, cooldown_steps=progress.cooldown_steps)
    schedule = WarmupInverseSqrt(
        model_config.d_model, config.resolved_warmup(total_steps), config.learning_rate_scale, **length
    )
    optimizer = FusedAdam(
        schedule,
        beta_1=config.adam_beta_1,
        beta_2=config.adam_beta_2,
        epsilon=config.adam_epsilon,
        weight_decay=config.weight_decay or None,
    )
    if config.weight_decay:
        optimizer.exclude_from_weight_decay(var_names=NOT_DECAYED)
    if config.precision == "mixed_float16":
        # float16 gradients underflow without scaling; bfloat16 has float32's range.
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer


# ---------------------------------------------------------------------------------------
# The distributed step.


def make_train_step(
    model, optimizer, strategy, label_smoothing, accumulate=1, jit=False, fused_loss=True, batch_spec=None
):
    """Returns `step(micro_batches) -> (loss_sum, target_tokens)`, both global.

    `micro_batches` is a tuple of `accumulate` distributed `(source [B, S], target [B, T])`
    batches. Each replica computes the gradient of its summed token losses divided by the
    number of non-padding target tokens in the whole global batch; the optimizer sums
    gradients over replicas, so the update is that of the global mean token loss,
    however the batch was split.

    `batch_spec`, the distributed dataset's `element_spec`: one trace of the step then
    serves batches of every shape (`_summed_over_replicas`).

    `fused_loss` projects the decoder states onto the vocabulary inside the loss, a slice
    of real target positions at a time (`app.training.output_loss`), instead of making the whole
    `[B, T, V]` logits; the two give the same loss and gradients. Under XLA (`jit`) the
    plain path is used: XLA fuses it itself and wants static shapes.
    """
    variables = model.trainable_variables
    scale_loss = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    transformer = Transformer(model)
    fused_loss = fused_loss and not jit

    def summed_token_loss(source, target):
        labels = target[:, 1:]  # [B, T-1]
        if not fused_loss:
            logits = model([source, target[:, :-1]], training=True)  # [B, T-1, V]
            return summed_loss(labels, logits, label_smoothing)[0]
        memory, memory_mask = transformer.encode(source, training=True)
        states = transformer.decoder_states(target[:, :-1], memory, memory_mask, training=True)  # [B, T-1, D]
        real = labels != 0
        return projected_loss_sum(
            tf.boolean_mask(states, real), transformer.output_matrix(), tf.boolean_mask(labels, real), label_smoothing
        )

    def loss_and_grads(source, target, global_tokens):
        with tf.GradientTape() as tape:
            loss_sum = summed_token_loss(source, target)
            normalized = loss_sum / global_tokens
            if scale_loss:
                normalized = optimizer.scale_loss(normalized)
        grads = tape.gradient(normalized, variables)
        return loss_sum, grads

    if jit:
        loss_and_grads = tf.function(loss_and_grads, jit_compile=True, reduce_retracing=True)

    def replica_step(micro_batches):
        context = tf.distribute.get_replica_context()
        local_tokens = tf.add_n([_target_tokens(target) for _, target in micro_batches])
        global_tokens = context.all_reduce(tf.distribute.ReduceOp.SUM, local_tokens)
        # A step whose batches are all padding (possible on one worker at an epoch's end)
        # contributes nothing rather than dividing by zero.
        global_tokens = tf.maximum(global_tokens, 1.0)
        total_loss, total_grads = 0.0, None
        for source, target in micro_batches:
            loss_sum, grads = loss_and_grads(source, target, global_tokens)
            grads = [tf.convert_to_tensor(g) for g in grads]  # embeddings give IndexedSlices
            total_grads = grads if total_grads is None else [a + b for a, b in zip(total_grads, grads)]
            total_loss += loss_sum
        optimizer.apply_gradients(zip(total_grads, variables))
        return total_loss, local_tokens

    micro_batches_spec = None if batch_spec is None else tuple([batch_spec] * accumulate)
    return _summed_over_replicas(strategy, replica_step, micro_batches_spec)


def _target_tokens(target):
    """Non-padding label tokens of a `[B, T]` target batch (the start token is no label)."""
    return tf.reduce_sum(tf.cast(target[:, 1:] != 0, tf.float32))


def make_eval_step(model, strategy, label_smoothing, batch_spec=None):
    """Returns `step(batch) -> (smoothed_loss_sum, nll_sum, target_tokens)` on a distributed batch.

    `batch_spec` is as for `make_train_step`.

    The smoothed loss is what training minimizes; the plain negative log-likelihood gives
    the perplexity, which stays comparable between models trained with different
    label smoothing (the paper's Table 3 reports it).
    """

    def replica_step(batch):
        source, target = batch
        logits = model([source, target[:, :-1]], training=False)
        return summed_loss_and_nll(target[:, 1:], logits, label_smoothing)

    return _summed_over_replicas(strategy, replica_step, batch_spec)


def _summed_over_replicas(strategy, replica_step, batch_spec=None):
    """`step(batch) -> sums`: runs `replica_step` on every replica and sums each output.

    Batches come in many shapes (`data.buckets`). With `batch_spec` (dimensions None) one
    trace serves them all. Without it, reduce_retracing traces again for each new pattern
    of shapes until the dimensions are unknown, up to three traces; those of the training
    and the evaluation step count together in TensorFlow's "triggered tf.function
    retracing" warning, since both are this closure, and reach its five at the first
    evaluation of a run whose first batches differ in shape.
    """
    tracing = dict(reduce_retracing=True) if batch_spec is None else dict(input_signature=[batch_spec])

    @tf.function(**tracing)
    def step(batch):
        per_replica = strategy.run(replica_step, args=(batch,))
        return tuple(strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None) for value in per_replica)

    return step


# ---------------------------------------------------------------------------------------
# The orchestrator.


class NonFiniteLoss(RuntimeError):
    pass


def train(model_config, data, config: TrainConfig, model_dir, strategy, evaluate_fn=None, log=print,
          started=None, clock=time.monotonic):
    """Trains until `config.train_steps` optimizer updates or `config.epochs` epochs.

    Resumes from the newest checkpoint in `model_dir` (weights, optimizer, step and the
    position in the data), so running the same command again continues where it stopped
    and ends at the same total step count; under `config.time_budget_minutes`, at the
    step count that fits in the time left (`app.training.time_budget`).

    Args:
        model_config: the model's configuration (its vocab_size matches the tokenizer).
        data: a `data.dataset.PreparedData`.
        config: a `TrainConfig`.
        model_dir: where settings, checkpoints, metrics and TensorBoard logs go.
        strategy: a `tf.distribute.Strategy`.
        evaluate_fn: `evaluate_fn(transformer) -> dict` with at least "bleu"; None skips BLEU.
        started: `clock()` when the command began, so that a time budget counts the data
            preparation too (default: now).
        clock: seconds, monotonic; tests pass a fake one.

    Returns:
        A dict: final step, last loss, best BLEU and the checkpoint paths.
    """
    started = clock() if started is None else started
    chief = is_chief(strategy)
    keras.config.set_dtype_policy(config.precision)
    keras.utils.set_random_seed(config.seed)

    max_steps = run_length(config, data)
    bidirectional_epochs = plan_bidirectional_epochs(config, data, max_steps, log)

    progress = checkpoints.Progress(max_steps, config.resolved_cooldown(max_steps))
    with strategy.scope():
        model = build_transformer(model_config)
        optimizer = make_optimizer(model_config, config, max_steps, progress)
        optimizer.build(model.trainable_variables)
    tracker = checkpoints.CheckpointTracker(
        model_dir, model, optimizer, progress, keep=config.keep_checkpoints, chief=chief
    )
    restored = tracker.restore_latest()
    if restored:
        log(
            f"resumed from {restored} at step {int(progress.step)} "
            f"(epoch {int(progress.epoch)}, batch {int(progress.batch_in_epoch)})"
        )
    metrics_path = os.path.join(model_dir, "metrics.jsonl")
    if chief:
        # The steps after the checkpoint are trained, and recorded, again.
        _drop_records_after(metrics_path, int(progress.step))
        drop_events_after(os.path.join(model_dir, "train"), int(progress.step))
    seconds_before = float(progress.seconds) if restored else 0.0
    total_steps, cooldown = _resumed_plan(config, progress, max_steps)
    progress.set_plan(total_steps, cooldown)
    # Multi-worker: every worker must start at the same step with the same vocabulary, and
    # compute in the same precision (`--precision auto` could differ between CPUs).
    check_same_on_all_workers(
        strategy,
        {
            "restored step": int(progress.step),
            "planned steps": total_steps,
            # The budget's decisions are collective: a worker without one would not join them.
            "time budget in seconds (0: none)": (
                round(config.time_budget_minutes * 60) if config.time_budget_minutes else 0
            ),
            "vocabulary checksum": zlib.crc32(data.tokenizer.model_proto),
            f"precision ({', '.join(f'{i} {name}' for i, name in enumerate(PRECISIONS))}; "
            "--precision auto depends on each CPU: give it explicitly)": PRECISIONS.index(config.precision),
        },
    )

    # Every split's batches share one spec: (int32 [None, None], int32 [None, None]), per replica.
    batch_spec = _distribute(strategy, data.eval_batches("validation")).element_spec
    train_step = make_train_step(
        model, optimizer, strategy, model_config.label_smoothing, config.accumulate, config.jit,
        batch_spec=batch_spec,
    )
    eval_step = make_eval_step(model, strategy, model_config.label_smoothing, batch_spec)
    writer = tf.summary.create_file_writer(os.path.join(model_dir, "train")) if chief else None
    transformer = Transformer(model, model_config)

    def record(entry):
        if not chief:
            return
        try:
            with open(metrics_path, "a") as f:
                f.write(json.dumps(entry) + "\n")
        except OSError as error:  # A full disk.
            raise checkpoints.cannot_write(metrics_path, error, tracker.latest()) from None
        with writer.as_default(step=entry["step"]):
            for key, value in entry.items():
                if key != "step" and isinstance(value, (int, float)):
                    tf.summary.scalar(key, value)

    def evaluate(step):
        loss_sum, nll_sum, tokens = 0.0, 0.0, 0.0
        for batch in _distribute(strategy, data.eval_batches("validation")):
            batch_loss, batch_nll, batch_tokens = eval_step(batch)
            loss_sum += float(batch_loss)
            nll_sum += float(batch_nll)
            tokens += float(batch_tokens)
        tokens = max(tokens, 1.0)
        entry = {
            "step": step,
            "valid_loss": loss_sum / tokens,
            # Per subword token, so it depends on the vocabulary: compare at one vocab size.
            "valid_perplexity": math.exp(min(nll_sum / tokens, 50.0)),
        }
        if evaluate_fn is not None:
            entry.update(evaluate_fn(transformer))
        record(entry)
        return entry

    progbar = make_progress(total_steps, config.log_every, log) if chief else None
    step = int(progress.step)
    last_loss = None
    # Since the last record: one batch's loss swings with its sentence lengths, so records
    # and the progress bar show the token-weighted mean over the window.
    window_tokens, window_loss, window_start = 0.0, 0.0, time.time()
    last_checkpoint_time = time.time()
    interrupted = _InterruptFlag()
    stop_requested = _stop_check(strategy, interrupted, step, clock)

    def updates_made():
        # .numpy(): under a distribution strategy the Keras variable wraps a MirroredVariable,
        # which int() does not take.
        return int(optimizer.iterations.numpy())

    def learning_rate():
        """The rate of the update just made. The optimizer's `learning_rate` is already
        the next update's: its schedule reads the count of updates made so far."""
        inner = optimizer.inner_optimizer if hasattr(optimizer, "inner_optimizer") else optimizer
        schedule = inner._learning_rate  # Keras keeps the schedule there, without a public name
        if isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
            return float(schedule(inner.iterations - 1))
        return float(inner.learning_rate)

    def say(message):
        # The progress bar rewrites its line in place; a message mid-run takes the next one.
        log(("\n" if progbar and progbar.rewrites_line else "") + message)

    def save(step, on_interrupt=False):
        progress.seconds.assign(seconds_before + clock() - started)
        return tracker.save(step, on_interrupt)

    # The time budget: the pace of training steps (evaluations left out) and of
    # evaluations, measured here and agreed on by all workers, decides the run's end.
    budget_seconds = config.time_budget_minutes * 60.0 if config.time_budget_minutes else None
    pace = PaceMeter()
    slowest_worker = max_over_workers(strategy) if budget_seconds else None
    evaluation_seconds = 0.0  # Spent evaluating in this invocation.

    reported_plan = total_steps  # The end the log and metrics.jsonl last gave.

    def replan(step, planned):
        nonlocal reported_plan
        now = clock()
        pace.observe_steps(step, now - evaluation_seconds)
        remaining = budget_seconds - seconds_before - (now - started)
        unknown = -1.0  # Not measured yet: a collective carries floats, not None.
        per_step, per_evaluation, overdue = slowest_worker([
            unknown if pace.seconds_per_step is None else pace.seconds_per_step,
            unknown if pace.seconds_per_evaluation is None else pace.seconds_per_evaluation,
            -remaining,
        ])
        per_step, per_evaluation = (None if value == unknown else value for value in (per_step, per_evaluation))
        remaining = -overdue
        cooldown = int(progress.cooldown_steps)
        new = plan_run_length(
            step, planned, cooldown, max_steps, config.cooldown_fraction, config.eval_every,
            per_step, per_evaluation, remaining,
        )
        if new != planned:
            progress.set_plan(new, cooldown_for_new_end(step, planned, cooldown, new, config.cooldown_fraction))
            if progbar:
                progbar.target = new
        # The pace wavers by a few percent from record to record, and the end with it:
        # only moves of 1% of the run or more, and the last word (the full length
        # again, or the end now), are worth a line and a record.
        if new != reported_plan and (
            abs(new - reported_plan) >= max(1, 0.01 * max_steps) or new in (max_steps, step)
        ):
            say(describe_plan(step, new, max_steps, per_step, remaining))
            record({"step": step, "planned_steps": new})
            reported_plan = new
        return new

    step_started = updates_before = None  # The step under way and the optimizer's updates before it.
    with interrupted:
        try:
            while step < total_steps:
                epoch = int(progress.epoch)
                skip = int(progress.batch_in_epoch)
                batches = _distribute(
                    strategy,
                    data.train_batches(
                        epoch, seed=config.seed, skip=skip, both_directions=epoch < bidirectional_epochs
                    ),
                )
                iterator = iter(batches)
                while step < total_steps:
                    micro_batches = _take(iterator, config.accumulate)
                    if micro_batches is None:
                        break  # end of epoch
                    step_started, updates_before = step, updates_made()
                    loss_sum, tokens = train_step(micro_batches)
                    loss_sum, tokens = float(loss_sum), float(tokens)
                    last_loss = loss_sum / max(tokens, 1.0)
                    if not math.isfinite(last_loss):
                        raise NonFiniteLoss(
                            f"the loss became {last_loss} at step {step + 1}; training stopped. "
                            f"The newest good checkpoint is {tracker.latest() or '(none yet)'}; "
                            "try a lower --learning-rate-scale, a longer warmup, or float32"
                        )
                    step += 1
                    progress.advance(config.accumulate)
                    window_tokens += tokens
                    window_loss += loss_sum
                    if progbar:
                        elapsed = max(time.time() - window_start, 1e-9)
                        progbar.update(
                            step,
                            [
                                ("loss", window_loss / max(window_tokens, 1.0)),
                                ("lr", learning_rate()),
                                ("tok/s", window_tokens / elapsed),
                            ],
                        )
                    if step % config.log_every == 0 or step == total_steps:
                        elapsed = max(time.time() - window_start, 1e-9)
                        record(
                            {
                                "step": step,
                                "loss": window_loss / max(window_tokens, 1.0),
                                "learning_rate": learning_rate(),
                                "tokens_per_second": window_tokens / elapsed,
                                "epoch": epoch,
                            }
                        )
                        window_tokens, window_loss, window_start = 0.0, 0.0, time.time()
                    if budget_seconds and step % config.log_every == 0:
                        total_steps = replan(step, total_steps)
                    if (
                        _due(step, config.checkpoint_every)
                        or _minutes_since(last_checkpoint_time) >= (config.checkpoint_minutes or math.inf)
                    ):
                        save(step)
                        last_checkpoint_time = time.time()
                    if _due(step, config.eval_every) and step < total_steps:
                        evaluation_start, evaluation_wall_start = clock(), time.time()
                        entry = evaluate(step)
                        say(_format_eval(entry))
                        tracker.offer_best(entry, step)
                        this_evaluation = clock() - evaluation_start
                        evaluation_seconds += this_evaluation
                        # The window's tokens/s counts training time only (window_start is wall time).
                        window_start += time.time() - evaluation_wall_start
                        pace.observe_evaluation(this_evaluation)
                        # Counted from the best evaluation's step rather than kept in memory: a
                        # resumed run counts the evaluations it redoes once, and an evaluation of
                        # the best's own step, redone, as no loss.
                        since_best = step // config.eval_every - (tracker.best_step or 0) // config.eval_every
                        if config.patience and since_best >= config.patience:
                            say(f"early stopping: no better BLEU in {config.patience} evaluations")
                            total_steps = step
                            progress.set_plan(step, config.resolved_cooldown(step))
                    if stop_requested(step, last=step >= total_steps):
                        raise KeyboardInterrupt
                else:
                    break
                progress.next_epoch()
        except KeyboardInterrupt:
            # A second signal raises as soon as Python runs again, which during a step is
            # just after its update, before the loop has counted it: count it here, so the
            # checkpoint's step is that of its weights and a resumed run does not train
            # that batch again. (An update the optimizer skipped, a float16 loss scale's
            # non-finite step, changed no weight and is trained again.)
            if int(progress.step) == step_started and updates_made() != updates_before:
                progress.advance(config.accumulate)
            step = int(progress.step)
            # Still under the flag: a worker saving for another's signal takes its own,
            # come meanwhile, as the same request rather than die of it mid-save.
            path = save(step, on_interrupt=True)
            log(f"\ninterrupted at step {step}; saved {path}. Run the same command to resume.")
            raise

    final_checkpoint = save(step)
    entry = evaluate(step)
    log(_format_eval(entry))
    tracker.offer_best(entry, step)
    return {
        "step": step,
        "seconds": seconds_before + clock() - started,
        "loss": last_loss,
        "checkpoint": final_checkpoint,
        "best_checkpoint": tracker.best_path(),
        "evaluation": entry,
    }


def run_length(config, data):
    """The run's length in optimizer steps, from `train_steps` and `epochs` (an epoch
    counted as one pass over the pairs one way).

    Raises:
        ValueError: if an epoch holds fewer batches than one update accumulates.
    """
    batches = len(data.train_plan(0, config.seed))
    steps_per_epoch = batches // config.accumulate
    if steps_per_epoch < 1:
        raise ValueError(
            f"the training data makes {batches} batches per epoch, fewer than --accumulate {config.accumulate}"
        )
    return _total_steps(config, steps_per_epoch)


def plan_bidirectional_epochs(config, data, max_steps, log):
    """How many epochs, from the first, train in both directions: the whole epochs that
    fit in `config.bidirectional_fraction` of the run's `max_steps`.

    Whole epochs, so that an epoch is one order of one set of pairs and a resumed run
    picks up the same batches. A corpus whose one epoch in both directions is longer
    than that fraction (WMT at most lengths) gets none, and the log says so.
    """
    if not config.bidirectional_fraction:
        return 0
    plan = data.train_plan(0, config.seed, both_directions=True)
    steps_per_epoch = len(plan) // config.accumulate
    epochs = int(config.bidirectional_fraction * max_steps) // max(steps_per_epoch, 1)
    forward = f"{data.config.source_lang}->{data.config.target_lang}"
    backward = f"{data.config.target_lang}->{data.config.source_lang}"
    if epochs == 0:
        log(
            f"bidirectional training off: one epoch of {forward} and {backward} is {steps_per_epoch:,} steps, "
            f"more than {config.bidirectional_fraction:.0%} of the run's {max_steps:,}"
        )
    else:
        steps = epochs * steps_per_epoch
        which = "the first epoch trains" if epochs == 1 else f"the first {epochs} epochs train"
        log(
            f"bidirectional training: {which} ({steps:,} steps, {steps / max_steps:.0%} of the run) "
            f"on {forward} and {backward} together, the rest on {forward}"
        )
    return epochs


def _total_steps(config, steps_per_epoch):
    limits = []
    if config.train_steps is not None:
        limits.append(config.train_steps)
    if config.epochs is not None:
        limits.append(config.epochs * steps_per_epoch)
    return min(limits)


def _resumed_plan(config, progress, max_steps):
    """The run's length and cooldown on (re)starting: `max_steps` and its cooldown, unless a
    time budget had already moved the end and the cooldown of that run has begun, which
    keeps both as the checkpoint has them (the cooldown possibly re-sloped,
    `app.training.time_budget.cooldown_for_new_end`)."""
    planned, cooldown = int(progress.planned_steps), int(progress.cooldown_steps)
    step = int(progress.step)
    if config.time_budget_minutes and 0 < planned <= max_steps and cooldown_has_begun(step, planned, cooldown):
        return planned, cooldown
    return max_steps, config.resolved_cooldown(max_steps)


def _drop_records_after(path, step):
    """Rewrites the metrics.jsonl at `path` without its records of steps after `step`.

    A run killed after its newest checkpoint had recorded steps that, resumed from that
    checkpoint, it trains and records again: kept, they would appear twice. A last line
    cut off by the kill goes too, or the next record would be appended to it. Lines that
    are not records (written from outside) are kept as they are.
    """
    try:
        with open(path, "rb") as f:
            text = f.read()
    except FileNotFoundError:
        return
    lines = text.split(b"\n")
    kept = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            if number == len(lines):  # The last line, without its newline: cut off.
                continue
            record = None
        recorded_step = record.get("step") if isinstance(record, dict) else None
        if isinstance(recorded_step, int) and recorded_step > step:
            continue
        kept.append(line + b"\n")
    kept = b"".join(kept)
    if kept == text:
        return
    write_atomically(path, kept)


def _distribute(strategy, dataset):
    """Splits each global batch of `dataset` into one slice per replica of every worker.

    The batches are not made by a `batch` op, so `tf.distribute` cuts each into
    `num_replicas_in_sync` row slices and, under MultiWorkerMirroredStrategy, hands every
    worker its own slices of every batch (DATA sharding of the slices): all workers run
    the same number of steps on the same global batches as one process with that many
    replicas. DATA is set explicitly because AUTO would shard by files (each worker a
    different number of batches, and a hang at the epoch's end) should the input ever
    be read from files.
    """
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return strategy.experimental_distribute_dataset(dataset.with_options(options))


def _take(iterator, count):
    """The next `count` distributed batches as a tuple, or None at the end of the data."""
    batches = []
    for _ in range(count):
        try:
            batches.append(next(iterator))
        except StopIteration:
            return None
    return tuple(batches)


def _due(step, every):
    return bool(every) and step % every == 0


def _minutes_since(moment):
    return (time.time() - moment) / 60.0


def _format_eval(entry):
    parts = [f"step {entry['step']}: validation loss {entry['valid_loss']:.4f}"]
    if "valid_perplexity" in entry:
        parts.append(f"perplexity {entry['valid_perplexity']:.2f}")
    if "bleu" in entry:
        parts.append(f"BLEU {entry['bleu']:.2f} ({entry.get('bleu_signature', '')})")
    return ", ".join(parts)


def _stop_check(strategy, interrupted, step, clock):
    """Returns `stop_requested(step, last) -> bool`: whether to stop after `step` for a
    signal `interrupted` took, asked after every step, with `last` true after the run's
    last one. In one process: whether the flag is raised.

    Multi-worker: each worker gets its signal at its own moment (a scheduler's SIGTERM to
    all at about the same time, Ctrl-C in one worker's terminal), and one saving (a
    collective) while another trains the next step (another) would hang or crash both.
    So the workers reduce their flags at steps they agree on (`_AgreedStop`), and all stop
    at the first of them after any worker raised its flag, and take part in its save.
    """
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return lambda step, last=False: interrupted.raised
    return _AgreedStop(interrupted, max_over_workers(strategy), step, clock)


class _AgreedStop:
    """`stop_requested(step, last)` on one of the workers: the same answer on each.

    The flags are reduced at steps the workers agree on, about once a second of the
    slowest worker's training and at the last step: a collective after every step costs
    as much as a tiny model's step (5 ms on a busy CPU, two workers on one host, against
    a 150 ms step). Each reduction also takes the slowest worker's seconds per step since
    the previous one, which sets the step of the next.
    """

    SECONDS_BETWEEN = 1.0

    def __init__(self, interrupted, reduce, step, clock):
        """`reduce(values) -> values`, each the maximum over workers; `step`: the first
        step's number minus 1; `clock`: seconds, monotonic."""
        self._interrupted, self._reduce, self._clock = interrupted, reduce, clock
        self._last_step, self._last_time = step, clock()
        self._next_step = step + 1

    def __call__(self, step, last=False):
        if step < self._next_step and not last:
            return False
        now = self._clock()
        raised, seconds_per_step = self._reduce(
            [float(self._interrupted.raised), (now - self._last_time) / max(step - self._last_step, 1)]
        )
        steps_per_check = int(self.SECONDS_BETWEEN / seconds_per_step) if seconds_per_step > 0 else 1
        self._last_step, self._last_time = step, now
        self._next_step = step + max(steps_per_check, 1)
        return raised > 0


class _InterruptFlag:
    """Turns Ctrl-C, and the SIGTERM with which a scheduler or `kill` stops a job, into a
    flag checked between steps, so a step is never cut in half and the run saves a
    checkpoint before it ends. A second signal interrupts at once.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.raised = False
        self._previous = {}

    def _handler(self, signum, frame):
        if self.raised:
            raise KeyboardInterrupt
        self.raised = True

    def __enter__(self):
        try:
            self._previous = {signum: signal.signal(signum, self._handler) for signum in self.SIGNALS}
        except ValueError:  # not the main thread: leave the signals as they are
            self._previous = {}
        return self

    def __exit__(self, *exc):
        for signum, previous in self._previous.items():
            if previous is not None:  # None: a handler not installed from Python, not restorable
                signal.signal(signum, previous)
        return False
