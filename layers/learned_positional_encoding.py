"""Learned positional embeddings, the paper's Table 3 row (E) variant."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="transformer")
class LearnedPositionalEncoding(keras.layers.Layer):
    """Adds a trained embedding of each position to a sequence of embeddings.

    Same interface as `SinusoidalPositionalEncoding`, so the model swaps one for the other.

    Args:
        max_length: the number of positions with a trained embedding.
    """

    def __init__(self, max_length, initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.max_length = max_length
        self.initializer = keras.initializers.get(initializer)

    def build(self, input_shape):
        self.position_embeddings = self.add_weight(
            shape=(self.max_length, input_shape[-1]),
            initializer=self.initializer,
            name="position_embeddings",
        )  # [P, D]

    def call(self, inputs, start_index=0):
        """Returns `inputs + E[start_index : start_index + T]` for `inputs` `[B, T, D]`."""
        length = ops.shape(inputs)[1]
        positions = ops.arange(length, dtype="int32") + ops.cast(start_index, "int32")  # [T]
        encoding = ops.take(ops.cast(self.position_embeddings, inputs.dtype), positions, axis=0)
        return inputs + encoding  # [B, T, D]

    def get_config(self):
        return {
            **super().get_config(),
            "max_length": self.max_length,
            "initializer": keras.initializers.serialize(self.initializer),
        }
