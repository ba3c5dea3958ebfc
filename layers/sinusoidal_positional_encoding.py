"""The paper's fixed sinusoidal positional encoding."""

import math

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="transformer")
class SinusoidalPositionalEncoding(keras.layers.Layer):
    """Adds the sinusoidal encoding of each position to a sequence of embeddings.

    The encoding is computed from the positions at each call (a few sines per position,
    nothing next to the matrix products) rather than read from a stored table: a table
    would be a constant copied into every traced function of an export, and it has
    nothing to train.

    Args:
        max_length: the most positions the model is meant to see; recorded for the
            configuration (decoding stays within it), not a hard limit of this layer.
    """

    def __init__(self, max_length, **kwargs):
        super().__init__(**kwargs)
        self.max_length = max_length

    def call(self, inputs, start_index=0):
        """Returns `inputs + PE[start_index : start_index + T]`.

        Args:
            inputs: `[B, T, D]` embeddings.
            start_index: int scalar (may be a tensor): absolute position of `inputs[:, 0]`,
                non-zero when decoding one step at a time.
        """
        length, width = ops.shape(inputs)[1], inputs.shape[-1]
        if width % 2:
            raise ValueError(f"the sinusoidal encoding needs an even width, got {width}")
        positions = ops.arange(length, dtype="float32") + ops.cast(start_index, "float32")  # [T]
        # 1 / 10000^(2i / D) for i = 0 .. D/2 - 1.
        inverse_frequencies = ops.exp(
            ops.arange(0, width, 2, dtype="float32") * (-math.log(10000.0) / width)
        )  # [D/2]
        angles = ops.expand_dims(positions, 1) * ops.expand_dims(inverse_frequencies, 0)  # [T, D/2]
        # Interleave: even dimensions take the sine, odd ones the cosine.
        encoding = ops.reshape(ops.stack([ops.sin(angles), ops.cos(angles)], axis=-1), (length, width))  # [T, D]
        return inputs + ops.cast(encoding, inputs.dtype)  # [B, T, D]

    def get_config(self):
        return {**super().get_config(), "max_length": self.max_length}
