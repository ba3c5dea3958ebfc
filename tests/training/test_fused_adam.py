"""FusedAdam against Keras's Adam: the same updates, state and checkpoints."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from app.training.fused_adam import FusedAdam


def _variables(matrix_dtype="float32"):
    rng = np.random.default_rng(0)
    return [
        keras.Variable(rng.normal(size=(6, 4)).astype(matrix_dtype), name="matrix"),
        keras.Variable(rng.normal(size=(4,)).astype("float32"), name="vector"),
        keras.Variable(rng.normal(size=(10, 3)).astype("float32"), name="table"),
    ]


def _gradients(step, rows, dense_table, matrix_dtype="float32"):
    rng = np.random.default_rng(100 + step)
    table = tf.IndexedSlices(  # An embedding's gradient: the rows looked up.
        tf.constant(rng.normal(size=(len(rows), 3)).astype("float32")), tf.constant(rows), tf.constant([10, 3])
    )
    return [
        tf.constant(rng.normal(size=(6, 4)).astype(matrix_dtype)),
        # A gradient of a few hundredths, and one exact zero, where epsilon matters.
        tf.constant((rng.normal(size=(4,)) * 0.03).astype("float32") * np.array([1, 1, 0, 1], "float32")),
        tf.convert_to_tensor(table) if dense_table else table,
    ]


def _train(optimizer_class, steps=5, rows=(1, 7, 4), dense_table=False, amsgrad=False, matrix_dtype="float32"):
    variables = _variables(matrix_dtype)
    schedule = keras.optimizers.schedules.ExponentialDecay(0.01, decay_steps=2, decay_rate=0.5)
    optimizer = optimizer_class(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9, amsgrad=amsgrad)
    optimizer.build(variables)

    @tf.function
    def apply(gradients):
        optimizer.apply(gradients, variables)

    for step in range(steps):
        apply(_gradients(step, list(rows), dense_table, matrix_dtype))
    graph = apply.get_concrete_function(_gradients(0, list(rows), dense_table, matrix_dtype)).graph
    optimizer.fused_updates = sum(op.type == "ResourceApplyAdam" for op in graph.get_operations())
    return variables, optimizer


def test_updates_and_moments_equal_keras_adam():
    ours, ours_optimizer = _train(FusedAdam)
    theirs, theirs_optimizer = _train(keras.optimizers.Adam)
    assert int(ours_optimizer.iterations) == int(theirs_optimizer.iterations) == 5
    assert (ours_optimizer.fused_updates, theirs_optimizer.fused_updates) == (3, 0)  # one op per variable
    for a, b, initial in zip(ours, theirs, _variables()):
        assert not np.allclose(np.asarray(a), np.asarray(initial))  # they moved
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)
    for a, b in zip(ours_optimizer.variables, theirs_optimizer.variables):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-12)  # float32 rounding


@pytest.mark.parametrize(
    "setting, fused_updates",
    [(dict(amsgrad=True), 0), (dict(matrix_dtype="float64"), 2)],
    ids=["amsgrad", "float64_variable"],
)
def test_amsgrad_and_other_dtypes_take_keras_path(setting, fused_updates):
    # ResourceApplyAdam knows no AMSGrad, and takes moments of the variable's dtype.
    ours, ours_optimizer = _train(FusedAdam, dense_table=True, **setting)
    theirs, _ = _train(keras.optimizers.Adam, dense_table=True, **setting)
    assert ours_optimizer.fused_updates == fused_updates
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)


def test_a_row_looked_up_twice_is_updated_by_its_summed_gradient():
    # The true gradient of a row looked up twice is the sum of its two slices, and Adam's
    # moments are of that sum; Keras's own Adam squares the slices one by one instead.
    ours, _ = _train(FusedAdam, rows=(1, 7, 1))
    summed, _ = _train(keras.optimizers.Adam, rows=(1, 7, 1), dense_table=True)
    for a, b in zip(ours, summed):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)


def test_a_keras_adam_checkpoint_restores_into_fused_adam(tmp_path):
    _, theirs_optimizer = _train(keras.optimizers.Adam, steps=3)
    path = tf.train.Checkpoint(optimizer=theirs_optimizer).write(str(tmp_path / "ckpt"))
    variables = _variables()
    ours_optimizer = FusedAdam(keras.optimizers.schedules.ExponentialDecay(0.01, decay_steps=2, decay_rate=0.5))
    ours_optimizer.build(variables)
    tf.train.Checkpoint(optimizer=ours_optimizer).read(path).assert_consumed()
    assert int(ours_optimizer.iterations) == 3
    for a, b in zip(ours_optimizer.variables, theirs_optimizer.variables):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("amsgrad", [False, True])
def test_serializes_with_its_settings(amsgrad):
    optimizer = FusedAdam(0.002, beta_2=0.98, epsilon=1e-9, amsgrad=amsgrad)
    copy = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert type(copy) is FusedAdam
    assert (copy.beta_2, copy.epsilon, copy.amsgrad) == (0.98, 1e-9, amsgrad)
