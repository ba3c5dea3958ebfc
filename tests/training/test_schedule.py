"""The learning-rate schedule: the paper's warmup and inverse square root, the cooldown,
the warmup's default (`app.training.schedule`)."""

import re

import pytest
import tensorflow as tf

from app.training.config import TrainConfig
from app.training.schedule import WarmupInverseSqrt, cooldown_steps, default_warmup_steps, resolve_warmup_steps


@pytest.mark.parametrize("step", [1, 100, 3999, 4000, 4001, 100_000])
def test_schedule_equals_the_papers_formula(step):
    schedule = WarmupInverseSqrt(d_model=512, warmup_steps=4000)
    expected = 512**-0.5 * min(step**-0.5, step * 4000**-1.5)
    # Keras passes the 0-based iteration count; the paper's step counts from 1.
    assert float(schedule(step - 1)) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("step", [1, 50, 799, 800, 801, 900, 999, 1000])
def test_cooldown_falls_linearly_to_the_runs_end(step):
    schedule = WarmupInverseSqrt(d_model=128, warmup_steps=100, total_steps=1000, cooldown_steps=200)
    paper = 128**-0.5 * min(step**-0.5, step * 100**-1.5)
    # 1 until step 801, then 200/200, 199/200, ..., 1/200 at the last update.
    factor = min(1.0, (1000 - step + 1) / 200)
    assert float(schedule(step - 1)) == pytest.approx(paper * factor, rel=1e-6)


def test_schedule_scale_multiplies_it_and_survives_its_config():
    schedule = WarmupInverseSqrt(d_model=512, warmup_steps=4000, scale=2.5, total_steps=9000, cooldown_steps=100)
    assert float(schedule(99)) == pytest.approx(2.5 * 512**-0.5 * 100 * 4000**-1.5, rel=1e-6)
    config = schedule.get_config()
    assert config == dict(d_model=512, warmup_steps=4000, scale=2.5, total_steps=9000, cooldown_steps=100)
    assert WarmupInverseSqrt.from_config(config).get_config() == config


def test_a_variable_run_length_without_cooldown_never_lowers_the_rate():
    # Past total_steps too: cooldown(step) is 1 whenever cooldown_steps is 0.
    schedule = WarmupInverseSqrt(
        d_model=128, warmup_steps=10, total_steps=tf.Variable(5), cooldown_steps=tf.Variable(0)
    )
    assert float(schedule(19)) == pytest.approx(128**-0.5 * 20**-0.5, rel=1e-6)


def test_the_cooldown_is_the_rounded_share_of_the_run():
    assert cooldown_steps(1000, 0.2558) == 256  # 255.8
    assert cooldown_steps(9000, 0.25) == 2250


@pytest.mark.parametrize(
    "arguments, message",
    [
        (dict(warmup_steps=0), "warmup_steps must be at least 1, got 0"),
        (dict(total_steps=100, cooldown_steps=-1), "cooldown_steps must not be negative, got -1"),
    ],
)
def test_schedule_rejects_bad_settings_by_name(arguments, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        WarmupInverseSqrt(d_model=128, **arguments)


def test_cooldown_needs_a_run_at_least_as_long():
    with pytest.raises(
        ValueError, match="cooldown_steps=200 needs a run of at least that many steps, got total_steps=100"
    ):
        WarmupInverseSqrt(d_model=128, warmup_steps=10, total_steps=100, cooldown_steps=200)
    with pytest.raises(ValueError, match="cooldown_fraction must be between 0 and 1, got 1.5"):
        TrainConfig(train_steps=10, cooldown_fraction=1.5)
    assert TrainConfig(train_steps=9000, cooldown_fraction=0.25).resolved_cooldown(9000) == 2250


def test_default_warmup_rounds_8_percent_and_caps_at_the_papers_4000():
    # app.training.schedule.default_warmup_steps is the rule train.py and benchmarks/gpu/train_jax.py
    # share: rounded, not truncated (1,031 steps -> 82.48 -> 82; 1,037 -> 82.96 -> 83),
    # at least one step, and the paper's 4,000 from 50,000 steps on or for a run of
    # unknown length.
    assert default_warmup_steps(16_000) == 1280  # tiny's default
    assert default_warmup_steps(1031) == 82
    assert default_warmup_steps(1037) == 83
    assert default_warmup_steps(6) == 1
    assert default_warmup_steps(49_000) == 3920
    assert default_warmup_steps(300_000) == 4000
    assert default_warmup_steps(None) == 4000


def test_an_explicit_warmup_wins_and_zero_means_one_step():
    # resolve_warmup_steps is what both train.py and train_jax.py call; train_jax once read
    # `warmup_steps or default`, which turned an explicit 0 into the default 8%.
    assert resolve_warmup_steps(None, 16_000) == 1280
    assert resolve_warmup_steps(10, 16_000) == 10
    assert resolve_warmup_steps(0, 16_000) == 1
    assert resolve_warmup_steps(6000, 1000) == 6000  # asked for, so not capped
