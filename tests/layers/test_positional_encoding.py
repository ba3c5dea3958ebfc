"""Positional encodings: the paper's formula, offsets, and the learned variant."""

import math

import numpy as np
import pytest

from layers.learned_positional_encoding import LearnedPositionalEncoding
from layers.sinusoidal_positional_encoding import SinusoidalPositionalEncoding


def papers_formula(length, width, start=0):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d))."""
    table = np.zeros((length, width))
    for row, pos in enumerate(range(start, start + length)):
        for i in range(width // 2):
            angle = pos / 10000 ** (2 * i / width)
            table[row, 2 * i], table[row, 2 * i + 1] = math.sin(angle), math.cos(angle)
    return table


def test_sinusoidal_encoding_equals_the_papers_formula():
    layer = SinusoidalPositionalEncoding(max_length=64)
    x = np.zeros((2, 50, 16), "float32")
    out = np.asarray(layer(x))
    np.testing.assert_allclose(out[0], papers_formula(50, 16), atol=2e-5)
    np.testing.assert_array_equal(out[0], out[1])


def test_sinusoidal_encoding_is_added_from_the_start_index():
    layer = SinusoidalPositionalEncoding(max_length=64)
    x = np.ones((1, 3, 8), "float32")
    np.testing.assert_allclose(np.asarray(layer(x, start_index=4))[0], 1.0 + papers_formula(3, 8, start=4), atol=1e-6)


def test_sinusoidal_encoding_rejects_odd_widths():
    with pytest.raises(ValueError, match="even width, got 5"):
        SinusoidalPositionalEncoding(max_length=4)(np.zeros((1, 2, 5), "float32"))


def test_learned_encoding_adds_its_table_from_the_start_index():
    layer = LearnedPositionalEncoding(max_length=6)
    x = np.ones((1, 2, 4), "float32")
    out = np.asarray(layer(x, start_index=3))
    table = np.asarray(layer.position_embeddings)
    np.testing.assert_allclose(out[0], 1.0 + table[3:5], atol=1e-7)
    assert table.shape == (6, 4)
    assert len(layer.trainable_weights) == 1


def test_learned_encoding_table_takes_the_given_initializer():
    layer = LearnedPositionalEncoding(max_length=3, initializer="ones")
    np.testing.assert_array_equal(np.asarray(layer(np.zeros((1, 2, 4), "float32")))[0], np.ones((2, 4)))
