"""Shared by the tests of layers with a written-out gradient: the gradients TensorFlow's
tape gives, and the central finite differences they are pinned to."""

import numpy as np
import tensorflow as tf


def outputs_and_gradients(layer, x, upstream):
    """`(y, dL/dx, [dL/dw for each trainable weight w])` for L = sum(y * upstream), in
    `upstream`'s dtype."""
    x = tf.convert_to_tensor(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x)
        loss = tf.reduce_sum(tf.cast(y, upstream.dtype) * upstream)
    x_grad, *weight_grads = tape.gradient(loss, [x, *layer.trainable_variables])
    return y, x_grad, weight_grads


def finite_differences(function, point, step=1e-6):
    """d function / d point, element by element, by central differences: `point`'s shape."""
    point = np.asarray(point, dtype="float64")
    gradient = np.zeros_like(point)
    for index in np.ndindex(point.shape):
        plus, minus = point.copy(), point.copy()
        plus[index] += step
        minus[index] -= step
        gradient[index] = (function(plus) - function(minus)) / (2 * step)
    return gradient
