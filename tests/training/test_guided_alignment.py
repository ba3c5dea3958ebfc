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


# The step: what it minimizes, and what the term reaches.


def _model_and_batch(num_layers=2):
    import tensorflow as tf

    from app.model.config import ModelConfig
    from app.model.transformer import build_transformer

    config = ModelConfig.from_size(
        "tiny", vocab_size=30, num_layers=num_layers, d_model=16, d_ff=32, num_heads=2, dropout=0.0
    )
    rng = np.random.default_rng(0)
    source = rng.integers(4, 30, (3, 6)).astype("int32")
    target = rng.integers(4, 30, (3, 7)).astype("int32")
    source[2, 4:], target[2, 5:] = 0, 0  # some padding
    gold = (rng.random((3, 6, 6)) < 0.3).astype(np.uint8)
    gold[2, 4:], gold[2, :, 4:] = 0, 0
    return config, build_transformer(config), tuple(tf.constant(x) for x in (source, target, gold))


def _reference_losses(model, config, batch, guidance):
    """(token loss sum, alignment loss sum, target tokens), computed the plain way."""
    from app.decoding.alignment import select_head
    from app.model.transformer import Transformer
    from app.training.losses import summed_loss

    source, target, gold = batch
    transformer = Transformer(model, config)
    memory, memory_mask = transformer.encode(source, training=True)
    logits, _, cross = transformer.decode(target[:, :-1], memory, memory_mask, training=True,
                                          return_attention_scores=True)
    token_sum, tokens = summed_loss(target[:, 1:], logits, 0.1)
    attention = select_head(cross[guidance.head.layer], guidance.head.head)
    return token_sum, guided_alignment_sum(attention, gold, guidance.cost_type), tokens


@pytest.mark.slow
@pytest.mark.parametrize("fused_loss", [True, False])
def test_the_step_descends_the_token_loss_plus_the_weighted_alignment_loss(fused_loss):
    import keras
    import tensorflow as tf

    from app.decoding.config import AlignmentHead
    from app.training.guidance import Guidance
    from app.training.step import make_train_step

    config, model, batch = _model_and_batch()
    guidance = Guidance(AlignmentHead(0, 1), weight=0.5, cost_type="ce")
    with tf.GradientTape() as tape:
        token_sum, alignment_sum, tokens = _reference_losses(model, config, batch, guidance)
        reference = (token_sum + 0.5 * alignment_sum) / tokens
    grads = tape.gradient(reference, model.trainable_variables)
    expected = [np.asarray(v) - np.asarray(tf.convert_to_tensor(g)) for v, g in zip(model.trainable_variables, grads)]

    step = make_train_step(model, keras.optimizers.SGD(1.0), tf.distribute.get_strategy(), 0.1,
                           fused_loss=fused_loss, guidance=guidance)
    loss_sum, step_tokens, step_alignment = step((batch,))
    assert float(step_tokens) == float(tokens)
    assert float(loss_sum) == pytest.approx(float(token_sum), rel=1e-5)
    assert float(step_alignment) == pytest.approx(float(alignment_sum), rel=1e-5) and float(alignment_sum) > 0
    for variable, want in zip(model.trainable_variables, expected):
        np.testing.assert_allclose(np.asarray(variable), want, atol=1e-6)


@pytest.mark.slow
def test_the_term_leaves_the_decoder_layers_above_its_head_untouched():
    import tensorflow as tf

    from app.decoding.alignment import select_head
    from app.model.transformer import Transformer

    config, model, (source, target, gold) = _model_and_batch(num_layers=2)
    transformer = Transformer(model, config)
    with tf.GradientTape() as tape:
        memory, memory_mask = transformer.encode(source, training=True)
        _, _, cross = transformer.decode(target[:, :-1], memory, memory_mask, training=True,
                                         return_attention_scores=True)
        loss = guided_alignment_sum(select_head(cross[0], 0), gold)
    grads = tape.gradient(loss, model.trainable_variables)
    above = [g for v, g in zip(model.trainable_variables, grads) if "decoder_layer_1" in v.path]
    below = [g for v, g in zip(model.trainable_variables, grads) if "decoder_layer_0" in v.path]
    assert above and all(g is None or not np.any(np.asarray(tf.convert_to_tensor(g))) for g in above)
    assert any(g is not None and np.any(np.asarray(tf.convert_to_tensor(g))) for g in below)


