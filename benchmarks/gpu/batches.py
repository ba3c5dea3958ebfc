"""The sweep's training batches: train.py's own, as numpy, for several seeds in lockstep.

`train_jax.py` runs where TensorFlow is not installed, so it cannot use the project's
tf.data pipeline; it reads the token ids `export_token_ids.py` wrote and batches them
with the project's `data.buckets.BucketScheme` (numpy only), seeded as `train.py` seeds
it: epoch e of seed s is `BucketScheme.plan(..., rng=np.random.default_rng([s, e]))`
(data/dataset.py). So a seed's batches hold the pairs `train.py --seed s` trains on, step
for step. Two things are the sweep's own:

- Seeds in lockstep. Several seeds train side by side as one vmapped step, so at every
  step their batches must have one shape. The first seed's batches come in its own
  order; every other seed takes, at each step, its next batch of the same bucket (every
  seed's plan has the same number of batches in each bucket, so none runs short). The
  first seed therefore trains exactly as alone; the others hold train.py's batches in
  another order.
- Few shapes. XLA compiles a program per batch shape, and on a GPU compiling dominates a
  tiny run when every bucket has its own shape
  (docs/lab-notebook/2026-11-24-the-base-model-on-a-gpu-under-jax.md). Every batch is
  padded to the shape of its bucket's group (buckets up to SHAPE_GROUP_LENGTHS[0], up to
  [1], ...): the most rows and the longest bucket of the group, so three shapes on
  Multi30k (docs/lab-notebook/2026-11-26-tiny-recipe-eight-seeds-at-a-time-on-a-gpu.md). Padding
  rows and positions are ignored by the masks and the loss.
"""

import os

import numpy as np

from data.buckets import BucketScheme

# Bucket lengths up to each of these share one padded batch shape.
SHAPE_GROUP_LENGTHS = (12, 24, 256)


def load_ids(folder):
    """`{split: (source ids, target ids)}` for train and validation: lists of int32 arrays.

    Read from the `ids.npz` that `export_token_ids.py` writes into `folder`.
    """
    arrays = np.load(os.path.join(folder, "ids.npz"))
    splits = {}
    for split in ("train", "validation"):
        sides = []
        for side in ("source", "target"):
            values, offsets = arrays[f"{split}_{side}_ids"], arrays[f"{split}_{side}_offsets"]
            sides.append([values[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)])
        splits[split] = tuple(sides)
    return splits


def padded(sentences):
    """N int32 id arrays as one zero-padded int32 array [N, longest]."""
    batch = np.zeros((len(sentences), max(len(s) for s in sentences)), np.int32)
    for row, ids in enumerate(sentences):
        batch[row, : len(ids)] = ids
    return batch


class LockstepBatches:
    """Epochs of `(source [K, B, L], target [K, B, L])` int32 batches for K seeds.

    Args:
        source, target: the training pairs' ids (markers included), one int32 array each.
        batch_tokens, max_length: as `train.py`'s `--batch-tokens` and `--max-length`.
        seeds: the K seeds, the first one's batch order shared by all.
        group_lengths: ascending bucket lengths, each ending a group of buckets that share
            one padded shape; the last must be at least the longest bucket in use.
        sort_by_length: as `BucketScheme.plan`'s: True is train.py's batching; False
            draws each pair's batch-mates afresh every epoch.
    """

    def __init__(self, source, target, batch_tokens, max_length, seeds, group_lengths=SHAPE_GROUP_LENGTHS,
                 sort_by_length=True):
        self.source, self.target, self.seeds = source, target, list(seeds)
        self.sort_by_length = sort_by_length
        self.source_lengths = np.array([len(ids) for ids in source])
        self.target_lengths = np.array([len(ids) for ids in target])
        self.longer_lengths = np.maximum(self.source_lengths, self.target_lengths)
        self.scheme = BucketScheme.for_budget(batch_tokens, max_length)
        self.group_lengths = tuple(group_lengths)
        # Bucket sizes do not change between epochs, so neither do the batches' rows: the
        # group shapes of epoch 0 hold every epoch's batches.
        plan = self.plan(self.seeds[0], 0)
        self.shape_of_group = {}
        for rows, bucket in zip(plan.rows, self.buckets_of(plan)):
            length = self.scheme.boundaries[bucket]
            group = int(np.searchsorted(self.group_lengths, length))
            if group == len(self.group_lengths):
                raise ValueError(f"bucket length {length} is past the last group length {self.group_lengths[-1]}")
            known_rows, known_length = self.shape_of_group.get(group, (0, 0))
            self.shape_of_group[group] = (max(known_rows, int(rows)), max(known_length, int(length)))

    def plan(self, seed, epoch):
        """`train.py --seed seed`'s batches of epoch `epoch` (a `data.buckets.BatchPlan`)."""
        rng = np.random.default_rng([seed, epoch])
        return self.scheme.plan(self.source_lengths, self.target_lengths, rng=rng, sort_by_length=self.sort_by_length)

    def buckets_of(self, plan):
        """The bucket of each batch of `plan`: that of its longest pair. int64 [batches]."""
        longest = [int(self.longer_lengths[pairs].max()) for pairs in plan.indices]
        return np.searchsorted(self.scheme.boundaries, longest)

    def shapes(self):
        """Every (rows, length) a batch is padded to, one per group in use."""
        return sorted(set(self.shape_of_group.values()))

    def epoch(self, epoch):
        """Epoch `epoch`'s batches, in the first seed's order (a generator)."""
        # Every seed's batches by bucket, each bucket's in its plan's order.
        queues, first_order = [], None
        for seed in self.seeds:
            plan = self.plan(seed, epoch)
            buckets = self.buckets_of(plan)
            first_order = buckets if first_order is None else first_order
            by_bucket = {}
            for pairs, bucket in zip(plan.indices, buckets):
                by_bucket.setdefault(int(bucket), []).append(pairs)
            queues.append({bucket: iter(batches) for bucket, batches in by_bucket.items()})
        for bucket in first_order:
            length = self.scheme.boundaries[bucket]
            rows, width = self.shape_of_group[int(np.searchsorted(self.group_lengths, length))]
            source = np.zeros((len(self.seeds), rows, width), np.int32)
            target = np.zeros((len(self.seeds), rows, width), np.int32)
            for member, queue in enumerate(queues):
                for row, pair in enumerate(next(queue[int(bucket)])):
                    source[member, row, : self.source_lengths[pair]] = self.source[pair]
                    target[member, row, : self.target_lengths[pair]] = self.target[pair]
            yield source, target
