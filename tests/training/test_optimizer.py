"""The optimizer (`app.training.optimizer`): the paper's Adam, AdamW's decay of the
matrices only, and the learning rate each record gives."""

import json

import numpy as np
import pytest
import tensorflow as tf

from app.model.config import ModelConfig
from app.model.transformer import build_transformer
from app.training.config import TrainConfig
from app.training.optimizer import make_optimizer
from app.training.schedule import WarmupInverseSqrt
from tests.training.helpers import run_training, small_model_config


@pytest.mark.parametrize(
    "positional, normalization", [("sinusoidal", "layer"), ("learned", "layer"), ("sinusoidal", "scale")]
)
def test_weight_decay_shrinks_every_matrix_by_the_learning_rate_times_it_and_no_vector(positional, normalization):
    config = ModelConfig.from_size(
        "tiny", vocab_size=40, num_layers=1, d_model=16, d_ff=32, num_heads=2, positional=positional,
        normalization=normalization,
    )
    model = build_transformer(config)
    # Random values everywhere, so that a decayed bias or layer-norm offset would show.
    rng = np.random.default_rng(0)
    for variable in model.trainable_variables:
        variable.assign(rng.normal(size=variable.shape).astype("float32"))
    before = [np.asarray(variable) for variable in model.trainable_variables]
    optimizer = make_optimizer(config, TrainConfig(train_steps=100, weight_decay=0.5), 100)
    optimizer.build(model.trainable_variables)
    learning_rate = np.float32(optimizer.learning_rate)  # The first step's.
    # Zero gradients: Adam's own step is exactly zero, so only the decay moves a weight.
    optimizer.apply([tf.zeros_like(v) for v in model.trainable_variables], model.trainable_variables)

    decayed = [v.path for v in model.trainable_variables if len(v.shape) >= 2]
    assert "shared_embedding/embeddings" in decayed and "decoder_layer_0/cross_attention/value/kernel" in decayed
    learned_positions = {"source_positions/position_embeddings", "target_positions/position_embeddings"}
    assert (learned_positions <= set(decayed)) == (positional == "learned")
    for variable, old in zip(model.trainable_variables, before):
        if variable.path in decayed:
            np.testing.assert_allclose(np.asarray(variable), old - old * np.float32(0.5) * learning_rate, rtol=1e-6)
        else:  # biases, gamma and beta (ScaleNorm: a scalar gamma)
            np.testing.assert_array_equal(np.asarray(variable), old, err_msg=variable.path)
    scales = [v.path for v in model.trainable_variables if v.path.endswith("gamma") and len(v.shape) == 0]
    assert len(scales) == (7 if normalization == "scale" else 0)  # 2 + 3 + the 2 final norms


def test_without_weight_decay_the_optimizer_is_the_papers_adam():
    config = ModelConfig.from_size("tiny", vocab_size=40, num_layers=1, d_model=16, d_ff=32, num_heads=2)
    optimizer = make_optimizer(config, TrainConfig(train_steps=100), 100)
    assert optimizer.weight_decay is None
    assert (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon) == (0.9, 0.98, 1e-9)


@pytest.mark.slow
def test_each_record_logs_the_learning_rate_its_step_was_trained_at(small_data, tmp_path):
    run_training(small_data, tmp_path, train_steps=5, warmup_steps=2, cooldown_fraction=0.4)
    records = [r for r in map(json.loads, open(tmp_path / "metrics.jsonl")) if "loss" in r]
    d_model = small_model_config(small_data).d_model
    schedule = WarmupInverseSqrt(d_model, 2, 1.0, total_steps=5, cooldown_steps=2)
    # Step n is the n-th update, made at the schedule's iteration n - 1. The last update
    # is made at half the rate of the one before (a cooldown of 2), never at 0.
    want = [float(schedule(n - 1)) for n in range(1, 6)]
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5]
    np.testing.assert_allclose([r["learning_rate"] for r in records], want, rtol=1e-6)
    assert records[-1]["learning_rate"] == pytest.approx(records[-2]["learning_rate"] * 0.5 * (4 / 5) ** 0.5, rel=1e-6)
