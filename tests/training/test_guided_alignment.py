"""Guided alignment training: the loss on literal values (app/training/alignment_loss.py)."""

import math

import numpy as np
import pytest

from app.training.alignment_loss import guided_alignment_sum

# One sentence, three target rows over three source pieces.
ATTENTION = np.array([[[0.7, 0.2, 0.1], [0.25, 0.25, 0.5], [0.1, 0.3, 0.6]]], np.float32)  # [1, 3, 3]


def test_ce_with_one_hot_gold_is_minus_the_log_of_the_linked_weights():
    gold = np.array([[[1, 0, 0], [0, 0, 1], [0, 1, 0]]], np.uint8)
    expected = -(math.log(0.7 + 1e-6) + math.log(0.5 + 1e-6) + math.log(0.3 + 1e-6))
    assert float(guided_alignment_sum(ATTENTION, gold, "ce")) == pytest.approx(expected, rel=1e-6)


def test_a_row_without_a_link_adds_nothing():
    gold = np.array([[[1, 0, 0], [0, 0, 0], [0, 0, 0]]], np.uint8)
    assert float(guided_alignment_sum(ATTENTION, gold, "ce")) == pytest.approx(-math.log(0.7 + 1e-6), rel=1e-6)
    assert float(guided_alignment_sum(ATTENTION, gold, "mse")) == pytest.approx(0.09 + 0.04 + 0.01, rel=1e-5)
    nothing = np.zeros_like(gold)
    assert float(guided_alignment_sum(ATTENTION, nothing, "ce")) == 0.0
    assert float(guided_alignment_sum(ATTENTION, nothing, "mse")) == 0.0


def test_a_row_linked_twice_asks_for_half_on_each():
    gold = np.array([[[1, 1, 0], [0, 0, 0], [0, 0, 0]]], np.uint8)
    expected = -(0.5 * math.log(0.7 + 1e-6) + 0.5 * math.log(0.2 + 1e-6))
    assert float(guided_alignment_sum(ATTENTION, gold, "ce")) == pytest.approx(expected, rel=1e-6)


def test_mse_literal_value():
    gold = np.array([[[1, 0, 0], [0, 1, 1], [0, 0, 0]]], np.uint8)
    # Row 0: (0.7-1)^2 + 0.2^2 + 0.1^2 = 0.14. Row 1, target (0, 0.5, 0.5):
    # 0.25^2 + 0.25^2 + 0^2 = 0.125. Row 2: no link, 0.
    assert float(guided_alignment_sum(ATTENTION, gold, "mse")) == pytest.approx(0.265, rel=1e-5)


def test_an_unknown_type_is_refused_by_name():
    with pytest.raises(ValueError, match="'l1'"):
        guided_alignment_sum(ATTENTION, np.zeros_like(ATTENTION), "l1")
