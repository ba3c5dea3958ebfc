"""Word alignments of a parallel corpus by eflomal, symmetrized by grow-diag-final-and:
the gold links of guided alignment training (`--guided-alignment eflomal`).

    lines = align_corpus(sources, targets)             # one Pharaoh line per pair: "0-0 1-2"
    path = cached_train_alignments(corpus, data_dir, config)   # train's, made once per corpus
    grow_diag_final_and({(0, 0)}, {(0, 0), (1, 1)}, 2, 2)   # {(0, 0), (1, 1)}

eflomal (Östling and Tiedemann, 2016) aligns both ways, source to target and back; the
two are joined by grow-diag-final-and (Koehn et al., 2005), written here because eflomal
ships no symmetrization tool (its README points to fast_align's atools). Words are
data/words.py's, the words the gold links count against.

eflomal is optional (`pip install -r requirements-alignment.txt`): GPL-3.0 and released
only as source, built with a C compiler and Cython, so it is imported only when a corpus
is aligned, never with this module. It seeds its samplers from the system's random source:
two runs give different links, which is why a preparation keeps its output
(`cached_train_alignments`, data/prepare.py) rather than running it again.
"""

import importlib.metadata
import json
import os
import tempfile

from data.atomic_files import write_atomically
from data.errors import DataError
from data.words import format_pharaoh, parse_pharaoh, words

INSTALL_HINT = "pip install -r requirements-alignment.txt"
# Train's alignments in a preparation's data directory, and what they were made from.
# Plain files, not a directory: data/shards.py's clean-up removes directories without a manifest.
TRAIN_ALIGNMENTS = "train.eflomal.gdfa"
TRAIN_ALIGNMENTS_KEY = "train.eflomal.json"
# Koehn's neighbourhood of an alignment point: the four sides first, then the diagonals.
_NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))
# Characters Python's str.split(), which eflomal splits its lines with, takes for white
# space but Unicode does not (data/words.py): inside a word they would cut it in two.
_SPLIT_ONLY = str.maketrans({character: "_" for character in "\x1c\x1d\x1e\x1f"})


def grow_diag_final_and(forward, reverse, source_len, target_len):
    """The symmetrization of two directional alignments by grow-diag-final-and.

    Koehn et al. (2005): start from the links both directions have; grow it, until nothing
    changes, by each link of either direction that neighbours a link already taken (on a
    side or a diagonal) and whose source or target word has no link yet; then add each
    link of the forward direction, then of the reverse one, whose source and target words
    both have none. Points are visited in the order of the pseudocode's loops: source word
    i, then target word j, each from 0; a link added during a sweep is grown from in the
    same sweep.

    Args:
        forward, reverse: iterables of `(i, j)`, source word i and target word j, from
            the source-to-target and the target-to-source alignment.
        source_len, target_len: the words of each side; links outside them are ignored.

    Returns:
        A set of `(i, j)`.
    """
    forward = {(i, j) for i, j in forward if 0 <= i < source_len and 0 <= j < target_len}
    reverse = {(i, j) for i, j in reverse if 0 <= i < source_len and 0 <= j < target_len}
    union = forward | reverse
    links = forward & reverse
    source_linked = {i for i, _ in links}
    target_linked = {j for _, j in links}

    def add(i, j):
        links.add((i, j))
        source_linked.add(i)
        target_linked.add(j)

    # Grow-diag.
    added = True
    while added:
        added = False
        for i in range(source_len):
            for j in range(target_len):
                if (i, j) not in links:
                    continue
                for di, dj in _NEIGHBOURS:
                    point = (i + di, j + dj)
                    if point in union and point not in links and (
                        point[0] not in source_linked or point[1] not in target_linked
                    ):
                        add(*point)
                        added = True
    # Final-and: each direction in turn.
    for direction in (forward, reverse):
        for i, j in sorted(direction):
            if i not in source_linked and j not in target_linked:
                add(i, j)
    return links


