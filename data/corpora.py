"""Raw parallel text from the three kinds of source: bundled Multi30k, TFDS, the user's files.

`open_corpus(dataset, source_lang, target_lang)` returns a `CorpusStream`, whose
`pairs(split)` yields a split's pairs one at a time, surrounding whitespace stripped,
pairs with an empty side dropped and counted as they stream by: memory does not grow
with the corpus. `load_corpus` collects every split into lists (small corpora, tests).
Split names are always "train", "validation" and, where the source has one, "test".
Nothing here tokenizes.

    Multi30k     data/multi30k/{train,val,test_2016_flickr}.{en,de,fr}.gz, any two
                 of en/de/fr in either direction.
    TFDS         any translation builder, e.g. "wmt14_translate/de-en"; the two
                 languages are picked from the example's feature dict by key, so
                 "wmt14_translate/de-en" also serves en->de. Read through the tf.data
                 stream TFDS provides, in batches.
    files:       "files:TRAIN_SRC,TRAIN_TGT[,VALID_SRC,VALID_TGT]". Without validation
                 files, 1% of the training pairs (at most 1000, evenly spaced) are held
                 out as validation and removed from train; a counting pass over train
                 finds how many pairs there are first.

With gold word alignments for train (`DataConfig.alignments`, guided alignment training:
`open_corpus(...).with_alignments(PATH)`), one Pharaoh line per raw train line, like
OpenNMT-tf's `train_alignments`: `aligned_pairs("train")` yields each kept pair with its
line, which the same filters (empty pairs, held-out validation) drop with its pair.
"""

import concurrent.futures
import dataclasses
import functools
import hashlib
import itertools
import os
import socket
import urllib.parse
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from data.errors import DataError, first_line
from data.text_files import check_readable, iter_lines, iter_parallel_lines

MULTI30K_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "multi30k")
MULTI30K_LANGUAGES = ("en", "de", "fr")
# Our split name -> the file stem in data/multi30k/.
MULTI30K_SPLITS = {"train": "train", "validation": "val", "test": "test_2016_flickr"}
# What benchmarks score on, by the names they take (`multi30k_path` reads both).
MULTI30K_SCORED_SPLITS = ("validation", "test_2016_flickr")

_TFDS_SPLITS = ("train", "validation", "test")
_HELD_OUT_FRACTION = 0.01
_HELD_OUT_MAX = 1000
_TFDS_BATCH = 4096  # Examples per batch read from TFDS's stream.
# Seconds the hosts a TFDS builder downloads from get, all together, to accept a
# connection before the download is given up: TFDS itself retries each file for minutes.
_DOWNLOAD_PROBE_SECONDS = 10


@dataclasses.dataclass(frozen=True)
class ParallelText:
    """Aligned sentences: `target[i]` translates `source[i]`."""

    source: List[str]
    target: List[str]

    def __len__(self) -> int:
        return len(self.source)


@dataclasses.dataclass(frozen=True)
class Corpus:
    """Every split of one dataset, empty pairs already removed."""

    splits: Dict[str, ParallelText]  # "train", "validation", maybe "test".
    # Pairs per split before dropping empty ones (train: less the held-out validation).
    read: Dict[str, int]
    dropped_empty: Dict[str, int]  # Pairs with an empty or whitespace-only side.
    # How validation came about when the source has none, e.g. "held out 290 pairs of
    # train"; None when the source provides it.
    validation_note: Optional[str] = None


def held_out_indices(count: int) -> np.ndarray:
    """Which of `count` non-empty training pairs are held out as validation: 1% (at most
    1000, at least 1), evenly spaced. int64 [H], ascending, distinct.

    Evenly spaced rather than the last lines, because concatenated corpora put their
    sub-corpora one after another.
    """
    if count < 2:
        raise DataError(
            f"cannot hold out validation pairs from only {count} training pair(s); "
            "give validation files as files:TRAIN_SRC,TRAIN_TGT,VALID_SRC,VALID_TGT"
        )
    held = min(_HELD_OUT_MAX, max(1, int(count * _HELD_OUT_FRACTION)))
    return np.unique(np.linspace(0, count - 1, held).round().astype(np.int64))


