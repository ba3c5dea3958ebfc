"""The paper's fixed sinusoidal positional encoding."""

import keras
import numpy as np
from keras import ops


def sinusoidal_table(max_length, width):
    """PE[pos, 2i] = sin(pos / 10000^(2i/width)), PE[pos, 2i+1] = cos(same angle).

    Returns:
        float32 numpy array `[max_length, width]`.
    """
    if width % 2:
        raise ValueError(f"the sinusoidal encoding needs an even width, got {width}")
    positions = np.arange(max_length, dtype=np.float64)[:, None]  # [P, 1]
    even_dims = np.arange(0, width, 2, dtype=np.float64)[None, :]  # [1, D/2]
    angles = positions / np.power(10000.0, even_dims / width)  # [P, D/2]
    table = np.empty((max_length, width), dtype=np.float64)
    table[:, 0::2] = np.sin(angles)
    table[:, 1::2] = np.cos(angles)
    return table.astype(np.float32)


@keras.saving.register_keras_serializable(package="transformer")
class SinusoidalPositionalEncoding(keras.layers.Layer):
    """Adds the sinusoidal encoding of each position to a sequence of embeddings.

    The table is computed once for positions `0 .. max_length - 1` and is not trained.

    Args:
        max_length: the largest number of positions this layer can encode.
    """

    def __init__(self, max_length, **kwargs):
        super().__init__(**kwargs)
        self.max_length = max_length

    def build(self, input_shape):
        self.table = sinusoidal_table(self.max_length, input_shape[-1])  # [P, D]

    def call(self, inputs, start_index=0):
        """Returns `inputs + PE[start_index : start_index + T]`.

        Args:
            inputs: `[B, T, D]` embeddings.
            start_index: int scalar (may be a tensor): absolute position of `inputs[:, 0]`,
                non-zero when decoding one step at a time.
        """
        length = ops.shape(inputs)[1]
        positions = ops.arange(length, dtype="int32") + ops.cast(start_index, "int32")  # [T]
        encoding = ops.take(ops.convert_to_tensor(self.table, inputs.dtype), positions, axis=0)
        return inputs + encoding  # [B, T, D]

    def get_config(self):
        return {**super().get_config(), "max_length": self.max_length}
