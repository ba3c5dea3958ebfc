"""`--lowercase`: a run that reads and writes lowercased text, from vocabulary to SavedModel."""

import argparse
import dataclasses
import json
import types

import pytest
import tensorflow as tf

from app.cli.flags import add_data_arguments, data_config_from_args
from data.tokenizer import MODEL_FILENAME, SubwordTokenizer, load_or_train, lowercase_lines, lowercase_strings
from tests.tiny_run import write_multi30k_slice

VOCAB_SIZE = 500


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """`[train.en, train.de, val.en, val.de]`: the first 300 / 20 lines of Multi30k."""
    return write_multi30k_slice(tmp_path_factory.mktemp("corpus"), train=300, validation=20)


def _read(path):
    with open(path, encoding="utf-8") as file:
        return file.read().splitlines()


@pytest.fixture(scope="module")
def lowercase_tokenizer(corpus, tmp_path_factory):
    texts = _read(corpus[0]) + _read(corpus[1])
    return SubwordTokenizer.train(
        texts, VOCAB_SIZE, str(tmp_path_factory.mktemp("vocab") / MODEL_FILENAME), lowercase=True
    )


def test_python_and_graph_lowercase_alike_and_keep_sharp_s():
    line = "STRAßE, Ärger, École, ΣΑΣ, İstanbul"
    expected = "straße, ärger, école, σας, i̇stanbul"  # Final sigma; dotted I keeps its dot.
    assert lowercase_lines([line]) == [expected]
    assert lowercase_strings(tf.constant([line])).numpy()[0].decode("utf-8") == expected
    assert lowercase_lines([]) == []


def test_a_lowercase_vocabulary_has_no_capitals_and_reads_any_case(lowercase_tokenizer, corpus):
    pieces = [piece.decode("utf-8") for piece in lowercase_tokenizer._sentencepiece().id_to_string(
        tf.range(lowercase_tokenizer.vocab_size)).numpy()]
    words = [piece for piece in pieces if not piece.startswith("<")]  # Reserved and byte pieces aside.
    assert len(words) > 200 and not [piece for piece in words if piece != piece.lower()]

    lines = _read(corpus[3])  # German validation: capitalized nouns.
    as_written = lowercase_tokenizer.tokenize(tf.constant(lines))
    lowered = lowercase_tokenizer.tokenize(tf.constant([line.lower() for line in lines]))
    shouted = lowercase_tokenizer.tokenize(tf.constant([line.upper() for line in lines]))
    assert as_written.to_list() == lowered.to_list()
    # str.upper() turns "ß" into "SS", which lowercases to "ss": only those lines may differ.
    assert [a for a, s, line in zip(as_written.to_list(), shouted.to_list(), lines) if a != s and "ß" not in line] == []
    decoded = [text.decode("utf-8") for text in lowercase_tokenizer.detokenize(as_written).numpy()]
    assert decoded == [" ".join(line.lower().split()) for line in lines]


def test_bpe_dropout_samples_lowercase_too(lowercase_tokenizer, corpus):
    lines = _read(corpus[3])
    sampled = tf.ragged.constant(lowercase_tokenizer.sample(lines, dropout=0.1, seed=3), dtype=tf.int32)
    decoded = [text.decode("utf-8") for text in lowercase_tokenizer.detokenize(sampled).numpy()]
    assert decoded == [" ".join(line.lower().split()) for line in lines]


def test_lowercase_is_a_setting_of_the_run_not_of_the_file(lowercase_tokenizer, tmp_path):
    path = tmp_path / MODEL_FILENAME
    path.write_bytes(lowercase_tokenizer.model_proto)
    assert SubwordTokenizer.load(str(path), lowercase=True).lowercase
    assert not SubwordTokenizer.load(str(path)).lowercase
    reused = load_or_train(str(tmp_path), lambda: pytest.fail("must not retrain"), VOCAB_SIZE, lowercase=True)
    assert reused.lowercase and reused.model_proto == lowercase_tokenizer.model_proto


def test_the_flag_reaches_the_config():
    parser = argparse.ArgumentParser()
    add_data_arguments(parser)
    config = data_config_from_args(parser.parse_args(["--lowercase"]))
    assert config.lowercase is True
    assert dataclasses.replace(config, lowercase=False) == data_config_from_args(parser.parse_args([]))


