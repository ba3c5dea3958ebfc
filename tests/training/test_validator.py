"""Evaluation during training (`app.training.validation.Validator`): the validation loss
and perplexity, the best checkpoint, patience."""

import json
import math

import numpy as np
import pytest
import tensorflow as tf

from app.model.transformer import build_transformer
from app.model_dir import checkpoints
from app.training.config import TrainConfig
from app.training.loop import train
from app.training.run_plan import RunPlan
from app.training.validation import Validator
from tests.training.helpers import checkpoint_weights, run_training, small_model_config


@pytest.mark.slow
def test_validation_loss_and_perplexity_equal_a_hand_computation_on_the_final_weights(small_data, tmp_path):
    # label smoothing 0.2: the smoothed loss and the perplexity's plain NLL then differ.
    config = small_model_config(small_data)
    train(
        RunPlan(size="tiny", variant=None, model_dir=str(tmp_path), model_config=config, data_config=small_data.config,
                train_config=TrainConfig(train_steps=3, warmup_steps=2, eval_every=0, log_every=1, seed=3,
                                         label_smoothing=0.2)),
        small_data, tf.distribute.get_strategy(), log=lambda *_: None,
    )
    final = [r for r in map(json.loads, open(tmp_path / "metrics.jsonl")) if "valid_loss" in r][-1]

    model = build_transformer(config)
    checkpoints.restore_weights(model, checkpoints.checkpoint_paths(tmp_path)[-1])
    smoothed, nll, tokens = 0.0, 0.0, 0.0
    for source, target in small_data.eval_batches("validation"):
        logits = model([source, target[:, :-1]], training=False).numpy().astype("float64")
        labels = target[:, 1:].numpy()
        log_probs = logits - logits.max(-1, keepdims=True)
        log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
        mask = labels != 0
        label_log_probs = np.take_along_axis(log_probs, labels[..., None], -1)[..., 0]
        off = 0.2 / (config.vocab_size - 1)
        per_token = -((0.8 - off) * label_log_probs + off * log_probs.sum(-1))
        smoothed += per_token[mask].sum()
        nll += -label_log_probs[mask].sum()
        tokens += mask.sum()
    assert final["valid_loss"] == pytest.approx(smoothed / tokens, rel=1e-5)
    assert final["valid_perplexity"] == pytest.approx(np.exp(nll / tokens), rel=1e-5)
    # The two measure different things: the perplexity is not exp(smoothed loss).
    assert abs(math.log(final["valid_perplexity"]) - final["valid_loss"]) > 0.01


@pytest.mark.slow
def test_the_best_checkpoint_follows_the_score(small_data, tmp_path):
    # Evaluations at steps 2, 4 and 6, and the final one at step 7.
    scores = iter([5.0, 9.0, 7.0, 8.0])
    result = run_training(
        small_data, tmp_path, evaluate_fn=lambda t: {"bleu": next(scores)}, eval_every=2, train_steps=7
    )
    best = json.load(open(tmp_path / "best" / "best.json"))
    assert (best["step"], best["score"]) == (4, 9.0)
    assert result["best_checkpoint"].endswith("ckpt-4")
    np.testing.assert_array_equal(
        sorted(checkpoint_weights(result["best_checkpoint"])), sorted(checkpoint_weights(result["checkpoint"]))
    )


# ---------------------------------------------------------------------------------------
# The Validator on its own, with a fake step and tracker.


class FakeTracker:
    def __init__(self, best_step=None):
        self.best_step = best_step
        self.offered = []

    def offer_best(self, entry, step):
        self.offered.append((entry["step"], step))


def make_validator(tracker, evaluate_fn=None, records=None, eval_every=2, patience=2):
    sums = {"first": (3.0, 2.0, 4.0), "second": (5.0, 2.0, 4.0)}  # (smoothed loss, nll, tokens)
    return Validator(
        sums.__getitem__, lambda: ["first", "second"], "the transformer", evaluate_fn,
        (records if records is not None else []).append, tracker, eval_every, patience,
    )


def test_an_evaluation_is_the_token_means_and_bleu_recorded_said_and_offered_in_that_order():
    events = []
    tracker = FakeTracker()
    tracker.offer_best = lambda entry, step: events.append(("offered", step))

    def bleu(transformer):
        events.append(("decoded", transformer))
        return {"bleu": 12.5, "bleu_signature": "nrefs:1"}

    validator = Validator(
        {"first": (3.0, 2.0, 4.0), "second": (5.0, 2.0, 4.0)}.__getitem__, lambda: ["first", "second"],
        "the transformer", bleu, lambda entry: events.append(("recorded", entry)), tracker, 2, None,
    )
    entry = validator.evaluate(10, lambda line: events.append(("said", line)))
    assert entry == {
        "step": 10, "valid_loss": 1.0, "valid_perplexity": math.exp(0.5), "bleu": 12.5, "bleu_signature": "nrefs:1"
    }
    assert events == [
        ("decoded", "the transformer"),
        ("recorded", entry),
        ("said", "step 10: validation loss 1.0000, perplexity 1.65, BLEU 12.50 (nrefs:1)"),
        ("offered", 10),
    ]


def test_without_bleu_an_evaluation_is_the_loss_and_perplexity_alone():
    records, lines = [], []
    entry = make_validator(FakeTracker(), records=records).evaluate(4, lines.append)
    assert entry == {"step": 4, "valid_loss": 1.0, "valid_perplexity": math.exp(0.5)}
    assert records == [entry]
    assert lines == ["step 4: validation loss 1.0000, perplexity 1.65"]


def test_patience_counts_evaluations_from_the_best_ones_step():
    tracker = FakeTracker()
    validator = make_validator(tracker, eval_every=2, patience=2)
    # No best yet: counted from step 0, so the evaluations at 2 and 4 use it up.
    assert [validator.should_stop(step) for step in (2, 4)] == [False, True]
    tracker.best_step = 4
    assert [validator.should_stop(step) for step in (4, 6, 8, 10)] == [False, False, True, True]
    # A resumed run evaluating the best's own step again counts it as no loss.
    tracker.best_step = 8
    assert validator.should_stop(8) is False


def test_without_patience_the_validator_never_stops_the_run():
    validator = make_validator(FakeTracker(best_step=2), eval_every=2, patience=None)
    assert [validator.should_stop(step) for step in (2, 10, 1000)] == [False, False, False]
