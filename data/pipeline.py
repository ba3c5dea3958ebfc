"""The `tf.data` pipeline that turns a `BatchPlan` into batches, and token ids in memory.

Each pair becomes
    source ids = tokens + [end]
    target ids = [start] + tokens + [end]      (the trainer shifts it into decoder
                                                input and labels)
int32, 0 = padding. A batch is the tuple (source [B, S], target [B, T]) with the shape
the plan gives it; from a split with gold word alignments (guided alignment training),
(source, target, gold uint8 [B, T - 1, S]) (data/shards.py).

`shard_batches` is what training reads: each batch is gathered with numpy from the
memory-mapped shards of a prepared split (data/shards.py), so no epoch re-tokenizes and
skipping k batches to resume mid-epoch costs nothing: the plan is indices, not data.

`TokenizedPairs`, `tokenize_pairs` and `make_batches` keep a split's ids
in memory, tokenized in-graph: the reference that the prepared shards are tested against
(tests/data/test_shards.py), and what benchmarks use on small corpora.
"""

import atexit
import dataclasses
import gc
from typing import Tuple

import numpy as np
import tensorflow as tf

from data.buckets import BatchPlan
from data.corpora import ParallelText
from data.tokenizer import SubwordTokenizer
from layers.special_tokens import END_ID, START_ID

_TOKENIZE_CHUNK = 4096  # Sentences per tokenizer call; big enough to amortize op overhead.
_ASSEMBLE_THREADS = 2  # Batches gathered and padded at once (microseconds each).
_PREFETCH_BATCHES = 2  # Batches ready ahead of the training step.


@dataclasses.dataclass(frozen=True)
class TokenizedPairs:
    """A split's id sequences, markers included."""

    source: tf.RaggedTensor  # int32 [N, None]: tokens + [end]
    target: tf.RaggedTensor  # int32 [N, None]: [start] + tokens + [end]

    def __len__(self) -> int:
        return int(self.source.nrows())

    def lengths(self) -> Tuple[np.ndarray, np.ndarray]:
        """(source lengths, target lengths), int64 [N] each, markers included."""
        return self.source.row_lengths().numpy(), self.target.row_lengths().numpy()

    def fits(self, max_length: int) -> np.ndarray:
        """bool [N]: both sides at most `max_length` ids long, markers included."""
        source_lengths, target_lengths = self.lengths()
        return (source_lengths <= max_length) & (target_lengths <= max_length)

    def select(self, keep: np.ndarray) -> "TokenizedPairs":
        """The pairs where `keep` (bool [N]) is true."""
        indices = np.flatnonzero(keep)
        return TokenizedPairs(tf.gather(self.source, indices), tf.gather(self.target, indices))

    def within(self, max_length: int) -> "TokenizedPairs":
        """The pairs whose both sides fit `max_length` (`fits`); these same pairs when all do."""
        fits = self.fits(max_length)
        return self if fits.all() else self.select(fits)

    def reversed(self) -> "TokenizedPairs":
        """The same pairs from target to source, with the markers moved to match:
        source = target tokens + [end], target = [start] + source tokens + [end]."""
        start = tf.RaggedTensor.from_tensor(tf.fill([self.source.nrows(), 1], START_ID))  # [N, 1]
        return TokenizedPairs(source=self.target[:, 1:], target=tf.concat([start, self.source], axis=1))

    def in_both_directions(self, max_length: int) -> "TokenizedPairs":
        """`2N` pairs: these, then each reversed (`reversed`), minus any reversed pair
        that outgrows `max_length` (the new target side gains the start marker)."""
        backward = self.reversed().within(max_length)
        return TokenizedPairs(
            source=tf.concat([self.source, backward.source], axis=0),
            target=tf.concat([self.target, backward.target], axis=0),
        )


def tokenize_pairs(tokenizer: SubwordTokenizer, text: ParallelText) -> TokenizedPairs:
    """Tokenizes both sides of every pair and adds the start/end markers."""
    return TokenizedPairs(
        source=_tokenize_all(tokenizer, text.source, add_start=False),
        target=_tokenize_all(tokenizer, text.target, add_start=True),
    )