class CorpusStream:
    """Every split of one dataset, streamed: `pairs(split)` yields (source, target) strings.

    `read[split]` and `dropped_empty[split]` are set when a pass over the split ends
    (train: less the held-out validation, so that read = kept + dropped per split).
    """

    def __init__(
        self, dataset: str, raw: Dict[str, Callable[[], Iterator[Tuple[str, str]]]], fingerprint: dict,
        alignments: Optional[str] = None,
    ):
        self.dataset = dataset
        self._raw = raw  # split -> a fresh iterator of its raw line pairs
        self._fingerprint = fingerprint
        # A file of one Pharaoh line per raw train line (guided alignment), or None.
        self.alignments = alignments
        self.read: Dict[str, int] = {}
        self.dropped_empty: Dict[str, int] = {}
        self._held: Optional[np.ndarray] = None
        self._train_before_hold_out: Optional[int] = None  # Non-empty pairs, held-out ones included.
        self._counts: Dict[str, int] = {}  # split -> pairs `pairs(split)` yields, once counted
        # Train and validation first, then test where there is one.
        self.splits: Tuple[str, ...] = ("train", "validation") + tuple(
            split for split in raw if split not in ("train", "validation")
        )

    @property
    def holds_out_validation(self) -> bool:
        """Whether validation is cut out of train (the source has none)."""
        return "validation" not in self._raw

    @property
    def validation_note(self) -> Optional[str]:
        """How validation came about when the source has none, e.g. "held out 290 pairs of train"."""
        if not self.holds_out_validation:
            return None
        return f"held out {len(self._held_out())} pairs of train"

    def fingerprint(self) -> dict:
        """What the text came from: file paths, sizes and mtimes, or the TFDS name and version."""
        return dict(self._fingerprint)

    def with_alignments(self, path: str) -> "CorpusStream":
        """The same corpus with `path`, a file of one Pharaoh line per raw train line, as
        train's gold alignments (`aligned_pairs`).

        Raises:
            DataError: the file is missing or unreadable.
        """
        check_readable(path)
        return CorpusStream(self.dataset, self._raw, self._fingerprint, path)

    def alignments_fingerprint(self) -> Optional[dict]:
        """The alignment file's path, size, mtime and sha256 (None without one): a changed
        file changes the preparation's fingerprint (data/prepare.py)."""
        if self.alignments is None:
            return None
        digest = hashlib.sha256()
        with open(self.alignments, "rb") as file:
            for block in iter(functools.partial(file.read, 1 << 20), b""):
                digest.update(block)
        described = _file_fingerprint([self.alignments])["files"][0]
        return dict(described, sha256=digest.hexdigest())

    def pairs(self, split: str) -> Iterator[Tuple[str, str]]:
        """The split's non-empty pairs in order, stripped; a new pass each call.

        Raises (while streaming):
            DataError: a bad or misaligned file, or a split left without a pair.
        """
        if split not in self.splits:
            raise DataError(f"{self.dataset} has no split {split!r}; it has {', '.join(self.splits)}")
        if self.holds_out_validation and split in ("train", "validation"):
            return self._held_out_pairs(split)
        return self._counted(split, self._raw[split]())

    def raw_pairs(self, split: str) -> Iterator[Tuple[str, str]]:
        """Every pair of the split as read, empty ones and held-out validation included:
        line N of the files is pair N (what an alignment file's lines count)."""
        if split not in self._raw:
            raise DataError(f"{self.dataset} has no raw split {split!r}; it has {', '.join(self._raw)}")
        return self._raw[split]()

    def aligned_pairs(self, split: str = "train") -> Iterator[Tuple[str, str, int, str]]:
        """`pairs(split)` with each pair's gold alignment: `(source, target, line number,
        Pharaoh line)`, the number counted from 1 in the raw split (and the file).

        Raises (while streaming):
            DataError: as `pairs`, or the alignment file and the split have different
                line counts (naming both).
        """
        if split != "train" or self.alignments is None:
            raise DataError(f"{self.dataset}: only train has alignments, and only with an alignment file")
        if self.holds_out_validation:
            return self._held_out_pairs(split, self._aligned_raw)
        return self._counted(split, self._aligned_raw())

    def _aligned_raw(self):
        """`(source, target, number, Pharaoh line)` of every raw train pair."""
        lines, pairs = iter_lines(self.alignments), self._raw["train"]()
        count = 0
        for source, target in pairs:
            line = next(lines, None)
            if line is None:  # The file ended first: count the rest of train.
                self._misaligned_links(count + 1 + sum(1 for _ in pairs), count)
            count += 1
            yield source, target, count, line
        rest = sum(1 for _ in lines)
        if rest:
            self._misaligned_links(count, count + rest)

    def _misaligned_links(self, pairs, lines):
        raise DataError(
            f"alignment file {self.alignments} has {lines} lines but train has {pairs} pairs: give one Pharaoh "
            "line (i-j links of source word i and target word j, from 0) per train line, empty lines included"
        )

    def count(self, split: str) -> int:
        """How many pairs `pairs(split)` yields: a pass over the split the first time, none
        after (with validation held out of train, the pass that chose it counted both).

        Raises:
            DataError: as `pairs`.
        """
        if split not in self._counts:
            if self.holds_out_validation and split in ("train", "validation"):
                held = len(self._held_out())
                self._counts["validation"], self._counts["train"] = held, self._train_before_hold_out - held
            else:
                self._counts[split] = sum(1 for _ in self.pairs(split))
        return self._counts[split]

    def _counted(self, split, raw):
        """The non-empty pairs of `raw` (pairs, or longer tuples whose first two are the
        pair), stripped, counted as they go by."""
        read = kept = 0
        for source, target, *rest in raw:
            read += 1
            source, target = source.strip(), target.strip()
            if source and target:
                kept += 1
                yield (source, target, *rest)
        if not kept:
            raise DataError(f"{self.dataset}: split {split!r} has no non-empty pairs ({read} read)")
        self.read[split], self.dropped_empty[split] = read, read - kept

    def _held_out(self):
        if self._held is None:
            kept = sum(1 for _ in self._counted("train", self._raw["train"]()))
            self._train_before_hold_out = kept
            self._held = held_out_indices(kept)
        return self._held

    def _held_out_pairs(self, split, raw=None):
        held = self._held_out()
        next_held = 0
        for index, pair in enumerate(self._counted("train", (raw or self._raw["train"])())):
            is_held = next_held < len(held) and held[next_held] == index
            next_held += is_held
            if is_held == (split == "validation"):
                yield pair
            if split == "validation" and next_held == len(held):
                break  # The rest of train holds no validation pair.
        if split == "train":
            self.read["train"] -= len(held)
        else:
            self.read["validation"], self.dropped_empty["validation"] = len(held), 0


