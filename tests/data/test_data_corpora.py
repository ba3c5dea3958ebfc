"""Tests for reading data: Multi30k, files:, TFDS (mocked), the CLI, and every bad input."""

import argparse
import dataclasses
import gzip
import io
import re

import numpy as np
import pytest
import tensorflow as tf

from app.commands.client import read_lines as client_read_lines
from app.cli.flags import add_data_arguments, data_config_from_args
from data.config import DataConfig
from data.corpora import load_corpus, multi30k_path, open_corpus, read_multi30k_lines
from data.dataset import prepare_data
from data.errors import DataError
from data import text_files
from data.text_files import read_lines


def _write(path, lines, gz=False):
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    if gz:
        data = gzip.compress(data)
    path.write_bytes(data)
    return str(path)


def test_multi30k_en_de_and_reverse_directions():
    en_de = load_corpus("multi30k", "en", "de")
    assert {split: len(text) for split, text in en_de.splits.items()} == {
        "train": 29000,
        "validation": 1014,
        "test": 1000,
    }
    assert en_de.splits["validation"].source[0] == "A group of men are loading cotton onto a truck"
    assert en_de.splits["validation"].target[0].startswith("Eine Gruppe von Männern")
    de_en = load_corpus("multi30k", "de", "en")
    assert de_en.splits["validation"].source[0] == en_de.splits["validation"].target[0]
    fr_en = load_corpus("multi30k", "fr", "en")
    assert fr_en.splits["test"].target == en_de.splits["test"].source


def test_multi30k_unknown_language_is_named():
    with pytest.raises(DataError, match="'cs'"):
        load_corpus("multi30k", "en", "cs")


def test_benchmarks_read_multi30k_splits_by_our_names_or_by_file_stems():
    corpus = load_corpus("multi30k", "en", "de")
    assert read_multi30k_lines("test_2016_flickr", "de") == corpus.splits["test"].target
    assert read_multi30k_lines("validation", "en", 3) == corpus.splits["validation"].source[:3]
    assert multi30k_path("val", "fr") == multi30k_path("validation", "fr")
    assert multi30k_path("val", "fr").endswith("val.fr.gz")


@pytest.mark.parametrize(
    "split, lang, message",
    [
        ("test2016", "de", "multi30k has no split 'test2016'; it has test, test_2016_flickr, train, val, validation"),
        ("train", "cs", "multi30k has no language 'cs'; it has en, de, fr"),
    ],
)
def test_a_multi30k_split_or_language_it_lacks_is_named(split, lang, message):
    with pytest.raises(DataError) as refused:
        read_multi30k_lines(split, lang)
    assert str(refused.value) == message


@pytest.mark.parametrize("language", ["", "../de", "de/x", " de", "1de", "de\n"])
def test_a_language_that_is_no_code_is_named(language):
    # It becomes part of the default model directory: runs/tiny-multi30k-en-../de.
    with pytest.raises(DataError) as refused:
        DataConfig(source_lang="en", target_lang=language)
    assert str(refused.value) == (
        f"target_lang {language!r} is not a language code: use letters, then letters, digits, '-' or '_' "
        "(en, de, pt-BR, zh_Hans)"
    )
    assert DataConfig(source_lang="pt-BR", target_lang="zh_Hans").target_lang == "zh_Hans"


def test_same_source_and_target_language_is_rejected():
    with pytest.raises(DataError, match="'en'"):
        DataConfig(source_lang="en", target_lang="en")


def test_files_with_empty_lines_counted_and_validation_held_out(tmp_path):
    source = [f"sentence {i}" for i in range(300)] + ["", "   ", "lonely"]
    target = [f"Satz {i}" for i in range(300)] + ["Satz", "Satz", " \t "]
    spec = f"files:{_write(tmp_path / 's.txt', source)},{_write(tmp_path / 't.txt.gz', target, gz=True)}"
    corpus = load_corpus(spec, "en", "de")
    assert corpus.read["train"] == 300  # 303 lines, 3 held out as validation.
    assert corpus.dropped_empty["train"] == 3
    assert len(corpus.splits["train"]) + len(corpus.splits["validation"]) == 300
    assert len(corpus.splits["validation"]) == 3  # 1% of train.
    assert corpus.validation_note == "held out 3 pairs of train"
    # Held-out pairs left train, and pairs stay aligned.
    assert not set(corpus.splits["validation"].source) & set(corpus.splits["train"].source)
    for text in corpus.splits.values():
        assert [s.split()[1] for s in text.source] == [t.split()[1] for t in text.target]


