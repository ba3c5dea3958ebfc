"""The residual block's two orders, post-norm and pre-norm, on stand-in sub-layers whose
every step leaves a different mark on the result."""

import numpy as np
import pytest

from layers.residual import residual_block


def _parts(calls):
    def norm(x):
        calls.append("norm")
        return x * 10.0

    def dropout(x, training=None):
        calls.append(("dropout", training))
        return x + 100.0

    def sublayer(x):
        calls.append("sublayer")
        return x * 2.0

    return norm, dropout, sublayer


@pytest.mark.parametrize(
    "norm_first, expected, order",
    [
        # LayerNorm(x + Dropout(sublayer(x))) = 10 (1 + (2 + 100))
        (False, 1030.0, ["sublayer", ("dropout", "T"), "norm"]),
        # x + Dropout(sublayer(LayerNorm(x))) = 1 + (20 + 100)
        (True, 121.0, ["norm", "sublayer", ("dropout", "T")]),
    ],
)
def test_residual_block_computes_the_papers_and_the_pre_norm_order(norm_first, expected, order):
    calls = []
    norm, dropout, sublayer = _parts(calls)
    out = residual_block(np.array([1.0]), sublayer, norm, dropout, norm_first, training="T")
    np.testing.assert_array_equal(out, [expected])
    assert calls == order


def test_residual_block_passes_every_extra_of_the_sub_layer_through():
    calls = []
    norm, dropout, _ = _parts(calls)
    out, weights, cache = residual_block(
        np.array([1.0]), lambda x: (x * 2.0, "weights", "cache"), norm, dropout, norm_first=True
    )
    np.testing.assert_array_equal(out, [121.0])
    assert (weights, cache) == ("weights", "cache")