def test_prepared_data_is_lowercased(corpus, tmp_path):
    from data.config import DataConfig
    from data.dataset import prepare_data
    from data.summary import format_summary, summarize

    config = DataConfig(dataset="files:" + ",".join(corpus), vocab_size=VOCAB_SIZE, batch_tokens=512, max_length=64)
    cased = prepare_data(config, str(tmp_path / "cased"))
    lowered = prepare_data(dataclasses.replace(config, lowercase=True), str(tmp_path / "lowered"))
    assert lowered.tokenizer.lowercase and not cased.tokenizer.lowercase
    assert "vocabulary 500 subwords of lowercased text" in "\n".join(format_summary(summarize(lowered)))
    assert "lowercased" not in "\n".join(format_summary(summarize(cased)))
    # The training targets detokenize to the lowercased German.
    targets = lowered.tokenizer.detokenize(lowered.tokens["train"].target[:5]).numpy()
    assert [t.decode("utf-8") for t in targets] == [" ".join(line.lower().split()) for line in _read(corpus[1])[:5]]


def test_validation_bleu_of_a_lowercase_run_is_lowercased_bleu(lowercase_tokenizer, tmp_path, monkeypatch):
    from app.training import validation

    # A "model" that copies its source, so the hypothesis is the source as the tokenizer
    # reads it back: lowercased.
    monkeypatch.setattr(validation, "greedy_ids", lambda transformer, source_ids: (source_ids, None))
    transformer = types.SimpleNamespace(config=types.SimpleNamespace(max_length=64))  # all it reads
    sentence = "Ein Hund läuft über die grüne Wiese ."
    lowercase_score = validation.make_bleu_evaluator(lowercase_tokenizer, [sentence], [sentence])(transformer)
    assert lowercase_score["bleu"] == pytest.approx(100.0)
    assert "case:lc" in lowercase_score["bleu_signature"]

    cased_path = tmp_path / MODEL_FILENAME
    cased_path.write_bytes(lowercase_tokenizer.model_proto)
    cased_score = validation.make_bleu_evaluator(
        SubwordTokenizer.load(str(cased_path)), [sentence], [sentence]
    )(transformer)
    assert "case:mixed" in cased_score["bleu_signature"]


@pytest.mark.slow
def test_an_export_of_a_lowercase_run_reads_any_case(tmp_path, monkeypatch):
    """The SavedModel lowercases in its graph: cased and lowercased input translate alike."""
    from app.export.saved_model import Translator, export, export_metadata, load_trained
    from app.decoding.config import DecodingConfig
    from tests.tiny_run import train_tiny_run

    # The signature read here is the only one written: each signature tokenizes its inputs
    # with the same lowercasing tokenizer, and the other five took 20 s of CPU to trace,
    # save and load (tests/export/ checks that an export writes all six).
    monkeypatch.setattr(Translator, "signatures", lambda self: {"serving_default": self.serve})
    (tmp_path / "run").mkdir()
    model_dir = train_tiny_run(tmp_path / "run", lowercase=True)
    trained = load_trained(model_dir)
    translator = trained.translator()
    assert translator.tokenizer.lowercase
    path = export(translator, str(tmp_path / "exports" / "translator"))
    restored = tf.saved_model.load(path).signatures["serving_default"]
    sentences = ["A man rides a bike.", "Zwei Hunde spielen im Schnee."]
    lowered = [sentence.lower() for sentence in sentences]
    from_cased, from_lowered = restored(inputs=tf.constant(sentences)), restored(inputs=tf.constant(lowered))
    in_memory = translator.serve(tf.constant(sentences))
    for key in ("translations", "scores"):
        assert from_cased[key].numpy().tolist() == from_lowered[key].numpy().tolist() == in_memory[key].numpy().tolist()
    # The scores do see the case of the ids: the same weights read without lowercasing
    # score the cased input differently (so the equality above is the lowercasing's doing).
    reads_case = Translator(trained.model, trained.config, SubwordTokenizer(translator.tokenizer.model_proto))
    assert not reads_case.tokenizer.lowercase
    assert (reads_case.serve(tf.constant(sentences))["scores"].numpy()
            != reads_case.serve(tf.constant(lowered))["scores"].numpy()).all()
    assert export_metadata(model_dir, trained.weights, DecodingConfig())["lowercase"] is True
    assert json.loads((tmp_path / "run" / "settings.json").read_text())["data"]["lowercase"] is True
