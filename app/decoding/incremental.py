"""Incremental decoding for inference: the decoder's step, in few TensorFlow ops.

    decoder = IncrementalDecoder(transformer, output_kernel)        # inside the tf.function
    memory = decoder.memory(memory_states, memory_mask)             # once per call
    cache = decoder.empty_cache(hypotheses)
    logits, cache = decoder.step(token_ids, step, cache, memory)    # in the loop body

The same function as `Transformer.decode_step`, computed differently. The Keras layers
are written for training, and every call of one adds ops a decoding step has no use
for: variable reads and casts, shape arithmetic for dynamic reshapes (`Shape`,
`StridedSlice`, `Pack`), custom-gradient identities, the memory mask turned into a bias
in every layer. At small batches TensorFlow's executor, not arithmetic, sets the pace
of a step, so every op counts (docs/lab-notebook/2026-11-27-decoding-against-ctranslate2-second-round.md).
Here:

- every weight is read, cast to the compute dtype and laid out once per call, before
  the loop, and the loop body only reads those tensors;
- self-attention's query, key and value projections are one `[D, 2 H K + H V]` product,
  with 1 / sqrt(d_k) folded into the query's columns as the layer folds it;
- one position a step (T = 1) makes every head split and merge a plain reshape: no
  transposes but cross-attention's, no shapes read at run time but the sentence count;
- the memory mask is an additive bias made once per call; the positional encodings a
  table made once per call by the model's own layer.

The arithmetic is the layers' own, op for op where it matters (layer norm, the folded
query scale, softmax in float32), so logits agree with `decode_step` to float32
rounding and translations are unchanged (tests/decoding/test_incremental.py).

Dimension names: N hypotheses (A sentences x their beams, sentence-major), A sentences,
S source length, t positions decoded so far, D model width, H heads, K and V key and
value width per head, P the model's positions.
"""

import math

import tensorflow as tf

from layers.layer_normalization import LayerNormalization, standardize_last_axis_tf
from layers.multi_head_attention import large_negative
from layers.scale_normalization import ScaleNormalization, unit_length_last_axis_tf


class _Norm:
    """A normalization layer's forward pass on weights read once: `[..., D]` -> same.

    `norm(x) = gain * standardize(x) + shift`: layer norm's `gamma * x_hat + beta`, or
    scale norm's `g * x / ||x||` with no shift. Where the norm feeds a projection, as
    every pre-norm sublayer's first one, `fold` moves the gain and shift into that
    projection's weights, once per call, and a step runs `standardize` alone: two ops
    fewer a norm, 24 a step in a 4-layer decoder.
    """

    def __init__(self, layer, dtype):
        self._dtype = dtype
        self._epsilon = layer.epsilon
        if isinstance(layer, LayerNormalization):
            self._kind = "layer"
            self._gamma = tf.cast(layer.gamma, tf.float32)  # [D]
            self._beta = tf.cast(layer.beta, tf.float32)  # [D]
        elif isinstance(layer, ScaleNormalization):
            self._kind = "scale"
            self._gamma = tf.cast(layer.gamma, tf.float32)  # []
            self._beta = None
        else:
            raise TypeError(f"no incremental form of {type(layer).__name__}")

    def _standardize_float32(self, x):
        # In float32, by the layers' own forward pass.
        x = tf.cast(x, tf.float32)
        if self._kind == "layer":
            return standardize_last_axis_tf(x, self._epsilon)[0]
        return unit_length_last_axis_tf(x, self._epsilon)[0]

    def standardize(self, x):
        """`x` normalized without the gain and shift, in the compute dtype, for a
        projection `fold` made."""
        return tf.cast(self._standardize_float32(x), self._dtype)

    def __call__(self, x):
        y = self._gamma * self._standardize_float32(x)
        if self._beta is not None:
            y = y + self._beta
        return tf.cast(y, self._dtype)

    def fold(self, dense, scale=None):
        """`(kernel [D, out], bias [out] or None)` of `dense` (times `scale`) with the
        norm's gain and shift moved in: `standardize(x) @ kernel + bias` is
        `dense(norm(x))` (times `scale`), to float32 rounding."""
        kernel, bias = _kernel(dense, tf.float32, scale)
        gain = self._gamma[:, None] if self._kind == "layer" else self._gamma
        if self._beta is not None:
            shift = tf.linalg.matvec(kernel, self._beta, transpose_a=True)  # [out]: beta @ kernel
            bias = shift if bias is None else bias + shift
        return tf.cast(gain * kernel, self._dtype), None if bias is None else tf.cast(bias, self._dtype)


def _kernel(dense, dtype, scale=None):
    """A Dense layer's `(kernel [in, out], bias [out] or None)` in `dtype`, times `scale`."""
    kernel = tf.cast(dense.kernel, dtype)
    bias = None if dense.bias is None else tf.cast(dense.bias, dtype)
    if scale is not None:
        scale = tf.cast(scale, dtype)
        kernel = kernel * scale
        bias = None if bias is None else bias * scale
    return kernel, bias


