"""The optimizer: the paper's Adam on its warmup / inverse-square-root schedule, and the
learning rate of the update it made last."""

import keras
from keras import ops

from app.model.config import ModelConfig
from app.training.config import TrainConfig
from app.training.fused_adam import NOT_DECAYED, FusedAdam
from app.training.schedule import WarmupInverseSqrt


def make_optimizer(model_config: ModelConfig, config: TrainConfig, total_steps, progress=None):
    """Adam(0.9, 0.98, 1e-9), fused (`app.training.fused_adam`), on the warmup / inverse-square-
    root schedule, with the configured share of `total_steps` at the end annealed
    linearly to zero; with `config.weight_decay`, AdamW's decay of the weight matrices.

    With a `checkpoints.Progress`, the schedule reads the run's length from its
    variables instead, so that a time budget can move the end; the warmup stays that of
    `total_steps`.
    """
    length = dict(total_steps=total_steps, cooldown_steps=config.resolved_cooldown(total_steps))
    if progress is not None:
        length = dict(total_steps=progress.planned_steps, cooldown_steps=progress.cooldown_steps)
    schedule = WarmupInverseSqrt(
        model_config.d_model, config.resolved_warmup(total_steps), config.learning_rate_scale, **length
    )
    optimizer = FusedAdam(
        schedule,
        beta_1=config.adam_beta_1,
        beta_2=config.adam_beta_2,
        epsilon=config.adam_epsilon,
        weight_decay=config.weight_decay or None,
    )
    if config.weight_decay:
        optimizer.exclude_from_weight_decay(var_names=NOT_DECAYED)
    if config.precision == "mixed_float16":
        # float16 gradients underflow without scaling; bfloat16 has float32's range.
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer


def last_learning_rate(optimizer):
    """The rate of the update just made, a float32 scalar tensor (made in the graph when called
    inside a `tf.function`). The optimizer's `learning_rate` is already the next update's:
    its schedule reads the count of updates made so far."""
    inner = optimizer.inner_optimizer if hasattr(optimizer, "inner_optimizer") else optimizer
    schedule = inner._learning_rate  # Keras keeps the schedule there, without a public name
    if isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
        return ops.cast(schedule(inner.iterations - 1), "float32")
    return ops.cast(inner.learning_rate, "float32")
