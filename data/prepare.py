"""The one-time preparation: every split's text tokenized into shards (data/shards.py).

    manifests = prepare_splits(config, tokenizer.model_proto, corpus, data_dir)

Like `fairseq-preprocess`: the corpus streams through once, in chunks that a pool of
worker processes segments with the `sentencepiece` package (no TensorFlow in the
workers; `data.lowercase` lowercases as the graph does, so the ids equal
`SubwordTokenizer.tokenize`'s), and the parent writes the kept pairs in order. Memory
holds a few chunks, whatever the corpus size. Pairs with an empty side are dropped by
the stream (data/corpora.py) and over-long ones here, both counted in the manifest.

A split is prepared when its directory has no manifest, or one whose fingerprint (data
settings, vocabulary checksum, input files' sizes and mtimes or the TFDS name and
version) differs: then it is rebuilt, and the reason printed. A split being written is a
hidden temporary directory, renamed into place whole (data/shards.py), so an
interrupted preparation leaves nothing training reads. Train, the split that takes
hours at WMT's size, is checkpointed every `SHARD_PAIRS` pairs: the next start, for the
same fingerprint, skips the pairs those shards hold (read, not tokenized again) and
goes on, to the same result as an uninterrupted preparation. Validation and test, small,
are prepared again whole.

BPE-dropout's per-epoch segmentation is the same pass over train (`prepare_sampled_train`),
written as the split "train-sampled", the previous epoch's replaced.

With gold word alignments (`DataConfig.alignments`, guided alignment training), train's
pairs come with their Pharaoh lines (data/corpora.py `aligned_pairs`), and the workers
parse each against the pair's words (data/words.py): a link outside them is an error
naming the file's line. A pair whose pieces do not mark its words (as many pieces starting
with "▁" as words, the first one among them; normalization can split a word, `¨` into
` ̈`) keeps no links, and is counted (`alignments_dropped_mismatch`). The links are
stored with the pairs that fit (data/shards.py), and the file is part of the fingerprint.
"""

import collections
import concurrent.futures
import concurrent.futures.process
import dataclasses
import hashlib
import itertools
import multiprocessing
import os
import sys
import time
from typing import Callable, Dict, Iterable, Iterator, List, NamedTuple, Optional, Tuple

import numpy as np

from data.errors import DataError
from data.shards import FORMAT_VERSION, SplitWriter, read_manifest, remove_leftovers
from data.words import parse_pharaoh, word_start_table, words

# Pairs per chunk handed to a worker: large enough to amortize the inter-process copy.
_CHUNK = 20_000
# Sentences per BPE-dropout draw, each with its own seed from (seed, side, first pair):
# the same chunks as before preparation streamed, so the same seed gives the same ids.
SAMPLE_CHUNK = 100_000
# Pairs of train between checkpoints of its preparation: what a kill can cost at most,
# a small share of a large corpus's tokenizing (docs/results.md has its pace).
SHARD_PAIRS = 1_000_000
# Chunks in flight per worker: bounds the parent's memory while keeping workers busy.
_IN_FLIGHT_PER_WORKER = 2
# The vocabulary is trained on at most this many sentences (source and target lines
# together), evenly spaced through train. sentencepiece's trainer holds every sentence it
# is given, with several copies and indexes of it, so that its peak grows with the
# sample (not with the pieces asked): this cap keeps the preparation's peak for any corpus
# near Multi30k's (docs/lab-notebook/2026-11-26-memory-at-scale.md).
# Half a million sentences, some ten million words, is still plenty for a 37k shared
# BPE; sentencepiece's own `input_sentence_size` and Marian's `--sentencepiece-max-lines`
# sample a corpus the same way, at a few hundred thousand to a few million lines.
MAX_VOCAB_TRAINING_SENTENCES = 500_000
SAMPLED_TRAIN = "train-sampled"


