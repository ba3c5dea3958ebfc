"""Stopping on a signal: Ctrl-C or SIGTERM becomes a flag read between calls of the
training function (`InterruptFlag`), which all workers of a multi-worker run agree on
(`stop_check`). The step a checkpoint saved on an interrupt holds is the one the graph
counted (`Progress.step`, advanced by each update), so a call cut short by a second signal
is counted as the weights have it."""

import signal

import tensorflow as tf

from app.training.strategy import max_over_workers


def stop_check(strategy, interrupted, step, clock):
    """Returns `stop_requested(step, last) -> bool`: whether to stop after `step` for a
    signal `interrupted` took, asked after every step, with `last` true after the run's
    last one. In one process: whether the flag is raised.

    Multi-worker: each worker gets its signal at its own moment (a scheduler's SIGTERM to
    all at about the same time, Ctrl-C in one worker's terminal), and one saving (a
    collective) while another trains the next step (another) would hang or crash both.
    So the workers reduce their flags at steps they agree on (`AgreedStop`), and all stop
    at the first of them after any worker raised its flag, and take part in its save.
    """
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return lambda step, last=False: interrupted.raised
    return AgreedStop(interrupted, max_over_workers(strategy), step, clock)


class AgreedStop:
    """`stop_requested(step, last)` on one of the workers: the same answer on each.

    The flags are reduced at steps the workers agree on, about once a second of the
    slowest worker's training and at the last step: a collective after every step would
    cost as much as a small model's step. Each reduction also takes the
    slowest worker's seconds per step since the previous one, which sets the step of the next.
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


class InterruptFlag:
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
