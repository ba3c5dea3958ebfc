"""A wall-clock budget for training: choose the run's length so that it ends in time.

A fixed step count ends within the hour on one machine and runs over on a slower one, or
on the same machine on a slower day (docs/results.md). Under a budget the run keeps its
schedule, the same warmup, peak and linear cooldown over the same final fraction, and
only its length changes: at each progress record, the pace of the recent steps and the
time of the latest evaluation (`PaceMeter`) set the run's end to the most steps, up to
the configured ones, that leave time for the evaluations still due, the final one
included (`plan_run_length`). The end moves only until the cooldown begins; from then on
it is fixed, so the learning rate never jumps. If the deadline passes all the same,
training stops at the next record.

    pace = PaceMeter()
    pace.observe_steps(step, training_seconds)        # at each progress record
    pace.observe_evaluation(seconds)                  # after each evaluation
    planned = plan_run_length(step, planned, 9500, 0.2, 1000,
                              pace.seconds_per_step, pace.seconds_per_evaluation, remaining_seconds)
"""

import collections
import math

from app.schedule import cooldown_steps


def cooldown_has_begun(step, total_steps, cooldown_fraction):
    """Whether update `step` (1-based, done) was already annealed in a `total_steps` run.

    The schedule's factor for update s is min(1, (total - s + 1) / cooldown): 1 up to
    s = total - cooldown + 1, below it after. Until an update below 1 has been taken, the
    run's end can move without changing any rate already used.
    """
    return step > total_steps - cooldown_steps(total_steps, cooldown_fraction) + 1


def evaluations_before(step, end, eval_every):
    """Evaluations the training loop runs after `step` and before `end`: every
    `eval_every` steps, none at `end` itself (the final evaluation is counted apart)."""
    if not eval_every:
        return 0
    return max(0, (end - 1) // eval_every - step // eval_every)


def longest_run_that_fits(step, max_steps, seconds_per_step, seconds_per_evaluation, eval_every, remaining_seconds):
    """The most total steps n, step <= n <= max_steps, whose rest fits in the time left.

    The rest of a run to n costs (n - step) steps, the evaluations due before n, and the
    final evaluation. Returns `step` when not even the final evaluation fits.
    """

    def cost(end):
        evaluations = evaluations_before(step, end, eval_every) + 1
        return (end - step) * seconds_per_step + evaluations * seconds_per_evaluation

    if cost(step) > remaining_seconds:
        return step
    low, high = step, max_steps  # cost(low) fits; find the largest end that does.
    while low < high:
        middle = (low + high + 1) // 2
        if cost(middle) <= remaining_seconds:
            low = middle
        else:
            high = middle - 1
    return low


def earliest_end_without_cooldown_yet(step, max_steps, cooldown_fraction):
    """The shortest run whose cooldown has not begun at `step` (capped at `max_steps`).

    A shorter plan would put `step` inside a cooldown that its earlier updates did not
    follow: the learning rate would drop at once instead of falling linearly.
    """
    # n - cooldown(n) never decreases with n, and no n below (step - 1.5) / (1 - f) can do.
    end = step if cooldown_fraction >= 1 else max(step, math.floor((step - 1.5) / (1 - cooldown_fraction)))
    end = min(end, max_steps)
    while end < max_steps and cooldown_has_begun(step, end, cooldown_fraction):
        end += 1
    return end


def plan_run_length(step, planned, max_steps, cooldown_fraction, eval_every,
                    seconds_per_step, seconds_per_evaluation, remaining_seconds):
    """The run's new end, given its current one and the seconds left in the budget.

    Past the deadline the run ends now. Once the cooldown has begun the end stays, and
    before the pace is known (None) too. Otherwise it is the longest run that fits, but
    not so short that the cooldown would have begun already. An evaluation not timed yet
    (None) counts as free: the first one comes `eval_every` steps in, long before the
    cooldown of any run worth a budget.
    """
    if remaining_seconds <= 0:
        return step
    if seconds_per_step is None or cooldown_has_begun(step, planned, cooldown_fraction):
        return planned
    fits = longest_run_that_fits(
        step, max_steps, seconds_per_step, seconds_per_evaluation or 0.0, eval_every, remaining_seconds
    )
    return max(fits, earliest_end_without_cooldown_yet(step, max_steps, cooldown_fraction))


class PaceMeter:
    """Measures seconds per training step, evaluations left out, over the newest records.

    Args:
        window: progress records the pace is measured over, so that a machine that slows
            down or speeds up is followed within a few hundred steps.
    """

    def __init__(self, window=10):
        self._records = collections.deque(maxlen=window + 1)  # (step, training seconds)
        self.seconds_per_evaluation = None

    def observe_steps(self, step, training_seconds):
        """Records that `step` updates were done after `training_seconds` of training time
        (wall time with evaluations left out; any origin, as only differences count)."""
        self._records.append((step, training_seconds))

    def observe_evaluation(self, seconds):
        """Records how long an evaluation took; the newest one stands for those to come."""
        self.seconds_per_evaluation = seconds

    @property
    def seconds_per_step(self):
        """The mean over the window, or None before two records."""
        if len(self._records) < 2:
            return None
        (first_step, first_seconds), (last_step, last_seconds) = self._records[0], self._records[-1]
        if last_step <= first_step:
            return None
        return (last_seconds - first_seconds) / (last_step - first_step)


def describe_plan(step, planned, max_steps, seconds_per_step, remaining_seconds):
    """One log line for a change of the run's end, decided at `step`."""
    pace = f"{seconds_per_step:.3f} s a step" if seconds_per_step is not None else "pace not measured yet"
    left = f"{remaining_seconds / 60:.1f} minutes left"
    if planned == step and remaining_seconds <= 0:
        return f"time budget spent at step {step}: training ends here ({pace})"
    if planned < max_steps:
        return f"time budget: the run ends at step {planned} of {max_steps} ({pace}, {left})"
    return f"time budget: all {max_steps} steps fit ({pace}, {left})"