def open_corpus(dataset: str, source_lang: str, target_lang: str) -> CorpusStream:
    """Opens every split of `dataset` for the language pair (see the module docstring).

    Files are checked to exist and TFDS builders prepared here; the text itself is read
    by `CorpusStream.pairs`.

    Raises:
        DataError: unknown dataset or language pair, missing files, a TFDS builder that
            cannot be built or downloaded.
    """
    if dataset == "multi30k":
        raw, fingerprint = _read_multi30k(source_lang, target_lang)
    elif dataset.startswith("files:"):
        raw, fingerprint = _read_files(dataset)
    else:
        raw, fingerprint = _read_tfds(dataset.removeprefix("tfds:"), source_lang, target_lang)
    return CorpusStream(dataset, raw, fingerprint)


def load_corpus(dataset: str, source_lang: str, target_lang: str) -> Corpus:
    """Every split of `dataset` read into lists, empty pairs removed (`open_corpus`).

    Raises:
        DataError: as `open_corpus` and `CorpusStream.pairs`.
    """
    stream = open_corpus(dataset, source_lang, target_lang)
    splits = {}
    for split in stream.splits:
        pairs = list(stream.pairs(split))
        splits[split] = ParallelText([source for source, _ in pairs], [target for _, target in pairs])
    return Corpus(
        splits=splits, read=dict(stream.read), dropped_empty=dict(stream.dropped_empty),
        validation_note=stream.validation_note,
    )


def _file_fingerprint(paths):
    """Each path with its size and modification time: a changed file changes the fingerprint."""
    described = []
    for path in paths:
        check_readable(path)
        status = os.stat(path)
        described.append({"path": os.path.abspath(path), "size": status.st_size, "mtime_ns": status.st_mtime_ns})
    return {"files": described}


def _read_multi30k(source_lang, target_lang):
    raw, paths = {}, []
    for split in MULTI30K_SPLITS:
        pair = [multi30k_path(split, lang) for lang in (source_lang, target_lang)]  # names a language it lacks
        raw[split] = functools.partial(iter_parallel_lines, *pair)
        paths += pair
    return raw, _file_fingerprint(paths)