@pytest.fixture(scope="module")
def guided_equivalence(tmp_path_factory):
    """tests/replica_equivalence.py's guided report: 1 replica against 2, guidance on."""
    import json
    import os
    import subprocess
    import sys

    from tests.built_once import built_once
    from tests.replica_equivalence import GUIDED

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    def run(directory):
        result = subprocess.run(
            [sys.executable, "-m", "tests.replica_equivalence", GUIDED], cwd=root,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}, capture_output=True, text=True, timeout=500,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        return [json.loads(result.stdout.strip().splitlines()[-1])]

    return built_once(tmp_path_factory, "replica-equivalence-guided", run)[0]


@pytest.mark.slow
def test_two_replicas_update_like_one_with_guided_alignment(guided_equivalence):
    # As tests/training/test_replicas.py's SGD case, with the alignment loss added to the
    # token loss (weight 0.5) and both divided by the global batch's tokens: the two runs
    # differ by float32 rounding of sums taken in another order alone.
    report = guided_equivalence
    assert report["replicas"] == 2
    for single, mirrored in report["losses"]:
        assert abs(single - mirrored) < 1e-5 * abs(single)
    for single, mirrored in report["alignment_losses"]:
        assert single > 0 and abs(single - mirrored) < 1e-5 * abs(single)
    assert report["max_weight_difference"] < 1e-5
    assert report["output_beyond_first_order"] < 1e-5
    assert report["replica_differences"] == {}


# The flags, the settings and the head word alignments read.


def _resolved(*flags):
    from app.commands.train import parse_args
    from app.commands.train_plan import resolved_flags

    return resolved_flags(parse_args(list(flags)))


@pytest.mark.parametrize(
    "flags", [["--guided-alignment-weight", "0.1"], ["--guided-alignment-type", "mse"],
              ["--guided-alignment-head=-1:mean"]],
)
def test_a_guided_alignment_flag_without_the_alignments_is_refused_by_name(flags):
    from app.cli.flag_types import FlagError
    from app.commands.train_plan import train_config_from_args

    with pytest.raises(FlagError, match=f"{flags[0].split('=')[0]} tunes guided alignment training, which needs "
                                        "--guided-alignment"):
        train_config_from_args(_resolved(*flags))


def test_a_guided_run_records_its_head_resolved_and_its_settings():
    from app.cli.flags import model_config_from_args
    from app.commands.train_plan import train_config_from_args

    flags = _resolved("--guided-alignment", "train.al")
    model_config = model_config_from_args(flags, vocab_size=100)  # tiny: 4 layers of 4 heads
    config = train_config_from_args(flags, model_config=model_config)
    assert (config.guided_alignment_head, config.guided_alignment_weight, config.guided_alignment_type) == (
        "3:0", 0.05, "ce")
    assert config.guided
    flags = _resolved("--guided-alignment", "eflomal", "--guided-alignment-head=1:mean",
                      "--guided-alignment-weight", "1", "--guided-alignment-type", "mse")
    config = train_config_from_args(flags, model_config=model_config)
    assert (config.guided_alignment_head, config.guided_alignment_weight, config.guided_alignment_type) == (
        "1:mean", 1.0, "mse")
    assert not train_config_from_args(_resolved()).guided


def test_a_head_the_model_lacks_is_a_flag_error():
    from app.cli.flag_types import FlagError
    from app.cli.flags import model_config_from_args
    from app.commands.train_plan import train_config_from_args

    flags = _resolved("--guided-alignment", "train.al", "--guided-alignment-head", "7:0")
    with pytest.raises(FlagError, match="--guided-alignment-head: alignment head 7:0: the model has 4 decoder layers"):
        train_config_from_args(flags, model_config=model_config_from_args(flags, vocab_size=100))


