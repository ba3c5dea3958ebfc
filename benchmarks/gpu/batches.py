"""The sweep's input pipeline in numpy: token ids from `export_token_ids.py` as padded batches.

A TensorFlow-free and JAX-free re-implementation of the project's token-budget buckets
(`data/buckets.py`) for `train_jax.py`, in its own module so that the tests run it where
JAX is not installed. Two things are the sweep's own: several seeds trained side by side
take their batches together (one shape a step for all of them), and batches are padded
past their bucket's length to one of a few shapes, so XLA compiles few programs.
"""

import os

import numpy as np

# Padded lengths of the numpy buckets: few shapes, so XLA compiles each once.
BUCKET_LENGTHS = (8, 12, 16, 20, 24, 28, 32, 40, 48, 64, 96, 128, 256)
# A sweep pads each bucket's batches further, to one of a few shapes: buckets up to 12,
# 13 to 24 and longer ones share one each. XLA compiles a program per shape, and on a
# GPU that dominates a tiny run: with one shape per bucket (ten on Multi30k), a sweep of
# 2026-11-24 had not reached step 2,000 after 8.5 minutes; with these three, three sweep
# processes sharing one H100 took about 2.5 minutes to step 100, then ran 39 steps a
# second each (docs/results.md, "The base model on a GPU, under JAX"). The extra rows and
# positions are padding, which the masks and the loss ignore.
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


def bucket_batches(source, target, batch_tokens, member_rngs, order_rng, group_lengths=None):
    """One epoch of `(source [K, B, L], target [K, B, L])` int32 batches, 0 for padding.

    Each pair goes to the shortest bucket length L that holds both sides, and a bucket's
    batches hold B = batch_tokens // L pairs (B * L <= batch_tokens); every batch of a
    bucket has the same shape (a short last batch is filled with all-padding rows, which
    the loss ignores), so the jitted step sees one shape per bucket. With `group_lengths`
    (ascending), each bucket's batches are padded further to its group's shape: the group
    is the first of `group_lengths` at least the bucket's length, its shape the most rows
    and the longest bucket among its buckets, so the step sees one shape per group. The
    real pairs of every batch are the same either way.

    Each of the K members (seeds trained side by side) shuffles the pairs of every bucket
    with its own generator in `member_rngs`; `order_rng` shuffles the order of the
    buckets' batches, shared by all members so that at every step they share a shape.
    With one member and `order_rng` its own generator this is a plain single run's
    epoch, and member 0 of a group sees exactly the batches it would see trained alone.
    """
    lengths = np.maximum([len(s) for s in source], [len(t) for t in target])
    bucket_of = np.searchsorted(BUCKET_LENGTHS, lengths)
    buckets = [(BUCKET_LENGTHS[b], max(1, batch_tokens // BUCKET_LENGTHS[b])) for b in np.unique(bucket_of)]
    padded_shape = {length: (rows, length) for length, rows in buckets}
    if group_lengths:
        group_of = {length: int(np.searchsorted(group_lengths, length)) for length, _ in buckets}
        for group in set(group_of.values()):
            members = [(length, rows) for length, rows in buckets if group_of[length] == group]
            shape = (max(rows for _, rows in members), max(length for length, _ in members))
            padded_shape.update({length: shape for length, _ in members})
    slots = []  # (bucket length, [K chunks of pair indices]): a step's batch for every member
    for bucket, (length, rows) in zip(np.unique(bucket_of), buckets):
        pairs = np.flatnonzero(bucket_of == bucket)
        shuffled = [rng.permutation(pairs) for rng in member_rngs]
        for start in range(0, len(pairs), rows):
            slots.append((length, [members[start : start + rows] for members in shuffled]))
    for index in order_rng.permutation(len(slots)):
        length, chunks = slots[index]
        rows, width = padded_shape[length]
        src = np.zeros((len(chunks), rows, width), np.int32)
        tgt = np.zeros((len(chunks), rows, width), np.int32)
        for member, chunk in enumerate(chunks):
            for row, pair in enumerate(chunk):
                src[member, row, : len(source[pair])] = source[pair]
                tgt[member, row, : len(target[pair])] = target[pair]
        yield src, tgt


def padded(sentences):
    """N int32 id arrays as one zero-padded int32 array [N, longest]."""
    batch = np.zeros((len(sentences), max(len(s) for s in sentences)), np.int32)
    for row, ids in enumerate(sentences):
        batch[row, : len(ids)] = ids
    return batch
