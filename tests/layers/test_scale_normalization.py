"""layers.ScaleNormalization: g x / ||x|| with its gradient written out, pinned to exact
values, to autodiff of the formula, and to finite differences."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from app.model.config import NORMALIZATION_KINDS
from layers.normalization import NORMALIZATIONS
from layers.scale_normalization import ScaleNormalization, _scale_normalize_last_axis
from tests.gradient_checks import finite_differences, outputs_and_gradients

RNG = np.random.default_rng(0)


def _autodiff_reference(x, gamma, upstream, epsilon):
    """The formula as other backends run it (`_scale_normalize_last_axis`), differentiated
    op by op by TensorFlow."""
    x = tf.constant(x)
    gamma = tf.Variable(gamma, dtype=x.dtype)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = _scale_normalize_last_axis(x, gamma, epsilon)
        loss = tf.reduce_sum(y * upstream)
    x_grad, gamma_grad = tape.gradient(loss, [x, gamma])
    return y, x_grad, gamma_grad


def test_each_vector_is_scaled_to_length_gamma_initialized_to_sqrt_width():
    layer = ScaleNormalization()
    y = layer(np.array([[3.0, 4.0], [0.0, -0.5]], "float32"))
    np.testing.assert_allclose(y.numpy(), 2**0.5 * np.array([[0.6, 0.8], [0.0, -1.0]]), rtol=1e-6)
    assert [w.name for w in layer.weights] == ["gamma"] and layer.gamma.shape == ()
    layer.gamma.assign(3.0)
    np.testing.assert_allclose(layer(np.array([[0.0, 0.0, 2.0]], "float32")).numpy(), [[0.0, 0.0, 3.0]])


@pytest.mark.parametrize("shape", [(7, 16), (3, 5, 16)])
def test_outputs_and_gradients_match_autodiff_in_float32(shape):
    layer = ScaleNormalization(epsilon=1e-6)
    layer.build(shape)
    layer.gamma.assign(2.5)
    # Rows of very different lengths, as residual streams have.
    x = (RNG.normal(size=shape) * RNG.uniform(0.1, 10, shape[:-1] + (1,))).astype("float32")
    upstream = RNG.normal(size=shape).astype("float32")

    y, x_grad, (gamma_grad,) = outputs_and_gradients(layer, x, upstream)
    y_ref, x_grad_ref, gamma_grad_ref = _autodiff_reference(x, np.float32(2.5), upstream, 1e-6)

    np.testing.assert_allclose(y.numpy(), y_ref.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(x_grad.numpy(), x_grad_ref.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(gamma_grad.numpy(), gamma_grad_ref.numpy(), rtol=1e-4)


def test_gradients_match_finite_differences_in_float64():
    layer = ScaleNormalization(epsilon=1e-3, dtype="float64")
    layer.build((6,))
    layer.gamma.assign(1.7)
    x = RNG.normal(size=(4, 6))
    upstream = RNG.normal(size=(4, 6))

    def loss(x, gamma=1.7):
        layer.gamma.assign(gamma)
        return float(tf.reduce_sum(layer(tf.constant(x)) * upstream))

    _, x_grad, (gamma_grad,) = outputs_and_gradients(layer, x, upstream)
    numeric_x = finite_differences(loss, x)
    numeric_gamma = finite_differences(lambda gamma: loss(x, float(gamma)), 1.7)
    np.testing.assert_allclose(x_grad.numpy(), numeric_x, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gamma_grad.numpy(), numeric_gamma, rtol=1e-6)


def test_a_vector_shorter_than_epsilon_is_divided_by_epsilon_with_a_finite_gradient():
    # A zero vector (an all-zero residual stream) must neither divide by zero nor make NaNs.
    layer = ScaleNormalization(epsilon=1e-2, dtype="float64")
    layer.build((3,))
    layer.gamma.assign(3**0.5)  # In float64: the initializer's sqrt(3) is float32's.
    x = np.array([[0.0, 0.0, 0.0], [1e-3, 0.0, 0.0], [3.0, 0.0, 4.0]])
    upstream = RNG.normal(size=(3, 3))
    y, x_grad, (gamma_grad,) = outputs_and_gradients(layer, x, upstream)
    y_ref, x_grad_ref, gamma_grad_ref = _autodiff_reference(x, 3**0.5, upstream, 1e-2)
    np.testing.assert_allclose(y.numpy(), y_ref.numpy(), rtol=1e-12)
    np.testing.assert_allclose(y.numpy()[:2], [[0.0, 0.0, 0.0], [3**0.5 * 0.1, 0.0, 0.0]], rtol=1e-12)
    # Below epsilon the output is linear in x: the gradient is g / epsilon times upstream.
    np.testing.assert_allclose(x_grad.numpy()[:2], 3**0.5 / 1e-2 * upstream[:2], rtol=1e-12)
    np.testing.assert_allclose(x_grad.numpy(), x_grad_ref.numpy(), rtol=1e-10)
    np.testing.assert_allclose(gamma_grad.numpy(), gamma_grad_ref.numpy(), rtol=1e-10)


def test_mixed_precision_computes_in_float32_and_rounds_once():
    layer = ScaleNormalization(dtype="mixed_bfloat16")
    x = tf.cast((RNG.normal(size=(64, 16)) * 5).astype("float32"), tf.bfloat16)
    y = layer(x)
    assert y.dtype == tf.bfloat16 and layer.gamma.dtype == "float32"
    exact = tf.cast(x, tf.float64).numpy()
    exact = 4.0 * exact / np.linalg.norm(exact, axis=-1, keepdims=True)
    np.testing.assert_array_equal(tf.cast(y, tf.float64).numpy(), tf.cast(tf.cast(exact, tf.bfloat16), tf.float64))


def test_keras_builds_and_serializes_it():
    layer = ScaleNormalization(epsilon=1e-5, name="norm")
    clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(clone) is ScaleNormalization and clone.epsilon == 1e-5 and clone.name == "norm"


def test_every_normalization_the_configuration_accepts_has_a_layer_and_no_other():
    # app/model/config.py keeps its own list, so that TensorFlow-free tools can read
    # configurations without importing the layers; the two must name the same kinds.
    assert tuple(NORMALIZATIONS) == NORMALIZATION_KINDS
