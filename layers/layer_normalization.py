"""Layer normalization with its gradient written out (TensorFlow backend).

Keras's `LayerNormalization` leaves its gradient to autodiff, which walks back through
the mean, the variance, the reciprocal square root, the scale and the shift one op at a
time, each a pass over the `[tokens, D]` activations. On a CPU those passes are bound by
memory bandwidth, and the model has one layer norm per sub-layer: 22 in tiny, 15 in
small. Written out, the backward pass is three reductions and one elementwise
expression, from the normalized input kept by the forward pass:

    x_hat = (x - mean) / sqrt(var + epsilon)        y = gamma * x_hat + beta
    g = dy * gamma
    dx = (g - mean(g) - x_hat * mean(g * x_hat)) / sqrt(var + epsilon)
    dgamma = sum over tokens of dy * x_hat           dbeta = sum over tokens of dy

(means over the last axis). The forward pass is Keras's normalization, in float32 at
least, as Keras computes it; the output is in the layer's compute dtype.

Everything else is Keras's `LayerNormalization`: its arguments, weights (`gamma`,
`beta`) and checkpoints. Other backends (under JAX, XLA fuses the autodiff's passes
itself), a normalization over other axes than the last, and layers without `center` or
`scale` (or with the deprecated `rms_scaling`) take Keras's own path.
"""

import keras


def standardize_last_axis_tf(x, epsilon):
    """TensorFlow, the forward pass before gamma and beta: `(x_hat [..., D], inverse_std
    [..., 1])`, x_hat = (x - mean) / sqrt(var + epsilon) over the last axis, in `x`'s dtype.
    Also the incremental decoder's (app/decoding/incremental.py), which folds gamma and
    beta into the projection after the norm."""
    import tensorflow as tf

    mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)  # [..., 1] each
    inverse_std = tf.math.rsqrt(variance + epsilon)  # [..., 1]
    return (x - mean) * inverse_std, inverse_std


def _normalize_last_axis_tf(inputs, gamma, beta, epsilon):
    """TensorFlow: `[..., D]` -> `[..., D]` in float32 (float64 for float64 inputs),
    with the gradient above for `inputs`, `gamma` `[D]` and `beta` `[D]`."""
    import tensorflow as tf

    dtype = tf.float64 if inputs.dtype == tf.float64 else tf.float32

    @tf.custom_gradient
    def normalized(x, gamma, beta):
        x_hat, inverse_std = standardize_last_axis_tf(x, epsilon)  # [..., D], [..., 1]

        def grad(upstream):
            upstream = tf.cast(upstream, dtype)
            token_axes = list(range(len(upstream.shape) - 1))
            gamma_grad = tf.reduce_sum(upstream * x_hat, token_axes)  # [D]
            beta_grad = tf.reduce_sum(upstream, token_axes)  # [D]
            g = upstream * gamma  # [..., D]
            x_grad = inverse_std * (
                g
                - tf.reduce_mean(g, -1, keepdims=True)
                - x_hat * tf.reduce_mean(g * x_hat, -1, keepdims=True)
            )
            return x_grad, gamma_grad, beta_grad

        return x_hat * gamma + beta, grad

    return normalized(tf.cast(inputs, dtype), tf.cast(gamma, dtype), tf.cast(beta, dtype))


@keras.saving.register_keras_serializable(package="transformer")
class LayerNormalization(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization` whose gradient is written out under TensorFlow.

    Args are `keras.layers.LayerNormalization`'s (`axis`, `epsilon`, `center`, `scale`,
    initializers, ...). The same outputs, to float32 rounding, and the same weights.
    """

    def _writes_its_gradient(self, rank):
        last_axis_only = list(self.axis) in ([-1], [rank - 1])
        return (
            keras.backend.backend() == "tensorflow"
            and last_axis_only
            and self.center
            and self.scale
            and not self.rms_scaling
        )

    def call(self, inputs):
        """`[..., D]` -> `[..., D]`, normalized over the last axis, in the compute dtype."""
        if not self._writes_its_gradient(len(inputs.shape)):
            return super().call(inputs)
        outputs = _normalize_last_axis_tf(inputs, self.gamma, self.beta, self.epsilon)
        return keras.ops.cast(outputs, self.compute_dtype)
