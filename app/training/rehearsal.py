"""A rehearsal of a training run, minutes long, that says whether the real one will work
and how long it will take (`python -m app.preflight`).

It builds the run's model and optimizer under the run's strategy and precision, exactly
as `app.training.loop.train` does, and makes real updates with the run's step function
(`steps_per_loop` updates a call) on the run's batches (`app.training.rehearsal_batches`:
the prepared corpus's own, or synthetic ones cut by the same buckets). Nothing is written
where the user keeps anything: checkpoints are timed in a temporary directory.

    parts = build_run(model_config, train_config, strategy)
    report = rehearse(parts, model_config, train_config, strategy, batches)
    report.seconds_per_step, report.replica_differences, report.peak_memory_bytes
    extras = time_run_extras(parts, model_config, train_config, strategy, data, evaluate_fn)

What it measures: the first call (tracing, compiling, and its updates), the steady time
per update after it and how much it varies, what a batch shape's first batch costs
beyond it (an XLA compile under --jit), target tokens per second, model FLOPs utilization of this process's devices
(`app.training.peaks`), peak memory, and whether every replica's copy of every weight and
optimizer variable is still the same after the updates (the copies are updated
separately; a checkpoint saves the first).
"""

import dataclasses
import math
import resource
import statistics
import sys
import tempfile
import time
from typing import Optional

import numpy as np

from app.model.flops import training_flops


@dataclasses.dataclass
class Rehearsal:
    """What a rehearsal measured. Times in seconds, sizes in bytes. Tokens and FLOPs are
    this process's replicas' (over several workers, each reports its own share)."""

    replicas: int  # in sync, every worker's
    local_replicas: int  # this process's
    batches: str  # which batches it trained on (`RehearsalBatches.description`)
    jit: bool  # XLA
    first_call_seconds: float  # tracing, compiling and the first call's updates
    first_call_steps: int
    first_call_shapes: int  # the batch shapes the first call met
    call_seconds: list  # each timed call's seconds, after the first call
    call_steps: list  # each timed call's updates
    call_new_shapes: list  # each timed call's batch shapes not seen in an earlier call
    tokens_per_step: float  # non-padding target tokens an update, mean over the timed updates
    flops_per_step: float  # model FLOPs an update (app.model.flops), mean over the timed updates
    losses: list  # mean token loss of every update, first call included
    peak_memory_bytes: list  # per GPU; one entry, the process's peak resident memory, on a CPU
    replica_differences: dict  # {variable path: largest difference from replica 0's copy}

    @property
    def steps(self):
        """Updates timed after the first call."""
        return sum(self.call_steps)

    def _steady_calls(self):
        """`[(seconds, steps)]` of the calls that met no new batch shape (all of them where
        every call met one): a shape's first batch costs more, an XLA compile under --jit,
        the CPU kernels' or GPU libraries' choices for it otherwise."""
        calls = list(zip(self.call_seconds, self.call_steps, self.call_new_shapes))
        steady = [(s, n) for s, n, new in calls if not new]
        return steady or [(s, n) for s, n, _ in calls]

    @property
    def seconds_per_step(self):
        """Steady seconds an update: the calls that met no new shape, pooled."""
        calls = self._steady_calls()
        return sum(s for s, _ in calls) / sum(n for _, n in calls)

    @property
    def step_time_error(self):
        """Two standard errors of `seconds_per_step`, from the spread of the calls' own
        per-update times (0 with one call): batches of other lengths take other times."""
        per_step = [s / n for s, n in self._steady_calls()]
        return 2 * statistics.stdev(per_step) / math.sqrt(len(per_step)) if len(per_step) > 1 else 0.0

    @property
    def seconds_per_new_shape(self):
        """What a batch shape's first batch added to its call beyond its updates at the
        steady pace; 0 where no timed call met a new shape."""
        new = sum(self.call_new_shapes)
        if not new or len(self._steady_calls()) == len(self.call_seconds):
            return 0.0
        extra = sum(s - n * self.seconds_per_step for s, n, k in
                    zip(self.call_seconds, self.call_steps, self.call_new_shapes) if k)
        return max(extra, 0.0) / new

    @property
    def tokens_per_second(self):
        """Target tokens of this process's replicas trained per second, steady."""
        return self.tokens_per_step / self.seconds_per_step

    @property
    def trace_seconds(self):
        """The first call's time beyond its updates at the steady pace and its shapes' first
        batches: tracing (and building the graph's functions)."""
        made = self.first_call_steps * self.seconds_per_step + self.first_call_shapes * self.seconds_per_new_shape
        return max(self.first_call_seconds - made, 0.0)

    @property
    def flops_per_second(self):
        return self.flops_per_step / self.seconds_per_step


