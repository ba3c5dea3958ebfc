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

    For step-by-step decoding it takes two caches: a self-attention cache that grows by
    the positions of each call (`self_attention.empty_cache`), one per hypothesis, and
    the memory's keys and values projected once per sentence (`init_memory_cache`). A
    batch of N = B x K hypotheses (K beams of each of B sentences, sentence-major) reads
    its sentence's memory cache: the K beams' positions are one sentence's K x T queries
    of cross-attention, so the memory is never copied per beam.
    """

    def build(self, inputs_shape, memory_shape=None):
        # Keras matches build arguments to call arguments by name: inputs_shape <-> inputs.
        super().build(inputs_shape)
        memory_shape = inputs_shape if memory_shape is None else memory_shape
        self.cross_attention, self.cross_attention_norm, self.cross_attention_dropout = (
            self._attention_block("cross_attention", inputs_shape, memory_shape)
        )

    def init_memory_cache(self, memory):
        """The memory's keys and values for cross-attention, projected once per sentence.

        Args:
            memory: encoder output `[B, S, D]`.

        Returns:
            `{"key": [B, H, S, K], "value": [B, H, S, V]}`.
        """
        return self.cross_attention.precompute_key_value(memory)

    def call(
        self,
        inputs,
        memory=None,
        self_attention_mask=None,
        memory_mask=None,
        self_cache=None,
        memory_cache=None,
        return_attention_scores=False,
        training=None,
    ):
        """Decodes one layer.

        Args:
            inputs: `[B, T, D]`; with the caches `[N, T, D]`, N = B x K hypotheses,
                T = 1 when decoding step by step.
            memory: encoder output `[B, S, D]`; unused with `memory_cache`.
            self_attention_mask: bool `[B, T, T]`; with `self_cache` None, or
                broadcastable to `[N, T, L + T]`.
            memory_mask: bool `[B, 1, S]`, the source padding mask.
            self_cache: `{"key": [N, H, L, K], "value": [N, H, L, V]}`, the L positions
                decoded so far (L = 0 at first), or None.
            memory_cache: `init_memory_cache(memory)`, required with `self_cache`.
            return_attention_scores: also return the self- and cross-attention weights.

        Returns:
            `[B or N, T, D]`, then `self_weights [B, H, T, T]` (`[N, H, T, L + T]`) and
            `cross_weights [B, H, T, S]` (`[B, H, K x T, S]`) if asked for, then the
            self-attention cache of L + T positions if one was given.
        """
        decoding = self_cache is not None
        if decoding and memory_cache is None:
            raise ValueError("a self-attention cache needs the memory_cache too")

        x, self_weights, self_cache = self._self_attention_block(
            inputs, self_attention_mask, self_cache, return_attention_scores, training
        )
        if decoding:
            # [N, T, D] -> [B, K x T, D]: each sentence's beams read its memory together.
            hypotheses, width = ops.shape(x)[0], ops.shape(x)[-1]
            x = ops.reshape(x, (ops.shape(memory_cache["key"])[0], -1, width))
        x, cross_weights = self._cross_attention_block(
            x, memory, memory_mask, memory_cache, return_attention_scores, training
        )
        if decoding:
            x = ops.reshape(x, (hypotheses, -1, width))  # [N, T, D]

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
        if decoding:
            results += (self_cache,)
        return results[0] if len(results) == 1 else results

    def _self_attention_block(self, inputs, mask, cache, return_attention_scores, training):
        """The masked self-attention block, with its residual and norm.

        Returns:
            `(x [B or N, T, D], the weights [B, H, T, T] ([N, H, T, L + T]) or None if not
            asked for, the cache of L + T positions or None without one)`.
        """
        decoding = cache is not None

        def self_attend(x):
            return self.self_attention(
                x,
                x,
                attention_mask=mask,
                cache=cache,
                append_to_cache=decoding,
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
        weights = extras.pop(0) if return_attention_scores else None
        return x, weights, (extras.pop(0) if decoding else None)

    def _cross_attention_block(self, x, memory, memory_mask, memory_cache, return_attention_scores, training):
        """The encoder-decoder attention block, with its residual and norm: `x` `[B, T, D]`
        (with the cache, `[B, K x T, D]`) -> `(x, the weights [B, H, T, S] or None if not
        asked for)`."""

        def cross_attend(x):
            return self.cross_attention(
                x,
                memory,
                attention_mask=memory_mask,
                cache=memory_cache,
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
        return x, (extras.pop(0) if return_attention_scores else None)

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
