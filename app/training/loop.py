"""Training: the paper's recipe as a custom loop under a `tf.distribute` strategy.

    python train.py                                  # tiny, Multi30k en->de, this CPU
    python train.py --size base                      # every visible GPU, the paper's model
    python train.py --cpu-replicas 8                 # 8 mirrored CPU replicas

`train(plan, data, strategy)` trains the run an `app.training.run_plan.RunPlan` describes.
It orchestrates objects that each do one thing: the distributed step
(`app.training.step`), the records (`app.training.metrics_log`), evaluation and early
stopping (`app.training.validation`), the time budget (`app.training.time_budget`),
interrupts (`app.training.interrupts`) and the checkpoints (`app.model_dir.checkpoints`).
A custom loop rather than `model.fit`, because the loss must be normalized by the
non-padding target tokens of the whole global batch (every replica, every accumulated
micro-batch), so that 1 replica and 8 give the same update.
"""

import dataclasses
import math
import time
import zlib
from typing import Callable, Optional

import keras
import tensorflow as tf

from app.runtime.progress import make_progress
from app.model.transformer import Transformer, build_transformer
from app.model_dir import checkpoints
from app.training.guidance import Guidance
from app.training.interrupts import InterruptFlag, stop_check
from app.training.metrics_log import MetricsLog, TrainingWindow, drop_records_after
from app.training.optimizer import make_optimizer
from app.training.precision import PRECISIONS
from app.training.run_length import plan_bidirectional_epochs, resumed_plan, run_length
from app.training.run_plan import RunPlan
from app.training.step import distribute, make_eval_step, make_train_steps
from app.training.strategy import check_same_on_all_workers, is_chief, max_over_workers
from app.training.time_budget import RunBudget
from app.training.validation import Validator
from data.dataset import PreparedData


class NonFiniteLoss(RuntimeError):
    pass


def train(plan: RunPlan, data, strategy, evaluate_fn=None, *, log=print, started=None, clock=time.monotonic):
    """Trains the run `plan` until `plan.train_config.train_steps` optimizer updates or its
    `epochs` epochs.

    Resumes from the newest checkpoint in `plan.model_dir` (weights, optimizer, step and
    the position in the data), so running the same command again continues where it
    stopped and ends at the same total step count; under the train config's
    `time_budget_minutes`, at the step count that fits in the time left
    (`app.training.time_budget`). While the model directory has no checkpoint to resume
    from, a fine-tuned run (`plan.init`) starts from its init run's weights.

    Args:
        plan: an `app.training.run_plan.RunPlan`, its model's vocab_size the tokenizer's
            (`app.training.start.prepare_model_dir` returns it so). Its model directory
            gets the checkpoints, metrics and TensorBoard logs.
        data: a `data.dataset.PreparedData`.
        strategy: a `tf.distribute.Strategy`.
        evaluate_fn: `evaluate_fn(transformer) -> dict` with at least "bleu"; None skips BLEU.
        log: where the run's lines go.
        started: `clock()` when the command began, so that a time budget counts the data
            preparation too (default: now).
        clock: seconds, monotonic; tests pass a fake one.

    Returns:
        A dict: final step, last loss, best BLEU and the checkpoint paths.
    """
    started = clock() if started is None else started
    config = plan.train_config
    keras.config.set_dtype_policy(config.precision)
    keras.utils.set_random_seed(config.seed)

    # The model, and where the run stands.
    max_steps = run_length(config, data)
    bidirectional_epochs = plan_bidirectional_epochs(config, data, max_steps, log)
    progress = checkpoints.Progress(max_steps, config.resolved_cooldown(max_steps))
    model, optimizer, tracker, restored = _model_where_the_run_stands(plan, strategy, progress, max_steps, log)
    seconds_before = float(progress.seconds) if restored else 0.0
    total_steps, cooldown = resumed_plan(config, progress, max_steps)
    progress.set_plan(total_steps, cooldown)
    _check_workers_agree(strategy, config, data, int(progress.step), total_steps)

    context = _RunContext(
        plan=plan, data=data, strategy=strategy, evaluate_fn=evaluate_fn, log=log, clock=clock, started=started,
        seconds_before=seconds_before,
    )
    loop = _Loop(
        context, model, optimizer, tracker, progress, total_steps=total_steps, max_steps=max_steps,
        bidirectional_epochs=bidirectional_epochs,
    )
    loop.run()
    final_checkpoint = loop.save(loop.step)
    entry = loop.validator.evaluate(loop.step, log)
    return {
        "step": loop.step,
        "seconds": seconds_before + clock() - started,
        "loss": loop.last_loss,
        "checkpoint": final_checkpoint,
        "best_checkpoint": tracker.best_path(),
        "evaluation": entry,
    }


