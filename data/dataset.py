"""`prepare_data`: the one call that turns a `DataConfig` into ready-to-batch data.

    data = prepare_data(config, model_dir, num_replicas=strategy.num_replicas_in_sync)
    for epoch in range(epochs):
        for source, target in data.train_batches(epoch, seed=seed):   # int32 [B, S], [B, T]
            ...
    data.eval_batches("validation")                # same batching, fixed order
    data.text["validation"].source / .target       # raw strings for BLEU

Everything that can be wrong with the input (files, languages, budget) raises
`DataError` here, before training starts. Reading order:
  1. read the splits, drop and count pairs with an empty side   (data.corpora)
  2. load the vocabulary from model_dir, or train it on train    (data.tokenizer)
  3. tokenize every split once, drop and count over-long pairs   (data.pipeline)
  4. plan batches per epoch from the lengths                     (data.buckets)
"""

import dataclasses
import itertools
from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np
import tensorflow as tf

from data.buckets import BatchPlan, BucketScheme
from data.config import DataConfig
from data.corpora import ParallelText, load_corpus
from data.errors import DataError
from data.pipeline import TokenizedPairs, make_batches, sample_pairs, tokenize_pairs
from data.tokenizer import SubwordTokenizer, load_or_train

# The vocabulary is trained on at most this many sentences (source and target lines
# together), evenly spaced through train: enough for a 37k BPE, and it keeps WMT-sized
# corpora (9M lines) within the trainer's memory.
MAX_VOCAB_TRAINING_SENTENCES = 2_000_000
# Keeps the BPE-dropout draws independent of the shuffle, which is seeded by (seed, epoch).
_BPE_DROPOUT_STREAM = 1


@dataclasses.dataclass(frozen=True)
class SplitCounts:
    """What happened to one split's pairs."""

    read: int  # Pairs in the source files / dataset.
    dropped_empty: int  # Either side empty or whitespace-only.
    dropped_too_long: int  # Either side longer than max_length ids.

    @property
    def kept(self) -> int:
        return self.read - self.dropped_empty - self.dropped_too_long


@dataclasses.dataclass(frozen=True)
class PreparedData:
    """Tokenizer, raw text and token ids of every split, and the batching scheme."""

    config: DataConfig
    tokenizer: SubwordTokenizer
    # Every non-empty pair per split ("train", "validation", maybe "test"), over-long
    # ones included (so BLEU covers the whole set; their count is in `counts`).
    text: Dict[str, ParallelText]
    # The pairs that fit max_length, as ids: what the batches hold.
    tokens: Dict[str, TokenizedPairs]
    counts: Dict[str, SplitCounts]
    scheme: BucketScheme
    # How validation was made when the source has none ("held out N pairs of train").
    validation_note: Optional[str] = None

    # The last epoch's training ids when they are not `tokens["train"]` as it is (a
    # BPE-dropout segmentation, or the pairs in both directions), keyed by
    # (seed, epoch, both_directions): the trainer asks for an epoch's plan, then its batches.
    _epoch_tokens: Dict[Tuple[int, int, bool], TokenizedPairs] = dataclasses.field(
        default_factory=dict, repr=False, compare=False
    )

    def train_tokens(self, epoch: int, seed: int = 0, both_directions: bool = False) -> TokenizedPairs:
        """Epoch `epoch`'s training ids: `tokens["train"]`, or with BPE-dropout a fresh
        segmentation of the same pairs, the same for the same (seed, epoch).

        `both_directions`: every pair also reversed, target to source, after the pairs
        themselves (`TokenizedPairs.in_both_directions`); twice the batches an epoch.
        """
        sampled = self.config.bpe_dropout > 0.0
        if not (sampled or both_directions):
            return self.tokens["train"]
        # Without BPE-dropout, every epoch in both directions holds the same ids.
        key = (seed, epoch if sampled else 0, both_directions)
        if key not in self._epoch_tokens:
            pairs = self.tokens["train"]
            if sampled:
                # One int from (seed, epoch): sentencepiece's generator takes a single seed.
                draw_seed = int(np.random.default_rng([seed, epoch, _BPE_DROPOUT_STREAM]).integers(2**31))
                pairs = sample_pairs(self.tokenizer, self.text["train"], self.config.bpe_dropout, draw_seed)
                # Longer pieces-wise than the deterministic split: a pair can outgrow max_length.
                pairs = pairs.within(self.config.max_length)
            if both_directions:
                pairs = pairs.in_both_directions(self.config.max_length)
            self._epoch_tokens.clear()
            self._epoch_tokens[key] = pairs
        return self._epoch_tokens[key]

    def train_plan(self, epoch: int, seed: int = 0, both_directions: bool = False) -> BatchPlan:
        """Epoch `epoch`'s batches; the same for the same (seed, epoch, both_directions)."""
        rng = np.random.default_rng([seed, epoch])
        return self.scheme.plan(*self.train_tokens(epoch, seed, both_directions).lengths(), rng=rng)

    def train_batches(
        self, epoch: int, seed: int = 0, skip: int = 0, both_directions: bool = False
    ) -> tf.data.Dataset:
        """One epoch of shuffled training batches: (source int32 [B, S], target int32 [B, T]).

        Args:
            epoch: selects the shuffle; another epoch gives another order.
            seed: the run's seed.
            skip: batches already trained on in this epoch (resuming mid-epoch).
            both_directions: train on every pair in both directions this epoch
                (bidirectional training; see `TrainConfig.bidirectional_fraction`).
        """
        tokens = self.train_tokens(epoch, seed, both_directions)
        return make_batches(tokens, self.train_plan(epoch, seed, both_directions), skip=skip)

    def eval_plan(self, split: str = "validation") -> BatchPlan:
        """A split's batches in a fixed order (buckets ascending, pairs by length, ties in file order)."""
        return self.scheme.plan(*self._split_tokens(split).lengths(), rng=None)

    def eval_batches(self, split: str = "validation") -> tf.data.Dataset:
        """A split's batches, unshuffled, batched like training."""
        return make_batches(self._split_tokens(split), self.eval_plan(split))

    def batch_shapes(self) -> List[Tuple[int, int, int]]:
        """Every (rows, source length, target length) a batch can have."""
        return self.scheme.declared_shapes()

    def _split_tokens(self, split):
        if split not in self.tokens:
            raise DataError(f"no split {split!r}; this dataset has {', '.join(self.tokens)}")
        return self.tokens[split]