def fingerprint(config, model_proto: bytes, corpus) -> dict:
    """What a split's shards are made from; a change means they must be made again.

    The alignments (the setting, and the file's size, mtime and checksum) are in it only
    where there are some: a preparation without them has the fingerprint it always had.
    """
    data = {
        field: getattr(config, field)
        for field in ("dataset", "source_lang", "target_lang", "vocab_size", "subword_model", "max_length", "lowercase")
    }
    wanted = {
        "format": FORMAT_VERSION,
        "data": data,
        "vocabulary_sha256": hashlib.sha256(model_proto).hexdigest(),
        "input": corpus.fingerprint(),
    }
    if config.alignments is not None:
        data["alignments"] = config.alignments
        wanted["alignments_input"] = corpus.alignments_fingerprint()
    return wanted


def prepared_for(manifest, wanted) -> bool:
    """Whether a split's manifest (None: not prepared) is of shards made from `wanted`, a
    `fingerprint`: otherwise they must be made again."""
    return manifest is not None and manifest.get("fingerprint") == wanted


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity, capped by a cgroup CPU quota.

    A container limited by a quota (Docker's `--cpus`, Kubernetes' CPU limit) still sees
    every core of its host in `os.sched_getaffinity`; a pool sized from that alone would
    start dozens of workers that share two cores' time.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = cgroup_cpu_quota()
    return max(1, min(cores, quota)) if quota else cores