def _model_where_the_run_stands(plan, strategy, progress, max_steps, log):
    """Builds the model and its optimizer under `strategy`, and restores the newest
    checkpoint into them and `progress` (or, without one, starts a fine-tuned run from its
    init run's weights); the chief drops the metrics records of steps after it. Returns
    `(model, optimizer, tracker, the restored checkpoint's path or None)`."""
    model_config, config, model_dir = plan.model_config, plan.train_config, plan.model_dir
    with strategy.scope():
        model = build_transformer(model_config)
        optimizer = make_optimizer(model_config, config, max_steps, progress)
        optimizer.build(model.trainable_variables)
    chief = is_chief(strategy)
    tracker = checkpoints.CheckpointTracker(
        model_dir, model, optimizer, progress, keep=config.keep_checkpoints, chief=chief
    )
    restored = _restore(tracker, progress, log)
    if not restored and plan.init is not None:
        log(plan.init.initialize(model))
    if chief:
        drop_records_after(model_dir, int(progress.step))
    return model, optimizer, tracker, restored


@dataclasses.dataclass(frozen=True)
class _RunContext:
    """What one start of a run trains with, and where its time counts from."""

    plan: RunPlan
    data: PreparedData
    strategy: tf.distribute.Strategy
    evaluate_fn: Optional[Callable]  # evaluate_fn(transformer) -> dict, or None
    log: Callable
    clock: Callable  # seconds, monotonic
    started: float  # clock() when the command began
    seconds_before: float  # trained by the starts before this one