def multi30k_path(split: str, lang: str) -> str:
    """The bundled file of Multi30k's `split` in `lang`: `split` is one of our split names
    (train, validation, test) or a file stem (val, test_2016_flickr), as benchmarks name
    them."""
    stem = MULTI30K_SPLITS.get(split, split)
    if stem not in MULTI30K_SPLITS.values():
        names = sorted(set(MULTI30K_SPLITS) | set(MULTI30K_SPLITS.values()))
        raise DataError(f"multi30k has no split {split!r}; it has {', '.join(names)}")
    if lang not in MULTI30K_LANGUAGES:
        raise DataError(f"multi30k has no language {lang!r}; it has {', '.join(MULTI30K_LANGUAGES)}")
    return os.path.join(MULTI30K_DIR, f"{stem}.{lang}.gz")


def bundled_alignments(dataset: str, source_lang: str, target_lang: str) -> Optional[str]:
    """The bundled gold word alignments of train for a dataset and direction, or None: one
    Pharaoh line per raw train line, as `--guided-alignment FILE` takes them. Multi30k
    en-de has eflomal's (data/multi30k/README.md says how they were made), which the
    default recipe trains with (app/training/recipes.py)."""
    if dataset == "multi30k" and (source_lang, target_lang) == ("en", "de"):
        return os.path.join(MULTI30K_DIR, "train.en-de.align.gz")
    return None


def read_multi30k_lines(split: str, lang: str, count: Optional[int] = None) -> List[str]:
    """The lines of the bundled Multi30k `split` in `lang` (see `multi30k_path`), the first
    `count` where given: what the benchmarks translate and score against."""
    return list(itertools.islice(iter_lines(multi30k_path(split, lang)), count))


def _read_files(dataset):
    paths = [path.strip() for path in dataset.removeprefix("files:").split(",")]
    if len(paths) not in (2, 4) or not all(paths):
        raise DataError(
            f"bad dataset {dataset!r}: expected files:TRAIN_SRC,TRAIN_TGT or "
            "files:TRAIN_SRC,TRAIN_TGT,VALID_SRC,VALID_TGT"
        )
    for source, target in zip(paths[::2], paths[1::2]):
        iter_parallel_lines(source, target)  # Missing files and one file as both sides: refused now.
    raw = {"train": functools.partial(iter_parallel_lines, paths[0], paths[1])}
    if len(paths) == 4:
        raw["validation"] = functools.partial(iter_parallel_lines, paths[2], paths[3])
    return raw, _file_fingerprint(paths)


def _read_tfds(name, source_lang, target_lang):
    # Imported here: it takes seconds and only this source needs it.
    import tensorflow_datasets as tfds

    builder = _tfds_builder(tfds, name, source_lang, target_lang)
    if not _tfds_prepared(builder):
        _check_downloadable(builder, name)
    try:
        builder.download_and_prepare()  # Downloads on first use; a no-op afterwards.
    except OSError as error:  # requests' ConnectionError and HTTPError are OSErrors too
        raise DataError(
            f"could not download or prepare {name!r} ({type(error).__name__}: {first_line(error)}); "
            f"TensorFlow Datasets needs the network on first use, or a copy prepared under "
            f"its data directory ({builder.data_dir})"
        ) from None
    # Mocked builders in tests carry no split metadata; then ask for all three.
    available = set(builder.info.splits.keys()) or set(_TFDS_SPLITS)
    if "train" not in available:
        raise DataError(f"{name} has no 'train' split; it has {', '.join(sorted(available))}")
    raw = {
        split: functools.partial(_tfds_pairs, tfds, builder, split, source_lang, target_lang)
        for split in _TFDS_SPLITS
        if split in available
    }
    fingerprint = {"tfds": builder.info.full_name, "data_dir": str(builder.data_dir)}
    return raw, fingerprint


def _tfds_builder(tfds, name, source_lang, target_lang):
    """The builder of `name`, checked to hold both languages; nothing downloaded."""
    try:
        builder = tfds.builder(name)
    except tfds.core.registered.DatasetNotFoundError:
        raise DataError(
            f"unknown dataset {name!r}: expected 'multi30k', 'files:...', or a "
            "TensorFlow Datasets translation builder such as 'wmt14_translate/de-en'"
        ) from None
    except (ValueError, AssertionError) as error:
        # A config or version the builder lacks ("wmt14_translate/xx-yy", ":9.9.9"), or a
        # name TFDS cannot parse; its message lists what there is.
        raise DataError(f"TensorFlow Datasets cannot build {name!r}: {first_line(error)}") from None
    languages = sorted(builder.info.features.keys())
    for flag, lang in (("--source-lang", source_lang), ("--target-lang", target_lang)):
        if lang not in languages:
            raise DataError(
                f"{name} has no language {lang!r} (given by {flag}); its examples have "
                f"the keys {', '.join(languages)}"
            )
    return builder


