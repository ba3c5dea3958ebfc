"""One encoder layer: self-attention, then the feed-forward block."""

import keras

from layers.dropout import Dropout
from layers.feed_forward import FeedForward
from layers.multi_head_attention import MultiHeadAttention
from layers.normalization import normalization_layer
from layers.residual import residual_block


@keras.saving.register_keras_serializable(package="transformer")
class EncoderLayer(keras.layers.Layer):
    """Self-attention and feed-forward sub-layers, each in a residual block.

    Args:
        num_heads: H.
        key_dim: d_k per head.
        value_dim: d_v per head (defaults to `key_dim`).
        inner_dim: d_ff of the feed-forward block.
        dropout: on each sub-layer's output before the residual sum.
        attention_dropout: on the attention weights.
        inner_dropout: after the feed-forward activation.
        norm_first: pre-norm instead of the paper's post-norm.
        layer_norm_epsilon: the normalization's epsilon.
        attention_bias: whether the attention projections have biases.
        normalization: "layer" (the paper's layer norm) or "scale" (ScaleNorm); see
            layers/normalization.py.
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        inner_dim,
        value_dim=None,
        dropout=0.1,
        attention_dropout=0.0,
        inner_dropout=0.0,
        norm_first=False,
        layer_norm_epsilon=1e-6,
        attention_bias=True,
        normalization="layer",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim
        self.inner_dim = inner_dim
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.inner_dropout = inner_dropout
        self.norm_first = norm_first
        self.layer_norm_epsilon = layer_norm_epsilon
        self.attention_bias = attention_bias
        self.normalization = normalization

    def build(self, input_shape):
        self.self_attention, self.self_attention_norm, self.self_attention_dropout = (
            self._attention_block("self_attention", input_shape, input_shape)
        )
        self.feed_forward = FeedForward(
            self.inner_dim, inner_dropout=self.inner_dropout, dtype=self.dtype_policy, name="feed_forward"
        )
        self.feed_forward.build(input_shape)
        self.feed_forward_norm, self.feed_forward_dropout = self._norm_and_dropout("feed_forward", input_shape)

    def _attention_block(self, name, query_shape, value_shape):
        """A built attention sub-layer named `name`, with its LayerNorm and Dropout."""
        attention = MultiHeadAttention(
            self.num_heads,
            self.key_dim,
            self.value_dim,
            dropout=self.attention_dropout,
            use_bias=self.attention_bias,
            dtype=self.dtype_policy,
            name=name,
        )
        attention.build(query_shape, value_shape)
        return (attention, *self._norm_and_dropout(name, query_shape))

    def _norm_and_dropout(self, name, shape):
        """The normalization (`<name>_norm`) and residual Dropout around sub-layer `name`."""
        norm = normalization_layer(
            self.normalization, self.layer_norm_epsilon, dtype=self.dtype_policy, name=f"{name}_norm"
        )
        norm.build(shape)
        return norm, Dropout(self.dropout, dtype=self.dtype_policy)

    def call(self, inputs, padding_mask=None, return_attention_scores=False, training=None):
        """Encodes one layer.

        Args:
            inputs: `[B, S, D]`.
            padding_mask: bool `[B, 1, S]` from `masks.padding_mask`.
            return_attention_scores: also return the self-attention weights `[B, H, S, S]`.

        Returns:
            `[B, S, D]`, or `([B, S, D], weights)`.
        """
        # Self-attention block.
        def attend(x):
            return self.self_attention(
                x,
                x,
                attention_mask=padding_mask,
                return_attention_scores=return_attention_scores,
                training=training,
            )

        x = residual_block(
            inputs,
            attend,
            self.self_attention_norm,
            self.self_attention_dropout,
            self.norm_first,
            training,
        )
        x, weights = x if return_attention_scores else (x, None)

        # Feed-forward block.
        x = residual_block(
            x,
            lambda h: self.feed_forward(h, training=training),
            self.feed_forward_norm,
            self.feed_forward_dropout,
            self.norm_first,
            training,
        )
        return (x, weights) if return_attention_scores else x

    def compute_output_spec(self, inputs, padding_mask=None, return_attention_scores=False, **_):
        output = keras.KerasTensor(inputs.shape, dtype=self.compute_dtype)
        if return_attention_scores:
            length = inputs.shape[1]
            weights_shape = (inputs.shape[0], self.num_heads, length, length)
            return output, keras.KerasTensor(weights_shape, dtype=self.compute_dtype)
        return output

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "key_dim": self.key_dim,
            "value_dim": self.value_dim,
            "inner_dim": self.inner_dim,
            "dropout": self.dropout,
            "attention_dropout": self.attention_dropout,
            "inner_dropout": self.inner_dropout,
            "norm_first": self.norm_first,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "attention_bias": self.attention_bias,
            "normalization": self.normalization,
        }