@dataclasses.dataclass(frozen=True)
class RunParts:
    """The run's model, optimizer and the progress its checkpoints hold, as train builds them."""

    model: object
    optimizer: object
    progress: object


def build_run(model_config, train_config, strategy, total_steps=None):
    """`RunParts` built under `strategy` as `app.training.loop` builds them."""
    import keras

    from app.model.transformer import build_transformer
    from app.model_dir import checkpoints
    from app.training.optimizer import make_optimizer

    keras.config.set_dtype_policy(train_config.precision)
    keras.utils.set_random_seed(train_config.seed)
    total_steps = total_steps or train_config.train_steps or 100_000
    progress = checkpoints.Progress(total_steps, train_config.resolved_cooldown(total_steps))
    with strategy.scope():
        model = build_transformer(model_config)
        optimizer = make_optimizer(model_config, train_config, total_steps, progress)
        optimizer.build(model.trainable_variables)
    return RunParts(model, optimizer, progress)


def rehearse(parts, model_config, train_config, strategy, batches, steps=20, max_seconds=60.0,
             clock=time.perf_counter):
    """Runs the first call, then calls over the next of `batches` (meeting new shapes), then
    the same batches again (shapes met: the steady pace); returns a `Rehearsal`.

    Args:
        parts: the run's `RunParts` (`build_run`).
        model_config, train_config: the run's configurations (`train_config.precision`
            resolved, not "auto").
        strategy: the run's `tf.distribute` strategy.
        batches: `RehearsalBatches`, global batches as the run's dataset yields them; the
            first `steps` updates' worth are trained on, twice.
        steps: updates of each pass (whole calls: at least this many), unless
            `max_seconds` pass first in that pass; at least one call is timed in each.
        clock: seconds, monotonic.
    """
    import tensorflow as tf

    from app.training.guidance import Guidance
    from app.training.step import distribute, make_train_steps
    from app.training.strategy import replica_differences

    replicas = strategy.num_replicas_in_sync
    local_replicas, share = local_share(strategy)
    accumulate = train_config.accumulate
    train_steps = make_train_steps(
        parts.model, parts.optimizer, strategy, train_config.label_smoothing, accumulate, train_config.jit,
        guidance=Guidance.of(train_config),
    )
    batches = batches.first(steps * accumulate)
    iterator = iter(distribute(strategy, batches.dataset))
    per_call = tf.constant(train_config.steps_per_loop, tf.int32)
    gpus = gpu_names(strategy)
    for index in range(len(gpus)):
        tf.config.experimental.reset_memory_stats(f"GPU:{index}")
    consumed, seen = 0, set()

    def call():
        nonlocal consumed
        started = clock()
        loss_sums, tokens, *_ = (value.numpy() for value in train_steps(iterator, per_call))
        seconds = clock() - started
        taken = range(consumed, consumed + len(loss_sums) * accumulate)
        consumed = taken.stop
        shapes = {batches.shape(batch) for batch in taken}
        new_shapes = len(shapes - seen)
        seen.update(shapes)
        return seconds, (loss_sums / np.maximum(tokens, 1.0)).tolist(), taken, new_shapes

    first_call_seconds, losses, _, first_call_shapes = call()
    first_call_steps = len(losses)
    call_seconds, call_steps, call_new_shapes, timed_batches = [], [], [], []
    one_pass = len(batches.plan)
    for end in (one_pass, 2 * one_pass):  # the batches once, then again
        pass_started, calls_before = clock(), len(call_seconds)
        while consumed < end and (clock() - pass_started < max_seconds or len(call_seconds) == calls_before):
            seconds, made, taken, new_shapes = call()
            losses += made
            call_seconds.append(seconds)
            call_steps.append(len(made))
            call_new_shapes.append(new_shapes)
            timed_batches.extend(taken)

    tokens = flops = 0.0
    for batch in timed_batches:
        source_lengths, target_lengths = batches.lengths(batch)
        tokens += float(np.sum(target_lengths - 1))  # labels: the target after its start id
        flops += training_flops(model_config, source_lengths, target_lengths - 1)
    timed_steps = sum(call_steps)
    return Rehearsal(
        replicas=replicas, local_replicas=local_replicas, batches=batches.description, jit=train_config.jit,
        first_call_seconds=first_call_seconds, first_call_steps=first_call_steps,
        first_call_shapes=first_call_shapes, call_seconds=call_seconds, call_steps=call_steps,
        call_new_shapes=call_new_shapes, tokens_per_step=tokens * share / timed_steps,
        flops_per_step=flops * share / timed_steps, losses=losses, peak_memory_bytes=_peak_memory(len(gpus)),
        replica_differences=replica_differences([*parts.model.weights, *parts.optimizer.variables]),
    )


