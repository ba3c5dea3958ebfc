"""`TrainConfig` (`app.training.config`): the values it refuses, and the warmup it resolves."""


import pytest

from app.training.config import TrainConfig


def test_train_config_rejects_bad_values():
    with pytest.raises(ValueError, match="give --train-steps or --epochs"):
        TrainConfig()
    with pytest.raises(ValueError, match="accumulate must be at least 1, got 0"):
        TrainConfig(train_steps=1, accumulate=0)
    with pytest.raises(ValueError, match="precision='float8'"):
        TrainConfig(train_steps=1, precision="float8")
    with pytest.raises(ValueError, match="weight_decay must be a non-negative number, got -0.1"):
        TrainConfig(train_steps=1, weight_decay=-0.1)
    with pytest.raises(ValueError, match="weight_decay must be a non-negative number, got nan"):
        TrainConfig(train_steps=1, weight_decay=float("nan"))
    for field, bad, message in [
        ("learning_rate_scale", 0.0, "learning_rate_scale must be a positive number, got 0.0"),
        ("learning_rate_scale", -1.0, "learning_rate_scale must be a positive number, got -1.0"),
        ("learning_rate_scale", float("inf"), "learning_rate_scale must be a positive number, got inf"),
        ("log_every", 0, "log_every must be at least 1, got 0"),
        ("eval_every", -1, r"eval_every must not be negative \(0: only at the end\), got -1"),
        ("eval_sentences", -3, r"eval_sentences must be at least 1 \(or all, by default\), got -3"),
        ("eval_sentences", 0, r"eval_sentences must be at least 1 \(or all, by default\), got 0"),
        ("checkpoint_minutes", 0.0, "checkpoint_minutes must be positive, got 0.0"),
        ("train_steps", 0, "train_steps must be at least 1, got 0"),
        ("epochs", 0, "epochs must be at least 1, got 0"),
    ]:
        with pytest.raises(ValueError, match=message):
            TrainConfig(**{"train_steps": 1, field: bad})
    with pytest.raises(ValueError) as refused:
        TrainConfig(train_steps=1, patience=3, eval_every=0)
    assert str(refused.value) == (
        "patience 3 counts evaluations, and eval_every 0 evaluates only at the end: give --eval-every too"
    )
    # The edges that are allowed: an evaluation only at the end, one validation sentence.
    TrainConfig(train_steps=1, eval_every=0, eval_sentences=1, learning_rate_scale=1e-3)


def test_warmup_is_the_papers_unless_the_run_is_short():
    assert TrainConfig(train_steps=100_000).resolved_warmup(100_000) == 4000
    assert TrainConfig(train_steps=1000).resolved_warmup(1000) == 80
    assert TrainConfig(train_steps=1000, warmup_steps=10).resolved_warmup(1000) == 10
