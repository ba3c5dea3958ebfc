"""Dropout that draws its keep-or-drop decisions 16 random bits at a time, a different
mask on every replica.

Keras's `Dropout` draws one 32-bit random number per element. On a CPU that draw is
most of what dropout costs, and the tiny model has 22 dropouts (embeddings and every
sub-layer): a large share of its step
(docs/lab-notebook/2026-11-22-dropout-with-16-bit-decisions.md). A decision needs far fewer
bits than 32, so this layer draws one 32-bit word per two elements and reads it as two
16-bit numbers: half the random numbers, for the same result up to the rate's rounding
to a multiple of 1/65,536 (0.1 becomes 0.100006).

Under `tf.distribute`, Keras's seed generator is one state that every replica reads
alike (it advances once per call, for all of them), so Keras's dropout draws the same
mask on every replica whose slice has the same shape: 8 GPUs would drop the same
positions of 8 different sentences. This layer gives every replica a stream of its own
(`replica_stream`): replica 0 draws exactly what one replica draws, replica r > 0 the
counter block r of the same Philox key, so every replica draws a different mask at every
call of every layer, and a run with a given seed and replica count draws the same masks
every time.

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


def replica_stream(seed):
    """`(key, counter, alg)` of this replica's random stream for the stateless `seed` (int32
    [2]), for TensorFlow's V2 stateless ops: on replica 0 (and outside any strategy) those
    `tf.random.stateless_uniform(..., seed)` draws from, on replica r > 0 the same key with
    the high word of the 128-bit Philox counter XORed with r.

    The key and counter are a bijective scramble of all 64 bits of the seed, so every
    (layer, call, replica) has a stream of its own: a replica's streams cannot meet
    another's, nor repeat between calls. (Folding r into the seed with
    `stateless_fold_in` hashed the two seed words to one 32-bit word, so a replica other
    than 0 drew an earlier call's seed again: 7 times in a layer's first 200,000 calls.)
    Replica 0 keeps the generator's own stream so that one replica, under any strategy,
    trains exactly as without one.

    The index is `replica_id_in_sync_group`, which counts the replicas of every worker
    of a MultiWorkerMirroredStrategy, so no two replicas of a cluster share a stream.
    """
    import tensorflow as tf

    key, counter = tf.raw_ops.StatelessRandomGetKeyCounter(seed=seed)  # uint64 [1], uint64 [2]
    alg = tf.random.Algorithm.AUTO_SELECT.value  # what tf.random.stateless_uniform uses
    context = tf.distribute.get_replica_context()
    if context is None:  # cross-replica context: no replica of its own
        return key, counter, alg
    replica = context.replica_id_in_sync_group
    known = tf.get_static_value(replica)
    if known is not None and int(known) == 0:  # MirroredStrategy and the default strategy: a constant
        return key, counter, alg
    block = tf.stack([tf.constant(0, tf.uint64), tf.cast(replica, tf.uint64)])  # XOR 0 on replica 0
    return key, tf.bitwise.bitwise_xor(counter, block), alg


def _uniform_uint16(shape, seed_generator):
    """Independent integers uniform on [0, 2^16) of `shape` (a list or int32 tensor):
    uint16 on TensorFlow and JAX, int32 elsewhere.

    TensorFlow and JAX draw half as many 32-bit words and reinterpret each as two
    16-bit halves; other backends draw one number per element.
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        # Stateless ops take an int32 seed; the generator's state is int64 on TF.
        seed = tf.cast(tf.math.floormod(seed_generator.next(), 2**31 - 1), tf.int32)
        key, counter, alg = replica_stream(seed)
        size = tf.reduce_prod(shape)
        words = tf.raw_ops.StatelessRandomUniformFullIntV2(
            shape=[(size + 1) // 2], key=key, counter=counter, alg=alg, dtype=tf.uint32
        )  # [ceil(n / 2)]
        halves = tf.reshape(tf.bitcast(words, tf.uint16), [-1])  # [2 ceil(n / 2)]
        return tf.reshape(halves[:size], shape)
    if backend == "jax":
        import jax

        # jax.random.bits packs narrow draws into 32-bit words itself.
        return jax.random.bits(seed_generator.next(), tuple(shape), dtype="uint16")
    return keras.random.randint(shape, 0, DECISION_LEVELS, dtype="int32", seed=seed_generator)


@keras.saving.register_keras_serializable(package="transformer")
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout` with 16-bit decisions (half the random numbers), drawn
    per replica (`replica_stream`).

    Args are `keras.layers.Dropout`'s: `rate`, `noise_shape`, `seed`. The rate applied
    is `applied_rate(rate)`, the nearest multiple of 2^-16, and kept elements are scaled
    by 1 / (1 - applied rate), so the expected output is the input. A `noise_shape`
    draws one decision per element of that shape (None: the input's size there) and
    broadcasts it. A rate so close to 1 that it rounds to 1 drops everything.
    """

    def call(self, inputs, training=False):
        """`[...]` -> `[...]`, the same shape and dtype."""
        threshold = drop_threshold(self.rate)
        if not training or threshold == 0:
            return inputs
        if threshold >= DECISION_LEVELS:
            return keras.ops.zeros_like(inputs)
        draws = _uniform_uint16(self._decision_shape(inputs), self.seed_generator)
        keep = keras.ops.greater_equal(draws, threshold)
        scale = DECISION_LEVELS / (DECISION_LEVELS - threshold)
        return keras.ops.where(keep, inputs * keras.ops.cast(scale, inputs.dtype), keras.ops.zeros_like(inputs))

    def _decision_shape(self, inputs):
        """The shape of the decisions: the input's, or `noise_shape` with its Nones filled in."""
        shape = keras.ops.shape(inputs)
        if self.noise_shape is None:
            return shape
        return [size if size is not None else shape[axis] for axis, size in enumerate(self.noise_shape)]