def prepare_data(config: DataConfig, model_dir: str, num_replicas: int = 1) -> PreparedData:
    """Reads, checks, tokenizes and counts every split of `config.dataset`.

    Args:
        config: with `batch_tokens` resolved (not None).
        model_dir: where the vocabulary file is read from, or written to if missing.
        num_replicas: replicas sharing each batch; batch rows are a multiple of it.

    Raises:
        DataError: any bad input or setting, naming the bad file, line or value.
    """
    if config.batch_tokens is None:
        raise DataError(
            "batch_tokens is None: resolve it for the model size first, e.g. "
            "dataclasses.replace(config, batch_tokens=4096)"
        )
    # Checked before the (possibly slow) reading and tokenizing.
    scheme = BucketScheme.for_budget(config.batch_tokens, config.max_length, num_replicas)
    corpus = load_corpus(config.dataset, config.source_lang, config.target_lang)
    train = corpus.splits["train"]
    tokenizer = load_or_train(
        model_dir,
        lambda: _vocab_training_text(train),
        config.vocab_size,
        lowercase=config.lowercase,
        model_type=config.subword_model,
    )

    tokens, counts = {}, {}
    for split, text in corpus.splits.items():
        pairs = tokenize_pairs(tokenizer, text)
        fits = pairs.fits(config.max_length)
        tokens[split] = pairs.select(fits)
        counts[split] = SplitCounts(
            read=corpus.read[split],
            dropped_empty=corpus.dropped_empty[split],
            dropped_too_long=int((~fits).sum()),
        )
    for split in ("train", "validation"):
        # Without validation pairs, the validation loss would read 0 and pick checkpoints.
        if split in tokens and len(tokens[split]) == 0:
            raise DataError(
                f"no {'training' if split == 'train' else split} pair fits max_length {config.max_length} "
                f"({counts[split].dropped_too_long} too long, {counts[split].dropped_empty} empty, "
                f"of {counts[split].read} read)"
            )
    return PreparedData(
        config=config,
        tokenizer=tokenizer,
        text=corpus.splits,
        tokens=tokens,
        counts=counts,
        scheme=scheme,
        validation_note=corpus.validation_note,
    )


def _vocab_training_text(train: ParallelText) -> Iterator[str]:
    """Source then target lines of train, evenly thinned to the trainer's cap."""
    lines = itertools.chain(train.source, train.target)
    total = 2 * len(train)
    step = max(1, -(-total // MAX_VOCAB_TRAINING_SENTENCES))
    return itertools.islice(lines, 0, None, step)
