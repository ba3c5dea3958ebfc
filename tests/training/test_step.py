"""The distributed steps (`app.training.step`): accumulation's gradient, one trace for every batch shape."""


import keras
import numpy as np
import pytest
import tensorflow as tf

import app.training.loop
import app.training.step
from app.model.config import ModelConfig
from app.model.transformer import build_transformer
from app.training.losses import summed_loss
from app.training.step import make_eval_step, make_train_step
from tests.training.helpers import run_training

# Why the fast tier runs no test of this file (tests/tiers.py).
ALL_SLOW_BECAUSE = "each test traces and runs distributed training steps"


@pytest.mark.slow
def test_accumulated_micro_batches_give_the_gradient_of_their_combined_token_mean():
    config = ModelConfig.from_size("tiny", vocab_size=30, num_layers=1, d_model=16, d_ff=32, num_heads=2, dropout=0.0)
    model = build_transformer(config)
    rng = np.random.default_rng(0)
    first = (rng.integers(3, 30, (2, 5)).astype("int32"), rng.integers(3, 30, (2, 6)).astype("int32"))
    second = (rng.integers(3, 30, (4, 3)).astype("int32"), rng.integers(3, 30, (4, 4)).astype("int32"))
    second[1][:, -1] = 0  # some padding in the targets

    with tf.GradientTape() as tape:
        losses = [summed_loss(t[:, 1:], model([s, t[:, :-1]], training=True), 0.1) for s, t in (first, second)]
        reference = (losses[0][0] + losses[1][0]) / (losses[0][1] + losses[1][1])
    grads = tape.gradient(reference, model.trainable_variables)
    expected = [np.asarray(v) - np.asarray(tf.convert_to_tensor(g)) for v, g in zip(model.trainable_variables, grads)]

    optimizer = keras.optimizers.SGD(learning_rate=1.0)
    step = make_train_step(model, optimizer, tf.distribute.get_strategy(), 0.1, accumulate=2)
    loss_sum, tokens = step((first, second))
    assert float(tokens) == float(losses[0][1] + losses[1][1])
    assert float(loss_sum) == pytest.approx(float(losses[0][0] + losses[1][0]), rel=1e-5)
    for variable, want in zip(model.trainable_variables, expected):
        np.testing.assert_allclose(np.asarray(variable), want, atol=1e-6)


@pytest.mark.slow
def test_with_a_batch_spec_one_trace_of_each_step_serves_every_batch_shape():
    config = ModelConfig.from_size("tiny", vocab_size=30, num_layers=1, d_model=16, d_ff=32, num_heads=2, dropout=0.0)
    model = build_transformer(config)
    strategy = tf.distribute.get_strategy()
    spec = (tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None, None], tf.int32))
    train_step = make_train_step(model, keras.optimizers.SGD(0.0), strategy, 0.1, accumulate=2, batch_spec=spec)
    eval_step = make_eval_step(model, strategy, 0.1, batch_spec=spec)
    rng = np.random.default_rng(0)
    for rows, source_length, target_length in [(2, 5, 6), (2, 7, 6), (8, 3, 4), (1, 9, 12)]:
        batch = tuple(rng.integers(3, 30, (rows, n)).astype("int32") for n in (source_length, target_length))
        train_step((batch, batch))
        eval_step(batch)
    assert train_step.experimental_get_tracing_count() == 1
    assert eval_step.experimental_get_tracing_count() == 1


@pytest.mark.slow
def test_a_run_traces_its_training_and_evaluation_steps_once(small_data, tmp_path, monkeypatch):
    # Traced again per new pattern of shapes, the two steps (one closure) reached the five
    # traces of TensorFlow's "triggered tf.function retracing" warning at a run's first
    # evaluation whenever its first batches differed in shape, as at base's batch size.
    # The training steps take each epoch's iterator, and a count of updates that varies.
    steps = []
    summed_over_replicas, make_train_steps = app.training.step._summed_over_replicas, app.training.loop.make_train_steps

    def keep(make):
        def made(*args, **kwargs):
            steps.append(make(*args, **kwargs))
            return steps[-1]

        return made

    monkeypatch.setattr(app.training.loop, "make_train_steps", keep(make_train_steps))
    monkeypatch.setattr(app.training.step, "_summed_over_replicas", keep(summed_over_replicas))
    # 33 batches an epoch, 2 an update: epoch 0 ends at step 16, after a call cut short.
    result = run_training(small_data, tmp_path, train_steps=18, eval_every=3, accumulate=2, steps_per_loop=4)
    assert result["step"] == 18 and len(small_data.train_plan(0, 3)) == 33
    plans = [small_data.train_plan(0, 3), small_data.eval_plan("validation")]
    shapes = [set(zip(plan.rows, plan.source_lengths, plan.target_lengths)) for plan in plans]
    assert len(shapes[0]) > 3 and len(shapes[1]) > 3  # shapes enough to have been traced again
    assert [step.experimental_get_tracing_count() for step in steps] == [1, 1]
