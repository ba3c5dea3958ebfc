"""benchmarks/gpu/batches.py: the GPU sweep trains on train.py's batches (no JAX needed here).

What the sweep's figures rest on: its first seed's batches are the ones `train.py` trains
that seed on, step for step; every seed sees every pair once an epoch; seeds side by
side share one shape a step; and the batches come in a few padded shapes, so that XLA
compiles a few programs rather than one per bucket.
"""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))

from batches import SHAPE_GROUP_LENGTHS, LockstepBatches, load_ids, padded  # noqa: E402


def id_lists(ragged):
    """A tf.RaggedTensor [N, None] of ids as N int32 numpy arrays."""
    return [np.asarray(row, np.int32) for row in ragged.numpy()]


@pytest.fixture(scope="module")
def pairs(small_data):
    tokens = small_data.tokens["train"]
    return id_lists(tokens.source), id_lists(tokens.target)


def lockstep(small_data, pairs, seeds, group_lengths=SHAPE_GROUP_LENGTHS):
    config = small_data.config
    return LockstepBatches(*pairs, config.batch_tokens, config.max_length, seeds, group_lengths)


def pairs_in(batch, ids):
    """Which pairs fill the rows of one seed's source batch [B, L]: their numbers, padding rows left out."""
    numbers = {tuple(source): number for number, source in enumerate(ids)}
    rows = [tuple(row[: np.count_nonzero(row)]) for row in batch if row.any()]
    return [numbers[row] for row in rows]


@pytest.mark.parametrize("epoch", [0, 3])
def test_the_first_seed_trains_on_train_pys_batches_step_for_step(small_data, pairs, epoch):
    batches = list(lockstep(small_data, pairs, [5, 6]).epoch(epoch))
    # What train.py --seed 5 trains on in this epoch: the project's own tf.data batches.
    reference = [(source.numpy(), target.numpy()) for source, target in small_data.train_batches(epoch, seed=5)]
    assert len(batches) == len(reference) > 1
    for (source, target), (train_source, train_target) in zip(batches, reference):
        rows, source_length = train_source.shape
        target_length = train_target.shape[1]
        np.testing.assert_array_equal(source[0, :rows, :source_length], train_source)
        np.testing.assert_array_equal(target[0, :rows, :target_length], train_target)
        # The rest is padding.
        assert not source[0, rows:].any() and not source[0, :, source_length:].any()
        assert not target[0, rows:].any() and not target[0, :, target_length:].any()


def test_every_seed_sees_every_pair_once_an_epoch_and_its_own_batches(small_data, pairs):
    source_ids = pairs[0]
    batches = list(lockstep(small_data, pairs, [1, 2, 3]).epoch(0))
    seen = [[pair for source, _ in batches for pair in pairs_in(source[member], source_ids)] for member in range(3)]
    for member in range(3):
        assert sorted(seen[member]) == list(range(len(source_ids)))
    # Same shapes, other pairs: each seed draws its own batches.
    assert seen[0] != seen[1] and seen[1] != seen[2]


def test_a_seed_alone_and_first_of_a_group_sees_the_same_batches(small_data, pairs):
    alone = list(lockstep(small_data, pairs, [7]).epoch(1))
    together = list(lockstep(small_data, pairs, [7, 8, 9]).epoch(1))
    assert len(alone) == len(together)
    for (solo, solo_target), (group, group_target) in zip(alone, together):
        np.testing.assert_array_equal(group[0], solo[0])
        np.testing.assert_array_equal(group_target[0], solo_target[0])


def test_batches_come_in_one_shape_per_group_of_buckets(small_data, pairs):
    batches = lockstep(small_data, pairs, [1, 2])
    # Per group: the most rows of its batches (a full batch of its shortest bucket in use)
    # and its longest bucket; one shape per group, groups without a batch left out.
    scheme = batches.scheme
    plan = small_data.train_plan(0, seed=1)
    expected = {}
    for rows, pairs_of_batch in zip(plan.rows, plan.indices):
        longer = max(max(len(pairs[0][i]), len(pairs[1][i])) for i in pairs_of_batch)
        bucket_length = scheme.boundaries[int(np.searchsorted(scheme.boundaries, longer))]
        group = int(np.searchsorted(SHAPE_GROUP_LENGTHS, bucket_length))
        known = expected.get(group, (0, 0))
        expected[group] = (max(known[0], int(rows)), max(known[1], bucket_length))
    assert batches.shapes() == sorted(expected.values())
    assert 1 < len(batches.shapes()) <= len(SHAPE_GROUP_LENGTHS)
    for epoch in (0, 1):
        shapes = {source.shape for source, _ in batches.epoch(epoch)} | {
            target.shape for _, target in batches.epoch(epoch)
        }
        assert shapes == {(2, *shape) for shape in batches.shapes()}


def test_a_bucket_past_the_last_group_is_refused_by_name(small_data, pairs):
    with pytest.raises(ValueError, match=r"bucket length \d+ is past the last group length 8"):
        lockstep(small_data, pairs, [1], group_lengths=(4, 8))


def test_padded_and_load_ids_read_export_token_ids_layout(tmp_path):
    sentences = [np.array([1, 5, 2], np.int32), np.array([1, 2], np.int32), np.array([1, 6, 7, 8, 2], np.int32)]
    np.testing.assert_array_equal(padded(sentences), [[1, 5, 2, 0, 0], [1, 2, 0, 0, 0], [1, 6, 7, 8, 2]])
    flat = np.concatenate(sentences)
    offsets = np.array([0, 3, 5, 10], np.int64)
    arrays = {
        f"{split}_{side}_{kind}": array
        for split in ("train", "validation")
        for side in ("source", "target")
        for kind, array in (("ids", flat), ("offsets", offsets))
    }
    np.savez(tmp_path / "ids.npz", **arrays)
    splits = load_ids(tmp_path)
    for split in ("train", "validation"):
        for side in splits[split]:
            assert [list(ids) for ids in side] == [list(ids) for ids in sentences]


def test_the_bucketing_imports_without_tensorflow():
    # The GPU machines have no TensorFlow: data.buckets and data.config must not pull it
    # in through the data package.
    script = "import sys, data.buckets, data.config; print('tensorflow' in sys.modules)"
    output = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True).stdout
    assert output.strip() == "False"


def test_unsorted_buckets_hold_the_same_pairs_with_other_batch_mates(small_data, pairs):
    sorted_batches = lockstep(small_data, pairs, [1])
    unsorted = LockstepBatches(*pairs, small_data.config.batch_tokens, small_data.config.max_length, [1],
                               sort_by_length=False)
    assert unsorted.shapes() == sorted_batches.shapes()
    source_ids = pairs[0]
    sorted_rows = [pairs_in(source[0], source_ids) for source, _ in sorted_batches.epoch(0)]
    unsorted_rows = [pairs_in(source[0], source_ids) for source, _ in unsorted.epoch(0)]
    assert sorted(p for rows in unsorted_rows for p in rows) == list(range(len(source_ids)))
    assert sorted(map(sorted, unsorted_rows)) != sorted(map(sorted, sorted_rows))
