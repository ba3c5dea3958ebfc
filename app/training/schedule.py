"""The paper's learning-rate schedule: linear warmup, then inverse square root decay.

Optionally followed by a linear cooldown to zero over the last steps of a run of known
length: with a fixed budget of steps, annealing the learning rate at the end makes the
most of the last steps (tiny's recipe: docs/training.md, "The recipe").
"""

import keras
from keras import ops


def default_warmup_steps(total_steps):
    """The warmup when none is asked for: the paper's 4,000 steps, or 8% of a shorter run.

    A run of unknown length (trained by epochs, before its length is known) gets 4,000.
    """
    if not total_steps:
        return 4000
    return max(1, min(4000, round(0.08 * total_steps)))


def resolve_warmup_steps(requested, total_steps):
    """The warmup a run uses: the one asked for (0 means none, which the schedule makes 1),
    or `default_warmup_steps` when none was asked for (None)."""
    if requested is not None:
        return max(1, requested)
    return default_warmup_steps(total_steps)


def cooldown_steps(total_steps, cooldown_fraction):
    """The updates at the end of a `total_steps` run over which the learning rate falls."""
    return round(cooldown_fraction * total_steps)


@keras.saving.register_keras_serializable(package="transformer")
class WarmupInverseSqrt(keras.optimizers.schedules.LearningRateSchedule):
    """lr(step) = scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) * cooldown(step).

    `step` counts optimizer updates from 1; Keras passes the 0-based iteration count, so
    the schedule adds one. The peak, at step = warmup, is scale * (d_model * warmup)^-0.5.
    cooldown(step) is 1 except over the last `cooldown_steps` updates of a run of
    `total_steps`, where it falls linearly: (total_steps - step + 1) / cooldown_steps,
    so the last update has 1 / cooldown_steps of the paper's rate.

    Args:
        d_model: the model width.
        warmup_steps: steps of linear warmup (the paper: 4000).
        scale: a multiplier on the whole schedule (the paper: 1).
        total_steps: the run's length in updates; needed only for a cooldown.
        cooldown_steps: updates of linear decay at the end (the paper: 0, none).

    `total_steps` and `cooldown_steps` may also be integer `tf.Variable`s, read at every
    update: a time budget (`app.training.time_budget`) moves the run's end while it trains.
    """

    def __init__(self, d_model, warmup_steps=4000, scale=1.0, total_steps=None, cooldown_steps=0):
        if warmup_steps < 1:
            raise ValueError(f"warmup_steps must be at least 1, got {warmup_steps}")
        variable_length = not isinstance(total_steps, (int, type(None)))
        if variable_length != (not isinstance(cooldown_steps, int)):
            raise ValueError(
                "total_steps and cooldown_steps must be both ints or both variables, got "
                f"{type(total_steps).__name__} and {type(cooldown_steps).__name__}"
            )
        # Variables change while training (app.training.time_budget keeps them consistent); ints are
        # checked here.
        if not variable_length and cooldown_steps < 0:
            raise ValueError(f"cooldown_steps must not be negative, got {cooldown_steps}")
        if not variable_length and cooldown_steps and (total_steps is None or cooldown_steps > total_steps):
            raise ValueError(
                f"cooldown_steps={cooldown_steps} needs a run of at least that many steps, "
                f"got total_steps={total_steps}"
            )
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.scale = scale
        self.total_steps = total_steps
        self.cooldown_steps = cooldown_steps

    def __call__(self, iteration):
        step = ops.cast(iteration, "float32") + 1.0
        decay = ops.minimum(ops.rsqrt(step), step * self.warmup_steps**-1.5)
        rate = self.scale * self.d_model**-0.5 * decay
        if isinstance(self.cooldown_steps, int):
            if self.cooldown_steps:
                remaining = (self.total_steps - step + 1.0) / self.cooldown_steps
                rate = rate * ops.clip(remaining, 0.0, 1.0)
            return rate
        total = ops.cast(self.total_steps, "float32")
        cooldown = ops.cast(self.cooldown_steps, "float32")
        remaining = (total - step + 1.0) / ops.maximum(cooldown, 1.0)
        return rate * ops.where(cooldown > 0, ops.clip(remaining, 0.0, 1.0), 1.0)

    def get_config(self):
        return {
            "d_model": self.d_model,
            "warmup_steps": self.warmup_steps,
            "scale": self.scale,
            # A variable length is saved as its value now.
            "total_steps": _integer(self.total_steps),
            "cooldown_steps": _integer(self.cooldown_steps),
        }


def _integer(value):
    return value if value is None or isinstance(value, int) else int(value.numpy())
