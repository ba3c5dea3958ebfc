"""A run's records: metrics.jsonl, one JSON object a line, and the same numbers as
TensorBoard scalars in `train/`, both written by the chief only (`MetricsLog`); the
training loss and speed between two records (`TrainingWindow`).

    metrics = MetricsLog(model_dir, chief, latest_checkpoint=tracker.latest)
    metrics.record({"step": 100, "loss": 4.2})

A resumed run first cuts both back to the step it resumed from (`drop_records_after`).
"""

import contextlib
import json
import os
import time

import tensorflow as tf

from app.model_dir import checkpoints
from app.model_dir.event_files import drop_events_after
from data.atomic_files import write_atomically

METRICS_FILE = "metrics.jsonl"
EVENTS_DIRECTORY = "train"  # TensorBoard's event files


class MetricsLog:
    """Appends records to `model_dir`'s metrics.jsonl and TensorBoard files (chief only:
    on the other workers `record` does nothing).

    Args:
        model_dir: the run's directory.
        chief: whether this worker writes.
        latest_checkpoint: `() -> path or None`, named in the error on a full disk, as the
            checkpoint to resume from.
    """

    def __init__(self, model_dir, chief, latest_checkpoint):
        self.path = os.path.join(model_dir, METRICS_FILE)
        self._chief, self._latest_checkpoint = chief, latest_checkpoint
        self._writer = tf.summary.create_file_writer(os.path.join(model_dir, EVENTS_DIRECTORY)) if chief else None

    def record(self, entry):
        """Appends `entry`, a dict with an int "step", as a line of metrics.jsonl, and each
        of its other numbers as a TensorBoard scalar of that step.

        Raises:
            checkpoints.CheckpointError: if metrics.jsonl cannot be written (a full disk).
        """
        if not self._chief:
            return
        try:
            with open(self.path, "a") as f:
                f.write(json.dumps(entry) + "\n")
        except OSError as error:  # A full disk.
            raise checkpoints.cannot_write(self.path, error, self._latest_checkpoint()) from None
        with self._writer.as_default(step=entry["step"]):
            for key, value in entry.items():
                if key != "step" and isinstance(value, (int, float)):
                    tf.summary.scalar(key, value)


def drop_records_after(model_dir, step):
    """Cuts `model_dir`'s metrics.jsonl and TensorBoard files back to `step`, the step a
    resumed run restarts from: the steps after it are trained, and recorded, again."""
    _drop_records_after(os.path.join(model_dir, METRICS_FILE), step)
    drop_events_after(os.path.join(model_dir, EVENTS_DIRECTORY), step)


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


class TrainingWindow:
    """The training loss and speed since the last record.

    One batch's loss swings with its sentence lengths, so records and the progress bar
    show the token-weighted mean over the window. Its tokens per second count training
    time only: time spent `paused()` (evaluating) is left out. Wall time (`time.time`).
    """

    def __init__(self):
        self.restart()

    def restart(self):
        """Empties the window, from now."""
        self._tokens, self._loss_sum, self._alignment_sum, self._start = 0.0, 0.0, 0.0, time.time()

    def add(self, loss_sum, tokens, alignment_sum=None):
        """Counts one step: its summed token losses, its non-padding target tokens and, in a
        guided run, its summed alignment loss."""
        self._tokens += tokens
        self._loss_sum += loss_sum
        self._alignment_sum += alignment_sum or 0.0

    def mean_loss(self):
        return self._loss_sum / max(self._tokens, 1.0)

    def mean_alignment_loss(self):
        """The guided alignment loss per target token (unweighted)."""
        return self._alignment_sum / max(self._tokens, 1.0)

    def tokens_per_second(self):
        return self._tokens / max(time.time() - self._start, 1e-9)

    @contextlib.contextmanager
    def paused(self):
        """Leaves the time spent inside the `with` block out of the window."""
        paused_at = time.time()
        yield
        self._start += time.time() - paused_at
