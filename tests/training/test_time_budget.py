"""The time budget: where a run ends (`app.training.time_budget`), and training under it.

The training runs here keep time on a fake clock that the data and the evaluations
advance (0.5 s a batch, 3 s an evaluation), so the run's end can be worked out by hand.
"""

import json

import numpy as np
import pytest
import tensorflow as tf

from app.model_dir import checkpoints
from app.training.schedule import WarmupInverseSqrt, cooldown_steps
from app.training.time_budget import (
    PaceMeter,
    cooldown_for_new_end,
    cooldown_has_begun,
    earliest_end_without_cooldown_yet,
    evaluations_before,
    longest_run_that_fits,
    plan_run_length,
    RunBudget,
)
from app.training.config import TrainConfig
from app.training.loop import train
from app.training.run_plan import RunPlan
from app.training.run_length import resumed_plan
from tests.training.helpers import checkpoint_weights, run_training, small_model_config

# ---------------------------------------------------------------------------------------
# Where the run ends.


@pytest.mark.parametrize("step", range(795, 810))
def test_the_cooldown_begins_where_the_schedule_first_lowers_the_rate(step):
    schedule = WarmupInverseSqrt(d_model=128, warmup_steps=100, total_steps=1000, cooldown_steps=200)
    paper = 128**-0.5 * step**-0.5
    annealed = float(schedule(step - 1)) < paper * (1 - 1e-6)
    assert cooldown_has_begun(step, 1000, 200) == annealed
    assert cooldown_has_begun(step, 1000, 200) == (step >= 802)
    assert not cooldown_has_begun(step, 1000, 0)  # no cooldown, never annealed


def test_evaluations_before_the_end_are_the_multiples_of_eval_every_in_between():
    assert evaluations_before(0, 9500, 1000) == 9  # 1000 .. 9000
    # Planned at step 1000's record, before the loop evaluates step 1000: still due.
    assert evaluations_before(1000, 9500, 1000) == 9
    assert evaluations_before(1001, 9500, 1000) == 8
    assert evaluations_before(999, 1000, 1000) == 0  # at the end only the final one
    assert evaluations_before(0, 1001, 1000) == 1
    assert evaluations_before(5, 100, 0) == 0


def test_the_longest_run_that_fits_leaves_time_for_every_evaluation():
    # cost(n) = 0.25 n + 30 (evaluations before n + the final one); 8 before any n in
    # 8001..9000: 0.25 n + 270 <= 2400 up to n = 8520, exactly.
    assert longest_run_that_fits(0, 9500, 0.25, 30.0, 1000, 2400.0) == 8520
    assert longest_run_that_fits(0, 9500, 0.25, 30.0, 1000, 2399.99) == 8519
    assert longest_run_that_fits(0, 9500, 0.25, 30.0, 1000, 1e9) == 9500  # never past the cap
    assert longest_run_that_fits(4000, 9500, 0.25, 30.0, 1000, 20.0) == 4000  # not even the final one


def test_the_earliest_end_keeps_every_update_taken_so_far_out_of_the_cooldown():
    # End n needs step <= n - round(0.2 n) + 1: 1001 - 200 + 1 = 802, 1000 - 200 + 1 = 801.
    assert earliest_end_without_cooldown_yet(802, 9500, 0.2) == 1001
    assert earliest_end_without_cooldown_yet(5000, 9500, 0.2) == 6249
    assert earliest_end_without_cooldown_yet(5000, 6000, 0.2) == 6000  # capped
    assert earliest_end_without_cooldown_yet(5000, 9500, 0.0) == 5000
    for fraction in (0.0, 0.1, 0.2, 0.5, 0.9):
        for step in range(0, 400, 7):
            end = earliest_end_without_cooldown_yet(step, 9500, fraction)
            assert not cooldown_has_begun(step, end, cooldown_steps(end, fraction))
            assert end == step or cooldown_has_begun(step, end - 1, cooldown_steps(end - 1, fraction))


