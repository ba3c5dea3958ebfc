"""The keras-hub comparison's pieces (benchmarks/keras_hub_peer.py): FLOPs, sizes, padding."""

import numpy as np
import pytest

from app.model.config import ModelConfig
from app.model.transformer import build_transformer
from benchmarks.keras_hub_peer import (
    build_keras_hub_transformer,
    fixed_length_arrays,
    lengths,
    pack,
    useful_fraction,
)


def toy_config(**overrides):
    fields = dict(vocab_size=10, num_layers=1, d_model=4, d_ff=8, num_heads=2, dropout=0.0)
    fields.update(overrides)
    return ModelConfig.from_size("tiny", **fields)


def test_keras_hub_peer_has_the_projects_layers_plus_its_own_embeddings_and_output():
    config = ModelConfig.from_size("tiny", vocab_size=8000)  # N 4, D 128, F 256, h 4
    d, f, v, n = 128, 256, 8000, 4

    def layer_weights(attention_bias):
        attention = 4 * d * d + (4 * d if attention_bias else 0)
        encoder_layer = attention + (2 * d * f + f + d) + 2 * 2 * d  # attention, FFN, 2 norms
        decoder_layer = 2 * attention + (2 * d * f + f + d) + 3 * 2 * d  # 2 attentions, FFN, 3 norms
        return n * (encoder_layer + decoder_layer)

    # Tiny's attention projections have biases, like keras-hub's (the paper's sizes have none).
    assert ModelConfig.from_size("tiny").attention_bias
    assert not ModelConfig.from_size("small").attention_bias
    assert (layer_weights(False), layer_weights(True)) == (1_318_912, 1_325_056)
    # One shared embedding, sinusoidal positions; tiny is pre-norm, so each stack ends
    # with a LayerNorm of its own (keras-hub's pre-norm layers leave that out).
    assert ModelConfig.from_size("tiny").norm_first
    project = layer_weights(True) + v * d + 2 * 2 * d
    # Source and target embeddings, 40 learned positions each, output Dense with bias.
    peer = layer_weights(True) + 2 * v * d + 2 * 40 * d + (d * v + v)
    assert (project, peer) == (2_349_568, 4_415_296)

    assert build_transformer(config).count_params() == project
    keras_hub_model = build_keras_hub_transformer(config)
    assert keras_hub_model.count_params() == peer
    ids = np.array([[5, 6, 2, 0], [7, 2, 0, 0]], np.int32)
    assert keras_hub_model([ids, ids]).shape == (2, 4, v)


def test_keras_hub_peer_rejects_sizes_its_layers_cannot_have():
    with pytest.raises(ValueError, match="key_dim=3"):
        build_keras_hub_transformer(toy_config(key_dim=3))


def test_fixed_length_pipeline_pads_cuts_and_counts_useful_label_positions():
    sources = [[5, 6, 2], [7, 2]]
    targets = [[1, 8, 9, 2], [1, 8, 9, 10, 11, 12, 2]]  # the second is cut to 6, end kept
    arrays = fixed_length_arrays(sources, targets, sequence_length=5)
    np.testing.assert_array_equal(arrays["encoder_inputs"], [[5, 6, 2, 0, 0], [7, 2, 0, 0, 0]])
    np.testing.assert_array_equal(arrays["decoder_inputs"], [[1, 8, 9, 2, 0], [1, 8, 9, 10, 11]])
    np.testing.assert_array_equal(arrays["labels"], [[8, 9, 2, 0, 0], [8, 9, 10, 11, 2]])
    assert useful_fraction(arrays["labels"]) == 8 / 10
    source_lengths, label_lengths = lengths(arrays["encoder_inputs"], arrays["labels"])
    np.testing.assert_array_equal(source_lengths, [3, 2])
    np.testing.assert_array_equal(label_lengths, [3, 5])
    # A source without an end value is simply cut.
    np.testing.assert_array_equal(pack([[4, 5, 6, 7]], 3), [[4, 5, 6]])
