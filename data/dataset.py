"""`prepare_data`: the one call that turns a `DataConfig` into ready-to-batch data.

    data = prepare_data(config, model_dir, num_replicas=strategy.num_replicas_in_sync)
    for epoch in range(epochs):
        for source, target in data.train_batches(epoch, seed=seed):   # int32 [B, S], [B, T]
            ...
    data.eval_batches("validation")                # same batching, fixed order
    data.text["validation"].source / .target       # raw strings for BLEU

    counts = prepare_shards(config, model_dir)      # python -m app.prepare: the shards alone

Everything that can be wrong with the input (files, languages, budget) raises
`DataError` here, before training starts. Reading order:
  1. open the corpus as streams, split by split                    (data.corpora)
  2. load the vocabulary from model_dir, or train it on a sample
     streamed from train                                          (data.tokenizer, data.prepare)
  3. prepare each split once: tokenized into shards under
     model_dir/data/, empty and over-long pairs dropped and counted (data.prepare, data.shards)
  4. plan batches per epoch from the lengths, gather them from the
     memory-mapped shards                                          (data.buckets, data.pipeline)

Memory holds the lengths (4 bytes a pair), one epoch's plan and validation's and test's
raw text; train's text and every split's ids stay on disk.
"""

import dataclasses
import os
from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np
import tensorflow as tf

from data.buckets import BatchPlan, BucketScheme
from data.config import EFLOMAL, DataConfig
from data.corpora import CorpusStream, ParallelText, open_corpus
from data.errors import DataError
from data.pipeline import shard_batches
from data.prepare import SAMPLED_TRAIN, prepare_sampled_train, prepare_splits, vocabulary_sample
from data.shards import BothDirections, ShardedPairs, read_text
from data.tokenizer import SubwordTokenizer, load_or_train

# Where a model directory keeps its prepared splits.
DATA_SUBDIR = "data"
# Keeps the BPE-dropout draws independent of the shuffle, which is seeded by (seed, epoch).
_BPE_DROPOUT_STREAM = 1


class TrainText:
    """Train's raw pairs, streamed from the corpus on demand: never held in memory.

    `len()` is the number of non-empty pairs; iterating yields (source, target) strings.
    """

    def __init__(self, corpus: CorpusStream, count: int):
        self._corpus = corpus
        self._count = count

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[Tuple[str, str]]:
        return self._corpus.pairs("train")


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
    """Tokenizer, raw text and prepared ids of every split, and the batching scheme."""

    config: DataConfig
    tokenizer: SubwordTokenizer
    # Every non-empty pair per split ("train", "validation", maybe "test"), over-long
    # ones included (so BLEU covers the whole set; their count is in `counts`):
    # `ParallelText` for validation and test, `TrainText` (streamed) for train.
    text: Dict[str, object]
    # The pairs that fit max_length, memory-mapped from MODEL_DIR/data/<split>/.
    tokens: Dict[str, ShardedPairs]
    counts: Dict[str, SplitCounts]
    scheme: BucketScheme
    # How validation was made when the source has none ("held out N pairs of train").
    validation_note: Optional[str] = None
    # Where the splits are (MODEL_DIR/data), the corpus they came from and the workers
    # that prepare them: BPE-dropout prepares a fresh segmentation of train per epoch.
    data_dir: Optional[str] = None
    corpus: Optional[CorpusStream] = dataclasses.field(default=None, repr=False, compare=False)
    workers: Optional[int] = None

    # The last epoch's training pairs when they are not `tokens["train"]` as it is (a
    # BPE-dropout segmentation, or the pairs in both directions), keyed by
    # (seed, epoch, both_directions): the trainer asks for an epoch's plan, then its batches.
    _epoch_tokens: Dict[Tuple[int, int, bool], object] = dataclasses.field(
        default_factory=dict, repr=False, compare=False
    )

    def train_tokens(self, epoch: int, seed: int = 0, both_directions: bool = False):
        """Epoch `epoch`'s training pairs: `tokens["train"]`, or with BPE-dropout a fresh
        segmentation of the same pairs, the same for the same (seed, epoch).

        `both_directions`: every pair also reversed, target to source, after the pairs
        themselves (`data.shards.BothDirections`); twice the batches an epoch.
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
                # Pairs the sampling makes longer than max_length are left out of the split.
                prepare_sampled_train(
                    self.config, self.tokenizer.model_proto, self.corpus, self.data_dir, draw_seed, self.workers,
                    log=lambda *_: None,
                )
                pairs = ShardedPairs(self.data_dir, SAMPLED_TRAIN)
            if both_directions:
                pairs = BothDirections(pairs, self.config.max_length)
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
        return shard_batches(tokens, self.train_plan(epoch, seed, both_directions), skip=skip)

    def eval_plan(self, split: str = "validation") -> BatchPlan:
        """A split's batches in a fixed order (buckets ascending, pairs by length, ties in file order)."""
        return self.scheme.plan(*self._split_tokens(split).lengths(), rng=None)

    def eval_batches(self, split: str = "validation") -> tf.data.Dataset:
        """A split's batches, unshuffled, batched like training."""
        return shard_batches(self._split_tokens(split), self.eval_plan(split))

    def batch_shapes(self) -> List[Tuple[int, int, int]]:
        """Every (rows, source length, target length) a batch can have."""
        return self.scheme.declared_shapes()

    def _split_tokens(self, split):
        if split not in self.tokens:
            raise DataError(f"no split {split!r}; this dataset has {', '.join(self.tokens)}")
        return self.tokens[split]