def test_files_with_validation_files(tmp_path):
    paths = [
        _write(tmp_path / "train.en", ["a b", "c d"]),
        _write(tmp_path / "train.de", ["A B", "C D"]),
        _write(tmp_path / "valid.en.gz", ["e f"], gz=True),
        _write(tmp_path / "valid.de", ["E F"]),
    ]
    corpus = load_corpus("files:" + ",".join(paths), "en", "de")
    assert corpus.splits["train"].source == ["a b", "c d"]
    assert corpus.splits["validation"].target == ["E F"]
    assert corpus.validation_note is None


def test_line_count_mismatch_names_both_files_and_counts(tmp_path):
    spec = f"files:{_write(tmp_path / 'a.en', ['x'] * 5)},{_write(tmp_path / 'b.de', ['y'] * 4)}"
    with pytest.raises(DataError, match=r"a\.en has 5 lines but .*b\.de has 4"):
        load_corpus(spec, "en", "de")


def test_every_reader_splits_a_file_into_the_same_lines(tmp_path):
    # A byte-order mark, CRLF, line and paragraph separators that str.splitlines() would
    # split on (U+2028, U+0085, \x0b, \x0c, \x1c-\x1e), a tab, no newline at the end.
    content = "\ufeffa cat\r\nthe\u2028dog\nthe\x85bird\r\nfish\tand\x0bchips\x1c\x1d\x1e\x0c.\nend".encode()
    path = tmp_path / "odd.en"
    path.write_bytes(content)
    lines = read_lines(str(path))
    assert lines == ["a cat", "the\u2028dog", "the\x85bird", "fish\tand\x0bchips\x1c\x1d\x1e\x0c.", "end"]
    # The translation client's stdin, and TensorFlow's own line reader, agree line for line
    # (both keep the byte-order mark, which the subword normalization drops).
    assert client_read_lines(io.BytesIO(content)) == ["\ufeff" + lines[0]] + lines[1:]
    assert [line.decode() for line in tf.data.TextLineDataset(str(path)).as_numpy_iterator()] == (
        ["\ufeff" + lines[0]] + lines[1:]
    )


def test_a_file_whose_lines_end_with_a_lone_carriage_return_is_named(tmp_path):
    source, target = tmp_path / "mac.en", tmp_path / "unix.de"
    source.write_bytes(b"a cat\rthe dog\r")
    target.write_bytes(b"eine Katze\nder Hund\n")
    with pytest.raises(DataError) as error:
        load_corpus(f"files:{source},{target}", "en", "de")
    assert str(error.value) == (
        f"{source}: its lines end with a lone carriage return (\\r), which does not end a line here "
        "(only \\n or \\r\\n does), so it reads as a single line; convert its line ends to \\n "
        "(e.g. with tr '\\r' '\\n')"
    )
    # A stray "\r" inside a line of a file with "\n" line ends stays part of that line.
    target.write_bytes(b"eine\rKatze\n")
    assert read_lines(str(target)) == ["eine\rKatze"]


def test_one_file_as_both_sides_is_refused(tmp_path):
    path = _write(tmp_path / "a.en", ["x", "y"])
    link = tmp_path / "a.de"
    link.symlink_to(path)
    with pytest.raises(DataError) as error:
        load_corpus(f"files:{path},{link}", "en", "de")
    assert str(error.value) == (
        f"{path} and {link} are the same file; parallel text needs the source sentences in one file and "
        "their translations in another"
    )


def test_missing_file_is_named(tmp_path):
    spec = f"files:{_write(tmp_path / 'a.en', ['x'])},{tmp_path / 'missing.de'}"
    with pytest.raises(DataError, match="file not found: .*missing.de"):
        load_corpus(spec, "en", "de")


def test_an_unreadable_file_is_named(tmp_path, monkeypatch):
    path = _write(tmp_path / "locked.en", ["x"])

    def refuse(file, mode):  # What open() raises for a file without read permission.
        raise PermissionError(13, "Permission denied", file)

    monkeypatch.setattr(text_files, "open", refuse, raising=False)
    with pytest.raises(DataError) as error:
        read_lines(path)
    assert str(error.value) == f"{path}: cannot be read (Permission denied)"


