"""The prepared token ids of a split on disk, and the memory-mapped reader that batches them.

Like fairseq's binarized datasets: text is tokenized once (data/prepare.py) and training
reads ids from files it memory-maps, so a corpus of any size costs disk, not memory. One
directory per split, MODEL_DIR/data/<split>/:

    source.ids, target.ids          the pieces of every kept pair, one after another, no
                                    markers; uint16 when the vocabulary fits, else int32
    source.offsets, target.offsets  int64 [N + 1]: pair i's pieces are ids[offsets[i]:offsets[i + 1]]
    lengths                         int16 [N, 2] (int32 past 32,767 ids): (source, target)
                                    ids per pair, markers included: what batching plans from
    text.json                       validation and test only: the raw pairs, for BLEU
    manifest.json                   FORMAT_VERSION, the counts, the id dtype and the
                                    fingerprint of what the split was made from

and, in a train split prepared with gold word alignments (guided alignment training; the
manifest says `"alignments": true`):

    links                           uint16 [L, 2] (int32 past 65,536 ids a side): every
                                    pair's (source word, target word) links, one after another
    links.offsets                   int64 [N + 1]: pair i's links are links[offsets[i]:offsets[i + 1]]
    word_starts                     uint8 [V]: 1 where the vocabulary's piece starts a word
                                    (it begins with "▁"), which maps pieces to words

A batch row is, as in data/pipeline.py, source = pieces + [end], target = [start] +
pieces + [end], int32, 0 = padding; with alignments a batch also has its gold, uint8
[B, T - 1, S], 1 where label t (target[:, 1:]) is linked to source piece s: the pieces
of linked words (`ShardedPairs.assemble`). A split is written under a hidden temporary name and
renamed into place whole, its manifest written last (`SplitWriter`), so a directory
without a manifest, or whose manifest's fingerprint differs, is never read.

A large split is written resumably: every so many pairs (a shard of the stream) the
writer makes what it appended durable and records how far it got (`checkpoint`), in
"<data dir>/.<split>.resumable/progress.json". A preparation killed mid-split keeps those
shards: the next one, for the same fingerprint, cuts the files back to the last
checkpoint and goes on from there, and the split it commits is the same, byte for byte,
as an uninterrupted preparation's.

Numpy only, no TensorFlow: the preparation's worker processes import this module.
"""

import json
import mmap
import os
import shutil
from typing import Optional, Tuple

import numpy as np

from data.errors import DataError
from layers.special_tokens import END_ID, PAD_ID, START_ID

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
TEXT = "text.json"  # Validation's and test's raw pairs, for BLEU: small splits only.
_PARTIAL = ".partial-"  # Marks a split being written: "<data dir>/.<split>.partial-<pid>".
_RESUMABLE = ".resumable"  # A split written resumably: "<data dir>/.<split>.resumable".
PROGRESS = "progress.json"  # In a resumable split: how far its writer got, at its last checkpoint.
_FILES = ("source.ids", "target.ids", "source.offsets", "target.offsets", "lengths")
_LINK_FILES = ("links", "links.offsets")  # A split with gold alignments has these too.
WORD_STARTS = "word_starts"
# Rows a reader gathers between handing its mapped pages back to the kernel (see
# `_Mapped.release`). A row read through a map can map more than its own page (the
# kernel maps the cached pages around a fault), and rows of a batch lie anywhere in the
# files: releasing every few hundred rows bounds what reads keep mapped, whatever the
# corpus size, for the cost of a page-table walk.
_RELEASE_EVERY_ROWS = 256


def id_dtype(vocab_size: int) -> np.dtype:
    """The narrowest dtype that holds every id of a vocabulary."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.int32)


def length_dtype(max_length: int) -> np.dtype:
    """The narrowest dtype that holds every kept pair's length."""
    return np.dtype(np.int16) if max_length < 1 << 15 else np.dtype(np.int32)


def link_dtype(max_length: int) -> np.dtype:
    """The narrowest dtype that holds every word index of a kept pair (a word has a piece)."""
    return np.dtype(np.uint16) if max_length <= 1 << 16 else np.dtype(np.int32)


