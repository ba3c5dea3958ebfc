"""app/training/run_estimate.py: a run's wall time from a rehearsal's figures, counted by
the training loop's own cadences."""

import pytest

from app.training.config import TrainConfig
from app.training.run_estimate import Measured, RunSchedule, estimate_run, run_schedule


def test_evaluations_and_checkpoints_are_counted_as_the_loop_makes_them():
    # Evaluations at 100 and 200 (not at 300: the end's own one is made instead), then at
    # the end; checkpoints at 50, 100, ..., 300, the final save being the one at 300.
    config = TrainConfig(train_steps=300, eval_every=100, checkpoint_every=50)
    assert run_schedule(config, 300, run_shapes=7) == RunSchedule(300, 3, 6, 7)
    # 310 steps: evaluations at 100, 200, 300 and the end; checkpoints at 50..300 and the end.
    assert run_schedule(config, 310, run_shapes=7) == RunSchedule(310, 4, 7, 7)
    # Neither cadence: only the end's evaluation and checkpoint.
    neither = TrainConfig(train_steps=40, eval_every=None, checkpoint_every=None)
    assert run_schedule(neither, 40, 1) == RunSchedule(40, 1, 1, 1)
    assert run_schedule(config, 300, 7, has_validation=False).evaluations == 0


def _measured(**overrides):
    fields = dict(
        startup_seconds=10.0, first_call_seconds=30.0, first_call_steps=10, first_call_shapes=3,
        seconds_per_step=2.0, step_time_error=0.1, seconds_per_new_shape=0.0, checkpoint_seconds=4.0,
        best_save_seconds=1.5, first_evaluation_seconds=20.0, evaluation_seconds=8.0,
    )
    fields.update(overrides)
    return Measured(**fields)


def test_the_estimate_adds_each_part_of_the_run_and_its_range_holds_the_uncertain_ones():
    estimate = estimate_run(RunSchedule(300, 3, 6, 7), _measured())
    assert estimate.parts == {
        "start": 10.0, "first call": 30.0, "new shapes": 0.0, "updates": 290 * 2.0, "checkpoints": 6 * 4.0,
        "evaluations": 20.0 + 2 * 8.0,
    }
    made = 10 + 30 + 580 + 24 + 36
    # Low: the mean step two standard errors faster, no best checkpoint after the first
    # evaluation; high: two standard errors slower, one after each of the other two; and
    # 10% of the whole either way.
    assert estimate.low == pytest.approx(made - 290 * 0.1 - 0.1 * made)
    assert estimate.high == pytest.approx(made + 2 * 1.5 + 290 * 0.1 + 0.1 * made)
    assert estimate.seconds == made + 1.5 and estimate.evaluations_measured


def test_every_shape_the_first_call_did_not_meet_costs_its_first_batch_once():
    estimate = estimate_run(RunSchedule(300, 3, 6, 7), _measured(seconds_per_new_shape=5.0))
    assert estimate.parts["new shapes"] == (7 - 3) * 5.0


def test_without_measured_evaluations_the_estimate_says_so_and_leaves_them_out():
    estimate = estimate_run(
        RunSchedule(300, 3, 6, 7), _measured(first_evaluation_seconds=None, evaluation_seconds=None)
    )
    assert "evaluations" not in estimate.parts and not estimate.evaluations_measured
    assert estimate.seconds == pytest.approx(10 + 30 + 580 + 24)
