"""The batches a rehearsal trains on: the run's own, or synthetic ones shaped like them.

    batches = corpus_batches(data, seed)                      # a prepared corpus: its real batches
    batches = synthetic_batches(lengths, scheme, vocab_size)  # made up, of the lengths given

Either way the batches are cut by the run's `BucketScheme` (its buckets, rows and
padding), and each batch's shape and its rows' real lengths are known on the host, so
that the rehearsal can count the tokens and model FLOPs of exactly the batches each call
consumed, and know which shapes are new (each one an XLA compile under --jit). A guided
alignment run's batches carry their gold alignment (synthetic ones a gold of zeros, of the
same shape), so that the step traced and timed is the run's.

Where the corpus is not prepared, the lengths come from a sample of its pairs, in words
times `SUBWORDS_PER_WORD` (no vocabulary exists yet to count subwords), or, where the
corpus cannot be read either, one fixed length (`--preflight-length`).
"""

import dataclasses
import itertools

import numpy as np

from data.buckets import BatchPlan
from layers.special_tokens import START_ID

# Ids below this are special (padding, start, end, unknown): synthetic tokens avoid them.
FIRST_ORDINARY_ID = 4
# Subwords per whitespace word of a joint BPE vocabulary of 8k-37k pieces on English,
# German or French news and captions; a synthetic length is words x this, plus markers.
SUBWORDS_PER_WORD = 1.3
# Pairs read from the start of the corpus for its length distribution.
SAMPLED_PAIRS = 2000


@dataclasses.dataclass(frozen=True)
class RehearsalBatches:
    """Batches in a fixed order, repeated: the dataset and, per batch, what it holds."""

    # tf.data.Dataset of (source int32 [B, S], target int32 [B, T]) (and gold uint8 [B, T - 1, S]
    # for a guided run), the plan's batches once.
    one_pass: object
    plan: object  # data.buckets.BatchPlan: each batch's rows and padded lengths
    source_lengths: np.ndarray  # int [N]: each pair's ids, end marker included
    target_lengths: np.ndarray  # int [N]: each pair's ids, start and end markers included
    description: str  # which batches, for the report

    @property
    def dataset(self):
        """The batches over and over: batch number n is the plan's n % len(plan)."""
        return self.one_pass.repeat()

    def first(self, count):
        """These batches cut to their first `count` (fewer where the plan has fewer)."""
        count = min(count, len(self.plan))
        plan = BatchPlan(self.plan.indices[:count], self.plan.rows[:count], self.plan.source_lengths[:count],
                         self.plan.target_lengths[:count])
        return dataclasses.replace(self, one_pass=self.one_pass.take(count), plan=plan)

    def shape(self, batch):
        """`(rows, source length, target length)` of batch number `batch` (counted over the repeats)."""
        batch %= len(self.plan)
        return int(self.plan.rows[batch]), int(self.plan.source_lengths[batch]), int(self.plan.target_lengths[batch])

    def lengths(self, batch):
        """`(source lengths, target lengths)` of the real rows of batch number `batch`."""
        indices = self.plan.indices[batch % len(self.plan)]
        return self.source_lengths[indices], self.target_lengths[indices]

    def mean_padded_flops(self, model_config, batches):
        """Mean training FLOPs of the first `batches` batches (every epoch repeats the
        first's) as computed on their padded shapes: what a step's time follows."""
        from app.model.flops import training_flops

        count = min(batches, len(self.plan))
        shapes = np.stack([self.plan.rows[:count], self.plan.source_lengths[:count],
                           self.plan.target_lengths[:count]], axis=1)
        unique, counts = np.unique(shapes, axis=0, return_counts=True)
        total = sum(
            int(n) * training_flops(model_config, np.full(int(rows), int(source)), np.full(int(rows), int(target) - 1))
            for (rows, source, target), n in zip(unique, counts)
        )
        return total / count

    def run_shapes(self, batches):
        """The distinct shapes among the first `batches` batches (every epoch repeats the first's)."""
        return {self.shape(batch) for batch in range(min(batches, len(self.plan)))}


def corpus_batches(data, seed):
    """The `RehearsalBatches` of epoch 0 of a prepared corpus (`data.dataset.PreparedData`),
    in the order the run takes them."""
    plan = data.train_plan(0, seed)
    source_lengths, target_lengths = data.train_tokens(0, seed).lengths()
    dataset = data.train_batches(0, seed=seed)
    description = f"real: the prepared corpus's training batches, {len(plan):,} an epoch, in the run's order"
    return RehearsalBatches(dataset, plan, np.asarray(source_lengths), np.asarray(target_lengths), description)


def synthetic_batches(source_lengths, target_lengths, scheme, vocab_size, seed=0, description="synthetic", *,
                      gold=False):
    """`RehearsalBatches` of random ordinary ids, pairs of the given lengths (markers
    included) batched and padded by `scheme` as the run's would be; with `gold` (a guided
    alignment run), each batch with a gold alignment of zeros, uint8 [B, T - 1, S]."""
    from data.pipeline import shard_batches

    if vocab_size <= FIRST_ORDINARY_ID:
        raise ValueError(f"a vocabulary of {vocab_size} ids has no ordinary token (ids 0-3 are special)")
    source_lengths, target_lengths = np.asarray(source_lengths), np.asarray(target_lengths)
    plan = scheme.plan(source_lengths, target_lengths, rng=np.random.default_rng(seed))
    pairs = _RandomPairs(source_lengths, target_lengths, vocab_size, seed, gold)
    return RehearsalBatches(shard_batches(pairs, plan), plan, source_lengths, target_lengths, description)


def sampled_lengths(pairs, max_length, sample=SAMPLED_PAIRS):
    """`(source lengths, target lengths)` in subwords, markers included, estimated from the
    first `sample` of `pairs` (strings), those longer than `max_length` left out as the
    run leaves them out; None where there are none."""
    source, target = [], []
    for source_text, target_text in itertools.islice(pairs, sample):
        source_length = round(len(source_text.split()) * SUBWORDS_PER_WORD) + 1  # end
        target_length = round(len(target_text.split()) * SUBWORDS_PER_WORD) + 2  # start, end
        if source_length <= max_length and target_length <= max_length:
            source.append(source_length)
            target.append(target_length)
    return (np.array(source), np.array(target)) if source else None


class _RandomPairs:
    """Pairs of random ordinary ids of given lengths, assembled into padded batches as
    `data.shards.ShardedPairs` assembles real ones (the target led by the start id)."""

    def __init__(self, source_lengths, target_lengths, vocab_size, seed, gold=False):
        self._source_lengths, self._target_lengths = source_lengths, target_lengths
        self._vocab_size, self._seed = vocab_size, seed
        self.has_alignments = gold  # data.pipeline.shard_batches then takes a third tensor

    def assemble(self, indices, rows, source_length, target_length):
        rng = np.random.default_rng([self._seed, int(indices[0]) if len(indices) else 0])
        source = np.zeros([rows, source_length], np.int32)
        target = np.zeros([rows, target_length], np.int32)
        for row, pair in enumerate(indices):
            source[row, : self._source_lengths[pair]] = rng.integers(
                FIRST_ORDINARY_ID, self._vocab_size, self._source_lengths[pair]
            )
            target[row, 0] = START_ID
            target[row, 1 : self._target_lengths[pair]] = rng.integers(
                FIRST_ORDINARY_ID, self._vocab_size, self._target_lengths[pair] - 1
            )
        if self.has_alignments:
            return source, target, np.zeros([rows, target_length - 1, source_length], np.uint8)
        return source, target
