"""A dense layer whose float32 weight gradient is computed in the faster orientation.

For y = x W with x `[N, A]` and W `[A, U]`, autodiff makes the weight gradient as
x^T dy, a `[A, U]` product contracting the N tokens. On a CPU (oneDNN, float32) that
product runs markedly slower when its output has more rows than columns (A > U) than the
same product made transposed, (dy^T x)^T, a `[U, A]` product plus a transpose of the
small result; at small's and base's feed-forward shapes too
(docs/lab-notebook/2026-11-22-fewer-passes-in-attention-and-the-loss.md).

So under TensorFlow, in float32, this layer makes the weight gradient as whichever of
the two products has no more rows than columns. In bfloat16 the orientation made no
difference worth a branch, and other backends (XLA picks its own layouts) take Keras's
path.

Everything else is `keras.layers.Dense`: arguments, weights, checkpoints, outputs.
"""

import keras


def _matmul_tf(inputs, kernel):
    """TensorFlow: `[..., A] @ [A, U]` -> `[..., U]`, with the weight gradient above."""
    import tensorflow as tf

    @tf.custom_gradient
    def product(rows, kernel):
        def grad(upstream):  # [N, U]
            rows_grad = tf.matmul(upstream, kernel, transpose_b=True)  # [N, A]
            if kernel.shape[0] > kernel.shape[1]:
                kernel_grad = tf.transpose(tf.matmul(upstream, rows, transpose_a=True))  # [A, U]
            else:
                kernel_grad = tf.matmul(rows, upstream, transpose_a=True)  # [A, U]
            return rows_grad, kernel_grad

        return tf.matmul(rows, kernel), grad

    kernel = tf.convert_to_tensor(kernel)  # a read of the variable, an input like the rows
    input_width, units = kernel.shape
    leading = tf.shape(inputs)[:-1]
    rows = tf.reshape(inputs, [-1, input_width])  # [N, A]
    outputs = product(rows, kernel)  # [N, U]
    return tf.reshape(outputs, tf.concat([leading, [units]], axis=0))


@keras.saving.register_keras_serializable(package="transformer")
class Dense(keras.layers.Dense):
    """`keras.layers.Dense` whose float32 weight gradient picks the faster orientation.

    Args are `keras.layers.Dense`'s. The same outputs and gradients, to float32 rounding.
    """

    def _writes_its_gradient(self):
        return (
            keras.backend.backend() == "tensorflow"
            and self.compute_dtype == "float32"
            and not self.lora_enabled
            and self.quantization_mode is None
        )

    def call(self, inputs, training=None):
        """`[..., A]` -> `[..., units]`."""
        if not self._writes_its_gradient():
            return super().call(inputs, training=training)
        outputs = _matmul_tf(inputs, self.kernel)
        if self.bias is not None:
            outputs = keras.ops.add(outputs, self.bias)
        if self.activation is not None:
            outputs = self.activation(outputs)
        return outputs