def describe_source(dataset: str, source_lang: str, target_lang: str) -> str:
    """Where `dataset`'s text would come from, in a line, checked without reading it or
    downloading anything: bundled, files that exist, or a TFDS builder prepared here or
    whose download hosts answer (`python -m app.preflight`).

    Raises:
        DataError: as `open_corpus` would, where the run could not read the text.
    """
    if dataset == "multi30k":
        _read_multi30k(source_lang, target_lang)
        return f"multi30k {source_lang}->{target_lang}, bundled"
    if dataset.startswith("files:"):
        _, fingerprint = _read_files(dataset)
        size = sum(entry["size"] for entry in fingerprint["files"])
        return f"{len(fingerprint['files'])} text files, {size / 1e9:.2f} GB"
    import tensorflow_datasets as tfds

    name = dataset.removeprefix("tfds:")
    builder = _tfds_builder(tfds, name, source_lang, target_lang)
    if _tfds_prepared(builder):
        return f"TensorFlow Datasets {name}, prepared in {builder.data_dir}"
    _check_downloadable(builder, name)
    return f"TensorFlow Datasets {name}, not prepared: the run downloads and prepares it first (its hosts answer)"


def _tfds_prepared(builder):
    """Whether the builder's data is prepared in its data directory (nothing to download)."""
    is_prepared = getattr(builder, "is_prepared", None)
    if is_prepared is not None:
        return bool(is_prepared())
    return os.path.exists(os.path.join(str(builder.data_dir), "dataset_info.json"))


def _check_downloadable(builder, name):
    """Raises DataError at once where the download could not succeed: a host the builder
    downloads from (its `url_infos`) does not accept a connection. TFDS would retry each
    file for minutes before saying so; this says which files, where a prepared copy goes,
    and the alternative of plain text files.
    """
    urls = sorted(getattr(builder, "url_infos", None) or {})
    unreachable = unreachable_hosts(urls)
    if not unreachable:
        return
    raise DataError(
        f"{name} is not prepared under {builder.data_dir}, and this machine cannot reach "
        f"{', '.join(unreachable)} to download it ({len(urls)} file(s): {', '.join(urls)}). "
        f"Prepare it where there is a network (`tfds build {name}`, or this same command) and copy the "
        f"directory {builder.data_dir} to the same path here (under TFDS_DATA_DIR, by default "
        "~/tensorflow_datasets), or give the text as --dataset files:TRAIN_SRC,TRAIN_TGT,VALID_SRC,VALID_TGT"
    )


def unreachable_hosts(urls, timeout=_DOWNLOAD_PROBE_SECONDS):
    """The `host:port`s of `urls` that do not accept a TCP connection within `timeout`
    seconds (name lookups included, all hosts at once), sorted; empty if all do."""
    addresses = set()
    for url in urls:
        parts = urllib.parse.urlsplit(url)
        if parts.hostname:
            addresses.add((parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)))
    if not addresses:
        return []

    def connects(address):
        try:
            socket.create_connection(address, timeout=timeout).close()
            return True
        except OSError:
            return False

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=len(addresses))
    futures = {pool.submit(connects, address): address for address in addresses}
    done, _ = concurrent.futures.wait(futures, timeout=timeout)
    pool.shutdown(wait=False)  # A name lookup that hangs is not waited for.
    failed = [address for future, address in futures.items() if future not in done or not future.result()]
    return sorted(f"{host}:{port}" for host, port in failed)


def _tfds_pairs(tfds, builder, split, source_lang, target_lang):
    """The split's (source, target) strings, from TFDS's own tf.data stream, a batch at a time."""
    batches = builder.as_dataset(split=split, shuffle_files=False).batch(_TFDS_BATCH)
    for batch in tfds.as_numpy(batches):
        for source, target in zip(batch[source_lang], batch[target_lang]):
            yield source.decode("utf-8"), target.decode("utf-8")