def local_share(strategy):
    """`(this process's replicas, their share of a global batch)`: over several workers,
    FLOPs and tokens are counted for this process's replicas, as its peak is for its devices."""
    replicas = strategy.num_replicas_in_sync
    try:
        local_replicas = len(strategy.extended.worker_devices)
    except RuntimeError:  # the default strategy: one replica, this process's
        local_replicas = replicas
    return local_replicas, local_replicas / replicas


def input_pipeline_rate(batches, max_batches=200, max_seconds=10.0, clock=time.perf_counter):
    """Target tokens a second the input pipeline alone delivers (`batches`' dataset read on
    the host, nothing trained), over up to `max_batches` batches or `max_seconds`."""
    tokens, batch = 0.0, 0
    started = clock()
    for batch, _ in enumerate(batches.dataset.take(max_batches)):
        tokens += float(np.sum(batches.lengths(batch)[1] - 1))
        if clock() - started >= max_seconds:
            break
    return tokens / max(clock() - started, 1e-9)


@dataclasses.dataclass(frozen=True)
class RunExtras:
    """The run's costs beyond its training steps, measured once each."""

    checkpoint_seconds: float  # one checkpoint (weights, optimizer, progress), as the run saves it
    best_save_seconds: float  # one save of a best checkpoint (weights), after an evaluation that improved
    first_evaluation_seconds: Optional[float]  # the first evaluation: tracing, validation loss, BLEU
    evaluation_seconds: Optional[float]  # a later one; None: not measured (no prepared corpus)


