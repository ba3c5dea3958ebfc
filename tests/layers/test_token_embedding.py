"""The shared token embedding: scaled lookups and the tied pre-softmax projection."""

import math

import numpy as np

from layers.token_embedding import TokenEmbedding


def test_embeddings_are_scaled_by_sqrt_width_and_reverse_projects_on_the_same_matrix():
    layer = TokenEmbedding(vocab_size=11, width=16)
    ids = np.array([[3, 0, 7]], "int32")
    embedded = np.asarray(layer(ids))
    matrix = np.asarray(layer.embeddings)
    np.testing.assert_allclose(embedded[0], matrix[[3, 0, 7]] * math.sqrt(16), rtol=1e-6)
    hidden = np.random.default_rng(0).normal(size=(1, 2, 16)).astype("float32")
    np.testing.assert_allclose(np.asarray(layer(hidden, reverse=True)), hidden @ matrix.T, rtol=1e-5, atol=1e-6)


def test_unscaled_embeddings_are_plain_lookups():
    layer = TokenEmbedding(vocab_size=5, width=4, scale=False)
    np.testing.assert_array_equal(np.asarray(layer(np.array([[2]]))) [0, 0], np.asarray(layer.embeddings)[2])


def test_matrix_starts_at_standard_deviation_width_to_the_minus_half():
    # So that scaled embeddings start at unit scale, like the positional encoding.
    layer = TokenEmbedding(vocab_size=4000, width=16)
    layer.build()
    matrix = np.asarray(layer.embeddings)
    assert abs(matrix.std() - 0.25) < 0.005  # 64,000 draws: the estimate's own error is 0.0007
    assert abs(matrix.mean()) < 0.005
