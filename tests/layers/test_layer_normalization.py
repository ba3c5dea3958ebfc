"""layers.LayerNormalization: Keras's layer norm with the gradient written out, pinned
to Keras's outputs and autodiff gradients, and to finite differences."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from app.model.config import ModelConfig
from app.model.transformer import build_transformer
from layers.layer_normalization import LayerNormalization
from tests.gradient_checks import finite_differences, outputs_and_gradients

RNG = np.random.default_rng(0)


def _pair(shape, dtype="float32", **kwargs):
    """This layer and Keras's, built for inputs of `shape`, with the same non-trivial gamma and beta."""
    ours = LayerNormalization(dtype=dtype, **kwargs)
    reference = keras.layers.LayerNormalization(dtype=dtype, **kwargs)
    ours.build(shape)
    reference.build(shape)
    weights = [RNG.normal(1.0, 0.5, w.shape).astype(w.dtype) for w in reference.get_weights()]
    ours.set_weights(weights)
    reference.set_weights(weights)
    return ours, reference


@pytest.mark.parametrize("shape", [(7, 16), (3, 5, 16)])
def test_outputs_and_gradients_match_keras_in_float32(shape):
    ours, reference = _pair(shape, epsilon=1e-6)
    # Rows with different offsets and scales, as residual streams have.
    x = (RNG.normal(size=shape) * RNG.uniform(0.1, 10, shape[:-1] + (1,)) + RNG.normal(size=shape[:-1] + (1,)) * 3)
    x = x.astype("float32")
    upstream = RNG.normal(size=shape).astype("float32")

    y, x_grad, weight_grads = outputs_and_gradients(ours, x, upstream)
    y_ref, x_grad_ref, weight_grads_ref = outputs_and_gradients(reference, x, upstream)

    np.testing.assert_allclose(y.numpy(), y_ref.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(x_grad.numpy(), x_grad_ref.numpy(), rtol=1e-4, atol=1e-5)
    for grad, grad_ref in zip(weight_grads, weight_grads_ref):
        np.testing.assert_allclose(grad.numpy(), grad_ref.numpy(), rtol=1e-4, atol=1e-5)
    # The same weights as Keras's layer, so checkpoints written before this layer load.
    assert [w.name for w in ours.weights] == [w.name for w in reference.weights] == ["gamma", "beta"]


def test_gradients_match_finite_differences_in_float64():
    layer = LayerNormalization(epsilon=1e-3, dtype="float64")
    layer.build((6,))
    layer.set_weights([RNG.normal(1.0, 0.5, 6), RNG.normal(0.0, 0.5, 6)])
    x = RNG.normal(size=(4, 6))
    upstream = RNG.normal(size=(4, 6))

    def loss(x, gamma=None, beta=None):
        if gamma is not None:
            layer.set_weights([gamma, beta])
        return float(tf.reduce_sum(layer(tf.constant(x)) * upstream))

    _, x_grad, (gamma_grad, beta_grad) = outputs_and_gradients(layer, x, upstream)
    gamma, beta = (w.copy() for w in layer.get_weights())
    numeric_x = finite_differences(loss, x)
    numeric_gamma = finite_differences(lambda gamma: loss(x, gamma, beta), gamma)
    numeric_beta = finite_differences(lambda beta: loss(x, gamma, beta), beta)
    np.testing.assert_allclose(x_grad.numpy(), numeric_x, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gamma_grad.numpy(), numeric_gamma, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(beta_grad.numpy(), numeric_beta, rtol=1e-6, atol=1e-8)


def test_mixed_bfloat16_computes_in_float32_and_returns_bfloat16():
    ours, reference = _pair((8, 32), dtype="mixed_bfloat16", epsilon=1e-6)
    x = tf.cast(RNG.normal(size=(8, 32)) * 4 + 1, tf.bfloat16)
    upstream = RNG.normal(size=(8, 32)).astype("float32")

    y, x_grad, weight_grads = outputs_and_gradients(ours, x, upstream)
    y_ref, x_grad_ref, weight_grads_ref = outputs_and_gradients(reference, x, upstream)

    assert y.dtype == tf.bfloat16 and x_grad.dtype == tf.bfloat16
    assert all(grad.dtype == tf.float32 for grad in weight_grads)
    # Both normalize the same bfloat16 inputs in float32 and round once at the end.
    np.testing.assert_allclose(tf.cast(y, tf.float32).numpy(), tf.cast(y_ref, tf.float32).numpy(), rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(
        tf.cast(x_grad, tf.float32).numpy(), tf.cast(x_grad_ref, tf.float32).numpy(), rtol=2e-2, atol=2e-2
    )
    for grad, grad_ref in zip(weight_grads, weight_grads_ref):
        np.testing.assert_allclose(grad.numpy(), grad_ref.numpy(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize(
    "kwargs, shape",
    [
        (dict(axis=1), (4, 6, 8)),
        (dict(axis=[1, 2]), (4, 6, 8)),
        (dict(center=False), (4, 8)),
        (dict(scale=False), (4, 8)),
        # Deprecated by Keras, which says so; the layer must still take Keras's path.
        pytest.param(
            dict(rms_scaling=True), (4, 8), marks=pytest.mark.filterwarnings("ignore:You passed `rms_scaling=True`")
        ),
    ],
)
def test_other_normalizations_take_keras_path(kwargs, shape):
    ours, reference = _pair(shape, **kwargs)
    assert not ours._writes_its_gradient(len(shape))
    x = RNG.normal(size=shape).astype("float32")
    upstream = RNG.normal(size=shape).astype("float32")
    y, x_grad, _ = outputs_and_gradients(ours, x, upstream)
    y_ref, x_grad_ref, _ = outputs_and_gradients(reference, x, upstream)
    np.testing.assert_array_equal(y.numpy(), y_ref.numpy())
    np.testing.assert_array_equal(x_grad.numpy(), x_grad_ref.numpy())


@pytest.mark.parametrize("norm_first", [False, True])
def test_every_layer_norm_in_the_model_is_this_one(norm_first):
    config = ModelConfig(
        num_layers=2, d_model=16, d_ff=32, num_heads=2, vocab_size=30, max_length=16, norm_first=norm_first
    )
    model = build_transformer(config)
    norms = [layer for layer in model._flatten_layers() if isinstance(layer, keras.layers.LayerNormalization)]
    # Encoder: 2 per layer; decoder: 3 per layer; pre-norm adds one after each stack.
    assert len(norms) == 2 * 2 + 2 * 3 + (2 if norm_first else 0)
    assert all(type(layer) is LayerNormalization for layer in norms)
    assert all(layer._writes_its_gradient(3) for layer in norms)