def align_corpus(sources, targets, log=print):
    """Pharaoh lines of gold links for parallel sentences: eflomal both ways over their
    words (data/words.py), joined by `grow_diag_final_and`.

    Args:
        sources, targets: lists of raw sentences, `targets[k]` translating `sources[k]`.
        log: where a line about the run goes.

    Returns:
        One line per pair (`"0-0 1-2"`, sorted); an empty line where a side has no word,
        or where eflomal leaves a sentence out (1,024 words or more).

    Raises:
        DataError: eflomal is not installed, or gives other lines than pairs.
    """
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} sources and {len(targets)} targets: give one target per source")
    try:
        import eflomal
    except ImportError:
        raise _not_installed() from None
    source_words = [words(sentence.translate(_SPLIT_ONLY)) for sentence in sources]
    target_words = [words(sentence.translate(_SPLIT_ONLY)) for sentence in targets]
    # Only pairs with words on both sides go to eflomal; the others have no link.
    aligned = [k for k, (source, target) in enumerate(zip(source_words, target_words)) if source and target]
    result = [""] * len(sources)
    if not aligned:
        return result
    log(f"eflomal: aligning {len(aligned):,} pairs, both ways")
    with tempfile.TemporaryDirectory(prefix="eflomal-") as directory:
        forward_path, reverse_path = (os.path.join(directory, name) for name in ("forward", "reverse"))
        eflomal.Aligner().align(
            [" ".join(source_words[k]) for k in aligned], [" ".join(target_words[k]) for k in aligned],
            links_filename_fwd=forward_path, links_filename_rev=reverse_path,
        )
        forward_lines, reverse_lines = (_lines(path) for path in (forward_path, reverse_path))
    for name, lines in (("forward", forward_lines), ("reverse", reverse_lines)):
        if len(lines) != len(aligned):
            raise DataError(f"eflomal wrote {len(lines)} {name} alignment lines for {len(aligned)} pairs")
    for k, forward, reverse in zip(aligned, forward_lines, reverse_lines):
        counts = (len(source_words[k]), len(target_words[k]))
        links = grow_diag_final_and(parse_pharaoh(forward, *counts), parse_pharaoh(reverse, *counts), *counts)
        result[k] = format_pharaoh(links)
    return result


def _lines(path):
    with open(path, encoding="utf-8") as file:
        return file.read().splitlines()


def cached_train_alignments(corpus, data_dir, config, log=print):
    """The path of a file of gold links for every raw train line of `corpus`, by
    `align_corpus`: made once, then reused for as long as the corpus, the language pair
    and eflomal's version are the same (never made again for the same: eflomal's links
    differ from run to run, and the preparation's fingerprint holds the file's checksum).

    Args:
        corpus: a `data.corpora.CorpusStream`; its raw train pairs are aligned, empty
            ones and the held-out validation pairs included (one line per line).
        data_dir: the preparation's directory (MODEL_DIR/data).
        config: the `DataConfig` (its dataset and languages).
        log: where a line about the alignment goes.

    Raises:
        DataError: as `align_corpus`, or a corpus that cannot be read.
    """
    path = made_train_alignments(corpus, data_dir, config)
    if path is not None:
        return path
    path, key_path, key = _train_alignments(corpus, data_dir, config)
    sources, targets = [], []
    for source, target in corpus.raw_pairs("train"):
        sources.append(source)
        targets.append(target)
    lines = align_corpus(sources, targets, log)
    write_atomically(path, "".join(line + "\n" for line in lines))
    write_atomically(key_path, json.dumps(key, indent=1, sort_keys=True))
    log(f"eflomal: train's alignments in {path}")
    return path


def made_train_alignments(corpus, data_dir, config):
    """The path `cached_train_alignments` returns where it would make nothing, else None."""
    path, key_path, key = _train_alignments(corpus, data_dir, config)
    try:
        with open(key_path, encoding="utf-8") as file:
            if json.load(file) == key and os.path.isfile(path):
                return path
    except (OSError, ValueError):
        pass
    return None


def _train_alignments(corpus, data_dir, config):
    """(the file, the file of what it was made from, what it is to be made from)."""
    key = {
        "dataset": config.dataset, "source_lang": config.source_lang, "target_lang": config.target_lang,
        "input": corpus.fingerprint(), "eflomal": _eflomal_version(),
    }
    return os.path.join(data_dir, TRAIN_ALIGNMENTS), os.path.join(data_dir, TRAIN_ALIGNMENTS_KEY), key


def _eflomal_version():
    try:
        return importlib.metadata.version("eflomal")
    except importlib.metadata.PackageNotFoundError:
        raise _not_installed() from None


def _not_installed():
    return DataError(
        f"--guided-alignment eflomal needs eflomal, which is not installed: {INSTALL_HINT} "
        "(GPL-3.0, built from source; or give a file of Pharaoh alignments instead)"
    )
