"""A wall-clock budget for training: choose the run's length so that it ends in time.

A fixed step count ends within the hour on one machine and runs over on a slower one, or
on the same machine on a slower day
(docs/lab-notebook/2026-11-21-en-de-the-default-command.md). Under a budget the run keeps its
schedule, the same warmup, peak and linear cooldown over the same final fraction, and
only its length changes: at each progress record, the pace of the recent steps and the
time of the latest evaluation (`PaceMeter`) set the run's end to the most steps, up to
the configured ones, that leave time for the evaluations still due, the final one
included (`plan_run_length`).

Before the cooldown begins, a new end brings the cooldown that its fraction gives. Once
it has begun, the end can still move earlier, since steps that slow down late would
otherwise meet the deadline with the learning rate still high; the rest of the cooldown
is then re-sloped (`cooldown_for_new_end`): it goes on from the rate of the last update
and falls linearly to the new end, so the rate never jumps. If the deadline passes all
the same, training stops at the next record.

    pace = PaceMeter()
    pace.observe_steps(step, training_seconds)        # at each progress record
    pace.observe_evaluation(seconds)                  # after each evaluation
    end = plan_run_length(step, planned, cooldown, 9500, 0.2, 1000,
                          pace.seconds_per_step, pace.seconds_per_evaluation, remaining_seconds)
    cooldown = cooldown_for_new_end(step, planned, cooldown, end, 0.2)

`RunBudget` does this for the training loop: it times the evaluations, replans at each
record and says when the end has moved far enough to be worth a line.
"""

import collections
import contextlib
import math

from app.training.schedule import cooldown_steps


def cooldown_has_begun(step, total_steps, cooldown):
    """Whether update `step` (1-based, done) was already annealed in a `total_steps` run
    whose last `cooldown` updates anneal.

    The schedule's factor for update s is min(1, (total - s + 1) / cooldown): 1 up to
    s = total - cooldown + 1, below it after. Until an update below 1 has been taken, the
    run's end can move, with the cooldown its fraction gives, without changing any rate
    already used.
    """
    return cooldown > 0 and step > total_steps - cooldown + 1


