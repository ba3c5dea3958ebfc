"""Positional encodings: the paper's formula, offsets, and the learned variant."""

import math

import numpy as np
import pytest

from layers.learned_positional_encoding import LearnedPositionalEncoding
from layers.sinusoidal_positional_encoding import SinusoidalPositionalEncoding, sinusoidal_table


def test_sinusoidal_table_equals_the_papers_formula():
    width = 6
    table = sinusoidal_table(max_length=7, width=width)
    for pos in range(7):
        for i in range(width // 2):
            angle = pos / 10000 ** (2 * i / width)
            assert table[pos, 2 * i] == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[pos, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-6)


def test_sinusoidal_encoding_is_added_from_the_start_index():
    layer = SinusoidalPositionalEncoding(max_length=10)
    x = np.zeros((2, 3, 8), "float32")
    table = sinusoidal_table(10, 8)
    np.testing.assert_allclose(np.asarray(layer(x)), np.broadcast_to(table[:3], (2, 3, 8)), atol=1e-7)
    np.testing.assert_allclose(np.asarray(layer(x, start_index=4))[0], table[4:7], atol=1e-7)


def test_sinusoidal_encoding_rejects_odd_widths():
    with pytest.raises(ValueError, match="even width, got 5"):
        sinusoidal_table(4, 5)


def test_learned_encoding_adds_its_table_from_the_start_index():
    layer = LearnedPositionalEncoding(max_length=6)
    x = np.ones((1, 2, 4), "float32")
    out = np.asarray(layer(x, start_index=3))
    table = np.asarray(layer.position_embeddings)
    np.testing.assert_allclose(out[0], 1.0 + table[3:5], atol=1e-7)
    assert len(layer.trainable_weights) == 1