def cgroup_cpu_quota(root: str = "/sys/fs/cgroup") -> Optional[int]:
    """The cgroup's CPU quota rounded up to whole cores, or None where there is none."""
    try:
        with open(os.path.join(root, "cpu.max")) as f:  # cgroup v2: "max 100000" or "200000 100000"
            quota, period = f.read().split()[:2]
        if quota == "max":
            return None
        return -(-int(quota) // int(period))
    except (OSError, ValueError):
        pass
    try:  # cgroup v1
        with open(os.path.join(root, "cpu", "cpu.cfs_quota_us")) as f:
            quota = int(f.read())
        with open(os.path.join(root, "cpu", "cpu.cfs_period_us")) as f:
            period = int(f.read())
        return -(-quota // period) if quota > 0 and period > 0 else None
    except (OSError, ValueError):
        return None


def prepare_splits(
    config, model_proto: bytes, corpus, data_dir: str, workers: Optional[int] = None, log: Callable = print
) -> Dict[str, dict]:
    """Prepares every split of `corpus` not yet prepared for this fingerprint.

    Args:
        config: the `DataConfig` (max_length, lowercase, and the fingerprint's fields).
        model_proto: the vocabulary's sentencepiece model.
        corpus: a `data.corpora.CorpusStream`.
        data_dir: where the splits go (MODEL_DIR/data).
        workers: worker processes (default: one per core); 1 segments in this process.
        log: where the progress lines and the rebuild messages go.

    Returns:
        split -> its manifest.
    """
    removed = remove_leftovers(data_dir)
    if removed:
        log(f"prepare: removed what an interrupted preparation left in {data_dir}: {', '.join(removed)}")
    wanted = fingerprint(config, model_proto, corpus)
    manifests = {}
    with _Segmenter(model_proto, config.lowercase, workers) as segmenter:
        for split in corpus.splits:
            manifest = read_manifest(data_dir, split)
            if prepared_for(manifest, wanted):
                manifests[split] = manifest
                continue
            if manifest is not None:
                log(
                    f"prepare: {os.path.join(data_dir, split)} was made from other data or settings "
                    f"({_difference(manifest.get('fingerprint'), wanted)}); preparing it again"
                )
            manifests[split] = _write_split(
                split, corpus, config, segmenter=segmenter, data_dir=data_dir, wanted=wanted, log=log
            )
    return manifests


def _difference(old, new) -> str:
    """Which fields of two fingerprints differ: "changed: data.vocab_size, vocabulary_sha256"."""
    old = old if isinstance(old, dict) else {}
    changed = []
    for key in sorted(set(old) | set(new)):
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        if isinstance(before, dict) and isinstance(after, dict):
            changed += [f"{key}.{k}" for k in sorted(set(before) | set(after)) if before.get(k) != after.get(k)]
        else:
            changed.append(key)
    return "changed: " + ", ".join(changed)


def _write_split(split, corpus, config, *, segmenter, data_dir, wanted, log):
    keep_text = split != "train"  # Validation and test keep their raw pairs for BLEU.
    aligned = split == "train" and corpus.alignments is not None  # Only train has gold alignments.
    sources, targets = [], []
    resume_key = None if keep_text else wanted  # Train is written resumably, shard by shard.
    word_starts = segmenter.word_starts() if aligned else None
    with SplitWriter(
        data_dir, split, config.vocab_size, config.max_length, resume_key=resume_key, word_starts=word_starts
    ) as writer:
        done = {"consumed": 0, "too_long": 0, "mismatched": 0, **(writer.resumed or {})}
        consumed, too_long, mismatched = done["consumed"], done["too_long"], done["mismatched"]
        if consumed:
            log(f"prepare {split}: resuming after the {consumed:,} pairs an interrupted preparation left prepared")
        progress = _Progress(f"prepare {split}", log, pairs=consumed)
        # The pairs already prepared are read past, not tokenized: the stream still counts them.
        pairs = itertools.islice(corpus.aligned_pairs(split) if aligned else corpus.pairs(split), consumed, None)
        last_checkpoint = consumed
        for chunk, encoded in segmenter.map(_chunks(pairs, _CHUNK, corpus.alignments), _encode_chunk):
            dropped, unlinked = _append_fitting(writer, encoded, config.max_length)
            too_long, mismatched = too_long + dropped, mismatched + unlinked
            consumed += len(chunk[0])
            if keep_text:
                sources += chunk[0]
                targets += chunk[1]
            elif consumed - last_checkpoint >= SHARD_PAIRS:
                writer.checkpoint({"consumed": consumed, "too_long": too_long, "mismatched": mismatched})
                last_checkpoint = consumed
            progress.update(len(chunk[0]))
        manifest = {
            "split": split,
            "read": corpus.read[split],
            "dropped_empty": corpus.dropped_empty[split],
            "dropped_too_long": too_long,
            "validation_note": corpus.validation_note if split == "validation" else None,
            "fingerprint": wanted,
        }
        if aligned:
            manifest["alignments_dropped_mismatch"] = mismatched
        writer.commit(manifest, (sources, targets) if keep_text else None)
    progress.done()
    return read_manifest(data_dir, split)


def prepare_sampled_train(
    config, model_proto: bytes, corpus, data_dir: str, draw_seed: int, workers: Optional[int] = None,
    log: Callable = print,
) -> dict:
    """Writes train with a BPE-dropout segmentation drawn for `draw_seed` as the split
    "train-sampled" (replacing the previous one) and returns its manifest.

    Pairs the sampling makes longer than max_length are left out (`dropped_too_long`).
    Reuses the split when it was drawn for this seed and fingerprint already.
    """
    wanted = dict(
        fingerprint(config, model_proto, corpus), bpe_dropout=config.bpe_dropout, draw_seed=draw_seed,
        sample_chunk=SAMPLE_CHUNK,  # The chunks' seeds depend on where chunks start.
    )
    manifest = read_manifest(data_dir, SAMPLED_TRAIN)
    if manifest is not None and manifest.get("fingerprint") == wanted:
        return manifest
    too_long = mismatched = 0
    aligned = corpus.alignments is not None
    progress = _Progress("BPE-dropout segmentation of train", log)
    with _Segmenter(model_proto, config.lowercase, workers) as segmenter:
        word_starts = segmenter.word_starts() if aligned else None
        with SplitWriter(
            data_dir, SAMPLED_TRAIN, config.vocab_size, config.max_length, word_starts=word_starts
        ) as writer:
            starts = itertools.count(0, SAMPLE_CHUNK)
            pairs = corpus.aligned_pairs("train") if aligned else corpus.pairs("train")
            chunks = (
                _SampleChunk(chunk, start, draw_seed, config.bpe_dropout)
                for start, chunk in zip(starts, _chunks(pairs, SAMPLE_CHUNK, corpus.alignments))
            )
            for chunk, encoded in segmenter.map(chunks, _sample_chunk):
                dropped, unlinked = _append_fitting(writer, encoded, config.max_length)
                too_long, mismatched = too_long + dropped, mismatched + unlinked
                progress.update(len(chunk.chunk.sources))
            manifest = {"split": SAMPLED_TRAIN, "dropped_too_long": too_long, "fingerprint": wanted}
            if aligned:
                manifest["alignments_dropped_mismatch"] = mismatched
            writer.commit(manifest)
    progress.done()
    return read_manifest(data_dir, SAMPLED_TRAIN)


def _append_fitting(writer, encoded, max_length) -> Tuple[int, int]:
    """Appends the pairs of a segmented chunk that fit max_length, with their links where
    the chunk has some; returns how many did not fit, and how many that did lost their
    links (their pieces do not mark their words)."""
    source_ids, source_lengths, target_ids, target_lengths, *aligned = encoded
    fits = (source_lengths + 1 <= max_length) & (target_lengths + 2 <= max_length)
    links = link_counts = None
    mismatched = 0
    if aligned:
        links, link_counts, unlinked = aligned
        mismatched = int((unlinked & fits).sum())
    if not fits.all():
        source_ids, source_lengths = _select(source_ids, source_lengths, fits)
        target_ids, target_lengths = _select(target_ids, target_lengths, fits)
        if aligned:
            links, link_counts = _select(links, link_counts, fits)
    writer.append(source_ids, source_lengths, target_ids, target_lengths, links=links, link_counts=link_counts)
    return int((~fits).sum()), mismatched


def _select(ids, lengths, keep):
    """The rows where `keep` of flat `ids` cut by `lengths`."""
    return ids[np.repeat(keep, lengths)], lengths[keep]


class _Chunk(NamedTuple):
    """Pairs a worker segments: `chunk[0]` the sources, `chunk[1]` the targets."""

    sources: List[str]
    targets: List[str]
    # With gold alignments: (the file, each pair's line number in it, each pair's line).
    alignments: Optional[Tuple[str, List[int], List[str]]] = None


class _SampleChunk(NamedTuple):
    """A `_Chunk` to segment with BPE-dropout, seeded by its first pair's place."""

    chunk: _Chunk
    start: int
    draw_seed: int
    dropout: float


def _chunks(pairs: Iterable[tuple], size: int, alignments: Optional[str] = None) -> Iterator[_Chunk]:
    """`_Chunk`s of up to `size` pairs each. The pairs are (source, target), or, with the
    alignment file `alignments`, (source, target, line number, Pharaoh line)."""
    iterator = iter(pairs)
    while True:
        chunk = list(itertools.islice(iterator, size))
        if not chunk:
            return
        columns = list(zip(*chunk))
        sources, targets = list(columns[0]), list(columns[1])
        if len(columns) == 2:
            yield _Chunk(sources, targets)
        else:
            yield _Chunk(sources, targets, (alignments, list(columns[2]), list(columns[3])))


def vocabulary_sample(corpus) -> Iterator[str]:
    """Source then target sentences of train, evenly thinned to the trainer's cap.

    The same sentences as the cap applied to train held in memory: every `step`-th line
    of the source lines followed by the target lines. A counting pass over train first
    (`CorpusStream.count`, here, so that a bad input raises before the trainer starts;
    none of its own where holding out validation already counted train), then, as the trainer
    reads, one pass that yields the sampled source lines and keeps only the sampled
    target lines, as UTF-8 in one buffer (no object per line), for after it: the trainer
    holds its own copy of every sentence, and a Python one would come on top.
    """
    count = corpus.count("train")
    step = max(1, -(-2 * count // MAX_VOCAB_TRAINING_SENTENCES))
    return _every_step(corpus, count, step)


def _every_step(corpus, count: int, step: int) -> Iterator[str]:
    targets, ends = bytearray(), [0]
    for index, (source, target) in enumerate(corpus.pairs("train")):
        if index % step == 0:
            yield source
        if (count + index) % step == 0:
            targets += target.encode("utf-8")
            ends.append(len(targets))
    for begin, end in zip(ends, ends[1:]):
        yield targets[begin:end].decode("utf-8")


# The workers: module-level state set once per process by `_start_worker`.
_processor = None
_model_proto = None
_lowercase = False
_starts = None  # bool [V], `word_start_table`, made when a chunk with alignments first needs it


def _start_worker(model_proto: bytes, lowercase: bool) -> None:
    global _processor, _model_proto, _lowercase, _starts
    import sentencepiece

    _processor = sentencepiece.SentencePieceProcessor(model_proto=model_proto)
    _model_proto, _lowercase, _starts = model_proto, lowercase, None


def _word_starts():
    global _starts
    if _starts is None:
        _starts = word_start_table(_model_proto)
    return _starts


def _texts(sentences):
    if not _lowercase:
        return sentences
    from data.lowercase import lowercase

    return [lowercase(sentence) for sentence in sentences]


def _flat(id_lists):
    """(int32 [P] pieces, int64 [n] pieces per sentence) of a list of id lists."""
    lengths = np.fromiter(map(len, id_lists), np.int64, len(id_lists))
    return np.fromiter(itertools.chain.from_iterable(id_lists), np.int32, int(lengths.sum())), lengths


def _encode_chunk(chunk):
    """Segments a `_Chunk` as `SubwordTokenizer.tokenize` does: (source ids, lengths,
    target ids, lengths), and with alignments `_chunk_links`' three more."""
    source_ids = _processor.encode(_texts(chunk.sources), out_type=int)
    target_ids = _processor.encode(_texts(chunk.targets), out_type=int)
    return (*_flat(source_ids), *_flat(target_ids), *_chunk_links(chunk, source_ids, target_ids))


def _sample_chunk(sample):
    """A `_SampleChunk`'s BPE-dropout segmentation, as `SubwordTokenizer.sample` draws it
    for the chunk's seeds: one per side from (draw seed, side, the chunk's first pair).
    BPE-dropout skips merges, never the word marker: a word still starts a piece."""
    import sentencepiece

    chunk = sample.chunk
    encoded, ids = [], []
    for side, sentences in enumerate((chunk.sources, chunk.targets)):
        chunk_seed = int(np.random.default_rng([sample.draw_seed, side, sample.start]).integers(2**31))
        # The generator is process-wide; one thread keeps the draws in sentence order.
        sentencepiece.set_random_generator_seed(chunk_seed)
        ids.append(_processor.encode(
            _texts(sentences), out_type=int, enable_sampling=True, alpha=sample.dropout, nbest_size=-1, num_threads=1
        ))
        encoded += _flat(ids[-1])
    return (*encoded, *_chunk_links(chunk, *ids))


def _chunk_links(chunk, source_ids, target_ids):
    """`()` for a chunk without alignments; else its pairs' links: (int32 [L, 2] (source
    word, target word) pair after pair, int64 [n] links per pair, bool [n] the pairs that
    lost theirs because their pieces do not mark their words).

    Raises:
        DataError: naming the alignment file's line, the link and the pair's word counts,
            for a link that is not `i-j` or lies outside the pair's words.
    """
    if chunk.alignments is None:
        return ()
    path, numbers, lines = chunk.alignments
    starts = _word_starts()
    links, counts, mismatched = [], [], []
    for source, target, number, line, source_pieces, target_pieces in zip(
        chunk.sources, chunk.targets, numbers, lines, source_ids, target_ids
    ):
        source_words, target_words = len(words(source)), len(words(target))
        try:
            pair_links = parse_pharaoh(line, source_words, target_words)
        except ValueError as error:
            raise DataError(
                f"{path}:{number}: {error} (the pair has {source_words} source and {target_words} target words)"
            ) from None
        marked = _marks_words(starts, source_pieces, source_words) and _marks_words(starts, target_pieces, target_words)
        if not marked:
            pair_links = []
        links += pair_links
        counts.append(len(pair_links))
        mismatched.append(not marked)
    return (
        np.asarray(links, np.int32).reshape([-1, 2]), np.asarray(counts, np.int64), np.asarray(mismatched, bool),
    )


def _marks_words(starts, pieces, word_count):
    """Whether a sentence's pieces start exactly its words: as many word-starting pieces as
    words, the first piece among them."""
    flags = starts[np.asarray(pieces, np.int64)]
    return int(flags.sum()) == word_count and (not len(flags) or bool(flags[0]))


class _Segmenter:
    """Maps a function over chunks in order: in this process for a single chunk, else in
    a pool of `workers` spawned processes (started at the second chunk, and only then).

    The pool is `concurrent.futures.ProcessPoolExecutor`, not `multiprocessing.Pool`: a
    worker that dies (killed for memory, a crash, a failed start) breaks the pool with an
    error here, where `multiprocessing.Pool` would start a new worker and wait forever
    for the lost chunk's result.
    """

    def __init__(self, model_proto: bytes, lowercase: bool, workers: Optional[int]):
        self._args = (model_proto, lowercase)
        self._workers = usable_cores() if workers is None else workers  # one per core
        if self._workers < 1:
            raise DataError(f"workers must be at least 1, got {self._workers}")
        self._pool = None

    def word_starts(self):
        """bool [V]: which of the vocabulary's pieces start a word (`word_start_table`)."""
        return word_start_table(self._args[0])

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *_):
        if self._pool is not None:
            # An error or an interrupt: drop the chunks not yet started; either way wait
            # for the workers to exit, so that none outlives the preparation.
            self._pool.shutdown(wait=True, cancel_futures=exc_type is not None)
            self._pool = None
        return False

    def map(self, chunks: Iterable, function) -> Iterator[tuple]:
        """Yields (chunk, function(chunk)) in the chunks' order; a bounded number in flight."""
        chunks = iter(chunks)
        first = next(chunks, None)
        if first is None:
            return
        second = next(chunks, None)
        if second is None or self._workers == 1:
            _start_worker(*self._args)
            for chunk in itertools.chain([first], [] if second is None else [second], chunks):
                yield chunk, function(chunk)
            return
        if self._pool is None:
            # spawn: workers start from a fresh interpreter, without the parent's TensorFlow.
            self._pool = concurrent.futures.ProcessPoolExecutor(
                self._workers, mp_context=multiprocessing.get_context("spawn"),
                initializer=_start_worker, initargs=self._args,
            )
        try:
            yield from self._pooled(itertools.chain([first, second], chunks), function)
        except concurrent.futures.process.BrokenProcessPool as error:
            raise DataError(
                f"a preparation worker process ended abruptly ({error}); if the machine ran out "
                "of memory, prepare with fewer workers (python -m app.prepare --workers N)"
            ) from error

    def _pooled(self, chunks, function):
        pending = collections.deque()
        for chunk in chunks:
            pending.append((chunk, self._pool.submit(function, chunk)))
            while len(pending) >= _IN_FLIGHT_PER_WORKER * self._workers:
                chunk, result = pending.popleft()
                yield chunk, result.result()
        while pending:
            chunk, result = pending.popleft()
            yield chunk, result.result()


@dataclasses.dataclass
class _Progress:
    """Pairs done so far: one line redrawn on a terminal, else a line every million pairs."""

    label: str
    log: Callable
    pairs: int = 0  # from an earlier, interrupted preparation, when it resumes
    started: float = dataclasses.field(default_factory=time.monotonic)
    _reported: int = 0

    def __post_init__(self):
        self._first = self.pairs  # the rate counts this run's pairs only
        self._reported = self.pairs

    def update(self, count: int) -> None:
        self.pairs += count
        if sys.stdout.isatty() and self.log is print:
            print(f"\r{self._line()}", end="", flush=True)
        elif self.pairs - self._reported >= 1_000_000:
            self._reported = self.pairs
            self.log(self._line())

    def done(self) -> None:
        if sys.stdout.isatty() and self.log is print:
            print("\r", end="")
        self.log(self._line())

    def _line(self) -> str:
        seconds = max(time.monotonic() - self.started, 1e-9)
        return f"{self.label}: {self.pairs:,} pairs ({(self.pairs - self._first) / seconds:,.0f}/s)"
