"""benchmarks/gpu/batches.py: the GPU sweep's numpy batches (no JAX needed here).

What the sweep's figures rest on: every training pair once an epoch for every seed, each
batch within its bucket's token budget, the few padded shapes that keep XLA from
compiling a program per bucket, and seeds trained side by side each drawing their own
order of pairs while sharing one shape a step.
"""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "gpu"))

from batches import BUCKET_LENGTHS, SHAPE_GROUP_LENGTHS, bucket_batches, load_ids, padded  # noqa: E402

# Pair lengths (the longer side decides the bucket): ten of 5 ids (bucket 8), three of 10
# (bucket 12), two of 20 (bucket 20), one of 30 (bucket 32).
PAIR_LENGTHS = [5] * 10 + [10] * 3 + [20] * 2 + [30]
BATCH_TOKENS = 64  # bucket 8: 8 rows; 12: 5 rows; 20: 3 rows; 32: 2 rows


def corpus():
    """Pairs whose ids name them: pair i's source is [i + 3] * n, its target one id shorter."""
    source = [np.full(n, i + 3, np.int32) for i, n in enumerate(PAIR_LENGTHS)]
    target = [np.full(n - 1, i + 3, np.int32) for i, n in enumerate(PAIR_LENGTHS)]
    return source, target


def pairs_of(batch):
    """The pair numbers in the rows of one member's source batch [B, L], padding rows left out."""
    return [int(row[0]) - 3 for row in batch if row[0] != 0]


def epoch(seeds, order_seed, group_lengths=None):
    source, target = corpus()
    rngs = [np.random.default_rng(seed) for seed in seeds]
    order = rngs[0] if order_seed is None else np.random.default_rng(order_seed)
    return list(bucket_batches(source, target, BATCH_TOKENS, rngs, order, group_lengths))


def test_one_shape_per_bucket_each_within_the_token_budget():
    batches = epoch([1], None)
    shapes = sorted(source.shape for source, _ in batches)
    assert shapes == [(1, 2, 32), (1, 3, 20), (1, 5, 12), (1, 8, 8), (1, 8, 8)]
    for source, target in batches:
        _, rows, length = source.shape
        assert target.shape == source.shape and rows * length <= BATCH_TOKENS
        assert length in BUCKET_LENGTHS


def test_grouped_shapes_pad_each_bucket_to_its_groups_most_rows_and_longest_bucket():
    # Buckets 8 and 12 share the first group (at most 12): 8 rows of 12; bucket 20 the
    # second (at most 24): 3 rows of 20; bucket 32 the last: 2 rows of 32.
    batches = epoch([1], None, SHAPE_GROUP_LENGTHS)
    assert sorted(source.shape for source, _ in batches) == [(1, 2, 32), (1, 3, 20), (1, 8, 12), (1, 8, 12), (1, 8, 12)]
    # The padding holds nothing: each batch holds exactly the pairs of the same step
    # without grouping, each row its pair's ids and zeros after them.
    for (grouped, grouped_target), (plain, plain_target) in zip(batches, epoch([1], None)):
        assert pairs_of(grouped[0]) == pairs_of(plain[0])
        _, rows, length = plain.shape
        np.testing.assert_array_equal(grouped[:, :rows, :length], plain)
        np.testing.assert_array_equal(grouped_target[:, :rows, :length], plain_target)
        assert not grouped[:, rows:].any() and not grouped[:, :, length:].any()


@pytest.mark.parametrize("group_lengths", [None, SHAPE_GROUP_LENGTHS])
def test_every_member_sees_every_pair_once_an_epoch(group_lengths):
    batches = epoch([1, 2, 3], None, group_lengths)
    for member in range(3):
        seen = [pair for source, _ in batches for pair in pairs_of(source[member])]
        assert sorted(seen) == list(range(len(PAIR_LENGTHS)))
        for source, target in batches:
            for row in range(source.shape[1]):
                pair = int(source[member, row, 0]) - 3
                if pair < 0:
                    continue
                assert np.count_nonzero(source[member, row]) == PAIR_LENGTHS[pair]
                assert np.count_nonzero(target[member, row]) == PAIR_LENGTHS[pair] - 1


def test_members_share_a_shape_each_step_and_draw_their_own_pairs():
    batches = epoch([1, 2], None)
    bucket_8 = [source for source, _ in batches if source.shape[2] == 8]
    # The same bucket at the same steps for both, its ten pairs split 8 + 2 differently.
    assert [pairs_of(source[0]) for source in bucket_8] != [pairs_of(source[1]) for source in bucket_8]
    assert all(source.shape[0] == 2 for source, _ in batches)


def test_member_0_of_a_group_sees_the_batches_it_would_alone():
    alone = epoch([7], None)
    together = epoch([7, 8, 9], None)
    assert len(alone) == len(together)
    for (solo, solo_target), (group, group_target) in zip(alone, together):
        np.testing.assert_array_equal(group[0], solo[0])
        np.testing.assert_array_equal(group_target[0], solo_target[0])


def test_padded_and_load_ids_read_export_token_ids_layout(tmp_path):
    sentences = [np.array([1, 5, 2], np.int32), np.array([1, 2], np.int32), np.array([1, 6, 7, 8, 2], np.int32)]
    np.testing.assert_array_equal(padded(sentences), [[1, 5, 2, 0, 0], [1, 2, 0, 0, 0], [1, 6, 7, 8, 2]])
    flat = np.concatenate(sentences)
    offsets = np.array([0, 3, 5, 10], np.int64)
    np.savez(tmp_path / "ids.npz", **{
        f"{split}_{side}_{kind}": array
        for split in ("train", "validation") for side in ("source", "target")
        for kind, array in (("ids", flat), ("offsets", offsets))
    })
    splits = load_ids(tmp_path)
    for split in ("train", "validation"):
        for side in splits[split]:
            assert [list(ids) for ids in side] == [list(ids) for ids in sentences]