def prepare_data(
    config: DataConfig, model_dir: str, num_replicas: int = 1, workers: Optional[int] = None, log=print
) -> PreparedData:
    """Opens, checks and counts every split of `config.dataset`, and prepares its shards
    under `model_dir/data` where they are missing or stale (`data.prepare.prepare_splits`).

    Args:
        config: with `batch_tokens` resolved (not None).
        model_dir: where the vocabulary file is read from, or written to if missing,
            and the prepared splits go.
        num_replicas: replicas sharing each batch; batch rows are a multiple of it.
        workers: preparation processes (default: one per core).
        log: where the preparation's progress lines go.

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
    prepared = _prepare(config, model_dir, workers, log)
    text = {}
    for split, counts in prepared.counts.items():
        if split == "train":
            text[split] = TrainText(prepared.corpus, counts.read - counts.dropped_empty)
        else:
            text[split] = ParallelText(*read_text(prepared.data_dir, split))
    return PreparedData(
        config=config,
        tokenizer=prepared.tokenizer,
        text=text,
        tokens=prepared.tokens,
        counts=prepared.counts,
        scheme=scheme,
        validation_note=prepared.manifests["validation"].get("validation_note"),
        data_dir=prepared.data_dir,
        corpus=prepared.corpus,
        workers=workers,
    )


def open_prepared(
    config: DataConfig, model_dir: str, num_replicas: int = 1, log=lambda *_: None
) -> Optional[PreparedData]:
    """`prepare_data`'s result where `model_dir` already holds the vocabulary and every
    split prepared for `config` (`python -m app.prepare`, or an earlier run), reading only;
    None where anything would have to be made first.

    Raises:
        DataError: as `prepare_data`, for a corpus that cannot be opened.
    """
    from data.prepare import fingerprint, prepared_for
    from data.shards import read_manifest
    from data.tokenizer import MODEL_FILENAME

    model_path = os.path.join(model_dir, MODEL_FILENAME)
    if not os.path.exists(model_path):
        return None
    corpus = open_corpus(config.dataset, config.source_lang, config.target_lang)
    data_dir = os.path.join(model_dir, DATA_SUBDIR)
    corpus = _with_alignments(config, corpus, data_dir, log, make=False)
    if corpus is None:
        return None
    wanted = fingerprint(config, SubwordTokenizer.load(model_path).model_proto, corpus)
    if not all(prepared_for(read_manifest(data_dir, split), wanted) for split in corpus.splits):
        return None
    return prepare_data(config, model_dir, num_replicas, log=log)


def prepare_shards(
    config: DataConfig, model_dir: str, workers: Optional[int] = None, log=print
) -> Dict[str, SplitCounts]:
    """What `python -m app.prepare` does: the vocabulary and every split's shards under
    `model_dir`, exactly as `prepare_data` makes them, without planning batches (the
    shards do not depend on the batch size: `config.batch_tokens` is not read). Returns
    each split's `SplitCounts`.

    Raises:
        DataError: any bad input or setting, naming the bad file, line or value.
    """
    return _prepare(config, model_dir, workers, log).counts


@dataclasses.dataclass(frozen=True)
class _Prepared:
    """The vocabulary and the prepared splits, before any batching."""

    corpus: CorpusStream
    tokenizer: SubwordTokenizer
    data_dir: str
    manifests: Dict[str, dict]
    tokens: Dict[str, ShardedPairs]
    counts: Dict[str, SplitCounts]


def _prepare(config, model_dir, workers, log) -> _Prepared:
    """Opens the corpus, loads or trains the vocabulary and prepares every split's shards
    (where missing or stale); checks that train and validation keep a pair.

    Raises:
        DataError: any bad input or setting, or a split with no pair that fits.
    """
    corpus = open_corpus(config.dataset, config.source_lang, config.target_lang)
    data_dir = os.path.join(model_dir, DATA_SUBDIR)
    corpus = _with_alignments(config, corpus, data_dir, log)
    tokenizer = load_vocabulary(config, model_dir, corpus)
    manifests = prepare_splits(config, tokenizer.model_proto, corpus, data_dir, workers, log=log)

    tokens, counts = {}, {}
    for split, manifest in manifests.items():
        tokens[split] = ShardedPairs(data_dir, split)
        counts[split] = SplitCounts(
            read=manifest["read"],
            dropped_empty=manifest["dropped_empty"],
            dropped_too_long=manifest["dropped_too_long"],
        )
    for split in ("train", "validation"):
        # Without validation pairs, the validation loss would read 0 and pick checkpoints.
        if split in tokens and len(tokens[split]) == 0:
            raise DataError(
                f"no {'training' if split == 'train' else split} pair fits max_length {config.max_length} "
                f"({counts[split].dropped_too_long} too long, {counts[split].dropped_empty} empty, "
                f"of {counts[split].read} read)"
            )
    return _Prepared(corpus, tokenizer, data_dir, manifests, tokens, counts)


def _with_alignments(config, corpus, data_dir, log, make=True) -> Optional[CorpusStream]:
    """`corpus` with train's gold alignments where `config` has some: its file, or
    eflomal's, made now (`data.eflomal_alignments.cached_train_alignments`); with
    `make=False`, None where eflomal's are not made yet."""
    if config.alignments is None:
        return corpus
    path = config.alignments
    if path == EFLOMAL:
        from data.eflomal_alignments import cached_train_alignments, made_train_alignments

        if make:
            path = cached_train_alignments(corpus, data_dir, config, log)
        else:
            path = made_train_alignments(corpus, data_dir, config)
            if path is None:
                return None
    return corpus.with_alignments(path)


def load_vocabulary(config: DataConfig, model_dir: str, corpus: CorpusStream) -> SubwordTokenizer:
    """The vocabulary in `model_dir`; else the cached one trained for the same data and
    settings (`data.vocabulary_cache`), copied there; else one trained on a sample
    streamed from train (`data.prepare.vocabulary_sample`), written there and cached."""
    from data.vocabulary_cache import cached_vocabulary

    return load_or_train(
        model_dir,
        lambda: vocabulary_sample(corpus),
        config.vocab_size,
        lowercase=config.lowercase,
        model_type=config.subword_model,
        cached=cached_vocabulary(config, corpus),
    )
