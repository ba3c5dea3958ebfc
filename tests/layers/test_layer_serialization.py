"""Every layer round-trips through get_config / from_config with identical outputs."""

import keras
import numpy as np
import pytest

from layers.decoder_layer import DecoderLayer
from layers.dropout import Dropout
from layers.encoder_layer import EncoderLayer
from layers.feed_forward import FeedForward
from layers.layer_normalization import LayerNormalization
from layers.learned_positional_encoding import LearnedPositionalEncoding
from layers.masks import decoder_self_attention_mask, padding_mask
from layers.multi_head_attention import MultiHeadAttention
from layers.scale_normalization import ScaleNormalization
from layers.sinusoidal_positional_encoding import SinusoidalPositionalEncoding
from layers.token_embedding import TokenEmbedding

B, S, T, D = 2, 5, 4, 16
RNG = np.random.default_rng(0)
SOURCE = RNG.normal(size=(B, S, D)).astype("float32")
TARGET = RNG.normal(size=(B, T, D)).astype("float32")
SOURCE_IDS = np.array([[4, 5, 6, 0, 0], [4, 5, 6, 7, 8]], "int32")
TARGET_IDS = np.array([[1, 5, 6, 0], [1, 5, 6, 7]], "int32")

# (layer class, constructor arguments, a call). Every argument differs from its default,
# so that a get_config() that drops or rewrites one is caught.
CASES = {
    "attention": (
        MultiHeadAttention,
        dict(
            num_heads=2, key_dim=4, value_dim=6, dropout=0.1, use_bias=False, output_dim=12,
            kernel_initializer="he_normal",
        ),
        lambda layer: layer(TARGET, SOURCE, attention_mask=padding_mask(SOURCE_IDS)),
    ),
    # At inference the identity; the round trip is pinned by its config (rate, seed) and class.
    "dropout": (Dropout, dict(rate=0.2, seed=3), lambda layer: layer(SOURCE)),
    "feed_forward": (
        FeedForward, dict(inner_dim=32, activation="gelu", inner_dropout=0.2), lambda layer: layer(SOURCE)
    ),
    "layer_norm": (LayerNormalization, dict(epsilon=1e-6), lambda layer: layer(SOURCE)),
    "scale_norm": (ScaleNormalization, dict(epsilon=1e-5), lambda layer: layer(SOURCE)),
    "sinusoidal": (SinusoidalPositionalEncoding, dict(max_length=9), lambda layer: layer(SOURCE)),
    "learned": (LearnedPositionalEncoding, dict(max_length=9, initializer="he_uniform"), lambda layer: layer(SOURCE)),
    "embedding": (TokenEmbedding, dict(vocab_size=12, width=D, scale=False), lambda layer: layer(SOURCE_IDS)),
    "encoder_layer": (
        EncoderLayer,
        dict(
            num_heads=2, key_dim=8, inner_dim=32, value_dim=4, dropout=0.2, attention_dropout=0.1,
            inner_dropout=0.3, norm_first=True, layer_norm_epsilon=1e-5, attention_bias=False,
            normalization="scale",
        ),
        lambda layer: layer(SOURCE, padding_mask=padding_mask(SOURCE_IDS)),
    ),
    "decoder_layer": (
        DecoderLayer,
        dict(
            num_heads=2, key_dim=8, inner_dim=32, value_dim=4, dropout=0.3, attention_dropout=0.1,
            inner_dropout=0.2, layer_norm_epsilon=1e-5, attention_bias=False,
        ),
        lambda layer: layer(
            TARGET,
            SOURCE,
            self_attention_mask=decoder_self_attention_mask(TARGET_IDS),
            memory_mask=padding_mask(SOURCE_IDS),
        ),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_layer_round_trips_through_its_config(case):
    layer_class, arguments, run = CASES[case]
    layer = layer_class(**arguments)
    expected = np.asarray(run(layer))
    config = keras.saving.serialize_keras_object(layer)
    clone = keras.saving.deserialize_keras_object(config)
    run(clone)  # builds it
    clone.set_weights(layer.get_weights())
    assert type(clone) is type(layer)
    # get_config() holds every constructor argument as given (initializers serialized).
    for name, value in arguments.items():
        if name.endswith("initializer"):
            value = keras.initializers.serialize(keras.initializers.get(value))
        assert layer.get_config()[name] == value, name
    assert clone.get_config() == layer.get_config()
    np.testing.assert_array_equal(np.asarray(run(clone)), expected)
