"""How many threads TensorFlow gives one op on the CPU, and how many ops it runs at once.

TensorFlow's defaults size both pools to the machine: every op may split its work over
every core (intra-op), and as many independent ops as there are cores run side by side
(inter-op). On a 2-core CPU that is up to four busy threads on two cores. For the tiny
model, whose matrix products are small, one thread per op with two ops at once trained
faster; `small` and beam search ran slower: small's larger products, and decoding's one
step after another, gain more from two threads per op than from two ops at once
(docs/lab-notebook/2026-11-24-one-thread-per-op.md). So these stay flags, TensorFlow's defaults unless asked, and a user
measures on their own CPU with
`benchmarks/bench_training.py --settings ...,...+1-thread-per-op`. The server takes TF
Serving's flags for the same pools (`python -m app.serve --tensorflow_intra_op_parallelism`):
there, the export's beam search ran fastest with one thread per op and its parallel
searches side by side on the inter-op threads (docs/serving.md#threads).
"""

import dataclasses
import sys
from typing import Optional

from app.decoding.config import DecodingConfig
from app.runtime.decoding_threads import decoding_intra_op_threads


def check_thread_counts(intra_op, inter_op):
    """ValueError naming the flag unless each count is None or at least 0."""
    for flag, value in (("--intra-op-threads", intra_op), ("--inter-op-threads", inter_op)):
        if value is not None and value < 0:
            raise ValueError(f"{flag} must be 0 (TensorFlow's choice) or more, got {value}")


def set_cpu_threads(intra_op=None, inter_op=None):
    """Sizes TensorFlow's two thread pools; None or 0 leaves TensorFlow's own choice.

    Must run before TensorFlow executes its first op: the pools are made then, once per
    process.

    Raises:
        ValueError: a negative count, or TensorFlow already started with other pools.
    """
    import tensorflow as tf

    check_thread_counts(intra_op, inter_op)
    try:
        if intra_op is not None:
            tf.config.threading.set_intra_op_parallelism_threads(intra_op)
        if inter_op is not None:
            tf.config.threading.set_inter_op_parallelism_threads(inter_op)
    except RuntimeError as error:
        raise ValueError(
            f"TensorFlow started before its threads could be set (intra-op {intra_op}, inter-op {inter_op}): "
            f"{error}"
        ) from error


def describe_cpu_threads():
    """One line for the log: the pools as set (0 in TensorFlow's terms: its own choice)."""
    import tensorflow as tf

    intra = tf.config.threading.get_intra_op_parallelism_threads()
    inter = tf.config.threading.get_inter_op_parallelism_threads()
    per_op = f"{intra} per op" if intra else "every core per op (TensorFlow's choice)"
    at_once = f"{inter} ops at once" if inter else "one op per core at once (TensorFlow's choice)"
    return f"CPU threads: {per_op}, {at_once}"


@dataclasses.dataclass(frozen=True)
class CpuThreads:
    """TensorFlow's two CPU thread pools as a command asks for them (--intra-op-threads,
    --inter-op-threads): part of each command's plan, applied once before TensorFlow runs
    an op. No TensorFlow until `apply`."""

    # Threads one op may use; None: TensorFlow's choice, or decoding's where `decoding`
    # (app/runtime/decoding_threads.py); 0: TensorFlow's choice.
    intra_op: Optional[int] = None
    # Ops run at once; None or 0: TensorFlow's choice.
    inter_op: Optional[int] = None
    # A command that decodes: its ops get the threads decoding ran fastest with where
    # `intra_op` is not given.
    decoding: bool = False

    def __post_init__(self):
        check_thread_counts(self.intra_op, self.inter_op)

    @property
    def given(self):
        """Whether either pool was asked for: the command then says how they are set."""
        return bool(self.intra_op or self.inter_op)

    def apply(self, stream=None):
        """Sizes the pools and, where either was given, says so in a line on `stream`
        (default standard error: standard output may hold the command's result). Call it
        before TensorFlow runs an op.

        Raises:
            ValueError: TensorFlow already started with other pools (`set_cpu_threads`).
        """
        set_cpu_threads(self.intra_op, self.inter_op)
        if self.intra_op is None and self.decoding:
            try:
                set_cpu_threads(decoding_intra_op_threads(DecodingConfig.parallel_searches))
            except ValueError:  # called again in a process whose TensorFlow has started: its pools stand
                pass
        if self.given:
            print(describe_cpu_threads(), file=stream or sys.stderr)
