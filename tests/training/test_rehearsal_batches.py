"""app/training/rehearsal_batches.py: the batches a rehearsal trains on, real or synthetic,
cut by the run's buckets, and the lengths and shapes it counts them by."""

import os

import numpy as np
import pytest

from app.training.rehearsal_batches import (
    FIRST_ORDINARY_ID,
    SUBWORDS_PER_WORD,
    corpus_batches,
    sampled_lengths,
    synthetic_batches,
)
from data.buckets import BucketScheme
from data.dataset import open_prepared
from layers.special_tokens import PAD_ID, START_ID


def test_synthetic_batches_are_cut_and_padded_as_the_runs_and_their_lengths_known():
    rng = np.random.default_rng(0)
    source_lengths, target_lengths = rng.integers(3, 30, 500), rng.integers(4, 30, 500)
    scheme = BucketScheme.for_budget(512, 32, num_replicas=2)
    batches = synthetic_batches(source_lengths, target_lengths, scheme, vocab_size=100, seed=3)
    for number, (source, target) in enumerate(batches.dataset.take(len(batches.plan) + 2).as_numpy_iterator()):
        assert source.shape[0] == target.shape[0] and batches.shape(number) == (*source.shape, target.shape[1])
        real_sources, real_targets = batches.lengths(number)
        # Each real row holds its pair's ids, then padding; the target begins with the start id.
        rows = len(real_sources)
        assert ((source[:rows] != PAD_ID).sum(axis=1) == real_sources).all()
        assert ((target[:rows] != PAD_ID).sum(axis=1) == real_targets).all()
        assert (target[:rows, 0] == START_ID).all() and (source[rows:] == PAD_ID).all()
        assert source[source != PAD_ID].min() >= FIRST_ORDINARY_ID
    # The repeat: batch len(plan) is batch 0 again.
    assert batches.shape(len(batches.plan)) == batches.shape(0)
    assert batches.run_shapes(10**6) == {batches.shape(n) for n in range(len(batches.plan))}


def test_the_mean_padded_flops_of_the_first_batches_is_each_batchs_counted_on_its_shape():
    from app.model.config import ModelConfig
    from app.model.flops import training_flops

    rng = np.random.default_rng(1)
    source_lengths, target_lengths = rng.integers(3, 30, 300), rng.integers(4, 30, 300)
    batches = synthetic_batches(source_lengths, target_lengths, BucketScheme.for_budget(256, 32), vocab_size=100)
    config = ModelConfig.from_size("tiny", vocab_size=100)

    def padded(batch):
        rows, source, target = batches.shape(batch)
        return training_flops(config, np.full(rows, source), np.full(rows, target - 1))

    assert batches.mean_padded_flops(config, 5) == pytest.approx(np.mean([padded(n) for n in range(5)]))
    whole = np.mean([padded(n) for n in range(len(batches.plan))])
    assert batches.mean_padded_flops(config, 10**6) == pytest.approx(whole)  # epochs repeat the first


def test_a_corpus_sample_gives_lengths_in_subwords_with_markers_and_drops_the_overlong():
    pairs = [("a b c d e f g h i j", "x y z"), ("one", "two words"), (" ".join(["w"] * 40), "short")]
    source, target = sampled_lengths(iter(pairs), max_length=32)
    # 10 words -> 13 subwords + the end marker; 3 words -> 4 + start and end.
    assert source.tolist() == [round(10 * SUBWORDS_PER_WORD) + 1, round(1 * SUBWORDS_PER_WORD) + 1]
    assert target.tolist() == [round(3 * SUBWORDS_PER_WORD) + 2, round(2 * SUBWORDS_PER_WORD) + 2]
    assert sampled_lengths(iter(pairs[2:]), max_length=32) is None


def test_a_prepared_corpus_is_opened_reading_only_and_its_batches_are_the_runs(small_data, tmp_path):
    model_dir = os.path.dirname(small_data.data_dir)
    before = sorted(os.walk(model_dir))
    data = open_prepared(small_data.config, model_dir)
    assert data is not None and sorted(os.walk(model_dir)) == before  # nothing written
    batches = corpus_batches(data, seed=5)
    first = [pair for pair in batches.dataset.take(3).as_numpy_iterator()]
    run = [pair for pair in small_data.train_batches(0, seed=5).take(3).as_numpy_iterator()]
    assert all((a[0] == b[0]).all() and (a[1] == b[1]).all() for a, b in zip(first, run))
    assert batches.description.startswith("real: the prepared corpus's training batches")
    # Not prepared there: None, and nothing made.
    assert open_prepared(small_data.config, str(tmp_path / "elsewhere")) is None
    assert not os.path.exists(tmp_path / "elsewhere")