def test_the_plan_shrinks_to_fit_and_grows_back_to_the_cap():
    def plan(step, planned, remaining, per_step=0.25, per_evaluation=30.0):
        return plan_run_length(step, planned, cooldown_steps(planned, 0.2), 9500, 0.2, 1000,
                               per_step, per_evaluation, remaining)

    # 0.25 (n - 2000) + 30 (evaluations at 2000..8000 + the final one) <= 1800: n = 8240.
    assert plan(2000, 9500, 1800.0) == 8240
    assert plan(2000, 8240, 1e9) == 9500  # faster after all: back to the configured length
    assert plan(2000, 9500, 1800.0, per_step=None) == 9500  # no pace yet: unchanged
    # Too little time for even a short cooldown: the shortest run that keeps it whole.
    assert plan(5000, 9500, 10.0) == 6249
    assert plan(5000, 9500, 0.0) == 5000  # the deadline has passed: end now
    assert plan(5000, 9500, -3.0) == 5000


def test_in_the_cooldown_the_plan_still_follows_the_pace():
    # Updates past 7601 of 9500 (cooldown 1900) were annealed. 100 s left: the final
    # evaluation and 280 steps, 0.25 (n - 7602) + 30 <= 100 for n up to 7882, where no
    # evaluation comes between (the next is at 8000).
    assert plan_run_length(7602, 9500, 1900, 9500, 0.2, 1000, 0.25, 30.0, 100.0) == 7882
    # Faster after all: the end stays, rather than stretch the cooldown under way.
    assert plan_run_length(7602, 7882, 1500, 9500, 0.2, 1000, 0.25, 30.0, 1e9) == 7882
    # Whatever the cooldown left, the deadline ends the run now.
    assert plan_run_length(7602, 9500, 1900, 9500, 0.2, 1000, 0.25, 30.0, 0.0) == 7602
    # A plan whose cooldown was re-sloped (1900 -> 1000, begun after update 8500 - 1000 + 1)
    # counts as begun by its own length: the end is not held back to 7700 / 0.8.
    assert plan_run_length(7700, 8500, 1000, 9500, 0.2, 1000, 0.25, 30.0, 100.0) == 7980


def test_a_new_end_before_the_cooldown_brings_the_cooldown_its_fraction_gives():
    assert cooldown_for_new_end(5000, 9500, 1900, 8240, 0.2) == 1648
    assert cooldown_for_new_end(7601, 9500, 1900, 8000, 0.2) == 1600  # 7601 not yet annealed