def time_run_extras(parts, model_config, train_config, strategy, data=None, evaluate_fn=None,
                    clock=time.perf_counter):
    """`RunExtras`: checkpoints saved with the run's tracker into a temporary directory,
    and, where `data` (the prepared corpus) is given, two evaluations as the run makes
    them (validation loss over the validation set, then `evaluate_fn`'s BLEU)."""
    from app.model.transformer import Transformer
    from app.model_dir import checkpoints
    from app.training.step import distribute, make_eval_step
    from app.training.validation import Validator

    with tempfile.TemporaryDirectory(prefix="preflight-") as scratch:
        tracker = checkpoints.CheckpointTracker(
            scratch, parts.model, parts.optimizer, parts.progress, keep=train_config.keep_checkpoints
        )
        # The second save is the run's usual one (the first also makes the directories).
        saves = []
        for step in (1, 2):
            started = clock()
            tracker.save(step)
            saves.append(clock() - started)
        first = later = None
        if data is not None:
            batches = lambda: distribute(strategy, data.eval_batches("validation"))  # noqa: E731
            eval_step = make_eval_step(parts.model, strategy, train_config.label_smoothing, batches().element_spec)
            validator = Validator(
                eval_step, batches, Transformer(parts.model, model_config), evaluate_fn, record=lambda entry: None,
                tracker=tracker, eval_every=1, patience=None,
            )
            times = []
            for step in (1, 2):  # the first one also saves the best checkpoint: the tracker has none
                started = clock()
                validator.evaluate(step, say=lambda line: None)
                times.append(clock() - started)
            first, later = times
        started = clock()
        tracker.offer_best({"bleu": math.inf}, 3)
        best_save = clock() - started
        tracker.close()
    return RunExtras(saves[-1], best_save, first, later)


def gpu_names(strategy):
    """The name of each GPU the strategy trains on (e.g. "NVIDIA H100 80GB HBM3"); empty on
    CPUs. One per local replica device; a device without details is "GPU"."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    try:
        devices = strategy.extended.worker_devices
    except RuntimeError:  # the default strategy: train.py takes it where there is no GPU
        return []
    used = [device for device in devices if "GPU" in device.upper()]
    names = []
    for device in used:
        index = int(device.rsplit(":", 1)[-1])
        try:
            details = tf.config.experimental.get_device_details(gpus[index])
        except (ValueError, RuntimeError, IndexError):
            details = {}
        names.append(details.get("device_name", "GPU"))
    return names


def _peak_memory(gpu_count):
    """Peak memory in bytes: each GPU's since the rehearsal began, or the process's peak
    resident set (Linux reports it in KiB, macOS in bytes) where there are no GPUs."""
    import tensorflow as tf

    if gpu_count:
        return [tf.config.experimental.get_memory_info(f"GPU:{index}")["peak"] for index in range(gpu_count)]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return [peak if sys.platform == "darwin" else peak * 1024]


# ---------------------------------------------------------------------------------------
# The verdict.


@dataclasses.dataclass(frozen=True)
class Check:
    """One thing the rehearsal verifies: its name, whether it passed, and what was seen."""

    name: str
    passed: bool
    detail: str


def checks(rehearsal, unseen_gpu_warning=None, data_problem=None, data_source=""):
    """The rehearsal's pass/fail checks, in the order they are printed.

    `data_problem`: why the run could not read its corpus (`data.corpora.describe_source`'s
    error), or None; `data_source`: where it reads it from, when it can."""
    finite = all(math.isfinite(loss) for loss in rehearsal.losses)
    differences = rehearsal.replica_differences
    largest = max(differences.values(), default=0.0)
    return [
        Check("the corpus can be read", data_problem is None, data_problem or data_source),
        Check(
            "TensorFlow sees the machine's GPUs", unseen_gpu_warning is None,
            unseen_gpu_warning or "no NVIDIA GPU left unseen",
        ),
        Check(
            "losses finite", finite,
            f"{len(rehearsal.losses)} updates, mean token loss {rehearsal.losses[0]:.3f} -> {rehearsal.losses[-1]:.3f}",
        ),
        Check(
            "every replica holds the same weights", not differences,
            (f"all {rehearsal.replicas} replicas equal after {len(rehearsal.losses)} updates"
             if rehearsal.replicas > 1 else "one replica, nothing to compare") if not differences else
            f"{len(differences)} variables differ between replicas (largest {largest:.3g}), e.g. "
            + ", ".join(sorted(differences)[:3]),
        ),
    ]


def format_duration(seconds):
    """"12 h 05 min", "7 min 30 s", "42 s"."""
    seconds = round(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    if seconds >= 60:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds} s"