def test_non_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "latin1.de"
    path.write_bytes("gut\nschön\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"latin1\.de, line 2: not valid UTF-8 \(byte 0xf6"):
        read_lines(str(path))


@pytest.mark.parametrize(
    "content, line, offset",
    [
        ("a cat\nthe\x00 dog\n".encode("utf-8"), 2, 3),  # A stray NUL.
        ("a cat\n".encode("utf-16-le"), 1, 1),  # UTF-16 without a byte-order mark: "a\0 \0c\0...".
    ],
)
def test_a_nul_byte_names_file_line_and_offset(content, line, offset, tmp_path):
    path = tmp_path / "nul.en"
    path.write_bytes(content)
    with pytest.raises(DataError) as error:
        read_lines(str(path))
    assert str(error.value) == (
        f"{path}, line {line}: a NUL byte at byte offset {offset} of the line, which no text holds: convert "
        "a UTF-16 file to UTF-8, or remove stray NULs (e.g. with tr -d '\\000')"
    )


@pytest.mark.parametrize(
    "content, byte, hint",
    [
        (b"\xff\xfe" + "a cat\n".encode("utf-16-le"), "0xff at byte offset 0",
         "it starts like UTF-16 text: convert it to UTF-8"),
        (gzip.compress(b"a cat\n", mtime=0), "0x8b at byte offset 1",
         "it starts like a gzip file: give it a name that ends in .gz"),
    ],
)
def test_a_utf16_or_gzip_file_read_as_utf8_says_what_it_looks_like(content, byte, hint, tmp_path):
    path = tmp_path / "train.en"
    path.write_bytes(content)
    with pytest.raises(DataError) as error:
        read_lines(str(path))
    assert str(error.value) == f"{path}, line 1: not valid UTF-8 (byte {byte} of the line); {hint}"


def test_corrupt_gzip_is_named(tmp_path):
    path = tmp_path / "broken.en.gz"
    path.write_bytes(b"not gzip at all")
    with pytest.raises(DataError, match=r"broken\.en\.gz: not a valid gzip file"):
        read_lines(str(path))


def test_bad_files_spec_is_named():
    with pytest.raises(DataError, match="'files:only_one.txt'"):
        load_corpus("files:only_one.txt", "en", "de")


def test_unknown_dataset_is_named():
    with pytest.raises(DataError, match="unknown dataset 'multi31k'"):
        load_corpus("multi31k", "en", "de")


def test_tfds_unknown_language_lists_the_keys():
    # Checked from the builder's code, before any download.
    with pytest.raises(DataError, match="no language 'fr'.*keys en, pt"):
        load_corpus("ted_hrlr_translate/pt_to_en", "fr", "en")


@pytest.mark.parametrize("name, message", [
    ("wmt14_translate/xx-yy", "BuilderConfig xx-yy not found"),
    ("ted_hrlr_translate/pt_to_en:9.9.9", "9.9.9"),
])
def test_tfds_a_config_or_version_the_builder_lacks_is_named(name, message):
    with pytest.raises(DataError, match=f"^TensorFlow Datasets cannot build {re.escape(repr(name))}: .*{message}"):
        load_corpus(name, "pt", "en")


@pytest.fixture
def hosts_reachable(monkeypatch):
    """Every download host answers (under mock_data nothing is downloaded at all)."""
    import data.corpora

    monkeypatch.setattr(data.corpora, "unreachable_hosts", lambda urls: [])


def test_tfds_a_failed_download_is_named_with_the_way_out(monkeypatch, tmp_path, hosts_reachable):
    tfds = pytest.importorskip("tensorflow_datasets")
    import requests

    # Where the real download starts: the builder's code path, then its checksums and URLs.
    builder_class = type(tfds.builder("ted_hrlr_translate/pt_to_en"))
    assert builder_class.code_path.name == "ted_hrlr_translate_dataset_builder.py"  # its imports resolve

    def no_network(self, *args, **kwargs):
        raise requests.exceptions.ConnectionError("Failed to resolve 'www.phontron.com'")

    monkeypatch.setattr(builder_class, "download_and_prepare", no_network)
    with pytest.raises(
        DataError,
        match=r"^could not download or prepare 'ted_hrlr_translate/pt_to_en' \(ConnectionError: Failed to resolve "
        r"'www.phontron.com'\); TensorFlow Datasets needs the network on first use, or a copy prepared under",
    ):
        load_corpus("ted_hrlr_translate/pt_to_en", "pt", "en")


def test_tfds_without_a_network_fails_at_once_naming_the_files_the_directory_and_files(monkeypatch):
    # TFDS would retry every file for minutes; the hosts are tried once, before it starts.
    tfds = pytest.importorskip("tensorflow_datasets")
    import data.corpora

    asked = []
    monkeypatch.setattr(data.corpora, "unreachable_hosts", lambda urls: asked.append(urls) or ["www.phontron.com:80"])

    def must_not_download(self, *args, **kwargs):
        raise AssertionError("download_and_prepare was called")

    monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare", must_not_download)
    with pytest.raises(DataError) as refused:
        open_corpus("tfds:ted_hrlr_translate/pt_to_en", "pt", "en")
    directory = str(tfds.builder("ted_hrlr_translate/pt_to_en").data_dir)  # not prepared: no copy here
    url = "http://www.phontron.com/data/qi18naacl-dataset.tar.gz"
    assert asked == [[url]]
    assert str(refused.value) == (
        f"ted_hrlr_translate/pt_to_en is not prepared under {directory}, and this machine cannot reach "
        f"www.phontron.com:80 to download it (1 file(s): {url}). Prepare it where there is a network "
        "(`tfds build ted_hrlr_translate/pt_to_en`, or this same command) and copy the directory "
        f"{directory} to the same path here (under TFDS_DATA_DIR, by default ~/tensorflow_datasets), or give "
        "the text as --dataset files:TRAIN_SRC,TRAIN_TGT,VALID_SRC,VALID_TGT"
    )


def test_a_host_is_unreachable_unless_it_accepts_a_connection_in_time():
    import socket

    from data.corpora import unreachable_hosts

    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    open_port = listening.getsockname()[1]
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]  # bound, never listening: refused
    try:
        urls = [f"http://127.0.0.1:{open_port}/a.tgz", f"http://127.0.0.1:{open_port}/b.tgz",
                f"https://127.0.0.1:{closed_port}/c.tgz", "http://host.invalid/d.tgz"]
        assert unreachable_hosts(urls, timeout=5) == [f"127.0.0.1:{closed_port}", "host.invalid:80"]
        assert unreachable_hosts(urls[:2]) == [] and unreachable_hosts([]) == []
    finally:
        listening.close()
        closed.close()


def test_tfds_translation_builder_under_mock_data(tmp_path, hosts_reachable):
    tfds = pytest.importorskip("tensorflow_datasets")
    config = DataConfig(
        dataset="ted_hrlr_translate/pt_to_en",
        source_lang="pt",
        target_lang="en",
        vocab_size=300,
        batch_tokens=512,
        max_length=64,
    )
    with tfds.testing.mock_data(num_examples=40, policy=tfds.testing.MockPolicy.USE_CODE):
        data = prepare_data(config, str(tmp_path))
        first_source, _ = next(iter(data.text["train"]))  # Train's text streams from TFDS.
    assert set(data.text) == {"train", "validation", "test"}
    assert data.counts["train"].read == 40
    ids = data.tokenizer.tokenize([first_source]).to_list()[0]
    decoded = data.tokenizer.detokenize([ids]).numpy()[0].decode("utf-8")
    assert decoded == " ".join(first_source.split())
    batches = list(data.train_batches(epoch=0))
    assert sum(int((source[:, 0] != 0).numpy().sum()) for source, _ in batches) == data.counts["train"].kept


def test_cli_defaults_and_overrides():
    parser = argparse.ArgumentParser()
    add_data_arguments(parser)
    config = data_config_from_args(parser.parse_args([]))
    assert config == DataConfig()
    assert (config.dataset, config.source_lang, config.target_lang) == ("multi30k", "en", "de")
    assert config.batch_tokens is None
    args = parser.parse_args(
        ["--dataset", "wmt14_translate/de-en", "--source-lang", "de", "--target-lang", "en",
         "--vocab-size", "37000", "--batch-tokens", "25000", "--max-length", "128"]
    )
    assert data_config_from_args(args) == DataConfig(
        dataset="wmt14_translate/de-en", source_lang="de", target_lang="en",
        vocab_size=37000, batch_tokens=25000, max_length=128,
    )


def test_prepare_data_needs_resolved_batch_tokens(tmp_path):
    with pytest.raises(DataError, match="batch_tokens is None"):
        prepare_data(DataConfig(), str(tmp_path))
    with pytest.raises(DataError, match="batch_tokens 200 cannot hold"):
        dataclasses.replace(DataConfig(), batch_tokens=200)


def test_a_library_error_is_reported_by_its_first_line_or_its_type():
    from data.errors import first_line

    assert first_line(ValueError("BuilderConfig xx-yy not found.\nAvailable: de-en, fr-en")) == (
        "BuilderConfig xx-yy not found."
    )
    assert first_line(IndexError()) == "IndexError"  # an empty message
    assert first_line(OSError("  \n")) == "OSError"


def test_tfds_streams_its_own_tf_data_stream_in_batches(monkeypatch, hosts_reachable):
    """Pairs come from `builder.as_dataset(...)` batch by batch, as a generator: never a
    list of the whole split."""
    tfds = pytest.importorskip("tensorflow_datasets")
    import types

    import data.corpora

    asked = []
    as_dataset = tfds.core.DatasetBuilder.as_dataset

    def recording(self, *args, **kwargs):
        asked.append(kwargs.get("split"))
        return as_dataset(self, *args, **kwargs)

    monkeypatch.setattr(tfds.core.DatasetBuilder, "as_dataset", recording)
    monkeypatch.setattr(data.corpora, "_TFDS_BATCH", 7)
    with tfds.testing.mock_data(num_examples=40, policy=tfds.testing.MockPolicy.USE_CODE):
        corpus = data.corpora.open_corpus("ted_hrlr_translate/pt_to_en", "pt", "en")
        assert asked == []  # Opening reads nothing.
        pairs = corpus.pairs("train")
        assert isinstance(pairs, types.GeneratorType)
        streamed = list(pairs)
        expected = load_corpus("ted_hrlr_translate/pt_to_en", "pt", "en").splits["train"]
    assert asked[0] == "train"
    assert [source for source, _ in streamed] == expected.source
    assert [target for _, target in streamed] == expected.target
    assert corpus.read["train"] == 40 and corpus.dropped_empty["train"] == 40 - len(streamed)


def test_a_misaligned_pair_of_files_names_both_and_where_they_part(tmp_path):
    spec = f"files:{_write(tmp_path / 'a.en', ['x'] * 3)},{_write(tmp_path / 'b.de', ['y'] * 5)}"
    stream = open_corpus(spec, "en", "de").pairs("train")
    with pytest.raises(DataError) as error:
        list(stream)
    assert str(error.value) == (
        f"parallel files differ in length: {tmp_path / 'a.en'} has 3 lines but {tmp_path / 'b.de'} has 5; "
        "line N of one must translate line N of the other (they part after line 3)"
    )


def test_held_out_validation_streams_the_same_pairs_as_the_lists(tmp_path):
    source = [f"sentence {i}" for i in range(450)] + ["", "x"]
    target = [f"Satz {i}" for i in range(450)] + ["Satz", ""]
    spec = f"files:{_write(tmp_path / 's.txt', source)},{_write(tmp_path / 't.txt', target)}"
    stream = open_corpus(spec, "en", "de")
    validation, train = list(stream.pairs("validation")), list(stream.pairs("train"))
    kept = [(s, t) for s, t in zip(source, target) if s.strip() and t.strip()]
    held = set(np.linspace(0, len(kept) - 1, 4).round().astype(int).tolist())
    assert validation == [kept[i] for i in sorted(held)]
    assert train == [pair for i, pair in enumerate(kept) if i not in held]
    assert (stream.read, stream.dropped_empty) == ({"train": 448, "validation": 4}, {"train": 2, "validation": 0})


@pytest.mark.parametrize("with_validation", [False, True])
def test_a_split_is_counted_once_and_as_many_pairs_as_it_streams(with_validation):
    """`CorpusStream.count` equals the pairs `pairs` yields; held-out validation's own
    counting pass serves train's and validation's counts, so none is made again."""
    from data.corpora import CorpusStream

    passes = {"train": 0, "validation": 0}
    train = [(f"s{i}", "" if i % 7 == 3 else f"t{i}") for i in range(300)]

    def raw(split, pairs):
        def stream():
            passes[split] += 1
            return iter(pairs)

        return stream

    splits = {"train": raw("train", train)}
    if with_validation:
        splits["validation"] = raw("validation", [("a", "b"), ("c", "")])
    corpus = CorpusStream("test", splits, fingerprint={})
    counts = {split: corpus.count(split) for split in ("train", "validation")}
    expected_passes = {"train": 1, "validation": 1} if with_validation else {"train": 1, "validation": 0}
    assert passes == expected_passes
    assert counts == ({"train": 257, "validation": 1} if with_validation else {"train": 255, "validation": 2})
    assert {split: corpus.count(split) for split in ("train", "validation")} == counts  # no pass again
    assert passes == expected_passes
    assert {split: len(list(corpus.pairs(split))) for split in ("train", "validation")} == counts
