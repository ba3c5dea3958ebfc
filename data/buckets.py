"""`BucketScheme`: which pairs share a batch, and the batch shapes that can occur.

Batches are sized by a token budget, not a sentence count. A pair goes to the bucket of
the smallest length boundary L >= max(source length, target length), and a full batch
of that bucket has

    rows(L) = num_replicas * floor(batch_tokens / (num_replicas * L))

rows, so source and target each hold at most `batch_tokens` ids, padding included.
Inside a bucket, pairs are ordered by (source length, target length) before they are
cut into batches, and each side of a batch is padded only to the smallest boundary that
holds its longest row: one side is L, the other often shorter. The last batch of a
bucket in an epoch holds the leftover pairs and is padded with all-padding rows up to a
multiple of 8 rows per replica (never past rows(L)). So every batch is (rows, source
length) and (rows, target length) from the finite set `declared_shapes()`, and because
bucket sizes do not change between epochs the same shapes recur every epoch:
`tf.function`/XLA compile each once, in the first epoch.

Why this design (measured on Multi30k en-de train, 8k BPE: the figures are in
docs/lab-notebook/2026-11-22-each-side-of-a-batch-padded-to-its-own-length.md and
docs/lab-notebook/2026-11-26-records-moved-from-code-comments.md; `tests` and the
benchmark compute the padding efficiency from real batches):
- Boundaries every token up to 24, then growing by 10%: fine where most pairs' lengths
  are, where one extra id of padding is a large share of a short pair.
- Padding the last batch of a bucket to the full rows(L), as is common, leaves many
  half-empty batches per epoch, which on a corpus of Multi30k's size costs a lot of
  padding efficiency, most at large token budgets. Rounding to 8 rows per replica
  keeps it high at every budget.
- One bucket per longer-side length, not a bucket per (source, target) length pair:
  the 2-D grid pads slightly less but makes hundreds of distinct shapes (one XLA
  compile each) and batches far below the budget because each cell holds few pairs.
- Each side padded to its own length, after ordering by length inside the bucket:
  English is shorter than German in pieces, so padding both sides to the longer one
  left the source side much less efficient than the target. Ordered and trimmed, both
  sides together pad less, except where a bucket is one or two batches (large budgets)
  and ordering has little to split. As in fairseq's length-sorted batching, a pair
  meets the same neighbours in most epochs; the batches' order and the order among
  pairs of equal lengths are still shuffled.
"""

import dataclasses
import math
from typing import List, Optional, Tuple

import numpy as np

from data.errors import DataError

# Lengths below this get a boundary at every length; above it boundaries grow by
# _GROWTH. See the module docstring.
_FINE_UNTIL = 24
_GROWTH = 1.1
_SHORTEST = 4
# Leftover batches are padded to a multiple of this many rows per replica.
ROW_MULTIPLE = 8
# Pairs whose buckets are looked up at once (`BucketScheme.bucket_of`).
_BUCKET_SLICE = 1 << 20


def length_boundaries(max_length: int) -> Tuple[int, ...]:
    """Bucket lengths: 4, 5, ..., 24, then +10% each (rounded up), the last = max_length."""
    boundaries, length = [], _SHORTEST
    while length < max_length:
        boundaries.append(length)
        length = length + 1 if length < _FINE_UNTIL else math.ceil(length * _GROWTH)
    boundaries.append(max_length)
    return tuple(boundaries)


@dataclasses.dataclass(frozen=True)
class BatchPlan:
    """One epoch's batches as indices into the split's pairs.

    Batch i holds pairs `indices[i]`; its source is padded to `rows[i]` rows of
    `source_lengths[i]` ids and its target to `rows[i]` rows of `target_lengths[i]`.
    Rows past `len(indices[i])` are all padding.
    """

    indices: List[np.ndarray]  # int32 [n_i] each (int64 past 2**31 pairs)
    rows: np.ndarray  # int32 [num_batches]
    source_lengths: np.ndarray  # int32 [num_batches]
    target_lengths: np.ndarray  # int32 [num_batches]

    def __len__(self) -> int:
        return len(self.indices)


