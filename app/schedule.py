"""The paper's learning-rate schedule: linear warmup, then inverse square root decay."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="transformer")
class WarmupInverseSqrt(keras.optimizers.schedules.LearningRateSchedule):
    """lr(step) = scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5).

    `step` counts optimizer updates from 1; Keras passes the 0-based iteration count, so
    the schedule adds one. The peak, at step = warmup, is scale * (d_model * warmup)^-0.5.

    Args:
        d_model: the model width.
        warmup_steps: steps of linear warmup (the paper: 4000).
        scale: a multiplier on the whole schedule (the paper: 1).
    """

    def __init__(self, d_model, warmup_steps=4000, scale=1.0):
        if warmup_steps < 1:
            raise ValueError(f"warmup_steps must be at least 1, got {warmup_steps}")
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.scale = scale

    def __call__(self, iteration):
        step = ops.cast(iteration, "float32") + 1.0
        decay = ops.minimum(ops.rsqrt(step), step * self.warmup_steps**-1.5)
        return self.scale * self.d_model**-0.5 * decay

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale}
