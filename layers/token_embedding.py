"""Token embedding scaled by sqrt(d_model), reusable as the pre-softmax projection."""

import math

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="transformer")
class TokenEmbedding(keras.layers.Layer):
    """Looks up token embeddings, or (with `reverse=True`) projects back onto the vocabulary.

    The paper shares one matrix between the source embedding, the target embedding and the
    pre-softmax projection; calling one `TokenEmbedding` in all three places does exactly
    that. Embeddings are multiplied by sqrt(D), so the matrix is initialized with standard
    deviation D^-0.5: embeddings then start at unit scale, like the positional encoding
    they are added to, and the logits of the tied projection start small.

    Args:
        vocab_size: number of token ids.
        width: D, the model width.
        scale: multiply embeddings by sqrt(D) (the paper's setting).
    """

    def __init__(self, vocab_size, width, scale=True, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.width = width
        self.scale = scale

    def build(self, input_shape=None):
        self.embeddings = self.add_weight(
            shape=(self.vocab_size, self.width),
            initializer=keras.initializers.RandomNormal(stddev=self.width**-0.5),
            name="embeddings",
        )  # [V, D]

    def call(self, inputs, reverse=False):
        """Embeds or projects.

        Args:
            inputs: int token ids `[B, T]`, or with `reverse=True` hidden states `[B, T, D]`.
            reverse: project hidden states onto the vocabulary instead of embedding ids.

        Returns:
            `[B, T, D]` embeddings, or `[B, T, V]` logits with `reverse=True`.
        """
        embeddings = ops.cast(self.embeddings, self.compute_dtype)
        if reverse:
            return ops.matmul(inputs, ops.transpose(embeddings))  # [B, T, V]
        outputs = ops.take(embeddings, ops.cast(inputs, "int32"), axis=0)  # [B, T, D]
        if self.scale:
            outputs = outputs * ops.cast(math.sqrt(self.width), outputs.dtype)
        return outputs

    def compute_output_spec(self, inputs, reverse=False):
        if reverse:
            return keras.KerasTensor((*inputs.shape[:-1], self.vocab_size), self.compute_dtype)
        return keras.KerasTensor((*inputs.shape, self.width), self.compute_dtype)

    def get_config(self):
        return {
            **super().get_config(),
            "vocab_size": self.vocab_size,
            "width": self.width,
            "scale": self.scale,
        }
