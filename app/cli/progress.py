"""Training progress: Keras's bar on a terminal, one plain line per log record elsewhere.

Keras's `Progbar` redraws its line with backspaces, carriage returns and colour codes, and
takes itself to be on a terminal whenever Python's `posix` module is loaded: always, on
Linux. So a run whose output went to a file (`python train.py > train.log`, nohup, a
cluster's job log) wrote its bar there: the default hour made a 4.3 MB log of 66 lines.
`make_progress` keeps the bar for a terminal and gives anything else `LineProgress`.

Both take `update(step, values)` with `values` a list of `(name, value)` pairs, and a
`target` (the run's last step) that may move while training (a time budget).
"""

import sys
import time

import keras


class TerminalProgress(keras.utils.Progbar):
    """Keras's bar, redrawn in place after every step."""

    rewrites_line = True  # a message printed mid-run must start a new line


class LineProgress:
    """One line every `every` steps and at the target, for logs:

        step 1000/16000 - loss: 4.1234 - lr: 1.7469e-03 - tok/s: 9876 - eta: 51:02

    The ETA counts from this object's first update (a resumed run's own pace).
    """

    rewrites_line = False

    def __init__(self, target, every, write=print, clock=time.monotonic):
        self.target = target
        self.every = every
        self._write = write
        self._clock = clock
        self._first = None  # (step, time) of the first update

    def update(self, step, values):
        now = self._clock()
        if self._first is None:
            self._first = (step, now)
        if step % self.every and step < self.target:
            return
        parts = [f"step {step}/{self.target}"]
        parts += [f"{name}: {_format_value(name, value)}" for name, value in values]
        first_step, first_time = self._first
        if first_step < step < self.target:
            seconds_per_step = (now - first_time) / (step - first_step)
            parts.append(f"eta: {_format_duration(seconds_per_step * (self.target - step))}")
        self._write(" - ".join(parts))


def make_progress(target, every, write=print, stream=None):
    """`TerminalProgress` when `stream` (default sys.stdout) is a terminal, else `LineProgress`."""
    stream = sys.stdout if stream is None else stream
    if stream.isatty():
        return TerminalProgress(target, stateful_metrics=["loss", "lr", "tok/s"])
    return LineProgress(target, every, write)


def _format_value(name, value):
    if name == "tok/s":
        return f"{value:.0f}"
    # As Keras's bar: 4 decimals, or scientific notation for small values.
    return f"{value:.4f}" if abs(value) > 1e-3 else f"{value:.4e}"


def _format_duration(seconds):
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"
