"""A rehearsal of a training run, minutes long, that says whether the real one will work
and how long it will take (`python -m app.preflight`).

It builds the run's model and optimizer under the run's strategy and precision, exactly
as `app.training.loop.train` does, and makes real updates with the run's step function
(`steps_per_loop` updates a call), on synthetic batches of the run's size: every replica
gets `batch_tokens / replicas` source and target tokens of one length, ids drawn at
random. No corpus is read, no vocabulary trained, and nothing is written anywhere.

    report = rehearse(model_config, train_config, strategy, batch_tokens=25000)
    report.seconds_per_step, report.replica_differences, report.peak_memory_bytes

What it measures: the first call (tracing, compiling, and its updates), the steady time
per update after it, target tokens per second, model FLOPs utilization against the
devices' peak (`app.training.peaks`), peak memory, and whether every replica's copy of
every weight and optimizer variable is still the same after the updates (the copies are
updated separately; a checkpoint saves the first).
"""

import dataclasses
import math
import resource
import sys
import time

import numpy as np

from app.model.flops import training_flops
from layers.special_tokens import START_ID

# Ids below this are special (padding, start, end, unknown): synthetic tokens avoid them.
FIRST_ORDINARY_ID = 4


@dataclasses.dataclass
class Rehearsal:
    """What a rehearsal measured. Times in seconds, sizes in bytes."""

    replicas: int
    rows_per_replica: int  # sentences per replica per micro-batch
    length: int  # tokens per sentence, each side
    tokens_per_replica_per_step: int  # target tokens, every micro-batch of an update
    first_call_seconds: float  # tracing, compiling and the first call's updates
    first_call_steps: int
    seconds_per_step: float  # steady, after the first call
    steps: int  # updates timed after the first call
    losses: list  # mean token loss of every update, first call included
    flops_per_step: float  # model FLOPs of one update over all replicas (app.model.flops)
    peak_memory_bytes: list  # per GPU; one entry, the process's peak resident memory, on a CPU
    replica_differences: dict  # {variable path: largest difference from replica 0's copy}

    @property
    def tokens_per_second(self):
        """Target tokens of all replicas trained per second, steady."""
        return self.tokens_per_replica_per_step * self.replicas / self.seconds_per_step

    @property
    def trace_seconds(self):
        """The first call's time beyond its updates at the steady pace: tracing and compiling."""
        return max(self.first_call_seconds - self.first_call_steps * self.seconds_per_step, 0.0)

    @property
    def flops_per_second(self):
        return self.flops_per_step / self.seconds_per_step


def synthetic_batches(vocab_size, rows, length, seed=0):
    """A `tf.data.Dataset` repeating one `(source [rows, length], target [rows, length + 1])`
    int32 batch of random ordinary ids, the target led by the start token: every
    position a real token, as in a well-bucketed batch of `length`-token sentences."""
    import tensorflow as tf

    if vocab_size <= FIRST_ORDINARY_ID:
        raise ValueError(f"a vocabulary of {vocab_size} ids has no ordinary token (ids 0-3 are special)")
    rng = np.random.default_rng(seed)
    source = rng.integers(FIRST_ORDINARY_ID, vocab_size, (rows, length), dtype=np.int32)
    target = np.concatenate(
        [np.full((rows, 1), START_ID, np.int32), rng.integers(FIRST_ORDINARY_ID, vocab_size, (rows, length), np.int32)],
        axis=1,
    )
    return tf.data.Dataset.from_tensors((source, target)).repeat()


def rows_per_replica(batch_tokens, replicas, length):
    """Sentences of `length` tokens per replica in a batch of `batch_tokens` (all replicas)."""
    return max(1, batch_tokens // replicas // length)


def rehearse(model_config, train_config, strategy, batch_tokens, length=32, steps=20, max_seconds=60.0,
             clock=time.perf_counter):
    """Runs the first call and then steady calls of the training step; returns a `Rehearsal`.

    Args:
        model_config, train_config: the run's configurations (`train_config.precision`
            resolved, not "auto").
        strategy: the run's `tf.distribute` strategy.
        batch_tokens: tokens per side of one micro-batch, all replicas together.
        length: tokens of every synthetic sentence, each side.
        steps: updates to time after the first call (whole calls: at least this many),
            unless `max_seconds` pass first; at least one call is timed.
        clock: seconds, monotonic.
    """
    import keras
    import tensorflow as tf

    from app.model.transformer import build_transformer
    from app.training.optimizer import make_optimizer
    from app.training.step import distribute, make_train_steps
    from app.training.strategy import replica_differences

    keras.config.set_dtype_policy(train_config.precision)
    keras.utils.set_random_seed(train_config.seed)
    replicas = strategy.num_replicas_in_sync
    rows = rows_per_replica(batch_tokens, replicas, length)
    total_steps = train_config.train_steps or 100_000
    with strategy.scope():
        model = build_transformer(model_config)
        optimizer = make_optimizer(model_config, train_config, total_steps)
        optimizer.build(model.trainable_variables)
    train_steps = make_train_steps(
        model, optimizer, strategy, train_config.label_smoothing, train_config.accumulate, train_config.jit
    )
    batches = synthetic_batches(model_config.vocab_size, rows * replicas, length, train_config.seed)
    iterator = iter(distribute(strategy, batches))
    per_call = tf.constant(train_config.steps_per_loop, tf.int32)
    gpus = gpu_names(strategy)
    for index in range(len(gpus)):
        tf.config.experimental.reset_memory_stats(f"GPU:{index}")

    def call():
        loss_sums, tokens, _ = (value.numpy() for value in train_steps(iterator, per_call))
        return (loss_sums / np.maximum(tokens, 1.0)).tolist()

    started = clock()
    losses = call()
    first_call_seconds, first_call_steps = clock() - started, len(losses)
    timed = 0
    started = clock()
    while timed < steps and (timed == 0 or clock() - started < max_seconds):
        made = call()
        losses += made
        timed += len(made)
    seconds_per_step = (clock() - started) / timed

    tokens = rows * length * train_config.accumulate
    flops = training_flops(model_config, np.full(rows * replicas, length), np.full(rows * replicas, length))
    return Rehearsal(
        replicas=replicas, rows_per_replica=rows, length=length, tokens_per_replica_per_step=tokens,
        first_call_seconds=first_call_seconds, first_call_steps=first_call_steps,
        seconds_per_step=seconds_per_step, steps=timed, losses=losses,
        flops_per_step=flops * train_config.accumulate,
        peak_memory_bytes=_peak_memory(len(gpus)),
        replica_differences=replica_differences([*model.weights, *optimizer.variables]),
    )


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
