"""One decoder layer: masked self-attention, encoder-decoder attention, feed-forward."""

import keras
from keras import ops

from layers.encoder_layer import EncoderLayer
from layers.residual import residual_block


@keras.saving.register_keras_serializable(package="transformer")
class DecoderLayer(EncoderLayer):
    """An encoder layer with a cross-attention block between its two blocks.

    Takes the same arguments as `EncoderLayer`. Self-attention is masked by the caller
    (look-ahead + padding, `masks.decoder_self_attention_mask`); cross-attention attends
    to the encoder output ("memory") under the source padding mask.

    For step-by-step decoding it keeps a cache `{"self": {...}, "cross": {...}}`: a fixed
    size self-attention cache written at the step index, and the memory's keys and values
    projected once (`init_cache`).
    """

    def build(self, inputs_shape, memory_shape=None):
        # Keras matches build arguments to call arguments by name: inputs_shape <-> inputs.
        super().build(inputs_shape)
        memory_shape = inputs_shape if memory_shape is None else memory_shape
        self.cross_attention, self.cross_attention_norm, self.cross_attention_dropout = (
            self._attention_block("cross_attention", inputs_shape, memory_shape)
        )

    def init_cache(self, memory, max_length):
        """The decoding cache for this layer.

        Args:
            memory: encoder output `[B, S, D]`.
            max_length: L, the most target positions that will be decoded.

        Returns:
            `{"self": {"key": [B, H, L, K], "value": [B, H, L, V]},
              "cross": {"key": [B, H, S, K], "value": [B, H, S, V]}}`.
        """
        batch_size = ops.shape(memory)[0]
        return {
            "self": self.self_attention.empty_cache(batch_size, max_length),
            "cross": self.cross_attention.precompute_key_value(memory),
        }

    def call(
        self,
        inputs,
        memory=None,
        self_attention_mask=None,
        memory_mask=None,
        cache=None,
        cache_index=None,
        return_attention_scores=False,
        training=None,
    ):
        """Decodes one layer.

        Args:
            inputs: `[B, T, D]` (T = 1 when decoding step by step).
            memory: encoder output `[B, S, D]`; unused when `cache` holds its projection.
            self_attention_mask: bool `[B, T, T]`, or `[B or 1, T, L]` with a cache.
            memory_mask: bool `[B, 1, S]`, the source padding mask.
            cache: this layer's cache from `init_cache`, or None.
            cache_index: int scalar, the position of `inputs[:, 0]` when using a cache.
            return_attention_scores: also return the self- and cross-attention weights.

        Returns:
            `[B, T, D]`, then `self_weights [B, H, T, T or L]` and
            `cross_weights [B, H, T, S]` if asked for, then the updated cache if given.
        """
        self_cache = None if cache is None else cache["self"]
        cross_cache = None if cache is None else cache["cross"]

        # Masked self-attention block.
        def self_attend(x):
            return self.self_attention(
                x,
                x,
                attention_mask=self_attention_mask,
                cache=self_cache,
                cache_index=cache_index,
                return_attention_scores=return_attention_scores,
                training=training,
            )

        x, *extras = _as_tuple(
            residual_block(
                inputs,
                self_attend,
                self.self_attention_norm,
                self.self_attention_dropout,
                self.norm_first,
                training,
            )
        )
        self_weights = extras.pop(0) if return_attention_scores else None
        if cache is not None:
            self_cache = extras.pop(0)

        # Encoder-decoder attention block.
        def cross_attend(x):
            return self.cross_attention(
                x,
                memory,
                attention_mask=memory_mask,
                cache=cross_cache,
                return_attention_scores=return_attention_scores,
                training=training,
            )

        x, *extras = _as_tuple(
            residual_block(
                x,
                cross_attend,
                self.cross_attention_norm,
                self.cross_attention_dropout,
                self.norm_first,
                training,
            )
        )
        cross_weights = extras.pop(0) if return_attention_scores else None

        # Feed-forward block.
        x = residual_block(
            x,
            lambda h: self.feed_forward(h, training=training),
            self.feed_forward_norm,
            self.feed_forward_dropout,
            self.norm_first,
            training,
        )

        results = (x,)
        if return_attention_scores:
            results += (self_weights, cross_weights)
        if cache is not None:
            results += ({"self": self_cache, "cross": cross_cache},)
        return results[0] if len(results) == 1 else results

    def compute_output_spec(self, inputs, memory=None, return_attention_scores=False, **_):
        output = keras.KerasTensor(inputs.shape, dtype=self.compute_dtype)
        if not return_attention_scores:
            return output
        batch, length, heads = inputs.shape[0], inputs.shape[1], self.num_heads
        return (
            output,
            keras.KerasTensor((batch, heads, length, length), dtype=self.compute_dtype),
            keras.KerasTensor((batch, heads, length, memory.shape[1]), dtype=self.compute_dtype),
        )


def _as_tuple(result):
    return result if isinstance(result, tuple) else (result,)
