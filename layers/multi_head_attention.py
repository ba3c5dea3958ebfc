"""Multi-head scaled dot-product attention with an optional key/value cache.

Dimension names: B batch, T query length, S key length, L cache length, H heads,
D model width, K key width per head (d_k), V value width per head (d_v).
"""

import math

import keras
from keras import ops

from layers.dense import Dense
from layers.dropout import Dropout


def split_heads(x, num_heads):
    """`[B, T, H * K]` -> `[B, H, T, K]` by reshape + transpose (no per-head loop)."""
    batch, length = ops.shape(x)[0], ops.shape(x)[1]
    x = ops.reshape(x, (batch, length, num_heads, -1))  # [B, T, H, K]
    return ops.transpose(x, (0, 2, 1, 3))  # [B, H, T, K]


def merge_heads(x):
    """`[B, H, T, K]` -> `[B, T, H * K]`, the inverse of `split_heads`."""
    batch, num_heads, length, width = (ops.shape(x)[i] for i in range(4))
    x = ops.transpose(x, (0, 2, 1, 3))  # [B, T, H, K]
    return ops.reshape(x, (batch, length, num_heads * width))  # [B, T, H * K]


def large_negative(dtype):
    """A finite stand-in for -inf that is safe in float16 (whose minimum is -65504)."""
    return -1e9 if keras.backend.standardize_dtype(dtype) in ("float32", "float64") else -3e4


