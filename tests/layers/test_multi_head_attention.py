"""Our multi-head attention against keras.layers.MultiHeadAttention, and its cache."""

import keras
import numpy as np
import pytest
from keras import ops

from layers.masks import causal_mask, padding_mask
from layers.multi_head_attention import MultiHeadAttention, large_negative, merge_heads, split_heads

B, T, S, D, H, K = 2, 3, 5, 16, 4, 8


def _pair_with_same_weights(use_bias=True, value_dim=None, output_dim=None, dropout=0.0):
    """Our layer and Keras's, built on the same shapes and holding the same weights."""
    sizes = dict(num_heads=H, key_dim=K, value_dim=value_dim, dropout=dropout, use_bias=use_bias)
    ours = MultiHeadAttention(**sizes, output_dim=output_dim)
    ours.build((B, T, D), (B, S, D))
    reference = keras.layers.MultiHeadAttention(**sizes, output_shape=output_dim)
    reference.build((B, T, D), (B, S, D))
    # Keras keeps per-head kernels [D, H, K] and [H, K, D]; ours are the same numbers
    # flattened to [D, H * K] and [H * K, D], heads split by reshape.
    bias_rng = np.random.default_rng(7)
    for ours_dense, theirs in [
        (ours.query_dense, reference._query_dense),
        (ours.key_dense, reference._key_dense),
        (ours.value_dense, reference._value_dense),
        (ours.output_dense, reference._output_dense),
    ]:
        assert len(ours_dense.weights) == len(theirs.weights) == (2 if use_bias else 1)
        kernel = np.asarray(theirs.kernel)
        ours_dense.kernel.assign(kernel.reshape(ours_dense.kernel.shape))
        if use_bias:
            # Non-zero biases (both initialize them to zeros), so that they are tested.
            bias = bias_rng.normal(size=theirs.bias.shape)
            theirs.bias.assign(bias.astype("float32"))
            ours_dense.bias.assign(bias.reshape(ours_dense.bias.shape).astype("float32"))
    return ours, reference


@pytest.mark.parametrize("use_bias", [True, False])
@pytest.mark.parametrize("masked", [False, True])
def test_equals_keras_multi_head_attention_with_the_same_weights(masked, use_bias):
    ours, reference = _pair_with_same_weights(use_bias)
    rng = np.random.default_rng(0)
    query = rng.normal(size=(B, T, D)).astype("float32")
    value = rng.normal(size=(B, S, D)).astype("float32")
    mask = None
    if masked:
        keys_real = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype="int32")
        mask = np.broadcast_to(np.asarray(padding_mask(keys_real)), (B, T, S))
        mask = mask & np.array([[1, 0, 1, 1, 1], [1, 1, 1, 1, 1], [1, 1, 1, 0, 1]], bool)
    out, weights = ours(query, value, attention_mask=mask, return_attention_scores=True)
    ref_out, ref_weights = reference(query, value, attention_mask=mask, return_attention_scores=True)
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref_out), atol=1e-5)
    np.testing.assert_allclose(np.asarray(weights), np.asarray(ref_weights), atol=1e-6)


def test_equals_keras_with_a_separate_key_other_value_and_output_widths():
    # Keys and values from different inputs, d_v != d_k (Table 3's B rows), and an
    # output width other than the query's: each input must feed its own projection.
    ours, reference = _pair_with_same_weights(value_dim=6, output_dim=10)
    rng = np.random.default_rng(5)
    query, value, key = (rng.normal(size=(B, n, D)).astype("float32") for n in (T, S, S))
    out, weights = ours(query, value, key=key, return_attention_scores=True)
    ref_out, ref_weights = reference(query, value, key=key, return_attention_scores=True)
    assert tuple(out.shape) == (B, T, 10)
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref_out), atol=1e-5)
    np.testing.assert_allclose(np.asarray(weights), np.asarray(ref_weights), atol=1e-6)


def test_attention_dropout_only_in_training_and_the_weights_returned_are_before_it():
    ours, reference = _pair_with_same_weights(dropout=0.5)
    rng = np.random.default_rng(6)
    query, value = rng.normal(size=(B, T, D)).astype("float32"), rng.normal(size=(B, S, D)).astype("float32")
    ref_out, ref_weights = reference(query, value, return_attention_scores=True, training=False)
    for training in (None, False):
        out, weights = ours(query, value, return_attention_scores=True, training=training)
        np.testing.assert_allclose(np.asarray(out), np.asarray(ref_out), atol=1e-5)
    out, weights = ours(query, value, return_attention_scores=True, training=True)
    assert np.abs(np.asarray(out) - np.asarray(ref_out)).max() > 0.1
    # As Keras: the softmax's weights, not the dropped ones that were applied.
    np.testing.assert_allclose(np.asarray(weights), np.asarray(ref_weights), atol=1e-6)


