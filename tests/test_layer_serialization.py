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
from layers.sinusoidal_positional_encoding import SinusoidalPositionalEncoding
from layers.token_embedding import TokenEmbedding

B, S, T, D = 2, 5, 4, 16
RNG = np.random.default_rng(0)
SOURCE = RNG.normal(size=(B, S, D)).astype("float32")
TARGET = RNG.normal(size=(B, T, D)).astype("float32")
SOURCE_IDS = np.array([[4, 5, 6, 0, 0], [4, 5, 6, 7, 8]], "int32")
TARGET_IDS = np.array([[1, 5, 6, 0], [1, 5, 6, 7]], "int32")

CASES = {
    "attention": (
        lambda: MultiHeadAttention(num_heads=2, key_dim=4, value_dim=6, dropout=0.1, name="mha"),
        lambda layer: layer(TARGET, SOURCE, attention_mask=padding_mask(SOURCE_IDS)),
    ),
    # At inference the identity; the round trip is pinned by its config (rate, seed) and class.
    "dropout": (lambda: Dropout(0.2, seed=3), lambda layer: layer(SOURCE)),
    "feed_forward": (lambda: FeedForward(32, inner_dropout=0.2), lambda layer: layer(SOURCE)),
    "layer_norm": (lambda: LayerNormalization(epsilon=1e-6), lambda layer: layer(SOURCE)),
    "sinusoidal": (lambda: SinusoidalPositionalEncoding(max_length=9), lambda layer: layer(SOURCE)),
    "learned": (lambda: LearnedPositionalEncoding(max_length=9), lambda layer: layer(SOURCE)),
    "embedding": (lambda: TokenEmbedding(12, D), lambda layer: layer(SOURCE_IDS)),
    "encoder_layer": (
        lambda: EncoderLayer(num_heads=2, key_dim=8, inner_dim=32, norm_first=True),
        lambda layer: layer(SOURCE, padding_mask=padding_mask(SOURCE_IDS)),
    ),
    "decoder_layer": (
        lambda: DecoderLayer(num_heads=2, key_dim=8, inner_dim=32, dropout=0.3),
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
    make, run = CASES[case]
    layer = make()
    expected = np.asarray(run(layer))
    config = keras.saving.serialize_keras_object(layer)
    clone = keras.saving.deserialize_keras_object(config)
    run(clone)  # builds it
    clone.set_weights(layer.get_weights())
    assert type(clone) is type(layer)
    assert clone.get_config() == layer.get_config()
    np.testing.assert_array_equal(np.asarray(run(clone)), expected)
