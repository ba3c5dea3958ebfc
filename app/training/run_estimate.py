"""A run's wall time, start to finish, from what a rehearsal measured.

    schedule = run_schedule(train_config, total_steps, run_shapes=42)
    estimate = estimate_run(schedule, measured)
    estimate.low, estimate.seconds, estimate.high, estimate.parts

The run's time is the sum of what it does, each counted by the training loop's own rules
(`app.training.loop`): the start (imports, data, the model), the first call (tracing),
the first batch of each batch shape (an XLA compile under --jit; without it, the CPU
kernels' or GPU libraries' set-up for the shape), the steady updates, an evaluation every
`eval_every` steps and one at the end, a checkpoint every `checkpoint_every` steps and one
at the end, and a best checkpoint after each evaluation that improves. The range holds the
updates' sampling error (two standard errors of the mean step time), whether each
evaluation after the first saves a best checkpoint (none do, or all do), and 10% of the
whole for what varies between two starts of the same run.
"""

import dataclasses
from typing import Dict, Optional


# The range's allowance for what no rehearsal measures: the README's five-minute run,
# started three times on an idle machine, took 146, 155 and 165 s (docs/lab-notebook/
# 2026-11-28-preflight-estimate-against-the-run.md).
SAME_RUN_VARIATION = 0.1


@dataclasses.dataclass(frozen=True)
class RunSchedule:
    """What a run does, counted."""

    steps: int
    evaluations: int  # the final one included; 0 where the run has no validation
    checkpoints: int  # the final one included
    shapes: int  # distinct batch shapes the run meets (each costs more the first time)


@dataclasses.dataclass(frozen=True)
class Measured:
    """A rehearsal's figures the estimate is made of (seconds)."""

    startup_seconds: float  # process start to the first call: imports, data, model
    first_call_seconds: float
    first_call_steps: int
    first_call_shapes: int  # the batch shapes the first call met
    seconds_per_step: float
    step_time_error: float  # two standard errors of seconds_per_step
    seconds_per_new_shape: float  # what a shape's first batch costs beyond the steady pace
    checkpoint_seconds: float
    best_save_seconds: float
    first_evaluation_seconds: Optional[float]  # None: evaluations not measured
    evaluation_seconds: Optional[float]


@dataclasses.dataclass(frozen=True)
class RunEstimate:
    seconds: float
    low: float
    high: float
    parts: Dict[str, float]  # seconds of each part of `seconds`, in the order of the run
    evaluations_measured: bool


def run_schedule(train_config, total_steps, run_shapes, has_validation=True):
    """The `RunSchedule` of a run of `total_steps` updates under `train_config`'s cadences
    (`eval_every`, `checkpoint_every`; None or 0: never but at the end)."""
    eval_every, checkpoint_every = train_config.eval_every, train_config.checkpoint_every
    # The loop evaluates at each multiple of eval_every before the end, then once at the end.
    evaluations = ((total_steps - 1) // eval_every if eval_every else 0) + 1 if has_validation else 0
    # It saves at each multiple of checkpoint_every; the final save adds one unless the end is one.
    checkpoints = total_steps // checkpoint_every if checkpoint_every else 0
    if not (checkpoint_every and total_steps % checkpoint_every == 0):
        checkpoints += 1
    return RunSchedule(total_steps, evaluations, checkpoints, run_shapes)


def estimate_run(schedule, measured):
    """The `RunEstimate` of `schedule` at `measured`'s pace."""
    later_steps = max(schedule.steps - measured.first_call_steps, 0)
    parts = {
        "start": measured.startup_seconds,
        "first call": measured.first_call_seconds,
        "new shapes": measured.seconds_per_new_shape * max(schedule.shapes - measured.first_call_shapes, 0),
        "updates": later_steps * measured.seconds_per_step,
        "checkpoints": schedule.checkpoints * measured.checkpoint_seconds,
    }
    evaluated = measured.first_evaluation_seconds is not None
    extra_best_saves = 0.0
    if evaluated and schedule.evaluations:
        parts["evaluations"] = (
            measured.first_evaluation_seconds + (schedule.evaluations - 1) * measured.evaluation_seconds
        )
        extra_best_saves = (schedule.evaluations - 1) * measured.best_save_seconds
    seconds = sum(parts.values())
    spread = later_steps * measured.step_time_error + SAME_RUN_VARIATION * seconds
    return RunEstimate(
        seconds=seconds + extra_best_saves / 2, low=seconds - spread, high=seconds + extra_best_saves + spread,
        parts=parts, evaluations_measured=evaluated,
    )