class _Loop:
    """The training loop and what it runs: the distributed step, the records, evaluation
    and early stopping, the time budget, interrupts and checkpoints.

    Each call of the training function makes the updates up to the next step at which
    something is due (a record, a checkpoint, an evaluation, the end), at most
    `config.steps_per_loop`, and the host reads their losses once per call.
    """

    def __init__(self, context, model, optimizer, tracker, progress, *, total_steps, max_steps, bidirectional_epochs):
        """`context`: a `_RunContext`; `progress`: the checkpointed `Progress`; `total_steps`:
        the planned end (the time budget and early stopping move it); `max_steps`: the
        full length; `bidirectional_epochs`: the first epochs that train both ways."""
        config, strategy, data = context.plan.train_config, context.strategy, context.data
        chief = is_chief(strategy)
        self.config, self.progress, self.tracker, self.log = config, progress, tracker, context.log
        self.clock, self.started, self.seconds_before = context.clock, context.started, context.seconds_before
        # Every split's batches share one spec: (int32 [None, None], int32 [None, None]), per replica.
        batch_spec = distribute(strategy, data.eval_batches("validation")).element_spec
        self.guided = config.guided
        self.train_steps = make_train_steps(
            model, optimizer, strategy, config.label_smoothing, config.accumulate, config.jit,
            progress=progress, guidance=Guidance.of(config),
        )
        eval_step = make_eval_step(model, strategy, config.label_smoothing, batch_spec)
        self.metrics = MetricsLog(context.plan.model_dir, chief, tracker.latest)
        self.validator = Validator(
            eval_step, lambda: distribute(strategy, data.eval_batches("validation")),
            Transformer(model, context.plan.model_config), context.evaluate_fn,
            record=self.metrics.record, tracker=tracker, eval_every=config.eval_every, patience=config.patience,
        )
        self.progbar = make_progress(total_steps, config.log_every, context.log) if chief else None
        self.step, self.total_steps = int(progress.step), total_steps
        self.last_loss = None
        self.window = TrainingWindow()
        self.last_checkpoint_time, self.minutes_between = time.time(), config.checkpoint_minutes or math.inf
        self.interrupted = InterruptFlag()
        self.stop_requested = stop_check(strategy, self.interrupted, self.step, context.clock)
        self.budget = RunBudget(
            config.time_budget_minutes, max_steps, config.cooldown_fraction, config.eval_every, progress,
            reduce=max_over_workers(strategy) if config.time_budget_minutes else None,
            clock=context.clock, started=context.started, seconds_before=context.seconds_before,
        )
        self.batches = _TrainingBatches(strategy, data, config, progress, bidirectional_epochs)

    def say(self, message):
        # The progress bar rewrites its line in place; a message mid-run takes the next one.
        self.log(("\n" if self.progbar and self.progbar.rewrites_line else "") + message)

    def save(self, step, on_interrupt=False):
        self.progress.seconds.assign(self.seconds_before + self.clock() - self.started)
        return self.tracker.save(step, on_interrupt)

    def run(self):
        """Trains to `total_steps` (which the time budget and early stopping may move).

        Raises:
            KeyboardInterrupt: Ctrl-C or SIGTERM, once a checkpoint of the step reached is saved.
            NonFiniteLoss: from `_finite`.
        """
        with self.interrupted:
            try:
                while self.step < self.total_steps:
                    epoch, rates = self._call()
                    if not rates:
                        continue
                    self._after_call(epoch, rates)
                    if self.stop_requested(self.step, last=self.step >= self.total_steps):
                        raise KeyboardInterrupt
            except KeyboardInterrupt:
                # The graph counts each update in `progress` as it makes it, so the checkpoint's
                # step is that of its weights even when a second signal came before the loop
                # read the call's results.
                self.step = int(self.progress.step)
                # Still under the flag: a worker saving for another's signal takes its own,
                # come meanwhile, as the same request rather than die of it mid-save.
                path = self.save(self.step, on_interrupt=True)
                self.log(f"\ninterrupted at step {self.step}; saved {path}. Run the same command to resume.")
                raise

    def _call(self):
        """One call of the training function: its updates counted, their losses checked and
        shown. Returns `(epoch, the learning rate of each update)`; no rates when the epoch
        ran out before the call made any update."""
        epoch, iterator = self.batches.current()
        count = _updates_in_call(self.step, self.total_steps, self.config)
        results = self.train_steps(iterator, tf.constant(count, tf.int32))
        loss_sums, token_counts, rates, *alignment = (value.numpy().tolist() for value in results)
        alignment_sums = alignment[0] if alignment else [None] * len(loss_sums)  # guided runs only
        if len(loss_sums) < count:
            self.batches.ran_out()
        for loss_sum, tokens, rate, alignment_sum in zip(loss_sums, token_counts, rates, alignment_sums):
            self.last_loss = _finite(loss_sum / max(tokens, 1.0), self.step + 1, self.tracker)
            if alignment_sum is not None:
                _finite(alignment_sum / max(tokens, 1.0), self.step + 1, self.tracker, "alignment loss")
            self.step += 1
            self.window.add(loss_sum, tokens, alignment_sum)
            if self.progbar:
                shown = [("loss", self.window.mean_loss())]
                if self.guided:
                    shown.append(("alignment loss", self.window.mean_alignment_loss()))
                self.progbar.update(self.step, shown + [("lr", rate), ("tok/s", self.window.tokens_per_second())])
        return epoch, rates

    def _after_call(self, epoch, rates):
        """What is due at the step a call ended on: a record, the time budget's replanning,
        a checkpoint, an evaluation and early stopping (nothing is due before a call's last
        update: `_updates_in_call`)."""
        config, step = self.config, self.step
        if step % config.log_every == 0 or step == self.total_steps:
            record = {
                "step": step, "loss": self.window.mean_loss(), "learning_rate": rates[-1],
                "tokens_per_second": self.window.tokens_per_second(), "epoch": epoch,
            }
            if self.guided:  # the guided alignment loss per target token, unweighted
                record["alignment_loss"] = self.window.mean_alignment_loss()
            self.metrics.record(record)
            self.window.restart()
        if config.time_budget_minutes and step % config.log_every == 0:
            self.total_steps, line = self.budget.replan(step, self.total_steps)
            if self.progbar:
                self.progbar.target = self.total_steps
            if line:
                self.say(line)
                self.metrics.record({"step": step, "planned_steps": self.total_steps})
        if _due(step, config.checkpoint_every) or _minutes_since(self.last_checkpoint_time) >= self.minutes_between:
            self.save(step)
            self.last_checkpoint_time = time.time()
        if _due(step, config.eval_every) and step < self.total_steps:
            with self.budget.evaluating(), self.window.paused():
                self.validator.evaluate(step, self.say)
            if self.validator.should_stop(step):
                self.say(f"early stopping: no better BLEU in {config.patience} evaluations")
                self.total_steps = step
                self.progress.set_plan(step, config.resolved_cooldown(step))


