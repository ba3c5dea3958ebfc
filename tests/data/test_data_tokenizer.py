"""Tests for data/tokenizer.py: reserved ids, round trip, graph mode, determinism, export."""

import gzip
import os
import re
import unicodedata

import keras
import pytest
import tensorflow as tf

from data.errors import DataError
from data.tokenizer import MODEL_FILENAME, SubwordTokenizer, load_or_train

VOCAB_SIZE = 600
MULTI30K_DIR = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "data", "multi30k")


def _lines(name, count):
    with gzip.open(os.path.join(MULTI30K_DIR, name), "rt", encoding="utf-8") as file:
        return [line.rstrip("\n") for _, line in zip(range(count), file)]


def _normalized(text):
    """What the documented normalization makes of `text`: NFKC, whitespace runs collapsed."""
    return " ".join(unicodedata.normalize("NFKC", text).split())


@pytest.fixture(scope="module")
def texts():
    return _lines("train.en.gz", 1000) + _lines("train.de.gz", 1000)


@pytest.fixture(scope="module")
def tokenizer(texts, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("vocab") / MODEL_FILENAME)
    return SubwordTokenizer.train(texts, VOCAB_SIZE, path)


def test_reserved_ids(tokenizer):
    pieces = tokenizer._sentencepiece().id_to_string(tf.constant([0, 1, 2, 3])).numpy().tolist()
    assert pieces == [b"<pad>", b"<s>", b"</s>", b"<unk>"]
    assert (tokenizer.pad_id, tokenizer.start_id, tokenizer.end_id, tokenizer.unknown_id) == (0, 1, 2, 3)
    assert tokenizer.vocab_size == VOCAB_SIZE


def test_tokenize_adds_no_markers_and_no_unknowns(tokenizer):
    ids = tokenizer.tokenize(tf.constant(_lines("val.de.gz", 200)))
    assert isinstance(ids, tf.RaggedTensor) and ids.dtype == tf.int32
    values = ids.flat_values.numpy()
    assert values.min() > tokenizer.unknown_id  # No pad, start, end or unknown.
    assert values.max() < tokenizer.vocab_size


@pytest.mark.parametrize("name", ["val.en.gz", "val.de.gz", "val.fr.gz"])
def test_round_trip_on_validation_up_to_normalization(tokenizer, name):
    # French is not in the vocabulary's training text: byte fallback must cover it.
    lines = _lines(name, 300)
    decoded = tokenizer.detokenize(tokenizer.tokenize(tf.constant(lines))).numpy()
    assert [text.decode("utf-8") for text in decoded] == [_normalized(line) for line in lines]


def test_round_trip_of_unseen_scripts_through_byte_fallback(tokenizer):
    lines = ["日本語の文です。", "Привет, мир!", "Ναι — 🙂 ok", "naïve café"]
    ids = tokenizer.tokenize(tf.constant(lines))
    assert tokenizer.unknown_id not in ids.flat_values.numpy()
    assert [t.decode("utf-8") for t in tokenizer.detokenize(ids).numpy()] == lines


@pytest.mark.slow
def test_graph_mode_equals_eager(tokenizer):
    lines = tf.constant(_lines("val.en.gz", 50))
    graph_tokenize = tf.function(tokenizer.tokenize)
    graph_detokenize = tf.function(tokenizer.detokenize)
    eager_ids = tokenizer.tokenize(lines)
    graph_ids = graph_tokenize(lines)
    assert eager_ids.to_list() == graph_ids.to_list()
    dense = eager_ids.to_tensor()
    assert graph_detokenize(dense).numpy().tolist() == tokenizer.detokenize(dense).numpy().tolist()