@pytest.mark.slow
def test_a_new_end_in_the_cooldown_re_slopes_it_from_the_last_rate_down():
    # Seed 1's float32 run (docs/lab-notebook/2026-11-21-en-de-the-default-command.md): the
    # end at 14,664 with a cooldown of 2,933, moved to 14,400 at step 14,000, where the
    # factor is 665 / 2,933.
    assert cooldown_for_new_end(14000, 14664, 2933, 14400, 0.2) == 1769  # ceil(401 * 2933 / 665)
    assert cooldown_for_new_end(14000, 14664, 2933, 14664, 0.2) == 2933  # the same end: unchanged
    assert cooldown_for_new_end(14000, 14664, 2933, 14000, 0.2) == 5  # ends now: ceil(2933 / 665)

    d_model = 64
    # The warmups end before the steps: from there the paper's rate only falls.
    for step, planned, cooldown, warmup in ((14000, 14664, 2933, 1280), (802, 1000, 200, 80),
                                            (13000, 16000, 3200, 1280), (3, 10, 10, 2)):
        paper = WarmupInverseSqrt(d_model, warmup)
        before = WarmupInverseSqrt(d_model, warmup, total_steps=planned, cooldown_steps=cooldown)
        for new_end in sorted({step, step + 1, (step + planned) // 2, planned - 1, planned}):
            new_cooldown = cooldown_for_new_end(step, planned, cooldown, new_end, 0.2)
            assert new_cooldown <= new_end
            after = WarmupInverseSqrt(d_model, warmup, total_steps=new_end, cooldown_steps=new_cooldown)
            # Still annealed, the factor of the last update taken rounded down by less
            # than one part in the new cooldown, and from there never up: no jump.
            assert cooldown_has_begun(step, new_end, new_cooldown)
            was = (planned - step + 1) / cooldown
            now = (new_end - step + 1) / new_cooldown
            assert was - 1 / new_cooldown < now <= was
            # Update u is the schedule's iteration u - 1.
            assert float(after(step - 1)) <= float(before(step - 1)) * (1 + 1e-6)
            rates = [float(after(i)) for i in range(step - 1, new_end)]
            assert all(later <= earlier * (1 + 1e-6) for earlier, later in zip(rates, rates[1:]))
            # The last update at 1 / new_cooldown of the paper's rate, as in every run.
            assert rates[-1] == pytest.approx(float(paper(new_end - 1)) / new_cooldown, rel=1e-5)
            assert float(after(new_end)) == 0.0
        with pytest.raises(ValueError, match=f"at step {step} can end from then to {planned}, not at {planned + 1}"):
            cooldown_for_new_end(step, planned, cooldown, planned + 1, 0.2)


def test_the_pace_is_the_mean_over_the_newest_records():
    pace = PaceMeter(window=2)
    assert pace.seconds_per_step is None
    pace.observe_steps(50, 100.0)
    assert pace.seconds_per_step is None
    for step, seconds in ((100, 120.0), (150, 130.0), (200, 150.0)):
        pace.observe_steps(step, seconds)
    assert pace.seconds_per_step == pytest.approx((150.0 - 120.0) / 100)  # records 100..200


def test_a_variable_run_length_gives_the_fixed_schedule_and_follows_its_variables():
    total, cooldown = tf.Variable(1000, dtype=tf.int64), tf.Variable(200, dtype=tf.int64)
    variable = WarmupInverseSqrt(d_model=128, warmup_steps=100, total_steps=total, cooldown_steps=cooldown)
    fixed = WarmupInverseSqrt(d_model=128, warmup_steps=100, total_steps=1000, cooldown_steps=200)
    rate = tf.function(lambda iteration: variable(iteration))
    for iteration in (0, 99, 500, 800, 801, 900, 999, 1000):
        assert float(rate(iteration)) == pytest.approx(float(fixed(iteration)), rel=1e-6)
    total.assign(500)
    cooldown.assign(100)
    shorter = WarmupInverseSqrt(d_model=128, warmup_steps=100, total_steps=500, cooldown_steps=100)
    for iteration in (300, 400, 401, 450, 499, 500):
        assert float(rate(iteration)) == pytest.approx(float(shorter(iteration)), rel=1e-6)
    cooldown.assign(0)  # no cooldown: the paper's rate to the end
    assert float(rate(499)) == pytest.approx(128**-0.5 * 500**-0.5, rel=1e-6)
    assert variable.get_config()["total_steps"] == 500
    with pytest.raises(ValueError, match="must be both ints or both variables, got ResourceVariable and int"):
        WarmupInverseSqrt(d_model=128, total_steps=total, cooldown_steps=200)


def test_a_resumed_run_keeps_a_moved_end_and_its_cooldown_only_once_the_cooldown_has_begun():
    budget = TrainConfig(train_steps=100, cooldown_fraction=0.2, time_budget_minutes=1.0)
    progress = checkpoints.Progress(60, 12)  # shortened to 60: updates past 49 annealed
    progress.step.assign(50)
    assert resumed_plan(budget, progress, 100) == (60, 12)
    progress.step.assign(49)
    assert resumed_plan(budget, progress, 100) == (100, 20)  # to be planned again
    progress.step.assign(50)
    no_budget = TrainConfig(train_steps=100, cooldown_fraction=0.2)
    assert resumed_plan(no_budget, progress, 100) == (100, 20)  # a length asked for is trained in full
    assert resumed_plan(budget, progress, 55) == (55, 11)  # a shorter --train-steps wins
    # A cooldown the run re-sloped (not 20% of its end) is kept as it is, and counts as
    # begun by its own length: updates past 60 - 30 + 1 = 31 annealed.
    progress = checkpoints.Progress(60, 30)
    progress.step.assign(40)
    assert resumed_plan(budget, progress, 100) == (60, 30)


# ---------------------------------------------------------------------------------------
# The budget of one invocation (`RunBudget`), on a fake clock.


def test_the_budget_replans_from_the_pace_of_the_slowest_worker_and_says_when_the_end_moves():
    # The run of test_a_budget_ends_the_run_in_time_with_its_cooldown_whole, by hand: 0.5 s
    # a step, 3 s for the evaluation at step 20, 30 s in all.
    clock, reduced = FakeClock(), []

    def over_workers(values):
        reduced.append(values)
        return values

    progress = checkpoints.Progress(100, 20)
    budget = RunBudget(0.5, 100, 0.2, 20, progress, over_workers, clock, started=0.0, seconds_before=0.0)
    clock.now = 2.5
    assert budget.replan(5, 100) == (100, None)  # no pace yet
    clock.now = 5.0
    assert budget.replan(10, 100) == (
        60, "time budget: the run ends at step 60 of 100 (0.500 s a step, 0.4 minutes left)"
    )
    assert [int(progress.planned_steps), int(progress.cooldown_steps)] == [60, 12]
    clock.now = 10.0
    with budget.evaluating():
        clock.now += 3.0
    clock.now = 15.5
    assert budget.replan(25, 60) == (
        42, "time budget: the run ends at step 42 of 100 (0.500 s a step, 0.2 minutes left)"
    )
    assert [int(progress.planned_steps), int(progress.cooldown_steps)] == [42, 8]
    clock.now = 18.0
    assert budget.replan(30, 42) == (42, None)  # unchanged: nothing to say
    # [seconds a step, seconds an evaluation, seconds overdue]; -1: not measured yet.
    assert reduced == [[-1.0, -1.0, -27.5], [0.5, -1.0, -25.0], [0.5, 3.0, -14.5], [0.5, 3.0, -12.0]]


def test_a_spent_budget_ends_the_run_at_once_and_counts_earlier_invocations():
    clock = FakeClock()
    progress = checkpoints.Progress(100, 20)
    # 20 of the 30 seconds spent before this invocation, which began at 100 on its clock.
    budget = RunBudget(0.5, 100, 0.2, 20, progress, lambda values: values, clock, started=100.0, seconds_before=20.0)
    clock.now = 111.0
    assert budget.replan(30, 100) == (30, "time budget spent at step 30: training ends here (pace not measured yet)")
    assert [int(progress.planned_steps), int(progress.cooldown_steps)] == [30, 6]


def test_moves_of_the_end_under_1_percent_of_the_run_go_unsaid_but_the_full_length_again_is_said():
    clock = FakeClock()
    clock.now = 40.0  # 560 of the 600 seconds left
    progress = checkpoints.Progress(1000, 0)
    paces = iter([0.95, 0.94, 0.93])

    def over_workers(values):  # the slowest worker's pace: these
        return [next(paces), values[1], values[2]]

    budget = RunBudget(10.0, 1000, 0.0, 0, progress, over_workers, clock, started=0.0, seconds_before=0.0)
    assert budget.replan(400, 1000) == (
        989, "time budget: the run ends at step 989 of 1000 (0.950 s a step, 9.3 minutes left)"
    )
    assert budget.replan(400, 989) == (995, None)  # 6 steps from the end last said
    assert int(progress.planned_steps) == 995
    assert budget.replan(400, 995) == (1000, "time budget: all 1000 steps fit (0.930 s a step, 9.3 minutes left)")


# ---------------------------------------------------------------------------------------
# Training under a budget.


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class BatchesThatTakeTime:
    """`data` whose training batches each advance `clock` when they are taken.

    With no prefetching, `Dataset.from_generator` runs the generator only when the loop
    asks for the next batch, so the clock reads `seconds_per_batch` times the steps taken.
    `seconds_per_batch` may also be a function of the batch's number (from 1, counted
    over epochs and resumed runs alike: a machine that slows down).
    """

    def __init__(self, data, clock, seconds_per_batch):
        self._data, self._clock = data, clock
        self._seconds = seconds_per_batch if callable(seconds_per_batch) else lambda number: seconds_per_batch
        self._taken = 0

    def __getattr__(self, name):
        return getattr(self._data, name)

    def train_batches(self, epoch, seed, skip=0, both_directions=False):
        batches = self._data.train_batches(epoch, seed=seed, skip=skip, both_directions=both_directions)

        def generate():
            for batch in batches:
                self._taken += 1
                self._clock.now += self._seconds(self._taken)
                yield batch

        options = tf.data.Options()
        options.experimental_optimization.inject_prefetch = False  # no batch taken ahead
        dataset = tf.data.Dataset.from_generator(generate, output_signature=batches.element_spec)
        return dataset.with_options(options)


def budgeted_run(data, model_dir, evaluate_fn=None, seconds_per_batch=0.5, **overrides):
    """100 steps asked for, a 30-second budget; batches take 0.5 s, evaluations 3 s."""
    clock = FakeClock()

    def evaluate(transformer):
        clock.now += 3.0
        return evaluate_fn(transformer) if evaluate_fn else {}

    fields = dict(train_steps=100, warmup_steps=2, cooldown_fraction=0.2, eval_every=20, log_every=5,
                  checkpoint_every=10, seed=3, time_budget_minutes=0.5)
    fields.update(overrides)
    batches = BatchesThatTakeTime(data, clock, seconds_per_batch)
    result = train(
        RunPlan(size="tiny", variant=None, model_dir=str(model_dir), model_config=small_model_config(data),
                data_config=data.config, train_config=TrainConfig(**fields)),
        batches, tf.distribute.get_strategy(), evaluate, log=lambda *_: None, started=0.0, clock=clock,
    )
    return result


@pytest.fixture(scope="module")
def uninterrupted(small_data, tmp_path_factory):
    """`uninterrupted(cooldown_fraction) -> (result, model_dir)` of `budgeted_run`, run once
    per fraction for this file's tests, which only read it."""
    runs = {}

    def run(cooldown_fraction):
        if cooldown_fraction not in runs:
            model_dir = tmp_path_factory.mktemp("uninterrupted")
            result = budgeted_run(small_data, model_dir, cooldown_fraction=cooldown_fraction)
            runs[cooldown_fraction] = result, model_dir
        return runs[cooldown_fraction]

    return run


@pytest.mark.slow
def test_a_budget_ends_the_run_in_time_with_its_cooldown_whole(small_data, uninterrupted):
    result, model_dir = uninterrupted(0.2)
    # By hand: at step 10 the pace is known (0.5 s) and 25 s are left, for 50 more steps:
    # end 60. The evaluation at 20 takes 3 s; at step 25, 14.5 s left: 15 s of steps to
    # 40, the evaluation there and the final one, 2 more steps: end 42, cooldown 8. From
    # step 36 the cooldown has begun; at a steady pace the end stays. 42 steps and 3
    # evaluations spend 21 + 9 s, the whole budget.
    assert result["step"] == 42
    assert result["seconds"] == 30.0
    records = [json.loads(line) for line in open(model_dir / "metrics.jsonl")]
    assert [(r["step"], r["planned_steps"]) for r in records if "planned_steps" in r] == [(10, 60), (25, 42)]
    rates = [(r["step"], r["learning_rate"]) for r in records if "learning_rate" in r]
    # The schedule followed the plan: the 42nd update, the last, was made at an eighth
    # of the decayed rate (a cooldown of 8), one more would be made at zero, and after
    # the warmup the rate never rose.
    d_model = small_model_config(small_data).d_model
    schedule = WarmupInverseSqrt(d_model, 2, 1.0, total_steps=42, cooldown_steps=8)
    without_cooldown = WarmupInverseSqrt(d_model, 2, 1.0)
    assert rates[-1][0] == 42 and rates[-1][1] == pytest.approx(float(without_cooldown(41)) / 8, rel=1e-6)
    assert float(schedule(42)) == 0.0
    assert all(later <= earlier for (_, earlier), (_, later) in zip(rates, rates[1:]))


@pytest.mark.slow
def test_a_cooldown_under_way_is_re_sloped_to_end_in_time(small_data, tmp_path, uninterrupted):
    # A cooldown over half the run: at step 25 the end that fits (42) would have begun
    # it, so the plan holds the earliest end that has not (48, cooldown 24). At step 30
    # the cooldown has begun (updates past 25 annealed) and 12 s are left: 6 s of steps
    # to 42 with the evaluations at 40 and the end. The end moves to 42, and the cooldown
    # is re-sloped: update 30's factor, 19 / 24, becomes 13 / ceil(13 * 24 / 19) = 13 / 17,
    # falling from there to 1 / 17 at step 42. Kept at 48, the run would have spent 33 s.
    steady, steady_dir = uninterrupted(0.5)
    assert (steady["step"], steady["seconds"]) == (42, 30.0)
    # The machine slows to 1 s a batch after the 30th. At step 35 the pace over steps 5
    # to 35 is 17.5 / 30 s and 7 s are left: the end moves to 40, and update 35's factor,
    # 8 / 17, becomes 6 / ceil(6 * 17 / 8) = 6 / 13. With the end fixed once the cooldown began, the
    # deadline would have stopped it at step 45, 9 s late, at 4 / 24 of the rate.
    slowed = budgeted_run(small_data, tmp_path / "slowed", cooldown_fraction=0.5,
                          seconds_per_batch=lambda number: 0.5 if number <= 30 else 1.0)
    assert (slowed["step"], slowed["seconds"]) == (40, 31.0)  # the pace is measured late
    d_model = small_model_config(small_data).d_model
    without_cooldown = WarmupInverseSqrt(d_model, 2, 1.0)
    for model_dir, run, plans, last_cooldown in (
        (steady_dir, steady, [(10, 60), (25, 48), (30, 42)], 17),
        (tmp_path / "slowed", slowed, [(10, 60), (25, 48), (30, 42), (35, 40)], 13),
    ):
        records = [json.loads(line) for line in open(model_dir / "metrics.jsonl")]
        assert [(r["step"], r["planned_steps"]) for r in records if "planned_steps" in r] == plans
        rates = [(r["step"], r["learning_rate"]) for r in records if "learning_rate" in r]
        # The last update at 1 / cooldown of the decayed rate, and after the warmup the
        # rate never rose: it fell to the new end without a jump.
        assert rates[-1][0] == run["step"]
        assert rates[-1][1] == pytest.approx(float(without_cooldown(run["step"] - 1)) / last_cooldown, rel=1e-6)
        assert all(later <= earlier for (_, earlier), (_, later) in zip(rates, rates[1:]))


@pytest.mark.slow
@pytest.mark.parametrize("cooldown_fraction", [0.2, 0.5])
def test_a_budgeted_run_resumed_after_a_crash_ends_where_it_would_have(
    small_data, tmp_path, uninterrupted, cooldown_fraction
):
    # With a cooldown over half the run, the end and the cooldown resumed are those the
    # run re-sloped at step 30 (42 and 17, not 21), as the test above works out.
    straight, _ = uninterrupted(cooldown_fraction)
    evaluations = iter([{}, RuntimeError("simulated crash")])

    def crash_at_step_40(transformer):
        outcome = next(evaluations)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    with pytest.raises(RuntimeError, match="simulated crash"):
        budgeted_run(small_data, tmp_path / "resumed", crash_at_step_40, cooldown_fraction=cooldown_fraction)
    # Step 40's checkpoint holds the end (42) and the 23 s spent; the cooldown has begun.
    resumed = budgeted_run(small_data, tmp_path / "resumed", cooldown_fraction=cooldown_fraction)
    assert resumed["step"] == straight["step"] == 42
    assert resumed["seconds"] == 23.0 + 1.0 + 3.0  # two steps and the final evaluation
    expected, actual = checkpoint_weights(straight["checkpoint"]), checkpoint_weights(resumed["checkpoint"])
    assert expected.keys() == actual.keys() and expected
    for name in expected:
        np.testing.assert_allclose(actual[name], expected[name], atol=1e-6, err_msg=name)
    # Run once more, the command finds the run finished and trains no further.
    assert budgeted_run(small_data, tmp_path / "resumed", cooldown_fraction=cooldown_fraction)["step"] == 42


@pytest.mark.slow
def test_a_budget_that_fits_the_run_changes_nothing(small_data, tmp_path):
    plain = run_training(small_data, tmp_path / "plain", cooldown_fraction=0.5)
    budgeted = run_training(small_data, tmp_path / "budgeted", cooldown_fraction=0.5, time_budget_minutes=60.0)
    assert budgeted["step"] == plain["step"] == 6
    expected, actual = checkpoint_weights(plain["checkpoint"]), checkpoint_weights(budgeted["checkpoint"])
    for name in expected:
        np.testing.assert_array_equal(actual[name], expected[name], err_msg=name)


@pytest.mark.slow
def test_a_spent_budget_stops_training_at_the_next_record(small_data, tmp_path):
    result = budgeted_run(small_data, tmp_path, time_budget_minutes=0.05)  # 3 s: 6 batches
    # At step 5 (2.5 s) no pace is known yet; at step 10 (5 s) the deadline has passed.
    assert result["step"] == 10