def _affine(x, kernel, bias, activation=None):
    """`activation(x @ kernel + bias)` for `x` `[N, in]`. A `BiasAdd` (not `AddV2`) after
    the `MatMul`, and a ReLU after that, are what grappler's remapper fuses into one
    `_FusedMatMul` op: one op a projection instead of two or three."""
    y = tf.matmul(x, kernel)
    if bias is not None:
        y = tf.nn.bias_add(y, bias)
    return y if activation is None else activation(y)


class _LayerWeights:
    """One decoder layer's weights, read and laid out for `IncrementalDecoder.step`."""

    def __init__(self, layer, dtype):
        self.norm_first = layer.norm_first
        self.self_norm = _Norm(layer.self_attention_norm, dtype)
        self.cross_norm = _Norm(layer.cross_attention_norm, dtype)
        self.feed_forward_norm = _Norm(layer.feed_forward_norm, dtype)

        def first_projection(norm, dense, scale=None):
            # Pre-norm: each sublayer's first projection reads its norm's output only.
            return norm.fold(dense, scale) if self.norm_first else _kernel(dense, dtype, scale)

        attention = layer.self_attention
        self.heads = attention.num_heads
        self.key_dim = attention.key_dim
        self.value_dim = attention.value_dim
        projections = [
            first_projection(self.self_norm, attention.query_dense, attention.query_scale),
            first_projection(self.self_norm, attention.key_dense),
            first_projection(self.self_norm, attention.value_dense),
        ]
        self.qkv_kernel = tf.concat([kernel for kernel, _ in projections], axis=1)  # [D, 2HK + HV]
        # The three have biases alike (`use_bias`), and a folded layer norm's shift gives all three one.
        self.qkv_bias = None if projections[0][1] is None else tf.concat([bias for _, bias in projections], axis=0)
        self.self_output = _kernel(attention.output_dense, dtype)  # [HV, D], [D]

        cross = layer.cross_attention
        self.cross_query = first_projection(self.cross_norm, cross.query_dense, cross.query_scale)  # [D, HK]
        self.cross_output = _kernel(cross.output_dense, dtype)  # [HV, D]

        feed_forward = layer.feed_forward
        self.inner = first_projection(self.feed_forward_norm, feed_forward.inner_dense)  # [D, F]
        self.activation = feed_forward.inner_dense.activation
        self.outer = _kernel(feed_forward.output_dense, dtype)  # [F, D]

    def residual(self, x, norm, sublayer):
        """Pre-norm `x + f(norm(x))`, the norm's gain and shift folded into `f`'s first
        projection, or post-norm `norm(x + f(x))`, as `residual_block`."""
        if self.norm_first:
            return x + sublayer(norm.standardize(x))
        return norm(x + sublayer(x))


