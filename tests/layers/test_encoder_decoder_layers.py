"""Encoder and decoder layers against keras-hub's TransformerEncoder / TransformerDecoder
holding the same weights (post-norm and pre-norm), and how their sub-layers are wired."""

import keras_hub
import numpy as np
import pytest

from layers.decoder_layer import DecoderLayer
from layers.encoder_layer import EncoderLayer
from layers.feed_forward import FeedForward
from layers.masks import decoder_self_attention_mask, padding_mask

B, S, T, D, H, F = 2, 5, 4, 16, 2, 32
# An epsilon far from both libraries' defaults, so a layer that ignores it is caught.
EPSILON = 0.05
SOURCE_IDS = np.array([[4, 5, 6, 0, 0], [4, 5, 6, 7, 8]], "int32")
TARGET_IDS = np.array([[1, 5, 6, 0], [1, 5, 6, 7]], "int32")


def _randomize(layer, seed):
    """Random values for every weight of `layer`: Keras starts biases at 0 and LayerNorm's
    gamma at 1, which would hide a bias or a scale used in the wrong place."""
    rng = np.random.default_rng(seed)
    for weight in layer.weights:
        weight.assign(rng.normal(scale=0.5, size=weight.shape).astype("float32"))


def _weights_of(theirs, sub_layer):
    """keras-hub's weights of one sub-layer of `theirs`, in creation order, found by their
    public `Variable.path` ("transformer_decoder/self_attention/query/kernel"), not through
    the private attributes that hold its sub-layers, which a keras-hub release may rename."""
    prefix = f"{theirs.name}/{sub_layer}/"
    weights = [weight for weight in theirs.weights if weight.path.startswith(prefix)]
    assert weights, f"no weights under {prefix!r} in {[weight.path for weight in theirs.weights]}"
    return weights


def _copy(ours, theirs, sub_layer):
    for ours_weight, theirs_weight in zip(ours.weights, _weights_of(theirs, sub_layer), strict=True):
        ours_weight.assign(np.asarray(theirs_weight))


def _copy_attention(ours, theirs, sub_layer):
    # Keras keeps per-head kernels [D, H, K] and [H, V, D]; ours are the same numbers
    # flattened to [D, H * K] and [H * V, D].
    for ours_dense, theirs_name in [
        (ours.query_dense, "query"),
        (ours.key_dense, "key"),
        (ours.value_dense, "value"),
        (ours.output_dense, "attention_output"),
    ]:
        theirs_weights = _weights_of(theirs, f"{sub_layer}/{theirs_name}")
        for ours_weight, theirs_weight in zip(ours_dense.weights, theirs_weights, strict=True):
            ours_weight.assign(np.asarray(theirs_weight).reshape(ours_weight.shape))


def _copy_feed_forward(ours, theirs):
    _copy(ours.feed_forward.inner_dense, theirs, "feedforward_intermediate_dense")
    _copy(ours.feed_forward.output_dense, theirs, "feedforward_output_dense")
    _copy(ours.feed_forward_norm, theirs, "feedforward_layer_norm")