@dataclasses.dataclass(frozen=True)
class BucketScheme:
    """Length boundaries and the rows of a full batch for each."""

    boundaries: Tuple[int, ...]  # Ascending; the last is max_length.
    full_rows: Tuple[int, ...]  # rows(L) for each boundary L; a multiple of num_replicas.
    num_replicas: int

    @classmethod
    def for_budget(cls, batch_tokens: int, max_length: int, num_replicas: int = 1) -> "BucketScheme":
        """The scheme for a token budget across `num_replicas` replicas.

        Raises:
            DataError: the budget cannot give each replica one row of max_length.
        """
        if num_replicas < 1:
            raise DataError(f"num_replicas must be at least 1, got {num_replicas}")
        if batch_tokens < num_replicas * max_length:
            raise DataError(
                f"batch_tokens {batch_tokens} is too small for {num_replicas} replica(s) "
                f"at max_length {max_length}: each replica needs at least one row, "
                f"{num_replicas * max_length} tokens"
            )
        boundaries = length_boundaries(max_length)
        full_rows = tuple(num_replicas * (batch_tokens // (num_replicas * length)) for length in boundaries)
        return cls(boundaries=boundaries, full_rows=full_rows, num_replicas=num_replicas)

    def bucket_of(self, source_lengths: np.ndarray, target_lengths: np.ndarray) -> np.ndarray:
        """Bucket index of each pair: the first boundary >= the longer side. int16 [N].

        A slice of pairs at a time: `searchsorted` answers in int64, which over a whole
        corpus of tens of millions of pairs would be the plan's largest temporary.
        """
        source_lengths, target_lengths = np.asarray(source_lengths), np.asarray(target_lengths)
        longest = max(source_lengths.max(initial=0), target_lengths.max(initial=0))
        if longest > self.boundaries[-1]:
            raise DataError(
                f"a pair of length {longest} is longer than the longest bucket "
                f"{self.boundaries[-1]}; filter by max_length first"
            )
        buckets = np.empty(len(source_lengths), np.int16)
        for start in range(0, len(buckets), _BUCKET_SLICE):
            end = start + _BUCKET_SLICE
            longer = np.maximum(source_lengths[start:end], target_lengths[start:end])
            buckets[start:end] = np.searchsorted(self.boundaries, longer, side="left")
        return buckets

    def leftover_rows(self, bucket: int, count: int) -> int:
        """Rows of the batch holding a bucket's last `count` pairs (count < full rows)."""
        multiple = ROW_MULTIPLE * self.num_replicas
        return min(self.full_rows[bucket], -(-count // multiple) * multiple)

    def padded_length(self, longest: int) -> int:
        """The length a batch side is padded to: the first boundary >= its longest row."""
        return self.boundaries[int(np.searchsorted(self.boundaries, longest, side="left"))]

    def declared_shapes(self) -> List[Tuple[int, int, int]]:
        """Every (rows, source length, target length) a batch can have.

        In bucket L, one side is padded to L (its longest row is the pair's longer
        side) and the other to any boundary up to L.
        """
        shapes = []
        for bucket, (length, full) in enumerate(zip(self.boundaries, self.full_rows)):
            multiple = ROW_MULTIPLE * self.num_replicas
            leftovers = {self.leftover_rows(bucket, count) for count in range(1, full, multiple)}
            shorter = self.boundaries[: bucket + 1]
            sides = sorted({(length, other) for other in shorter} | {(other, length) for other in shorter})
            shapes.extend((rows, source, target) for rows in sorted(leftovers | {full}) for source, target in sides)
        return shapes

    def plan(
        self,
        source_lengths: np.ndarray,
        target_lengths: np.ndarray,
        rng: Optional[np.random.Generator] = None,
        sort_by_length: bool = True,
    ) -> BatchPlan:
        """Groups pairs into batches; every pair lands in exactly one batch.

        Args:
            source_lengths, target_lengths: int [N], ids per row, markers included.
            rng: shuffles the pairs of equal lengths within each bucket and then the
                batch order; None keeps the input order among equal lengths and the
                buckets in ascending length.
            sort_by_length: order each bucket's pairs by length before cutting it into
                batches (what training does: less padding, but about half of a pair's
                batch-mates recur from one epoch to the next on Multi30k); False cuts
                the bucket in `rng`'s order, so batch-mates are drawn afresh each epoch.
                The GPU sweep compares the two (benchmarks/gpu/batches.py).
        """
        source_lengths, target_lengths = np.asarray(source_lengths), np.asarray(target_lengths)
        # Compact dtypes: on a corpus of tens of millions of pairs the plan's temporaries
        # dominate the data's memory. A permutation draws the same order whatever the dtype.
        buckets = self.bucket_of(source_lengths, target_lengths)
        index_dtype = np.int32 if len(source_lengths) < 2**31 else np.int64
        indices, rows, padded_source, padded_target = [], [], [], []
        for bucket in np.unique(buckets):
            members = np.flatnonzero(buckets == bucket).astype(index_dtype)
            if rng is not None:
                members = rng.permutation(members)
            if sort_by_length:
                # By source length, then target length (lexsort is stable: ties keep the
                # shuffle), so that a batch's rows are of similar length on both sides.
                members = members[np.lexsort((target_lengths[members], source_lengths[members]))]
            full = self.full_rows[bucket]
            for start in range(0, len(members), full):
                # A copy, so that no bucket's whole member array outlives its loop.
                chunk = members[start : start + full].copy()
                indices.append(chunk)
                rows.append(full if len(chunk) == full else self.leftover_rows(bucket, len(chunk)))
                padded_source.append(self.padded_length(source_lengths[chunk].max()))
                padded_target.append(self.padded_length(target_lengths[chunk].max()))
        order = rng.permutation(len(indices)) if rng is not None else np.arange(len(indices))
        return BatchPlan(
            indices=[indices[i] for i in order],
            rows=np.asarray(rows, np.int32)[order],
            source_lengths=np.asarray(padded_source, np.int32)[order],
            target_lengths=np.asarray(padded_target, np.int32)[order],
        )
