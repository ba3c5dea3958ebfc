"""Validation BLEU during training (app.training.validation): sources as the export reads them."""

import types

import keras
import pytest
import tensorflow as tf

import app.training.validation
from app.model.config import ModelConfig
from app.training.validation import make_bleu_evaluator
from app.export.saved_model import Translator
from app.model.transformer import Transformer, build_transformer
from data.tokenizer import MODEL_FILENAME, SubwordTokenizer
from tests.tiny_run import write_multi30k_slice

MAX_LENGTH = 16  # positions of the model: shorter than the long sentence below
SHORT = "A man rides a bike."
LONG = "Two young men in orange vests are standing on a ladder next to a tall building."


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    directory = tmp_path_factory.mktemp("corpus")
    source, target = write_multi30k_slice(directory, train=300, validation=1)[:2]
    texts = [line for path in (source, target) for line in open(path, encoding="utf-8").read().splitlines()]
    return SubwordTokenizer.train(texts, 400, str(directory / MODEL_FILENAME))


def _config(tokenizer):
    return ModelConfig.from_size(
        "tiny", vocab_size=tokenizer.vocab_size, num_layers=1, d_model=8, d_ff=8, num_heads=2,
        max_length=MAX_LENGTH, positional="learned",
    )


def test_a_source_longer_than_the_model_s_positions_is_read_as_the_export_reads_it(tokenizer, monkeypatch):
    # A "model" that copies its source: the hypothesis is the source as it was read.
    monkeypatch.setattr(app.training.validation, "greedy_ids", lambda transformer, source_ids: (source_ids, None))
    config = _config(tokenizer)
    assert len(tokenizer.tokenize(tf.constant([LONG]))[0]) + 1 > MAX_LENGTH
    translator = Translator(build_transformer(config), config, tokenizer)
    as_exported = tokenizer.detokenize(translator.source_ids(tf.constant([SHORT, LONG]))).numpy()
    references = [text.decode("utf-8") for text in as_exported]
    assert references[0] == SHORT and LONG.startswith(references[1]) and references[1] != LONG
    evaluate = make_bleu_evaluator(tokenizer, [SHORT, LONG], references)
    assert evaluate(types.SimpleNamespace(config=config))["bleu"] == pytest.approx(100.0)


def test_a_learned_position_model_scores_a_source_longer_than_its_positions(tokenizer):
    # Read whole, the long source went past the learned table: a GatherV2 error on a CPU.
    keras.utils.set_random_seed(1)
    config = _config(tokenizer)
    transformer = Transformer(build_transformer(config), config)
    result = make_bleu_evaluator(tokenizer, [SHORT, LONG], ["Ein Hund.", "Zwei junge Männer."])(transformer)
    assert result["eval_sentences"] == 2
