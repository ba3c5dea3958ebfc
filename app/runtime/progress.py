"""Training progress: Keras's bar on a terminal, one plain line per log record elsewhere.

Keras's `Progbar` redraws its line with backspaces, carriage returns and colour codes, and
takes itself to be on a terminal whenever Python's `posix` module is loaded: always, on
Linux. So a run whose output went to a file (`python train.py > train.log`, nohup, a
cluster's job log) wrote its bar there: megabytes of redraws in a few dozen lines
(docs/lab-notebook/2026-11-28-records-moved-from-code-comments.md).
`make_progress` keeps the bar for a terminal and gives anything else `LineProgress`.

Both take `update(step, values)` with `values` a list of `(name, value)` pairs, and a
`target` (the run's last step) that may move while training (a time budget).

`CountProgress` is the same for the other long steps, which count items towards a known
total (sentences decoded by `app.evaluate`): one line redrawn on a terminal, a plain line
now and then elsewhere, always on stderr by default, so that a command's results on stdout
stay clean. `format_seconds` writes the durations of their closing lines.
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
        return TerminalProgress(target, stateful_metrics=["loss", "alignment loss", "lr", "tok/s"])
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


def format_seconds(seconds):
    """A duration for a progress line: "8.4 s" under a minute, else "M:SS" or "H:MM:SS"."""
    return f"{seconds:.1f} s" if seconds < 59.95 else _format_duration(seconds)


class CountProgress:
    """Progress of a count towards a known total, for the long steps of the commands:

        decoding: 640/1,014 sentences - 21.3 sentences/s - eta 0:17        (while it runs)
        decoding: 1,014 sentences in 47.6 s - 21.3 sentences/s             (`close()`)

    On a terminal the line is redrawn in place (at most every `redraw_seconds`), and
    `close()` ends it; elsewhere (a log file, a pipe) a plain line is written at most every
    `interval` seconds, and `close()` writes the last. The rate and ETA count from
    this object's creation.

    Args:
        label: what is counted, first on the line ("decoding").
        total: the count when done.
        unit: the plural noun of the count ("sentences").
        stream: where the lines go (default sys.stderr); a terminal when `stream.isatty()`.
        interval: seconds between plain lines.
        clock: seconds, monotonic; tests may replace it.
    """

    def __init__(self, label, total, unit, stream=None, interval=30.0, clock=time.monotonic, redraw_seconds=0.2):
        self.label = label
        self.total = total
        self.unit = unit
        self._stream = sys.stderr if stream is None else stream
        self._terminal = self._stream.isatty()
        self._interval = redraw_seconds if self._terminal else interval
        self._clock = clock
        self._started = clock()
        self._written = self._started  # when the last line was written
        self._done = 0

    def update(self, done):
        """Records that `done` of `total` are done (a count, not an increment)."""
        self._done = done
        now = self._clock()
        if now - self._written < self._interval or done >= self.total:
            return  # the last line is close()'s
        self._written = now
        parts = [f"{self.label}: {done:,}/{self.total:,} {self.unit}"]
        seconds = now - self._started
        if done and seconds > 0:
            rate = done / seconds
            parts.append(f"{_format_rate(rate)} {self.unit}/s")
            parts.append(f"eta {_format_duration((self.total - done) / rate)}")
        self._line(" - ".join(parts))

    def close(self):
        """The closing line: the count, the time it took and the rate."""
        seconds = self._clock() - self._started
        line = f"{self.label}: {self._done:,} {self.unit} in {format_seconds(seconds)}"
        if self._done and seconds > 0:
            line += f" - {_format_rate(self._done / seconds)} {self.unit}/s"
        self._line(line)
        if self._terminal:
            self._stream.write("\n")
            self._stream.flush()

    def _line(self, text):
        if self._terminal:
            # Back to the line's start, and clear what a longer earlier line left.
            self._stream.write("\r" + text + "\x1b[K")
        else:
            self._stream.write(text + "\n")
        self._stream.flush()


def _format_rate(rate):
    return f"{rate:.1f}" if rate < 100 else f"{rate:,.0f}"
