"""Tests for the prepared shards: the workers' ids equal the graph's, preparation is atomic,
stale shards are rebuilt, and both directions and evaluation read what they should."""

import dataclasses
import multiprocessing
import os

import numpy as np
import pytest
import tensorflow as tf

from data import prepare as preparation
from data.config import DataConfig
from data.corpora import load_corpus, open_corpus
from data.dataset import prepare_data
from data.errors import DataError
from data.lowercase import lowercase
from data.pipeline import TokenizedPairs, make_batches, tokenize_pairs
from data.shards import BothDirections, ShardedPairs, read_manifest
from tests.tiny_run import write_multi30k_slice

# Text the segmentation must agree on: cases, accents, final sigma, dotted capital I, a
# sharp s, Unicode 14 capitals that TensorFlow's ICU does not lowercase, byte fallback.
TRICKY = [
    "A Man In A Blue SHIRT.",
    "ΟΔΟΣ ΚΑΙ ΣΟΦΙΑ Σ.",
    "İstanbul’da DİYARBAKIR",
    "Straße GROẞE Maß",
    "\u2c2f\ua7c0 \U00010570x\U00010595",
    "Ein Mann 🚲 fährt Fahrrad — 東京 Москва",
    "ﬁne ＦＵＬＬ－ＷＩＤＴＨ  double  spaces",
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A 1500-pair files: dataset (with validation files) and its model directory."""
    directory = tmp_path_factory.mktemp("shards")
    paths = write_multi30k_slice(directory, train=1500, validation=60)
    return "files:" + ",".join(paths), directory


def _config(spec, max_length=48, **overrides):
    return DataConfig(dataset=spec, vocab_size=600, batch_tokens=1024, max_length=max_length, **overrides)


def _pairs_rows(pairs):
    return list(zip(map(tuple, pairs.source.to_list()), map(tuple, pairs.target.to_list())))


def _batches(dataset):
    return [(source.numpy(), target.numpy()) for source, target in dataset]


def _same_batches(got, want):
    assert len(got) == len(want)
    for (source, target), (want_source, want_target) in zip(got, want):
        assert source.shape == want_source.shape and target.shape == want_target.shape
        np.testing.assert_array_equal(source, want_source)
        np.testing.assert_array_equal(target, want_target)


@pytest.mark.parametrize("lower", [False, True])
def test_the_workers_ids_are_the_graphs_ids(corpus, lower, tmp_path):
    spec, _ = corpus
    data = prepare_data(_config(spec, lowercase=lower), str(tmp_path / "model"))
    text = load_corpus(spec, "en", "de").splits["train"]
    sentences = text.source[:300] + text.target[:300] + TRICKY
    preparation._start_worker(data.tokenizer.model_proto, lower)
    source_ids, source_lengths, _, _ = preparation._encode_chunk(preparation._Chunk(sentences, []))
    graph = data.tokenizer.tokenize(tf.constant(sentences)).to_list()
    rows = [row.tolist() for row in np.split(source_ids, np.cumsum(source_lengths)[:-1])]
    assert len(rows) == len(sentences) == 600 + len(TRICKY)
    assert rows == graph


def test_python_lowercasing_is_tensorflows_for_every_code_point():
    characters = [chr(c) for c in range(1, 0x110000) if not 0xD800 <= c < 0xE000]
    graph = tf.strings.lower(tf.constant(characters), encoding="utf-8").numpy()
    differ = [hex(ord(c)) for c, lowered in zip(characters, graph) if lowercase(c) != lowered.decode("utf-8")]
    assert differ == []
    sentences = ["ΟΔΟΣ ΚΑΙ", "Σ.", "AΣ", *TRICKY]
    graph = tf.strings.lower(tf.constant(sentences), encoding="utf-8").numpy()
    assert [lowercase(s) for s in sentences] == [s.decode("utf-8") for s in graph]


def test_shards_batch_like_the_in_memory_pipeline_in_both_directions(corpus, tmp_path):
    spec, _ = corpus
    data = prepare_data(_config(spec), str(tmp_path / "model"))
    text = load_corpus(spec, "en", "de").splits["train"]
    reference = tokenize_pairs(data.tokenizer, text).within(48)
    assert _pairs_rows(data.tokens["train"]) == _pairs_rows(reference)
    both = reference.in_both_directions(48)
    shard_both = data.train_tokens(epoch=1, seed=3, both_directions=True)
    assert isinstance(shard_both, BothDirections)
    for side in (0, 1):
        np.testing.assert_array_equal(shard_both.lengths()[side], both.lengths()[side])
    plan = data.train_plan(1, seed=3, both_directions=True)
    _same_batches(_batches(data.train_batches(1, seed=3, skip=4, both_directions=True)),
                  _batches(make_batches(both, plan, skip=4)))


@pytest.mark.slow
def test_an_interrupted_preparation_leaves_nothing_readable_and_the_next_completes(corpus, tmp_path, monkeypatch):
    spec, _ = corpus
    model_dir = str(tmp_path / "model")
    config = _config(spec)
    append = preparation._append_fitting
    calls = []

    def interrupted(*args):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt  # Ctrl-C mid-split, with the pool of 2 workers running.
        return append(*args)

    monkeypatch.setattr(preparation, "_CHUNK", 100)
    monkeypatch.setattr(preparation, "_append_fitting", interrupted)
    with pytest.raises(KeyboardInterrupt):
        prepare_data(config, model_dir, workers=2)
    assert multiprocessing.active_children() == []  # The pool was stopped.
    data_dir = os.path.join(model_dir, "data")
    assert os.listdir(data_dir) == []  # No half split, no temporary directory.
    with pytest.raises(DataError, match="is not a prepared split"):
        ShardedPairs(data_dir, "train")

    # What a killed process leaves: a temporary split, and a split directory without its
    # manifest. The next start removes both and prepares every split.
    os.makedirs(os.path.join(data_dir, ".train.partial-12345"))
    os.makedirs(os.path.join(data_dir, "validation"))
    open(os.path.join(data_dir, "validation", "source.ids"), "wb").close()
    monkeypatch.setattr(preparation, "_append_fitting", append)
    lines = []
    prepared = prepare_data(config, model_dir, workers=2, log=lines.append)
    assert lines[0] == (
        f"prepare: removed what an interrupted preparation left in {data_dir}: .train.partial-12345, validation"
    )
    assert sorted(os.listdir(data_dir)) == ["train", "validation"]
    assert prepared.counts["train"].read == 1500
    assert len(prepared.tokens["train"]) == prepared.counts["train"].kept
    text = load_corpus(spec, "en", "de").splits["train"]
    assert _pairs_rows(prepared.tokens["train"]) == _pairs_rows(tokenize_pairs(prepared.tokenizer, text).within(48))


def test_stale_shards_are_rebuilt_and_say_why(corpus, tmp_path):
    spec, _ = corpus
    model_dir = str(tmp_path / "model")
    prepare_data(_config(spec), model_dir, log=lambda *_: None)
    lines = []
    again = prepare_data(_config(spec), model_dir, log=lines.append)
    assert lines == []  # Up to date: nothing prepared.
    shorter = prepare_data(_config(spec, max_length=24), model_dir, log=lines.append)
    assert lines[0] == (
        f"prepare: {os.path.join(model_dir, 'data', 'train')} was made from other data or settings "
        "(changed: data.max_length); preparing it again"
    )
    assert shorter.counts["train"].dropped_too_long > again.counts["train"].dropped_too_long
    assert read_manifest(os.path.join(model_dir, "data"), "train")["fingerprint"]["data"]["max_length"] == 24

    # A changed input file (its size and mtime) is seen too.
    train_source = spec.removeprefix("files:").split(",")[0]
    with open(train_source, "a", encoding="utf-8") as file:
        file.write("")  # Same content: only the mtime moves.
    os.utime(train_source, ns=(0, 0))
    lines.clear()
    prepare_data(_config(spec, max_length=24), model_dir, log=lines.append)
    assert "changed: input.files" in lines[0]


def test_a_manifest_of_another_format_is_refused(corpus, tmp_path):
    import json

    spec, _ = corpus
    model_dir = str(tmp_path / "model")
    data = prepare_data(_config(spec), model_dir, log=lambda *_: None)
    path = os.path.join(data.data_dir, "validation", "manifest.json")
    with open(path, encoding="utf-8") as file:
        manifest = json.load(file)
    with open(path, "w", encoding="utf-8") as file:
        json.dump(dict(manifest, format=99), file)
    with pytest.raises(DataError, match="has format 99, this code reads 1"):
        ShardedPairs(data.data_dir, "validation")


def test_evaluating_the_test_split_reads_no_training_file(monkeypatch):
    import argparse

    import data.text_files
    from app.commands.evaluate import read_references

    opened = []
    lines = data.text_files._lines

    def recording(path):
        opened.append(os.path.basename(path))
        return lines(path)

    monkeypatch.setattr(data.text_files, "_lines", recording)
    args = argparse.Namespace(source=None, reference=None, dataset=None, split="test_2016_flickr", test_set=None)
    sources, references, description = read_references(args, DataConfig())
    assert sorted(opened) == ["test_2016_flickr.de.gz", "test_2016_flickr.en.gz"]
    assert (len(sources), len(references)) == (1000, 1000)
    assert description == "multi30k test_2016_flickr en->de"


def test_validation_held_out_of_train_streams_train_once_for_evaluation(tmp_path):
    source = [f"sentence {i}" for i in range(400)]
    target = [f"Satz {i}" for i in range(400)]
    paths = []
    for name, lines in (("s.en", source), ("t.de", target)):
        (tmp_path / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        paths.append(str(tmp_path / name))
    stream = open_corpus("files:" + ",".join(paths), "en", "de")
    assert [s for s, _ in stream.pairs("validation")] == ["sentence 0", "sentence 133", "sentence 266", "sentence 399"]


def test_a_dry_run_twice_trains_the_vocabulary_once(tmp_path, monkeypatch, capsys):
    import train
    from data.tokenizer import SubwordTokenizer

    monkeypatch.setenv("TRANSFORMER_VOCAB_CACHE", str(tmp_path / "cache"))
    trained = []
    original = SubwordTokenizer.train.__func__

    def counting(cls, *args, **kwargs):
        trained.append(1)
        return original(cls, *args, **kwargs)

    monkeypatch.setattr(SubwordTokenizer, "train", classmethod(counting))
    spec = "files:" + ",".join(write_multi30k_slice(tmp_path, train=300, validation=20))
    model_dir = str(tmp_path / "run")
    argv = ["--dry-run", "--dataset", spec, "--vocab-size", "400", "--model-dir", model_dir, "--max-length", "48",
            "--num-layers", "1", "--d-model", "32", "--d-ff", "64", "--num-heads", "2", "--max-positions", "48"]
    assert train.main(argv) == 0
    first = capsys.readouterr().out
    assert train.main(argv) == 0
    second = capsys.readouterr().out
    assert len(trained) == 1
    assert not os.path.exists(model_dir)  # A dry run leaves no trace.
    summary = first[first.index("data: "):]
    assert summary == second[second.index("data: "):]
    assert len(os.listdir(tmp_path / "cache")) == 1


def test_reversed_rows_are_the_target_then_the_source_with_markers_moved(corpus, tmp_path):
    spec, _ = corpus
    data = prepare_data(_config(spec), str(tmp_path / "model"), log=lambda *_: None)
    forward = data.tokens["validation"]
    reference = TokenizedPairs(forward.source, forward.target)
    assert _pairs_rows(forward.reversed()) == _pairs_rows(reference.reversed())
    assert _pairs_rows(BothDirections(forward, 20)) == _pairs_rows(reference.in_both_directions(20))


def test_split_lengths_use_compact_dtypes(corpus, tmp_path):
    spec, _ = corpus
    data = prepare_data(_config(spec), str(tmp_path / "model"), log=lambda *_: None)
    assert [lengths.dtype for lengths in data.tokens["train"].lengths()] == [np.int16, np.int16]
    assert {batch.dtype for batch in data.train_plan(0).indices} == {np.dtype(np.int32)}
    assert data.tokens["train"].manifest["id_dtype"] == "uint16"
    assert dataclasses.asdict(data.counts["train"]) == {"read": 1500, "dropped_empty": 0, "dropped_too_long": 123}


def test_a_worker_that_dies_is_an_error_naming_it_not_a_wait_for_ever(tmp_path):
    from tests.data.dying_worker import die

    tokenizer_proto = prepare_data(
        _config("files:" + ",".join(write_multi30k_slice(tmp_path, train=50, validation=10))), str(tmp_path / "m")
    ).tokenizer.model_proto
    chunks = [(["a"], ["b"])] * 3
    with pytest.raises(DataError, match="a preparation worker process ended abruptly .* --workers N"):
        with preparation._Segmenter(tokenizer_proto, False, workers=2) as segmenter:
            list(segmenter.map(chunks, die))
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize(
    "files, quota",
    [
        ({"cpu.max": "200000 100000\n"}, 2),
        ({"cpu.max": "150000 100000\n"}, 2),  # 1.5 cores: two workers share them
        ({"cpu.max": "max 100000\n"}, None),
        ({"cpu/cpu.cfs_quota_us": "50000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 1),
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
        ({}, None),
    ],
)
def test_the_default_workers_follow_a_cgroup_cpu_quota(files, quota, tmp_path):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert preparation.cgroup_cpu_quota(str(tmp_path)) == quota
    assert 1 <= preparation.usable_cores() <= len(os.sched_getaffinity(0))
