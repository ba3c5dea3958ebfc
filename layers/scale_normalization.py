"""ScaleNorm (Nguyen and Salazar, 2019): `g * x / ||x||`, one learned scalar per norm.

A layer norm centres each `[D]` vector, scales it to unit variance, then applies a
learned scale and shift per feature (2 D weights). ScaleNorm only projects the vector
onto the sphere of radius `g`, with a single learned scalar `g` initialized to sqrt(D),
the length of a unit-variance vector: no mean, no per-feature weights. Its authors found
it trained small translation pairs better than layer norm; here it is the model option
`normalization="scale"` (`app/model/config.py`), in place of every layer norm.

    n = max(||x||, epsilon)         x_hat = x / n           y = g * x_hat

Under TensorFlow the gradient is written out, as for `layers.LayerNormalization`: one
reduction and one elementwise expression instead of autodiff's op-by-op walk, which on a
CPU is bound by memory bandwidth:

    s = sum over the last axis of dy * x_hat
    dx = (g / n) * (dy - x_hat * s)     (dx = (g / n) * dy where ||x|| <= epsilon)
    dg = sum of s over every token

The forward pass is in float32 at least; the output is in the layer's compute dtype.
"""

import keras


def unit_length_last_axis_tf(x, epsilon):
    """TensorFlow, the forward pass before the scale: `(x_hat [..., D], divisor [..., 1])`,
    x_hat = x / divisor, divisor = max(||x||, epsilon) over the last axis, in `x`'s dtype.
    Also the incremental decoder's (app/decoding/incremental.py)."""
    import tensorflow as tf

    divisor = tf.maximum(tf.norm(x, axis=-1, keepdims=True), epsilon)  # [..., 1]
    return x / divisor, divisor


def _scale_normalize_last_axis_tf(inputs, scale, epsilon):
    """TensorFlow: `[..., D]` -> `[..., D]` in float32 (float64 for float64 inputs),
    with the gradient above for `inputs` and the scalar `scale`."""
    import tensorflow as tf

    dtype = tf.float64 if inputs.dtype == tf.float64 else tf.float32

    @tf.custom_gradient
    def normalized(x, scale):
        x_hat, divisor = unit_length_last_axis_tf(x, epsilon)  # [..., D], [..., 1]

        def grad(upstream):
            upstream = tf.cast(upstream, dtype)
            projection = tf.reduce_sum(upstream * x_hat, -1, keepdims=True)  # [..., 1]
            # Where the length is clamped to epsilon the divisor is a constant, so x_hat's
            # radial part is not removed (divisor > epsilon exactly where length > epsilon).
            radial = tf.where(divisor > epsilon, projection, tf.zeros_like(projection))
            x_grad = (scale / divisor) * (upstream - x_hat * radial)
            return x_grad, tf.reduce_sum(projection)

        return scale * x_hat, grad

    return normalized(tf.cast(inputs, dtype), tf.cast(scale, dtype))


def _scale_normalize_last_axis(inputs, scale, epsilon):
    """Any backend, autodiff's gradient: `[..., D]` -> `[..., D]` in float32 (float64 for
    float64 inputs)."""
    dtype = "float64" if inputs.dtype == "float64" else "float32"
    x = keras.ops.cast(inputs, dtype)
    length = keras.ops.sqrt(keras.ops.sum(keras.ops.square(x), axis=-1, keepdims=True))  # [..., 1]
    return keras.ops.cast(scale, dtype) * x / keras.ops.maximum(length, epsilon)


@keras.saving.register_keras_serializable(package="transformer")
class ScaleNormalization(keras.layers.Layer):
    """`[..., D]` -> `[..., D]`: each vector over the last axis scaled to length `g`.

    Args:
        epsilon: the least length divided by, so that a zero vector stays zero.

    Weights: `gamma`, a scalar initialized to sqrt(D). It is named as a layer norm's
    scale is, so that the optimizer leaves it out of weight decay (`app/training/fused_adam.py`).
    """

    def __init__(self, epsilon=1e-6, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = epsilon
        # As Keras's LayerNormalization: inputs and `gamma` are not cast down to a mixed
        # policy's compute dtype before the float32 arithmetic.
        self.autocast = False

    def build(self, input_shape):
        width = input_shape[-1]
        self.gamma = self.add_weight(
            shape=(), initializer=keras.initializers.Constant(float(width) ** 0.5), name="gamma",
            autocast=False,
        )

    def call(self, inputs):
        """`[..., D]` -> `[..., D]` in the compute dtype."""
        if keras.backend.backend() == "tensorflow":
            outputs = _scale_normalize_last_axis_tf(inputs, self.gamma, self.epsilon)
        else:  # Under JAX, XLA fuses autodiff's passes itself.
            outputs = _scale_normalize_last_axis(inputs, self.gamma, self.epsilon)
        return keras.ops.cast(outputs, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "epsilon": self.epsilon}