@keras.saving.register_keras_serializable(package="transformer")
class MultiHeadAttention(keras.layers.Layer):
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V over H heads, projected by W^O.

    Q, K and V are dense projections of the query, key and value inputs; heads are split
    by reshape + transpose, attended in one batched matmul, merged back and projected.

    Key/value cache, for step-by-step decoding. A cache is a dict
    `{"key": [B, H, L, K], "value": [B, H, L, V]}`:
    - self-attention: pass `cache` with `append_to_cache=True`; this call's keys and
      values are appended to the cache's L positions, and the query attends over all of
      them. The cache grows by T positions a call (from `empty_cache`, L = 0), so a step
      costs what the positions decoded so far cost, not what the longest output would;
      under `tf.while_loop` its length axis is a loose shape invariant.
    - cross-attention: pass `cache` from `precompute_key_value(memory)`; the encoder
      output is projected once per sentence, not once per step.

    Args:
        num_heads: H.
        key_dim: K, width of each query/key head.
        value_dim: V, width of each value head; defaults to `key_dim`.
        dropout: dropout rate on the attention weights.
        use_bias: whether the four projections have biases.
        output_dim: width of the output; defaults to the query's width D.
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        value_dim=None,
        dropout=0.0,
        use_bias=True,
        output_dim=None,
        kernel_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if num_heads < 1 or key_dim < 1:
            raise ValueError(
                f"num_heads and key_dim must be positive, got num_heads={num_heads}, "
                f"key_dim={key_dim}"
            )
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim or key_dim
        self.dropout = dropout
        self.use_bias = use_bias
        self.output_dim = output_dim
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape

        def dense(units, name):
            return Dense(
                units,
                use_bias=self.use_bias,
                # A fresh copy per projection, so no two kernels share an initializer state.
                kernel_initializer=keras.initializers.get(
                    keras.initializers.serialize(self.kernel_initializer)
                ),
                dtype=self.dtype_policy,
                name=name,
            )

        self.query_dense = dense(self.num_heads * self.key_dim, "query")
        self.query_dense.build(query_shape)
        self.key_dense = dense(self.num_heads * self.key_dim, "key")
        self.key_dense.build(key_shape)
        self.value_dense = dense(self.num_heads * self.value_dim, "value")
        self.value_dense.build(value_shape)
        self.output_dense = dense(self.output_dim or query_shape[-1], "attention_output")
        self.output_dense.build((*query_shape[:-1], self.num_heads * self.value_dim))
        self.dropout_layer = Dropout(self.dropout, dtype=self.dtype_policy)

    @property
    def query_scale(self):
        """1 / sqrt(d_k), the softmax's scale, which `project_queries` folds into W^Q."""
        return 1.0 / math.sqrt(self.key_dim)

    def project_queries(self, query):
        """W^Q query / sqrt(d_k): `[B, T, D]` -> `[B, H, T, K]`.

        The softmax's 1 / sqrt(d_k) is folded into the projection's kernel and bias, a
        `[D, H * K]` product, instead of scaling every query (or every score) after it:
        one pass over `[B, T, H * K]` less forward and one less backward.
        """
        scale = ops.cast(self.query_scale, self.compute_dtype)
        kernel = ops.cast(self.query_dense.kernel, self.compute_dtype) * scale  # [D, H * K]
        projected = ops.matmul(query, kernel)  # [B, T, H * K]
        if self.use_bias:
            projected = projected + ops.cast(self.query_dense.bias, self.compute_dtype) * scale
        return split_heads(projected, self.num_heads)

    def precompute_key_value(self, key, value=None):
        """Projects keys and values once, for a cross-attention cache.

        Args:
            key: `[B, S, D]`, usually the encoder output.
            value: `[B, S, D]`; defaults to `key`.

        Returns:
            `{"key": [B, H, S, K], "value": [B, H, S, V]}`.
        """
        value = key if value is None else value
        return {
            "key": split_heads(self.key_dense(key), self.num_heads),
            "value": split_heads(self.value_dense(value), self.num_heads),
        }

    def empty_cache(self, batch_size, dtype=None):
        """An empty self-attention cache: `{"key": [B, H, 0, K], "value": [B, H, 0, V]}`."""
        dtype = dtype or self.compute_dtype
        return {
            "key": ops.zeros((batch_size, self.num_heads, 0, self.key_dim), dtype),
            "value": ops.zeros((batch_size, self.num_heads, 0, self.value_dim), dtype),
        }

    def call(
        self,
        query,
        value,
        key=None,
        attention_mask=None,
        cache=None,
        append_to_cache=False,
        return_attention_scores=False,
        training=None,
    ):
        """Attends from `query` to `key`/`value`.

        Args:
            query: `[B, T, D]`.
            value: `[B, S, D]`; ignored when a cross-attention cache is given.
            key: `[B, S, D]`; defaults to `value`.
            attention_mask: bool, broadcastable to `[B, T, S]` (or `[B, T, L]` with a
                cache); True = may attend. See `layers/masks.py`.
            cache: a key/value cache dict (see the class docstring), or None.
            append_to_cache: with `cache`: self-attention decoding, which appends this
                call's keys and values to the cache; without it the cache is a
                cross-attention one from `precompute_key_value`.
            return_attention_scores: also return the attention weights `[B, H, T, S]`.

        Returns:
            `output [B, T, D]`, followed by the attention weights if asked for, followed
            by the updated cache if one was given.
        """
        query_heads = self.project_queries(query)  # [B, H, T, K], scaled by 1 / sqrt(K)
        if cache is not None and not append_to_cache:
            # Cross-attention: keys and values were projected once by precompute_key_value.
            key_heads, value_heads = cache["key"], cache["value"]
        else:
            key = value if key is None else key
            key_heads = split_heads(self.key_dense(key), self.num_heads)  # [B, H, S, K]
            value_heads = split_heads(self.value_dense(value), self.num_heads)  # [B, H, S, V]
            if cache is not None:
                # Self-attention decoding: the earlier positions, then this call's.
                key_heads = ops.concatenate([cache["key"], key_heads], axis=2)  # [B, H, L + T, K]
                value_heads = ops.concatenate([cache["value"], value_heads], axis=2)  # [B, H, L + T, V]
                cache = {"key": key_heads, "value": value_heads}

        scores = ops.einsum("bhtk,bhsk->bhts", query_heads, key_heads)  # [B, H, T, S]
        # Softmax in float32 even under mixed precision: it is where half precision hurts.
        scores = ops.cast(scores, "float32")
        if attention_mask is not None:
            # Added, not selected: the bias is made once at [B, 1, T, S], a head's share
            # of the scores, and an addition's gradient passes through unchanged where a
            # select's needs another select over [B, H, T, S]. A hidden score becomes
            # about -1e9, and its softmax weight exactly 0, as a replaced one would.
            mask = ops.expand_dims(ops.cast(attention_mask, "bool"), axis=1)  # [B, 1, T, S]
            scores = scores + ops.where(mask, 0.0, large_negative("float32"))
        weights = ops.softmax(scores, axis=-1)  # [B, H, T, S]
        weights = ops.cast(weights, self.compute_dtype)
        attended = ops.einsum(
            "bhts,bhsv->bhtv", self.dropout_layer(weights, training=training), value_heads
        )  # [B, H, T, V]
        output = self.output_dense(merge_heads(attended))  # [B, T, D]

        results = (output,)
        if return_attention_scores:
            results += (weights,)
        if cache is not None:
            results += (cache,)
        return results[0] if len(results) == 1 else results

    def compute_output_spec(self, query, value, key=None, attention_mask=None, **kwargs):
        # Only the functional graph needs this, and it never passes a cache.
        output_shape = (*query.shape[:-1], self.output_dim or query.shape[-1])
        output = keras.KerasTensor(output_shape, dtype=self.compute_dtype)
        if kwargs.get("return_attention_scores"):
            weights_shape = (query.shape[0], self.num_heads, query.shape[1], value.shape[1])
            return output, keras.KerasTensor(weights_shape, dtype=self.compute_dtype)
        return output

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "value_dim": self.value_dim,
                "dropout": self.dropout,
                "use_bias": self.use_bias,
                "output_dim": self.output_dim,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config