def evaluations_before(step, end, eval_every):
    """Evaluations the training loop still runs from `step` on and before `end`: every
    `eval_every` steps, none at `end` itself (the final evaluation is counted apart).

    The one at `step` itself counts: the loop plans at a progress record, before it
    evaluates that step.
    """
    if not eval_every:
        return 0
    first = max(step, 1)  # none at step 0
    return max(0, (end - 1) // eval_every - (first - 1) // eval_every)


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
    while end < max_steps and cooldown_has_begun(step, end, cooldown_steps(end, cooldown_fraction)):
        end += 1
    return end


def plan_run_length(step, planned, cooldown, max_steps, cooldown_fraction, eval_every,
                    seconds_per_step, seconds_per_evaluation, remaining_seconds):
    """The run's new end, given its current one (`planned`, whose last `cooldown` updates
    anneal) and the seconds left in the budget.

    Past the deadline the run ends now; before the pace is known (None) the end stays.
    Otherwise it is the longest run that fits. Before the cooldown has begun it is not
    so short that the cooldown would have begun already (`earliest_end_without_cooldown_yet`).
    After, it is not later than the current end: the cooldown is re-sloped to an earlier
    end (`cooldown_for_new_end`) so as to finish in time, but a faster pace leaves the
    seconds it saves unused, as a fixed end would, rather than stretch a cooldown under way.
    An evaluation not timed yet (None) counts as free: the first one comes `eval_every`
    steps in, long before the cooldown of any run worth a budget.
    """
    if remaining_seconds <= 0:
        return step
    if seconds_per_step is None:
        return planned
    fits = longest_run_that_fits(
        step, max_steps, seconds_per_step, seconds_per_evaluation or 0.0, eval_every, remaining_seconds
    )
    if cooldown_has_begun(step, planned, cooldown):
        return min(fits, planned)
    return max(fits, earliest_end_without_cooldown_yet(step, max_steps, cooldown_fraction))


def cooldown_for_new_end(step, planned, cooldown, new_end, cooldown_fraction):
    """The cooldown length that goes with moving the run's end from `planned` to `new_end`.

    Before the cooldown has begun, the one the fraction gives. After, the one that keeps
    the factor of update `step`, the last taken, (planned - step + 1) / cooldown, and
    falls linearly from it to the new end: (new_end - step + 1) / new_cooldown is that
    factor, rounded down, so no later update is made at a higher rate than the one
    before it, and the new plan still counts `step` as annealed. The last update keeps a
    factor of 1 / new_cooldown, as in every run (`WarmupInverseSqrt`), and the new
    cooldown is no longer than the run.

    For example, a run planned to end at 14,664 with a cooldown of 2,933, whose end moves to
    14,400 at step 14,000 (factor 665 / 2,933 = 0.227), gets a cooldown of 1,769: its last
    400 updates fall from 0.227 to 1 / 1,769. Why the end must be able to move once the
    cooldown has begun: docs/lab-notebook/2026-11-21-en-de-the-default-command.md.

    Raises:
        ValueError: in the cooldown, for a `new_end` before `step` or after `planned`.
    """
    if not cooldown_has_begun(step, planned, cooldown):
        return cooldown_steps(new_end, cooldown_fraction)
    if not step <= new_end <= planned:
        raise ValueError(f"a cooldown under way at step {step} can end from then to {planned}, not at {new_end}")
    updates_left_then, updates_left_now = planned - step + 1, new_end - step + 1
    # ceil(updates_left_now * cooldown / updates_left_then), in integers: at least
    # updates_left_now + 1, as the old factor is below 1.
    return -(-updates_left_now * cooldown // updates_left_then)


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


class RunBudget:
    """The time budget of one invocation of a run: the pace of its training steps
    (evaluations left out) and of its evaluations, measured here and agreed on by all
    workers, decides the run's end.

    Args:
        minutes: the budget, across resumptions, final evaluation included (None: no
            budget; `evaluating` still times evaluations, and `replan` is not to be asked).
        max_steps: the configured length, never exceeded.
        cooldown_fraction, eval_every: the run's (`TrainConfig`).
        progress: the run's `checkpoints.Progress`, whose plan `replan` moves.
        reduce: `reduce(values) -> values`, each the maximum over workers
            (`app.training.strategy.max_over_workers`).
        clock: seconds, monotonic.
        started: `clock()` when this invocation began.
        seconds_before: seconds the run spent in earlier invocations.
    """

    def __init__(self, minutes, max_steps, cooldown_fraction, eval_every, progress, reduce, clock, started,
                 seconds_before):
        self._seconds = minutes * 60.0 if minutes else None
        self._max_steps, self._cooldown_fraction, self._eval_every = max_steps, cooldown_fraction, eval_every
        self._progress, self._reduce, self._clock = progress, reduce, clock
        self._started, self._seconds_before = started, seconds_before
        self._pace = PaceMeter()
        self._evaluation_seconds = 0.0  # Spent evaluating in this invocation.
        self._reported_plan = int(progress.planned_steps)  # The end the log and metrics.jsonl last gave.

    @contextlib.contextmanager
    def evaluating(self):
        """Times the evaluation run inside the `with` block, and leaves it out of the steps' pace."""
        start = self._clock()
        yield
        seconds = self._clock() - start
        self._evaluation_seconds += seconds
        self._pace.observe_evaluation(seconds)

    def replan(self, step, planned):
        """The run's end after `step`, at a progress record, given its current end `planned`.

        A new end goes into `progress` with its cooldown (`cooldown_for_new_end`).

        Returns:
            `(end, line)`: `line` describes the end for the log and metrics.jsonl when it
            has moved by 1% of the run or more since the last one given, or to the full
            length again, or to now; else None. (The pace wavers by a few percent from
            record to record, and the end with it.)
        """
        now = self._clock()
        self._pace.observe_steps(step, now - self._evaluation_seconds)
        remaining = self._seconds - self._seconds_before - (now - self._started)
        unknown = -1.0  # Not measured yet: a collective carries floats, not None.
        per_step, per_evaluation, overdue = self._reduce([
            unknown if self._pace.seconds_per_step is None else self._pace.seconds_per_step,
            unknown if self._pace.seconds_per_evaluation is None else self._pace.seconds_per_evaluation,
            -remaining,
        ])
        per_step, per_evaluation = (None if value == unknown else value for value in (per_step, per_evaluation))
        remaining = -overdue
        cooldown = int(self._progress.cooldown_steps)
        new = plan_run_length(
            step, planned, cooldown, self._max_steps, self._cooldown_fraction, self._eval_every,
            seconds_per_step=per_step, seconds_per_evaluation=per_evaluation, remaining_seconds=remaining,
        )
        if new != planned:
            self._progress.set_plan(
                new, cooldown_for_new_end(step, planned, cooldown, new, self._cooldown_fraction)
            )
        line = None
        if new != self._reported_plan and (
            abs(new - self._reported_plan) >= max(1, 0.01 * self._max_steps) or new in (self._max_steps, step)
        ):
            line = describe_plan(step, new, self._max_steps, per_step, remaining)
            self._reported_plan = new
        return new, line