class IncrementalDecoder:
    """The decoder of `transformer`, one position at a time, for beam search and sampling.

    Build it inside the `tf.function` that decodes, before the loop: it reads the weights.

    Args:
        transformer: the model's decoding view (`app.model.transformer.Transformer`).
        output_kernel: the pre-softmax projection `[D, V]` (`Transformer.output_kernel()`,
            or an export's copy of it); made here if None.
    """

    def __init__(self, transformer, output_kernel=None):
        self._transformer = transformer
        embedding = transformer.target_embedding
        self._dtype = tf.as_dtype(embedding.compute_dtype)
        self._embeddings = tf.cast(embedding.embeddings, self._dtype)  # [V, D]
        self._embedding_scale = math.sqrt(embedding.width) if embedding.scale else None
        # Row p is what the positional layer adds at position p: the layer itself on zeros.
        zeros = tf.zeros([1, transformer.config.max_length, embedding.width], self._dtype)
        self._positions = transformer.target_positions(zeros, start_index=0)[0]  # [P, D]
        self._layers = [_LayerWeights(layer, self._dtype) for layer in transformer.decoder_layers]
        self._final_norm = None if transformer.decoder_norm is None else _Norm(transformer.decoder_norm, self._dtype)
        self._output_kernel = transformer.output_kernel() if output_kernel is None else output_kernel  # [D, V]

    def memory(self, memory_states, memory_mask):
        """What every step reads of the source, once per sentence.

        Args:
            memory_states: the encoder output `[A, S, D]`.
            memory_mask: bool `[A, 1, S]`, True at real source tokens.

        Returns:
            `{"bias": float32 [A, 1, 1, S] (0, or about -1e9 at padding),
            "layers": [{"key": [A, H, S, K], "value": [A, H, S, V]}, ...]}`, one entry per
            sentence however many hypotheses decode it (beam search's `sentence_cache`).
        """
        cache = self._transformer.init_memory_cache(memory_states, memory_mask)
        bias = tf.where(memory_mask[:, None, :, :], 0.0, large_negative("float32"))  # [A, 1, 1, S]
        return {"bias": bias, "layers": cache["layers"]}

    def empty_cache(self, hypotheses):
        """Every layer's self-attention keys and values before the first step:
        `[{"key": [N, H, 0, K], "value": [N, H, 0, V]}, ...]`; axis 2 grows a position
        a step, so under `tf.while_loop` it needs a loose shape invariant."""
        return [
            {
                "key": tf.zeros([hypotheses, layer.heads, 0, layer.key_dim], self._dtype),
                "value": tf.zeros([hypotheses, layer.heads, 0, layer.value_dim], self._dtype),
            }
            for layer in self._layers
        ]

    def step(self, token_ids, step, cache, memory):
        """Decodes position `step`.

        Args:
            token_ids: int32 `[N]`, the tokens at position `step` (the start token at 0).
            step: int32 scalar; `cache` holds positions 0 .. step - 1.
            cache: `empty_cache(N)` or the previous step's.
            memory: `memory(...)` of the A sentences; N is a multiple of A, each
                sentence's hypotheses next to each other.

        Returns:
            `(logits float32 [N, V] for position step + 1, cache of step + 1 positions)`.
        """
        x = tf.gather(self._embeddings, token_ids)  # [N, D]
        if self._embedding_scale is not None:
            x = x * tf.cast(self._embedding_scale, self._dtype)
        x = x + self._positions[step]  # [N, D]
        sentences = tf.shape(memory["bias"])[0]  # A
        new_cache = []
        for layer, layer_cache, layer_memory in zip(self._layers, cache, memory["layers"]):
            x, layer_cache = self._layer(layer, x, layer_cache, layer_memory, memory["bias"], sentences)
            new_cache.append(layer_cache)
        if self._final_norm is not None:
            x = self._final_norm(x)
        return tf.cast(tf.matmul(x, self._output_kernel), tf.float32), new_cache  # [N, V]

    def _layer(self, layer, x, cache, layer_memory, memory_bias, sentences):
        """One decoder layer on `x` `[N, D]`: `(x [N, D], cache of one more position)`."""
        heads, key_dim, value_dim = layer.heads, layer.key_dim, layer.value_dim
        new_cache = {}

        def self_attend(h):
            qkv = _affine(h, layer.qkv_kernel, layer.qkv_bias)  # [N, 2HK + HV]
            # One position: [N, H * K] -> [N, H, 1, K] is a reshape, no transpose.
            if key_dim == value_dim:  # one reshape and one unstack, two ops
                query, key, value = tf.unstack(tf.reshape(qkv, [-1, 3, heads, 1, key_dim]), axis=1)
            else:
                query, key, value = tf.split(qkv, [heads * key_dim, heads * key_dim, heads * value_dim], axis=1)
                query = tf.reshape(query, [-1, heads, 1, key_dim])
                key = tf.reshape(key, [-1, heads, 1, key_dim])
                value = tf.reshape(value, [-1, heads, 1, value_dim])
            keys = tf.concat([cache["key"], key], axis=2)  # [N, H, t + 1, K]
            values = tf.concat([cache["value"], value], axis=2)  # [N, H, t + 1, V]
            new_cache.update(key=keys, value=values)
            # Every cached position is an earlier real token: no mask.
            scores = tf.cast(tf.matmul(query, keys, transpose_b=True), tf.float32)  # [N, H, 1, t + 1]
            weights = tf.cast(tf.nn.softmax(scores), self._dtype)
            attended = tf.reshape(tf.matmul(weights, values), [-1, heads * value_dim])  # [N, H V]
            return _affine(attended, *layer.self_output)  # [N, D]

        def cross_attend(h):
            # A sentence's hypotheses are its K x 1 queries: [N, H K] -> [A, H, K, K_h].
            query = tf.reshape(_affine(h, *layer.cross_query), [sentences, -1, heads, key_dim])
            query = tf.transpose(query, [0, 2, 1, 3])  # [A, H, beams, K]
            scores = tf.cast(tf.matmul(query, layer_memory["key"], transpose_b=True), tf.float32)  # [A, H, beams, S]
            weights = tf.cast(tf.nn.softmax(scores + memory_bias), self._dtype)
            attended = tf.transpose(tf.matmul(weights, layer_memory["value"]), [0, 2, 1, 3])  # [A, beams, H, V]
            return _affine(tf.reshape(attended, [-1, heads * value_dim]), *layer.cross_output)  # [N, D]

        def feed_forward(h):
            hidden = _affine(h, *layer.inner, activation=layer.activation)  # [N, F]
            return _affine(hidden, *layer.outer)  # [N, D]

        x = layer.residual(x, layer.self_norm, self_attend)
        x = layer.residual(x, layer.cross_norm, cross_attend)
        x = layer.residual(x, layer.feed_forward_norm, feed_forward)
        return x, new_cache
