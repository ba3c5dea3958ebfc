"""layers.Dense: Keras's dense layer whose float32 weight gradient picks the faster of two
orientations, pinned to Keras's outputs and autodiff gradients."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from app.model.config import ModelConfig
from app.model.transformer import build_transformer
from layers.dense import Dense

RNG = np.random.default_rng(0)


def _pair(input_shape, units, dtype="float32", **kwargs):
    """This layer and Keras's, built for `input_shape`, with the same random weights."""
    ours = Dense(units, dtype=dtype, **kwargs)
    reference = keras.layers.Dense(units, dtype=dtype, **kwargs)
    ours.build(input_shape)
    reference.build(input_shape)
    # Random biases too: both initialize them to zeros.
    weights = [RNG.normal(size=w.shape).astype(w.dtype) for w in reference.get_weights()]
    ours.set_weights(weights)
    reference.set_weights(weights)
    return ours, reference


def _outputs_and_gradients(layer, x, upstream):
    """`(y, dL/dx, [dL/dkernel, dL/dbias])` for L = sum(y * upstream), under `tf.function`."""

    @tf.function
    def run(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x)
            loss = tf.reduce_sum(tf.cast(y, tf.float32) * upstream)
        return y, tape.gradient(loss, [x, *layer.trainable_variables])

    y, (x_grad, *weight_grads) = run(tf.convert_to_tensor(x))
    return y, x_grad, weight_grads


# Wider in than out (the transposed product), narrower, square; rank 2 and rank 3.
@pytest.mark.parametrize("input_shape, units", [((3, 5, 24), 8), ((3, 5, 8), 24), ((7, 16), 16), ((7, 24), 8)])
@pytest.mark.parametrize("activation", [None, "relu"])
def test_outputs_and_gradients_match_keras_in_float32(input_shape, units, activation):
    ours, reference = _pair(input_shape, units, activation=activation)
    assert ours._writes_its_gradient()
    x = RNG.normal(size=input_shape).astype("float32")
    upstream = RNG.normal(size=input_shape[:-1] + (units,)).astype("float32")

    y, x_grad, weight_grads = _outputs_and_gradients(ours, x, upstream)
    y_ref, x_grad_ref, weight_grads_ref = _outputs_and_gradients(reference, x, upstream)

    assert y.shape == y_ref.shape == input_shape[:-1] + (units,)
    np.testing.assert_allclose(y.numpy(), y_ref.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(x_grad.numpy(), x_grad_ref.numpy(), rtol=1e-5, atol=1e-5)
    assert len(weight_grads) == len(weight_grads_ref) == 2
    for grad, grad_ref in zip(weight_grads, weight_grads_ref):
        assert grad.shape == grad_ref.shape
        np.testing.assert_allclose(grad.numpy(), grad_ref.numpy(), rtol=1e-5, atol=1e-5)
    # The same weights as Keras's layer, so checkpoints written before this layer load.
    assert [w.name for w in ours.weights] == [w.name for w in reference.weights] == ["kernel", "bias"]


@pytest.mark.parametrize("input_width, units, want", [(24, 8, (8, 24)), (8, 24, (8, 24)), (16, 16, (16, 16))])
def test_the_weight_gradient_is_made_with_no_more_rows_than_columns(input_width, units, want):
    layer = Dense(units, use_bias=False)
    layer.build((None, input_width))

    @tf.function(input_signature=[tf.TensorSpec([None, input_width])])
    def kernel_gradient(x):
        with tf.GradientTape() as tape:
            y = layer(x)
        return tape.gradient(y, layer.kernel)

    graph = kernel_gradient.get_concrete_function().graph
    # The forward product and the inputs' gradient are [N, .] with N unknown; the one
    # product of known shape is the kernel's gradient, [min, max] of the two widths.
    shapes = [tuple(op.outputs[0].shape.as_list()) for op in graph.get_operations() if op.type == "MatMul"]
    assert [shape for shape in shapes if None not in shape] == [want]


def test_bfloat16_takes_keras_path():
    ours, reference = _pair((6, 24), 8, dtype="mixed_bfloat16")
    assert not ours._writes_its_gradient()
    x = tf.cast(RNG.normal(size=(6, 24)), tf.bfloat16)
    upstream = RNG.normal(size=(6, 8)).astype("float32")
    y, x_grad, weight_grads = _outputs_and_gradients(ours, x, upstream)
    y_ref, x_grad_ref, weight_grads_ref = _outputs_and_gradients(reference, x, upstream)
    np.testing.assert_array_equal(tf.cast(y, tf.float32).numpy(), tf.cast(y_ref, tf.float32).numpy())
    for grad, grad_ref in zip(weight_grads, weight_grads_ref):
        np.testing.assert_array_equal(grad.numpy(), grad_ref.numpy())


def test_round_trips_through_its_config():
    layer, _ = _pair((2, 5), 3, activation="relu", use_bias=False)
    clone = keras.layers.deserialize(keras.layers.serialize(layer))  # built from its build config
    clone.set_weights(layer.get_weights())
    assert type(clone) is Dense and clone.get_config() == layer.get_config()
    x = RNG.normal(size=(2, 5)).astype("float32")
    np.testing.assert_array_equal(np.asarray(clone(x)), np.asarray(layer(x)))


@pytest.mark.parametrize("attention_bias", [False, True])
def test_every_dense_layer_of_the_attention_and_feed_forward_blocks_is_this_one(attention_bias):
    config = ModelConfig(
        num_layers=2, d_model=16, d_ff=32, num_heads=2, vocab_size=30, max_length=16, attention_bias=attention_bias
    )
    model = build_transformer(config)
    dense = [layer for layer in model._flatten_layers() if isinstance(layer, keras.layers.Dense)]
    # Encoder: 4 attention projections + 2 feed-forward per layer; decoder: 8 + 2.
    assert len(dense) == 2 * 6 + 2 * 10
    assert all(type(layer) is Dense for layer in dense)