def _restore(tracker, progress, log):
    """Restores the newest checkpoint, if any, and says so; returns its path or None."""
    restored = tracker.restore_latest()
    if restored:
        log(
            f"resumed from {restored} at step {int(progress.step)} "
            f"(epoch {int(progress.epoch)}, batch {int(progress.batch_in_epoch)})"
        )
    return restored


def _finite(loss, step, tracker, name="loss"):
    """`loss`, the mean token loss (or another `name`d one) of update `step`, if finite.

    Raises:
        NonFiniteLoss: naming the newest checkpoint, the one to resume from.
    """
    if not math.isfinite(loss):
        raise NonFiniteLoss(
            f"the {name} became {loss} at step {step}; training stopped. "
            f"The newest good checkpoint is {tracker.latest() or '(none yet)'}; "
            "try a lower --learning-rate-scale, a longer warmup, or float32"
        )
    return loss


def _check_workers_agree(strategy, config, data, step, total_steps):
    """Multi-worker: every worker must start at the same step with the same vocabulary, and
    compute in the same precision (`--precision auto` could differ between CPUs)."""
    check_same_on_all_workers(
        strategy,
        {
            "restored step": step,
            # The steps of a call, the collectives in between, must be the same on every worker.
            "steps per loop": config.steps_per_loop,
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


def _updates_in_call(step, total_steps, config):
    """The updates the next call makes after `step`: `config.steps_per_loop`, or fewer to end
    at the next step that has a record, a checkpoint or an evaluation due, or ends the run
    (the time budget replans, and early stopping acts, at such steps only).

    A checkpoint every `config.checkpoint_minutes` is saved at the first call's end after
    its time, up to `steps_per_loop - 1` steps later than after every step."""
    ends = [total_steps, _next_multiple(step, config.log_every)]
    ends += [_next_multiple(step, every) for every in (config.checkpoint_every, config.eval_every) if every]
    return min(config.steps_per_loop, min(ends) - step)


def _next_multiple(step, every):
    return (step // every + 1) * every


class _TrainingBatches:
    """The distributed training batches from the run's position in the data (`progress`) on:
    an iterator over the rest of the current epoch, then one per epoch after it."""

    def __init__(self, strategy, data, config, progress, bidirectional_epochs):
        self._strategy, self._data, self._config = strategy, data, config
        self._progress, self._bidirectional_epochs = progress, bidirectional_epochs
        self._epoch = self._iterator = None
        self._ran_out = False

    def current(self):
        """`(epoch, iterator)`: the epoch's distributed batches from `progress.batch_in_epoch` on,
        or the next epoch's from its start once this one `ran_out`."""
        if self._ran_out:
            # Only now, not when it ran out: a checkpoint saved at the epoch's last step
            # holds the epoch and its batches taken, whatever the steps per call.
            self._progress.next_epoch()
            self._iterator, self._ran_out = None, False
        if self._iterator is None:
            epoch, skip = int(self._progress.epoch), int(self._progress.batch_in_epoch)
            batches = self._data.train_batches(
                epoch, seed=self._config.seed, skip=skip, both_directions=epoch < self._bidirectional_epochs
            )
            self._epoch, self._iterator = epoch, iter(distribute(self._strategy, batches))
        return self._epoch, self._iterator

    def ran_out(self):
        """Says that the current iterator has no whole update's batches left."""
        self._ran_out = True


def _due(step, every):
    return bool(every) and step % every == 0


def _minutes_since(moment):
    return (time.time() - moment) / 60.0