def test_detokenize_skips_padding_and_start_and_stops_at_end(tokenizer):
    words = tokenizer.tokenize(tf.constant(["A dog runs.", "Two men"])).to_list()
    junk = tokenizer.tokenize(tf.constant(["junk"])).to_list()[0]
    rows = [
        [1] + words[0] + [2] + junk + [0, 0],  # Tokens after the end id are ignored.
        [1] + words[1] + [0] * (len(words[0]) + len(junk) + 3 - len(words[1])),  # No end id.
    ]
    dense = tf.constant(rows, tf.int32)
    expected = [b"A dog runs.", b"Two men"]
    assert tokenizer.detokenize(dense).numpy().tolist() == expected
    assert tokenizer.detokenize(tf.ragged.constant(rows)).numpy().tolist() == expected
    # Out-of-vocabulary ids (a padded output layer) are skipped, int64 is accepted.
    padded = tf.constant([[tokenizer.vocab_size + 5] + words[1] + [2]], tf.int64)
    assert tokenizer.detokenize(padded).numpy().tolist() == [b"Two men"]


def test_detokenize_writes_one_line_whatever_bytes_the_ids_spell(tokenizer):
    # Byte-fallback pieces spell any byte, so a poorly trained model can write a line
    # break, a NUL or U+2028 and split one translation over several lines of a file.
    word = tokenizer.tokenize(tf.constant(["dog"])).to_list()[0]
    pieces = ["<0x0A>", "<0x0D>", "<0x00>", "<0x09>", "<0x7F>", "<0xC2>", "<0x85>", "<0xE2>", "<0x80>", "<0xA8>"]
    newline, carriage_return, nul, tab, delete, *next_line_and_line_separator = (
        tokenizer._sentencepiece().string_to_id(tf.constant(pieces)).numpy().tolist()
    )
    rows = [
        word + [newline] + word,
        word + [carriage_return, newline] + word,
        word + [nul, tab, delete] + word,
        word + next_line_and_line_separator + word,
    ]
    texts = [text.decode("utf-8") for text in tokenizer.detokenize(tf.ragged.constant(rows)).numpy()]
    assert texts == ["dog dog"] * 4
    graph_texts = tf.function(tokenizer.detokenize)(tf.ragged.constant(rows).to_tensor()).numpy()
    assert [text.decode("utf-8") for text in graph_texts] == texts


def test_training_is_deterministic(texts, tmp_path):
    first = SubwordTokenizer.train(texts, VOCAB_SIZE, str(tmp_path / "a" / MODEL_FILENAME))
    second = SubwordTokenizer.train(texts, VOCAB_SIZE, str(tmp_path / "b" / MODEL_FILENAME))
    assert first.model_proto == second.model_proto
    with open(tmp_path / "a" / MODEL_FILENAME, "rb") as a, open(tmp_path / "b" / MODEL_FILENAME, "rb") as b:
        assert a.read() == b.read()


def test_load_or_train_reuses_the_saved_vocabulary(texts, tmp_path):
    trained = load_or_train(str(tmp_path), lambda: texts, VOCAB_SIZE)

    def must_not_train():
        raise AssertionError("retrained although the vocabulary file exists")

    loaded = load_or_train(str(tmp_path), must_not_train, VOCAB_SIZE)
    assert loaded.model_proto == trained.model_proto
    with pytest.raises(DataError, match="vocab_size 600.*vocab_size 700"):
        load_or_train(str(tmp_path), must_not_train, 700)


def test_training_says_when_it_starts_reads_the_last_sentence_and_ends(texts, tmp_path, capsys):
    lines = []
    streamed = iter(texts)  # a corpus read once, as train.py's sample: its count is known once read
    tokenizer = load_or_train(str(tmp_path / "a"), lambda: streamed, VOCAB_SIZE, log=lines.append)
    assert lines[0] == "training the vocabulary: 600 bpe pieces on the training sentences, streamed"
    assert re.fullmatch(r"vocabulary: read 2,000 sentences in \d+\.\d s; learning the pieces", lines[1])
    assert re.fullmatch(r"vocabulary: 600 pieces from 2,000 sentences in \d+\.\d s", lines[2])
    assert len(lines) == 3 and tokenizer.vocab_size == 600
    # A list tells its count at once; without a log callable the lines go to stderr, not stdout.
    SubwordTokenizer.train(["a tiny corpus", "tiny"] * 5, 1000, str(tmp_path / "b"), lowercase=True)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines()[0] == "training the vocabulary: 1,000 bpe pieces on 10 sentences"
    assert re.fullmatch(r"vocabulary: \d+ pieces from 10 sentences in \d+\.\d s", captured.err.splitlines()[2])