def test_the_guided_flags_help_says_their_defaults():
    import argparse

    from app.commands.train_plan import add_training_arguments
    from app.cli.flags import add_data_arguments

    parser = argparse.ArgumentParser()
    add_data_arguments(parser)
    add_training_arguments(parser)
    helps = {action.dest: action.help for action in parser._actions}
    for dest in ("guided_alignment", "guided_alignment_weight", "guided_alignment_type", "guided_alignment_head"):
        assert "default" in helps[dest], dest


def test_word_alignments_read_the_guided_head_unless_told_another():
    from app.decoding.config import AlignmentHead, chosen_alignment_head
    from app.model.config import ModelConfig

    config = ModelConfig.from_size("tiny", vocab_size=100)  # 4 layers of 4 heads
    guided = {"guided_alignment_head": "3:1"}
    assert chosen_alignment_head(config, train_settings=guided) == AlignmentHead(3, 1)
    assert chosen_alignment_head(config, AlignmentHead(0, None), train_settings=guided) == AlignmentHead(0, None)
    assert chosen_alignment_head(config, train_settings={"guided_alignment_head": None}) == AlignmentHead(2, None)
    assert chosen_alignment_head(config) == AlignmentHead(2, None)


def test_rehearsal_batches_of_a_guided_run_carry_a_zero_gold():
    from app.training.rehearsal_batches import synthetic_batches
    from data.buckets import BucketScheme

    scheme = BucketScheme.for_budget(256, 32, 1)
    lengths = ([5, 7, 9, 11] * 8, [6, 8, 10, 12] * 8)
    batches = synthetic_batches(*lengths, scheme, vocab_size=50, gold=True).first(3)
    for source, target, gold in batches.one_pass:
        assert gold.dtype.name == "uint8" and tuple(gold.shape) == (source.shape[0], target.shape[1] - 1,
                                                                    source.shape[1])
        assert not np.any(gold.numpy())
    assert all(len(batch) == 2 for batch in synthetic_batches(*lengths, scheme, vocab_size=50).first(1).one_pass)


@pytest.mark.slow
def test_a_guided_run_logs_its_alignment_loss_and_its_exports_align_with_its_head(small_corpus, tmp_path):
    import json
    import os

    from app.decoding.config import AlignmentHead
    from app.export.saved_model import load_trained
    from app.model_dir.settings import save_settings
    from data.config import DataConfig
    from data.dataset import prepare_data
    from data.words import words
    from tests.training.helpers import run_training, small_model_config

    # A diagonal gold: word k to word k, as far as both sentences go.
    with open(small_corpus[0], encoding="utf-8") as sources, open(small_corpus[1], encoding="utf-8") as targets:
        counts = [min(len(words(source)), len(words(target))) for source, target in zip(sources, targets)]
    lines = [" ".join(f"{k}-{k}" for k in range(count)) for count in counts]
    alignments = tmp_path / "train.al"
    alignments.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    config = DataConfig(dataset="files:" + ",".join(small_corpus), vocab_size=400, batch_tokens=512, max_length=64,
                        alignments=str(alignments))
    data = prepare_data(config, str(tmp_path / "run"), log=lambda *_: None)
    guided = dict(guided_alignment_head="0:1", guided_alignment_weight=0.5)
    run_training(data, tmp_path / "run", **guided)
    with open(os.path.join(tmp_path, "run", "metrics.jsonl"), encoding="utf-8") as file:
        records = [record for record in map(json.loads, file) if "learning_rate" in record]
    assert len(records) == 6 and all(record["alignment_loss"] > 0 for record in records)

    from app.training.config import TrainConfig

    train_config = TrainConfig(train_steps=6, **guided)
    save_settings(str(tmp_path / "run"), small_model_config(data), config, train_config, log=lambda *_: None)
    trained = load_trained(str(tmp_path / "run"), checkpoint="latest")
    assert trained.alignment_head == AlignmentHead(0, 1)
    assert trained.translator().alignment_head == AlignmentHead(0, 1)
    assert trained.translator(alignment_head=AlignmentHead(0, None)).alignment_head == AlignmentHead(0, None)