def _tokenize_all(tokenizer, sentences, add_start) -> tf.RaggedTensor:
    """int32 [N, None]: each sentence's ids + [end], with [start] first if add_start."""

    def tokenize(chunk):  # string [C] -> int32 [C, None]
        column = tf.ones([tf.shape(chunk)[0], 1], tf.int32)  # [C, 1]
        parts = [tokenizer.tokenize(chunk), column * END_ID]
        if add_start:
            parts.insert(0, column * START_ID)
        return tf.concat(parts, axis=1)

    chunks = (
        tf.data.Dataset.from_tensor_slices(tf.constant(sentences, tf.string))
        .batch(_TOKENIZE_CHUNK)
        .map(tokenize, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    )
    parts = list(chunks)
    if not parts:
        return tf.RaggedTensor.from_row_lengths(tf.zeros([0], tf.int32), tf.zeros([0], tf.int64))
    return tf.concat(parts, axis=0)


def shard_batches(pairs, plan: BatchPlan, skip: int = 0) -> tf.data.Dataset:
    """The plan's batches as a dataset of (source int32 [B, S], target int32 [B, T]),
    gathered from a prepared split; with its gold alignments where the split has some
    (`pairs.has_alignments`): (source, target, gold uint8 [B, T - 1, S]).

    Args:
        pairs: a `data.shards.ShardedPairs` or `BothDirections` (anything with
            `assemble(indices, rows, source_length, target_length)`).
        plan: which pairs form each batch and its padded shape.
        skip: batches to leave out at the start (resuming mid-epoch).
    """
    _release_iterators_before_exit()

    def assemble(batch):  # int64 scalar -> (int32 [B, S], int32 [B, T][, uint8 [B, T - 1, S]]), in numpy
        batch = int(batch)
        return pairs.assemble(
            plan.indices[batch], int(plan.rows[batch]), int(plan.source_lengths[batch]), int(plan.target_lengths[batch])
        )

    aligned = getattr(pairs, "has_alignments", False)
    dtypes = [tf.int32, tf.int32] + ([tf.uint8] if aligned else [])

    def gather(batch):
        tensors = tf.numpy_function(assemble, [batch], dtypes, stateful=False)
        for tensor in tensors:
            tensor.set_shape([None] * (2 if tensor.dtype == tf.int32 else 3))  # [B, S], [B, T], [B, T - 1, S]
        return tuple(tensors)

    return (
        tf.data.Dataset.range(skip, len(plan))
        .map(gather, num_parallel_calls=_ASSEMBLE_THREADS, deterministic=True)
        .prefetch(_PREFETCH_BATCHES)
        .with_options(_fixed_options())
    )


_exit_hook_registered = False


def _release_iterators_before_exit() -> None:
    """Makes sure no iterator over a `shard_batches` dataset outlives Python's atexit phase.

    The batches come from a Python function (`tf.numpy_function`), which tf.data's threads
    run under the GIL. Once the interpreter starts finalizing, a thread that asks for the
    GIL is ended on the spot, so a batch being assembled then never arrives; an iterator
    still alive at that point (a module global, a cycle the last collection frees) is
    destroyed during finalization, and its destructor waits for that batch for ever. This
    hung a process after its work was done in about one exit in three.

    The hook runs at exit, while threads can still take the GIL: it deletes every live
    tf.data iterator's resource, whose destructor then stops the pipeline's threads.
    """
    global _exit_hook_registered
    if not _exit_hook_registered:
        _exit_hook_registered = True
        atexit.register(_delete_live_iterators)


def _delete_live_iterators() -> None:
    from tensorflow.python.data.ops import iterator_ops, multi_device_iterator_ops

    gc.collect()  # Iterators in unreachable cycles go now, the usual way.
    resources = {
        iterator_ops.OwnedIterator: "_iterator_resource",
        multi_device_iterator_ops.OwnedMultiDeviceIterator: "_multi_device_iterator_resource",
    }
    for obj in gc.get_objects():
        for kind, attribute in resources.items():
            if isinstance(obj, kind):
                # The handle's last reference: the resource and its threads go with it.
                vars(obj).pop(attribute, None)


def _fixed_options() -> tf.data.Options:
    # No autotuning: tf.data's autotuner runs a background thread per iterator, and the
    # iterator's destructor waits for that thread: on busy cores, training stalled at
    # epoch starts while the previous epoch's iterator was dropped
    # (docs/lab-notebook/2026-11-22-fewer-passes-in-attention-and-the-loss.md). The
    # pipeline only gathers and pads rows: a fixed parallelism and a small prefetch
    # buffer lose nothing.
    options = tf.data.Options()
    options.autotune.enabled = False
    return options


def make_batches(pairs: TokenizedPairs, plan: BatchPlan, skip: int = 0) -> tf.data.Dataset:
    """The plan's batches as a dataset of (source int32 [B, S], target int32 [B, T]).

    Args:
        pairs: the split's ids.
        plan: which pairs form each batch and its padded shape.
        skip: batches to leave out at the start (resuming mid-epoch).
    """
    if plan.indices:
        flat = np.concatenate(plan.indices)
    else:
        flat = np.zeros([0], np.int64)
    row_lengths = np.asarray([len(batch) for batch in plan.indices], np.int64)
    indices = tf.RaggedTensor.from_row_lengths(flat, row_lengths)  # int64 [num_batches, None]
    source_ids, target_ids = pairs.source, pairs.target

    def assemble(batch_indices, rows, source_length, target_length):
        # Rows past len(batch_indices) come out as all padding (0).
        source = tf.gather(source_ids, batch_indices).to_tensor(shape=tf.stack([rows, source_length]))  # [B, S]
        target = tf.gather(target_ids, batch_indices).to_tensor(shape=tf.stack([rows, target_length]))  # [B, T]
        return source, target

    return (
        tf.data.Dataset.from_tensor_slices((indices, plan.rows, plan.source_lengths, plan.target_lengths))
        .skip(skip)
        .map(assemble, num_parallel_calls=_ASSEMBLE_THREADS, deterministic=True)
        .prefetch(_PREFETCH_BATCHES)
        .with_options(_fixed_options())
    )