def test_small_corpus_gets_a_smaller_vocabulary_not_an_error(tmp_path):
    tokenizer = SubwordTokenizer.train(["a tiny corpus", "tiny"] * 5, 1000, str(tmp_path / "m"))
    assert 260 < tokenizer.vocab_size < 1000


def test_load_missing_file_names_it(tmp_path):
    with pytest.raises(DataError, match="nowhere.model"):
        SubwordTokenizer.load(str(tmp_path / "nowhere.model"))


def test_survives_reseeding(tokenizer):
    # Seeding clears TensorFlow's kernel cache, which used to destroy the vocabulary.
    before = tokenizer.tokenize(tf.constant(["A dog."])).to_list()
    keras.utils.set_random_seed(7)
    tf.random.set_seed(8)
    assert tokenizer.tokenize(tf.constant(["A dog."])).to_list() == before


def test_saved_model_takes_raw_strings(tokenizer, tmp_path):
    class Module(tf.Module):
        def __init__(self, tokenizer):
            super().__init__()
            self.tokenizer = tokenizer

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def round_trip(self, strings):
            return self.tokenizer.detokenize(self.tokenizer.tokenize(strings).to_tensor())

    lines = tf.constant(["A man sleeps.", "Ein Hund läuft."])
    tf.saved_model.save(Module(tokenizer), str(tmp_path / "export"))
    restored = tf.saved_model.load(str(tmp_path / "export"))
    assert restored.round_trip(lines).numpy().tolist() == lines.numpy().tolist()


def test_more_characters_than_the_vocabulary_holds_is_named_with_the_size_needed(tmp_path):
    # 60 characters, equally frequent: each needs a piece besides the 260 reserved and byte pieces.
    texts = [chr(0x4E00 + i) * 3 for i in range(60)]
    path = tmp_path / MODEL_FILENAME
    with pytest.raises(DataError) as error:
        SubwordTokenizer.train(texts, 300, str(path))
    assert str(error.value) == (
        "vocab_size 300 is too small for the training text: the characters that make up 99.95% of it each "
        "need a piece, 321 pieces with the reserved and byte pieces; use a vocab_size of at least 321"
    )
    assert list(tmp_path.iterdir()) == []
    assert SubwordTokenizer.train(texts, 321, str(path)).vocab_size == 321


def test_text_with_no_sentence_the_trainer_reads_is_named(tmp_path):
    with pytest.raises(DataError) as error:
        SubwordTokenizer.train(["x" * 5000, " "], 300, str(tmp_path / MODEL_FILENAME))
    assert str(error.value) == (
        "no sentence to learn the subword vocabulary from: every training sentence is empty or longer "
        "than 4192 bytes, the longest the trainer reads"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "content, problem",
    [
        (b"not a model", "not a sentencepiece model: its bytes do not parse as one"),
        (b"", "not a sentencepiece model: it holds no pieces"),
    ],
)
def test_a_file_that_is_not_a_vocabulary_is_named(content, problem, tmp_path):
    path = tmp_path / MODEL_FILENAME
    path.write_bytes(content)
    with pytest.raises(DataError) as error:
        load_or_train(str(tmp_path), lambda: ["a cat"], VOCAB_SIZE)
    assert str(error.value) == f"{path}: {problem}"
    assert path.read_bytes() == content  # Left as it was: it may be a run's only copy.
