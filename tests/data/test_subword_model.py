"""Tests for the choice of subword model: BPE (the default) or sentencepiece's unigram LM."""

import argparse
import dataclasses

import pytest

from app.cli.flags import add_data_arguments, data_config_from_args
from data.config import DataConfig
from data.dataset import prepare_data
from data.errors import DataError
from data.tokenizer import MODEL_FILENAME, load_or_train, trained_model_type
from tests.tiny_run import write_multi30k_slice


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """(dataset spec, directory for model directories) over 600 Multi30k pairs."""
    directory = tmp_path_factory.mktemp("subword_model")
    spec = "files:" + ",".join(write_multi30k_slice(directory, train=600, validation=40))
    return spec, directory


def _prepare(corpus, name, **overrides):
    spec, directory = corpus
    config = DataConfig(dataset=spec, vocab_size=600, batch_tokens=1024, **overrides)
    return prepare_data(config, str(directory / name))


@pytest.fixture(scope="module")
def bpe(corpus):
    return _prepare(corpus, "bpe")


@pytest.fixture(scope="module")
def unigram(corpus):
    return _prepare(corpus, "unigram", subword_model="unigram")


def test_the_default_is_bpe_and_the_file_says_which(bpe, unigram):
    assert DataConfig().subword_model == "bpe"
    assert trained_model_type(bpe.tokenizer.model_proto) == "bpe"
    assert trained_model_type(unigram.tokenizer.model_proto) == "unigram"


def test_unigram_segments_the_same_text_differently_and_round_trips(bpe, unigram):
    sentence = "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche."
    bpe_ids = bpe.tokenizer.tokenize([sentence]).to_list()[0]
    unigram_ids = unigram.tokenizer.tokenize([sentence]).to_list()[0]
    assert bpe_ids != unigram_ids
    assert unigram.tokenizer.detokenize([unigram_ids + [2]]).numpy()[0].decode() == sentence


def test_a_vocabulary_of_the_other_model_is_refused_by_name(corpus, bpe):
    _, directory = corpus

    def must_not_train():
        raise AssertionError("retrained although the vocabulary file exists")

    with pytest.raises(DataError, match=f"{MODEL_FILENAME} is a 'bpe' vocabulary, but subword model 'unigram'"):
        load_or_train(str(directory / "bpe"), must_not_train, 600, model_type="unigram")


def test_an_unknown_model_is_named():
    with pytest.raises(DataError, match="subword_model must be one of \\('bpe', 'unigram'\\), got 'wordpiece'"):
        DataConfig(subword_model="wordpiece")


def test_bpe_dropout_needs_bpe():
    with pytest.raises(DataError, match="bpe_dropout 0.1 needs subword_model 'bpe', got 'unigram'"):
        DataConfig(subword_model="unigram", bpe_dropout=0.1)


def test_the_flag_reaches_the_config():
    parser = argparse.ArgumentParser()
    add_data_arguments(parser)
    config = data_config_from_args(parser.parse_args(["--subword-model", "unigram"]))
    assert config.subword_model == "unigram"
    assert dataclasses.replace(config, subword_model="bpe") == data_config_from_args(parser.parse_args([]))
    with pytest.raises(SystemExit):
        parser.parse_args(["--subword-model", "wordpiece"])