def index_dtype(count: int) -> np.dtype:
    """int32 indices where `count` rows fit, else int64."""
    return np.dtype(np.int32) if count < 1 << 31 else np.dtype(np.int64)


class SplitWriter:
    """Writes one split: `append` chunks of kept pairs, then `commit` with the manifest.

        with SplitWriter(data_dir, "train", vocab_size, max_length) as writer:
            writer.append(source_ids, source_lengths, target_ids, target_lengths)
            writer.commit(manifest)

    Until `commit`, everything goes to a hidden temporary directory, removed if the block
    fails; `commit` writes the manifest last, then renames the directory into place
    (replacing an older one).

    With `word_starts` (bool [V]: which pieces start a word), the split holds gold word
    alignments: each `append` gives its pairs' links too.

    With a `resume_key` (the split's fingerprint), the temporary directory is the split's
    resumable one: `checkpoint(state)` makes the pairs appended so far durable, and a
    later writer with the same key starts from the last checkpoint, with `resumed` the
    `state` recorded there (None when it starts afresh). An interrupted resumable writer
    keeps its directory once it has a checkpoint.
    """

    def __init__(
        self, data_dir: str, split: str, vocab_size: int, max_length: int, resume_key=None, *, word_starts=None
    ):
        self.path = os.path.join(data_dir, split)
        self._resume_key = resume_key
        self._word_starts = None if word_starts is None else np.asarray(word_starts, np.uint8)
        self._names = _FILES + (_LINK_FILES if word_starts is not None else ())
        self._link_dtype = link_dtype(max_length)
        name = f".{split}{_RESUMABLE}" if resume_key is not None else f".{split}{_PARTIAL}{os.getpid()}"
        self.temporary = os.path.join(data_dir, name)
        self._id_dtype = id_dtype(vocab_size)
        self._length_dtype = length_dtype(max_length)
        self.pairs = 0
        self._ends = {"source": 0, "target": 0, "links": 0}
        self._files = {}
        self.resumed = None

    def __enter__(self):
        progress = self._progress()
        if progress is not None and progress.get("key") == self._resume_key:
            # Everything past the checkpoint (a chunk written after it, half a write) goes.
            for name in self._names:
                file = open(os.path.join(self.temporary, name), "r+b")
                file.truncate(progress["sizes"][name])
                file.seek(0, os.SEEK_END)
                self._files[name] = file
            self.pairs, self.resumed = progress["pairs"], progress["state"]
            self._ends.update(progress["ends"])
            return self
        shutil.rmtree(self.temporary, ignore_errors=True)
        os.makedirs(self.temporary)
        for name in self._names:
            self._files[name] = open(os.path.join(self.temporary, name), "wb")
        for offsets in ("source.offsets", "target.offsets", "links.offsets"):
            if offsets in self._files:
                np.zeros([1], np.int64).tofile(self._files[offsets])
        return self

    def _progress(self) -> Optional[dict]:
        """The last checkpoint of a resumable split's earlier writer, or None."""
        if self._resume_key is None:
            return None
        try:
            with open(os.path.join(self.temporary, PROGRESS), encoding="utf-8") as file:
                progress = json.load(file)
        except (OSError, ValueError):
            return None
        if not all(os.path.isfile(os.path.join(self.temporary, name)) for name in self._names):
            return None
        if not (isinstance(progress, dict) and set(self._names) <= set(progress.get("sizes", ()))):
            return None
        return progress

    def checkpoint(self, state) -> None:
        """Makes every pair appended so far durable, then records `state` (JSON: what the
        caller needs to go on, e.g. the pairs of the stream consumed) with the files'
        sizes: a resumable writer of the same key starts from here."""
        if self._resume_key is None:
            raise ValueError("checkpoint() needs a SplitWriter made with a resume_key")
        for file in self._files.values():
            file.flush()
            os.fsync(file.fileno())
        progress = {
            "key": self._resume_key, "pairs": self.pairs, "ends": self._ends, "state": state,
            "sizes": {name: file.tell() for name, file in self._files.items()},
        }
        path = os.path.join(self.temporary, PROGRESS)
        with open(path + ".new", "w", encoding="utf-8") as file:
            json.dump(progress, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(path + ".new", path)

    def append(self, source_ids, source_lengths, target_ids, target_lengths, *, links=None, link_counts=None) -> None:
        """Adds pairs: flat pieces (int [P]) and pieces per pair (int [n]) of each side,
        markers not included; in a split with alignments, also their links (int [L, 2],
        (source word, target word), pair after pair) and links per pair (int [n])."""
        if (links is None) != (self._word_starts is None):
            raise ValueError("give links exactly when the SplitWriter was made with word_starts")
        self._append_flat("source", source_ids, source_lengths, self._id_dtype)
        self._append_flat("target", target_ids, target_lengths, self._id_dtype)
        if links is not None:
            self._append_flat("links", np.reshape(links, [-1, 2]), link_counts, self._link_dtype)
        with_markers = np.stack([np.asarray(source_lengths) + 1, np.asarray(target_lengths) + 2], axis=1)
        with_markers.astype(self._length_dtype).tofile(self._files["lengths"])
        self.pairs += len(source_lengths)

    def _append_flat(self, name, rows, counts, dtype):
        """Appends `rows` (a side's pieces, or links) and their ends, by `counts` per pair,
        to `name`'s offsets."""
        np.asarray(rows).astype(dtype, copy=False).tofile(self._files["links" if name == "links" else f"{name}.ids"])
        ends = self._ends[name] + np.cumsum(counts, dtype=np.int64)
        ends.tofile(self._files[f"{name}.offsets"])
        if len(ends):
            self._ends[name] = int(ends[-1])

    def commit(self, manifest: dict, text: Optional[Tuple[list, list]] = None) -> None:
        """Closes the files, writes `text` (the split's raw (sources, targets), for
        validation and test), then `manifest` (with the format and layout added), and
        moves the split into place."""
        if text is not None:
            with open(os.path.join(self.temporary, TEXT), "w", encoding="utf-8") as file:
                json.dump({"source": text[0], "target": text[1]}, file, ensure_ascii=False)
        for file in self._files.values():
            file.flush()
            os.fsync(file.fileno())
            file.close()
        manifest = dict(
            manifest, format=FORMAT_VERSION, pairs=self.pairs, id_dtype=self._id_dtype.name,
            length_dtype=self._length_dtype.name,
        )
        if self._word_starts is not None:
            self._word_starts.tofile(os.path.join(self.temporary, WORD_STARTS))
            manifest.update(alignments=True, link_dtype=self._link_dtype.name)
        for name in (PROGRESS, PROGRESS + ".new"):  # the committed split holds what any other does
            if os.path.exists(os.path.join(self.temporary, name)):
                os.remove(os.path.join(self.temporary, name))
        with open(os.path.join(self.temporary, MANIFEST), "w", encoding="utf-8") as file:
            json.dump(manifest, file, indent=1, sort_keys=True)
            file.flush()
            os.fsync(file.fileno())
        if os.path.exists(self.path):  # A stale split: out of the way first, then removed.
            stale = self.path + f"{_PARTIAL}stale-{os.getpid()}"
            os.replace(self.path, stale)
            os.replace(self.temporary, self.path)
            shutil.rmtree(stale, ignore_errors=True)
        else:
            os.replace(self.temporary, self.path)
        self._files = {}

    def __exit__(self, *exc_info):
        for file in self._files.values():  # Not committed: an error, or an interrupt.
            file.close()
        # A resumable split keeps what its last checkpoint made durable, for the next writer.
        if not os.path.exists(os.path.join(self.temporary, PROGRESS)):
            shutil.rmtree(self.temporary, ignore_errors=True)
        return False


def remove_leftovers(data_dir: str) -> list:
    """Removes what an interrupted preparation left under `data_dir`: temporary split
    directories, and split directories without a manifest, but not the resumable splits
    that have a checkpoint (`SplitWriter`). Returns their names."""
    removed = []
    if not os.path.isdir(data_dir):
        return removed
    for name in sorted(os.listdir(data_dir)):
        path = os.path.join(data_dir, name)
        if not os.path.isdir(path):
            continue
        if name.endswith(_RESUMABLE) and os.path.exists(os.path.join(path, PROGRESS)):
            continue
        if _PARTIAL in name or not os.path.exists(os.path.join(path, MANIFEST)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(name)
    return removed


def read_text(data_dir: str, split: str) -> Tuple[list, list]:
    """(sources, targets): the raw non-empty pairs a validation or test split was made from."""
    with open(os.path.join(data_dir, split, TEXT), encoding="utf-8") as file:
        text = json.load(file)
    return text["source"], text["target"]


def read_manifest(data_dir: str, split: str) -> Optional[dict]:
    """The split's manifest, or None where the split was not (completely) prepared."""
    path = os.path.join(data_dir, split, MANIFEST)
    try:
        with open(path, encoding="utf-8") as file:
            return json.load(file)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise DataError(
            f"{path}: not a readable manifest ({error}); remove {os.path.dirname(path)} to prepare it again"
        ) from None


class _Mapped:
    """A file's contents as a read-only numpy array backed by a memory map."""

    def __init__(self, path: str, dtype):
        self._file = open(path, "rb")
        size = os.fstat(self._file.fileno()).st_size
        if size:
            self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
            self.array = np.frombuffer(self._map, dtype=dtype)
        else:  # mmap cannot map an empty file.
            self._map = None
            self.array = np.zeros([0], dtype)

    def release(self) -> None:
        """Hands the mapped pages back to the kernel: they stay in the page cache, but no
        longer count as this process's memory, which an epoch's reads would otherwise
        fill with the whole file."""
        if self._map is not None and hasattr(mmap, "MADV_DONTNEED"):
            self._map.madvise(mmap.MADV_DONTNEED)


class ShardedPairs:
    """One prepared split, read through memory maps.

    `lengths()` are in memory (a few bytes a pair, what batching plans from); the ids
    stay on disk until `assemble` gathers a batch's rows.
    """

    def __init__(self, data_dir: str, split: str):
        self.path = os.path.join(data_dir, split)
        self.manifest = read_manifest(data_dir, split)
        if self.manifest is None:
            raise DataError(f"{self.path} is not a prepared split (no {MANIFEST}); run python -m app.prepare")
        if self.manifest.get("format") != FORMAT_VERSION:
            raise DataError(
                f"{self.path} has format {self.manifest.get('format')}, this code reads {FORMAT_VERSION}; "
                "prepare it again (python -m app.prepare)"
            )
        ids = np.dtype(self.manifest["id_dtype"])
        self._maps = {
            name: _Mapped(os.path.join(self.path, name), dtype)
            for name, dtype in (
                ("source.ids", ids), ("target.ids", ids),
                ("source.offsets", np.int64), ("target.offsets", np.int64),
            )
        }
        self.has_alignments = bool(self.manifest.get("alignments"))
        if self.has_alignments:
            self._maps["links"] = _Mapped(os.path.join(self.path, "links"), np.dtype(self.manifest["link_dtype"]))
            self._maps["links.offsets"] = _Mapped(os.path.join(self.path, "links.offsets"), np.int64)
            self._word_starts = np.fromfile(os.path.join(self.path, WORD_STARTS), np.uint8).astype(bool)  # [V]
        lengths = np.fromfile(os.path.join(self.path, "lengths"), dtype=self.manifest["length_dtype"])
        lengths = lengths.reshape([-1, 2])
        # Two contiguous arrays: planning sorts and compares them per side.
        self._lengths = (np.ascontiguousarray(lengths[:, 0]), np.ascontiguousarray(lengths[:, 1]))
        self._gathered = 0

    def __len__(self) -> int:
        return len(self._lengths[0])

    def lengths(self) -> Tuple[np.ndarray, np.ndarray]:
        """(source lengths, target lengths), int16 [N] each (int32 past 32,767), markers included."""
        return self._lengths

    def fits(self, max_length: int) -> np.ndarray:
        """bool [N]: both sides at most `max_length` ids long, markers included."""
        source_lengths, target_lengths = self.lengths()
        return (source_lengths <= max_length) & (target_lengths <= max_length)

    def side(self, side: str) -> Tuple[np.ndarray, np.ndarray]:
        """(pieces, offsets) of "source" or "target", memory-mapped."""
        return self._maps[f"{side}.ids"].array, self._maps[f"{side}.offsets"].array

    def assemble(self, indices, rows: int, source_length: int, target_length: int):
        """The batch of pairs `indices`: (source int32 [rows, S], target int32 [rows, T]),
        rows past len(indices) all padding; with alignments, also their gold, uint8
        [rows, T - 1, S] (`gold`)."""
        source = np.zeros([rows, source_length], np.int32)
        target = np.zeros([rows, target_length], np.int32)
        row_positions = np.arange(len(indices))
        self._fill(source, row_positions, "source", indices, start=False)
        self._fill(target, row_positions, "target", indices, start=True)
        if not self.has_alignments:
            return source, target
        return source, target, self.gold(source, target, [(row_positions, indices, False)])

    def gold(self, source, target, parts):
        """The gold alignment of an assembled batch: uint8 [rows, T - 1, S], 1 where label
        t (`target[:, 1:]`) and source piece s belong to two linked words.

        Args:
            source: int32 [rows, S], target: int32 [rows, T], as assembled.
            parts: `(row positions, pair indices, reversed)` triples: which pair's links
                each row takes, swapped to (target word, source word) where reversed (the
                row translates the pair's target into its source).
        """
        rows, source_length = source.shape
        labels = target[:, 1:]  # [rows, T - 1]
        source_words = _word_indices(source, self._word_starts)  # [rows, S], -1: no word
        target_words = _word_indices(labels, self._word_starts)  # [rows, T - 1]
        # linked[r, j, i]: row r links its target word j to its source word i. A pair has
        # at most as many words as pieces, and its links were checked against its words.
        linked = np.zeros([rows, max(labels.shape[1], 1), max(source_length, 1)], np.uint8)
        links, offsets = self._maps["links"].array.reshape([-1, 2]), self._maps["links.offsets"].array
        for row_positions, pairs, reverse in parts:
            pairs = np.asarray(pairs, np.int64)
            begins = offsets[pairs]
            counts = offsets[pairs + 1] - begins  # int64 [n]
            within = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
            pair_links = links[np.repeat(begins, counts) + within].astype(np.int64)  # [L, 2]
            source_word, target_word = pair_links[:, 0], pair_links[:, 1]
            if reverse:
                source_word, target_word = target_word, source_word
            linked[np.repeat(np.asarray(row_positions, np.int64), counts), target_word, source_word] = 1
        row_index = np.arange(rows)[:, None, None]  # [rows, 1, 1]
        gold = linked[row_index, np.maximum(target_words, 0)[:, :, None], np.maximum(source_words, 0)[:, None, :]]
        gold *= (target_words >= 0)[:, :, None] & (source_words >= 0)[:, None, :]  # [rows, T - 1, S]
        return gold

    def _fill(self, out, row_positions, side, indices, start):
        """Writes pairs `indices` of `side` into rows `row_positions` of `out`, with the markers."""
        pieces, offsets = self.side(side)
        indices = np.asarray(indices, np.int64)
        begins = offsets[indices]
        counts = offsets[indices + 1] - begins  # int64 [n]
        total = int(counts.sum())
        lead = int(start)
        # Row and column of every piece: pieces of row r are columns lead .. lead + counts[r] - 1.
        row_of = np.repeat(row_positions, counts)
        column = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
        out[row_of, column + lead] = pieces[np.repeat(begins, counts) + column]
        if start:
            out[row_positions, 0] = START_ID
        out[row_positions, counts + lead] = END_ID
        self._gathered += len(indices)
        if self._gathered >= _RELEASE_EVERY_ROWS:
            self._gathered = 0
            for mapped in self._maps.values():
                mapped.release()

    def rows(self, side: str, start: bool):
        """Every pair's ids of `side` as Python lists, markers included (small splits, tests)."""
        pieces, offsets = self.side(side)
        prefix = [START_ID] if start else []
        return [prefix + pieces[offsets[i] : offsets[i + 1]].tolist() + [END_ID] for i in range(len(self))]

    @property
    def source(self):
        """int32 RaggedTensor [N, None]: pieces + [end] (loads the whole side: small splits, tests)."""
        return _ragged(self.rows("source", start=False))

    @property
    def target(self):
        """int32 RaggedTensor [N, None]: [start] + pieces + [end] (small splits, tests)."""
        return _ragged(self.rows("target", start=True))

    def reversed(self) -> "BothDirections":
        """The same pairs from target to source (`BothDirections` without the forward half)."""
        return BothDirections(self, max_length=None, forward=False)


class BothDirections:
    """2N virtual pairs over one `ShardedPairs`: the pairs, then each reversed (source =
    target pieces + [end], target = [start] + source pieces + [end]), minus reversed
    pairs that outgrow `max_length`. Computed by index; nothing is copied.

    `forward=False`: only the reversed pairs.
    """

    def __init__(self, pairs: ShardedPairs, max_length: Optional[int], forward: bool = True):
        self.pairs = pairs
        self.forward = forward
        source_lengths, target_lengths = pairs.lengths()
        # Reversed, the source loses the start marker and the target gains it.
        reversed_source, reversed_target = target_lengths - 1, source_lengths + 1
        if max_length is None:
            fits = np.ones(len(pairs), bool)
        else:  # As `TokenizedPairs.in_both_directions`: both reversed sides must fit.
            fits = (reversed_source <= max_length) & (reversed_target <= max_length)
        self.backward = np.flatnonzero(fits).astype(index_dtype(len(pairs)))  # pair of reversed row k
        self.has_alignments = getattr(pairs, "has_alignments", False)
        forward_count = len(pairs) if forward else 0
        self._forward_count = forward_count
        dtype = np.result_type(source_lengths.dtype, np.int16)
        if forward:
            self._lengths = (
                np.concatenate([source_lengths, reversed_source[fits]]).astype(dtype),
                np.concatenate([target_lengths, reversed_target[fits]]).astype(dtype),
            )
        else:
            self._lengths = (reversed_source[fits].astype(dtype), reversed_target[fits].astype(dtype))

    def __len__(self) -> int:
        return len(self._lengths[0])

    def lengths(self) -> Tuple[np.ndarray, np.ndarray]:
        return self._lengths

    def assemble(self, indices, rows: int, source_length: int, target_length: int):
        source = np.zeros([rows, source_length], np.int32)
        target = np.zeros([rows, target_length], np.int32)
        indices = np.asarray(indices, np.int64)
        is_forward = indices < self._forward_count
        forward_rows, backward_rows = np.flatnonzero(is_forward), np.flatnonzero(~is_forward)
        forward_pairs = indices[forward_rows]
        backward_pairs = self.backward[indices[backward_rows] - self._forward_count]
        self.pairs._fill(source, forward_rows, "source", forward_pairs, start=False)
        self.pairs._fill(target, forward_rows, "target", forward_pairs, start=True)
        self.pairs._fill(source, backward_rows, "target", backward_pairs, start=False)
        self.pairs._fill(target, backward_rows, "source", backward_pairs, start=True)
        if not self.has_alignments:
            return source, target
        parts = [(forward_rows, forward_pairs, False), (backward_rows, backward_pairs, True)]
        return source, target, self.pairs.gold(source, target, parts)

    def _side_rows(self, side_name):
        forward_side = self.pairs.rows(side_name, start=side_name == "target") if self.forward else []
        other = "target" if side_name == "source" else "source"
        other_rows = self.pairs.rows(other, start=side_name == "target")
        return forward_side + [other_rows[i] for i in self.backward]

    @property
    def source(self):
        return _ragged(self._side_rows("source"))

    @property
    def target(self):
        return _ragged(self._side_rows("target"))


def _word_indices(ids, word_starts):
    """Each piece's word in its row, int64 [rows, L]: how many word-starting pieces lead up
    to it, less one; -1 at the markers and padding, and before a row's first word."""
    words = np.cumsum(word_starts[ids], axis=1) - 1  # [rows, L]
    words[(ids == PAD_ID) | (ids == START_ID) | (ids == END_ID)] = -1
    return words


def _ragged(rows):
    import tensorflow as tf  # Only for these small-split and test views.

    flat = np.fromiter((i for row in rows for i in row), np.int32)
    return tf.RaggedTensor.from_row_lengths(flat, np.fromiter(map(len, rows), np.int64, len(rows)))