@pytest.mark.parametrize("use_bias", [True, False])
def test_gradients_equal_keras_multi_head_attention_with_the_same_weights(use_bias):
    # The scale folded into W^Q and the mask added as a bias change the backward graph:
    # the gradients of every input and weight must still be Keras's.
    import tensorflow as tf

    ours, reference = _pair_with_same_weights(use_bias)
    rng = np.random.default_rng(2)
    query = tf.constant(rng.normal(size=(B, T, D)).astype("float32"))
    value = tf.constant(rng.normal(size=(B, S, D)).astype("float32"))
    upstream = tf.constant(rng.normal(size=(B, T, D)).astype("float32"))
    keys_real = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype="int32")
    mask = np.broadcast_to(np.asarray(padding_mask(keys_real)), (B, T, S))

    def gradients(layer, dense_layers):
        weights = [w for dense in dense_layers for w in (dense.kernel, *([dense.bias] if use_bias else []))]
        with tf.GradientTape() as tape:
            tape.watch([query, value])
            out = layer(query, value, attention_mask=mask)
            loss = tf.reduce_sum(out * upstream)
        grads = tape.gradient(loss, [query, value, *weights])
        # Keras's per-head weights hold the same numbers as ours, shaped differently.
        return [np.asarray(g).reshape(-1) for g in grads]

    ours_grads = gradients(ours, [ours.query_dense, ours.key_dense, ours.value_dense, ours.output_dense])
    reference_grads = gradients(
        reference,
        [reference._query_dense, reference._key_dense, reference._value_dense, reference._output_dense],
    )
    assert len(ours_grads) == len(reference_grads) == 2 + 4 * (2 if use_bias else 1)
    for got, want in zip(ours_grads, reference_grads):
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_attention_weights_on_padded_keys_are_exactly_zero():
    layer = MultiHeadAttention(num_heads=H, key_dim=K)
    ids = np.array([[4, 5, 0, 0, 0], [4, 5, 6, 7, 0]], dtype="int32")
    x = np.random.default_rng(1).normal(size=(B, S, D)).astype("float32") * 30.0
    _, weights = layer(x, x, attention_mask=padding_mask(ids), return_attention_scores=True)
    weights = np.asarray(weights)  # [B, H, S, S]
    assert np.all(weights[0, :, :, 2:] == 0.0)
    assert np.all(weights[1, :, :, 4:] == 0.0)
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-6)


def test_split_then_merge_heads_is_the_identity():
    x = np.random.default_rng(2).normal(size=(B, T, H * K)).astype("float32")
    heads = split_heads(x, H)
    assert tuple(heads.shape) == (B, H, T, K)
    # Head h holds features h*K .. (h+1)*K - 1 of each position.
    np.testing.assert_array_equal(np.asarray(heads)[:, 1], x[:, :, K : 2 * K])
    np.testing.assert_array_equal(np.asarray(merge_heads(heads)), x)


def test_cached_self_attention_equals_masked_full_attention():
    layer = MultiHeadAttention(num_heads=H, key_dim=K)
    x = np.random.default_rng(3).normal(size=(B, T, D)).astype("float32")
    full = np.asarray(layer(x, x, attention_mask=causal_mask(T)))
    cache = layer.empty_cache(B)
    assert tuple(cache["key"].shape) == (B, H, 0, K)
    for step in range(T):
        out, cache = layer(x[:, step : step + 1], x[:, step : step + 1], cache=cache, append_to_cache=True)
        np.testing.assert_allclose(np.asarray(out)[:, 0], full[:, step], atol=1e-5)
        assert tuple(cache["key"].shape) == tuple(cache["value"].shape) == (B, H, step + 1, K)


def test_cross_attention_cache_equals_attending_to_the_memory():
    layer = MultiHeadAttention(num_heads=H, key_dim=K)
    rng = np.random.default_rng(4)
    query, memory = rng.normal(size=(B, T, D)).astype("float32"), rng.normal(size=(B, S, D)).astype("float32")
    expected = np.asarray(layer(query, memory))
    out, _ = layer(query, memory, cache=layer.precompute_key_value(memory))
    np.testing.assert_allclose(np.asarray(out), expected, atol=1e-6)


def test_cross_attention_cache_of_separate_keys_and_values_equals_attending_to_them():
    layer = MultiHeadAttention(num_heads=H, key_dim=K)
    rng = np.random.default_rng(8)
    query, value, key = (rng.normal(size=(B, n, D)).astype("float32") for n in (T, S, S))
    expected = np.asarray(layer(query, value, key=key))
    out, _ = layer(query, None, cache=layer.precompute_key_value(key, value))
    np.testing.assert_allclose(np.asarray(out), expected, atol=1e-6)


def test_rejects_non_positive_sizes():
    with pytest.raises(ValueError, match="num_heads=0"):
        MultiHeadAttention(num_heads=0, key_dim=8)


def test_softmax_stays_float32_under_mixed_precision():
    layer = MultiHeadAttention(num_heads=H, key_dim=K, dtype="mixed_bfloat16")
    x = np.ones((1, 2, D), "float32")
    out, weights = layer(x, x, return_attention_scores=True)
    assert ops.dtype(out) == "bfloat16"
    np.testing.assert_allclose(np.asarray(ops.cast(weights, "float32")).sum(-1), 1.0, atol=1e-2)


def test_large_negative_is_finite_in_half_precision():
    assert large_negative("float32") == -1e9
    # float16's minimum is -65504: -1e9 would become -inf there, and -inf - -inf is NaN.
    assert large_negative("float16") == large_negative("bfloat16") == -3e4
    assert np.isfinite(np.float16(large_negative("float16")))
