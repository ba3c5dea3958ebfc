"""Dropout that draws its keep-or-drop decisions 16 random bits at a time.

Keras's `Dropout` draws one 32-bit random number per element. On a CPU that draw is
most of what dropout costs: about a tenth of the tiny model's bfloat16 training step,
which has 22 dropouts (embeddings and every sub-layer). A decision needs far fewer
bits than 32, so this layer draws one 32-bit word per two elements and reads it as two
16-bit numbers: half the random numbers, for the same result up to the rate's rounding
to a multiple of 1/65,536 (0.1 becomes 0.100006).

Everything else is Keras's `Dropout`: its arguments, its seed generator (so the
checkpointed random state is the same variable), inverted scaling at training time and
the identity at inference.
"""

import keras

# Decisions are 16-bit: one element is dropped when its draw is below the threshold
# round(rate * 2^16), so the rate applied is threshold / 2^16.
DECISION_LEVELS = 2**16


def drop_threshold(rate):
    """Draws below this (of 2^16) drop their element."""
    return round(rate * DECISION_LEVELS)


def applied_rate(rate):
    """The drop probability this layer applies for a requested `rate` in [0, 1)."""
    return drop_threshold(rate) / DECISION_LEVELS


def _uniform_uint16_like(inputs, seed_generator):
    """Independent integers uniform on [0, 2^16) shaped like `inputs`: uint16 on
    TensorFlow and JAX, int32 elsewhere.

    TensorFlow and JAX draw half as many 32-bit words and reinterpret each as two
    16-bit halves; other backends draw one number per element.
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        # Stateless ops take an int32 seed; the generator's state is int64 on TF.
        seed = tf.cast(tf.math.floormod(seed_generator.next(), 2**31 - 1), tf.int32)
        shape = tf.shape(inputs)
        size = tf.size(inputs)
        words = tf.random.stateless_uniform(
            [(size + 1) // 2], seed=seed, minval=None, maxval=None, dtype=tf.uint32
        )  # [ceil(n / 2)]
        halves = tf.reshape(tf.bitcast(words, tf.uint16), [-1])  # [2 ceil(n / 2)]
        return tf.reshape(halves[:size], shape)
    if backend == "jax":
        import jax

        # jax.random.bits packs narrow draws into 32-bit words itself.
        return jax.random.bits(seed_generator.next(), inputs.shape, dtype="uint16")
    return keras.random.randint(keras.ops.shape(inputs), 0, DECISION_LEVELS, dtype="int32", seed=seed_generator)


@keras.saving.register_keras_serializable(package="transformer")
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout` with 16-bit decisions (half the random numbers).

    Args are `keras.layers.Dropout`'s: `rate`, `noise_shape`, `seed`. The rate applied
    is `applied_rate(rate)`, the nearest multiple of 2^-16, and kept elements are scaled
    by 1 / (1 - applied rate), so the expected output is the input. A `noise_shape`, or
    a rate so close to 1 that it rounds to 1, takes Keras's own path.
    """

    def call(self, inputs, training=False):
        """`[...]` -> `[...]`, the same shape and dtype."""
        threshold = drop_threshold(self.rate)
        if not training or threshold == 0:
            return inputs
        if self.noise_shape is not None or threshold >= DECISION_LEVELS:
            return super().call(inputs, training=training)
        draws = _uniform_uint16_like(inputs, self.seed_generator)
        keep = keras.ops.greater_equal(draws, threshold)
        scale = DECISION_LEVELS / (DECISION_LEVELS - threshold)
        return keras.ops.where(keep, inputs * keras.ops.cast(scale, inputs.dtype), keras.ops.zeros_like(inputs))
