"""app.model.flops: the model FLOPs of a step, counted by hand."""

import numpy as np

from app.model.config import ModelConfig
from app.model.flops import forward_flops, training_flops
from app.model.transformer import build_transformer


def toy_config(**overrides):
    fields = dict(vocab_size=10, num_layers=1, d_model=4, d_ff=8, num_heads=2, dropout=0.0)
    fields.update(overrides)
    return ModelConfig.from_size("tiny", **fields)


def test_forward_flops_equal_a_hand_count_for_one_layer():
    # D = 4, F = 8, H = 2, d_k = d_v = 2 (A = Bv = 4), V = 10; s = 3 source, t = 2 target tokens.
    encoder = 3 * 2 * (4 * 4 + 4 * 4 + 4 * 4 + 4 * 4 + 2 * 4 * 8)  # Q, K, V, O, FFN: 768
    encoder += 3 * 3 * 2 * (4 + 4)  # scores and values, 3 x 3: 144
    decoder = 2 * 2 * (4 * 16 + 2 * 16 + 2 * 4 * 8)  # self Q K V O, cross Q O, FFN: 640
    decoder += 3 * 2 * (2 * 16)  # cross K, V over the 3 source tokens: 192
    decoder += 2 * 2 * 2 * (4 + 4)  # self-attention, 2 x 2: 64
    decoder += 2 * 3 * 2 * (4 + 4)  # cross-attention, 2 x 3: 96
    output = 2 * 2 * 4 * 10  # 160
    assert encoder + decoder + output == 2064
    config = toy_config()
    assert forward_flops(config, 3, 2) == 2064
    assert training_flops(config, 3, 2) == 3 * 2064
    # Sentences add up; padding is no sentence's length, so it never counts.
    assert forward_flops(config, [3, 3], [2, 2]) == 2 * 2064


def test_forward_flops_of_the_projections_are_twice_the_models_weight_matrices():
    # With d_k != d_v != d_model / h, so that each width is in its place.
    config = toy_config(num_layers=2, key_dim=3, value_dim=5)
    model = build_transformer(config)
    matrices = sum(int(np.prod(w.shape)) for w in model.weights if w.path.endswith("kernel"))
    # The shared embedding is also the output projection: D x V more multiply-adds.
    matrices += config.d_model * config.vocab_size
    a, bv = 2 * 3, 2 * 5
    attention = config.num_layers * 2 * (a + bv) * (1 + 1 + 1)  # s = t = 1: enc, dec self, dec cross
    assert forward_flops(config, 1, 1) == 2 * matrices + attention