def _inputs(seed):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(B, T, D)).astype("float32"), rng.normal(size=(B, S, D)).astype("float32")


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_equals_keras_hubs_with_the_same_weights(norm_first):
    _, source = _inputs(0)
    ours = EncoderLayer(
        num_heads=H, key_dim=D // H, inner_dim=F, dropout=0.3, norm_first=norm_first, layer_norm_epsilon=EPSILON
    )
    ours.build(source.shape)
    theirs = keras_hub.layers.TransformerEncoder(
        intermediate_dim=F, num_heads=H, dropout=0.3, normalize_first=norm_first, layer_norm_epsilon=EPSILON
    )
    theirs.build(source.shape)
    _randomize(theirs, seed=1)
    _copy_attention(ours.self_attention, theirs, "self_attention_layer")  # the decoder's: "self_attention"
    _copy(ours.self_attention_norm, theirs, "self_attention_layer_norm")
    _copy_feed_forward(ours, theirs)

    expected = theirs(source, padding_mask=SOURCE_IDS != 0)
    for training in (None, False):
        got = ours(source, padding_mask=padding_mask(SOURCE_IDS), training=training)
        np.testing.assert_allclose(np.asarray(got), np.asarray(expected), atol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_equals_keras_hubs_with_the_same_weights(norm_first):
    target, memory = _inputs(2)
    ours = DecoderLayer(
        num_heads=H, key_dim=D // H, inner_dim=F, dropout=0.3, norm_first=norm_first, layer_norm_epsilon=EPSILON
    )
    ours.build(target.shape, memory.shape)
    theirs = keras_hub.layers.TransformerDecoder(
        intermediate_dim=F, num_heads=H, dropout=0.3, normalize_first=norm_first, layer_norm_epsilon=EPSILON
    )
    theirs.build(target.shape, memory.shape)
    _randomize(theirs, seed=3)
    _copy_attention(ours.self_attention, theirs, "self_attention")
    _copy(ours.self_attention_norm, theirs, "self_attention_layer_norm")
    _copy_attention(ours.cross_attention, theirs, "cross_attention")
    _copy(ours.cross_attention_norm, theirs, "cross_attention_layer_norm")
    _copy_feed_forward(ours, theirs)

    # keras-hub adds the look-ahead mask itself (use_causal_mask=True).
    expected = np.asarray(
        theirs(target, memory, decoder_padding_mask=TARGET_IDS != 0, encoder_padding_mask=SOURCE_IDS != 0)
    )
    got = np.asarray(
        ours(
            target,
            memory,
            self_attention_mask=decoder_self_attention_mask(TARGET_IDS),
            memory_mask=padding_mask(SOURCE_IDS),
        )
    )
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_decoder_layer_returns_self_then_cross_attention_weights():
    target, memory = _inputs(4)
    layer = DecoderLayer(num_heads=H, key_dim=D // H, inner_dim=F)
    self_mask, memory_mask = decoder_self_attention_mask(TARGET_IDS), padding_mask(SOURCE_IDS)
    _, self_weights, cross_weights = layer(
        target, memory, self_attention_mask=self_mask, memory_mask=memory_mask, return_attention_scores=True
    )
    assert tuple(self_weights.shape) == (B, H, T, T)
    assert tuple(cross_weights.shape) == (B, H, T, S)
    # The self-attention weights are those of the layer's first sub-layer, on its input.
    _, expected = layer.self_attention(target, target, attention_mask=self_mask, return_attention_scores=True)
    np.testing.assert_allclose(np.asarray(self_weights), np.asarray(expected), atol=1e-6)


@pytest.mark.parametrize("layer_class", [EncoderLayer, DecoderLayer])
def test_each_dropout_and_size_reaches_its_sub_layer(layer_class):
    layer = layer_class(
        num_heads=H, key_dim=4, value_dim=6, inner_dim=F, dropout=0.1, attention_dropout=0.2, inner_dropout=0.3
    )
    layer.build((B, T, D))
    attentions = [layer.self_attention] + ([layer.cross_attention] if layer_class is DecoderLayer else [])
    residual_dropouts = [layer.self_attention_dropout, layer.feed_forward_dropout]
    if layer_class is DecoderLayer:
        residual_dropouts.append(layer.cross_attention_dropout)
    for attention in attentions:
        assert attention.dropout == 0.2
        assert tuple(attention.value_dense.kernel.shape) == (D, H * 6)
        assert tuple(attention.query_dense.kernel.shape) == (D, H * 4)
    assert [dropout.rate for dropout in residual_dropouts] == [0.1] * len(residual_dropouts)
    assert layer.feed_forward.inner_dropout == 0.3


def test_feed_forward_is_relu_between_two_dense_layers():
    x = np.random.default_rng(5).normal(size=(B, T, D)).astype("float32")
    layer = FeedForward(F)
    layer.build(x.shape)
    _randomize(layer, seed=6)
    w1, b1, w2, b2 = (np.asarray(w) for w in layer.weights)
    expected = np.maximum(0.0, x @ w1 + b1) @ w2 + b2  # FFN(x) = max(0, x W1 + b1) W2 + b2
    np.testing.assert_allclose(np.asarray(layer(x)), expected, atol=1e-5)


def test_feed_forward_dropout_is_on_the_inner_activations():
    # With W2 all ones every output of a position is the sum of its (dropped) inner
    # activations, so all D of them are equal; dropout on the outputs would make them
    # 0 or twice the sum, each on its own.
    x = np.random.default_rng(7).normal(size=(B, T, D)).astype("float32")
    layer = FeedForward(F, inner_dropout=0.5)
    layer.build(x.shape)
    layer.output_dense.kernel.assign(np.ones((F, D), "float32"))
    dropped = np.asarray(layer(x, training=True))
    np.testing.assert_allclose(dropped, np.repeat(dropped[..., :1], D, axis=-1), rtol=1e-6)
    assert not np.allclose(dropped, np.asarray(layer(x)))
