"""Raw parallel text from the three kinds of source: bundled Multi30k, TFDS, the user's files.

`load_corpus(config)` returns the splits as lists of strings with empty pairs removed
and counted. Split names are always "train", "validation" and, where the source has
one, "test". Nothing here tokenizes.

    Multi30k     data/multi30k/{train,val,test_2016_flickr}.{en,de,fr}.gz, any two
                 of en/de/fr in either direction.
    TFDS         any translation builder, e.g. "wmt14_translate/de-en"; the two
                 languages are picked from the example's feature dict by key, so
                 "wmt14_translate/de-en" also serves en->de.
    files:       "files:TRAIN_SRC,TRAIN_TGT[,VALID_SRC,VALID_TGT]". Without validation
                 files, 1% of the training pairs (at most 1000, evenly spaced) are held
                 out as validation and removed from train.
"""

import dataclasses
import os
from typing import Dict, List, Optional, Tuple

import numpy as np

from data.errors import DataError, first_line
from data.text_files import read_parallel_lines

MULTI30K_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "multi30k")
MULTI30K_LANGUAGES = ("en", "de", "fr")
# Our split name -> the file stem in data/multi30k/.
MULTI30K_SPLITS = {"train": "train", "validation": "val", "test": "test_2016_flickr"}

_TFDS_SPLITS = ("train", "validation", "test")
_HELD_OUT_FRACTION = 0.01
_HELD_OUT_MAX = 1000


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


def drop_empty_pairs(source: List[str], target: List[str]) -> Tuple[ParallelText, int]:
    """Strips surrounding whitespace and drops pairs where either side is then empty.

    Returns:
        (the kept pairs, how many were dropped).
    """
    kept_source, kept_target = [], []
    for source_line, target_line in zip(source, target):
        source_line, target_line = source_line.strip(), target_line.strip()
        if source_line and target_line:
            kept_source.append(source_line)
            kept_target.append(target_line)
    return ParallelText(kept_source, kept_target), len(source) - len(kept_source)


def hold_out(train: ParallelText) -> Tuple[ParallelText, ParallelText]:
    """Splits evenly spaced pairs off train as validation; deterministic.

    Evenly spaced rather than the last lines, because concatenated corpora put their
    sub-corpora one after another.

    Returns:
        (the remaining train pairs, the held-out validation pairs).
    """
    if len(train) < 2:
        raise DataError(
            f"cannot hold out validation pairs from only {len(train)} training pair(s); "
            "give validation files as files:TRAIN_SRC,TRAIN_TGT,VALID_SRC,VALID_TGT"
        )
    count = min(_HELD_OUT_MAX, max(1, int(len(train) * _HELD_OUT_FRACTION)))
    held = set(np.linspace(0, len(train) - 1, count).round().astype(int).tolist())
    keep = [i for i in range(len(train)) if i not in held]
    held = sorted(held)

    def pick(indices):
        return ParallelText([train.source[i] for i in indices], [train.target[i] for i in indices])

    return pick(keep), pick(held)


def load_corpus(dataset: str, source_lang: str, target_lang: str) -> Corpus:
    """Reads every split of `dataset` for the language pair (see the module docstring).

    Raises:
        DataError: unknown dataset or language pair, missing or misaligned files,
            non-UTF-8 bytes, or a split left empty.
    """
    if dataset == "multi30k":
        raw = _read_multi30k(source_lang, target_lang)
    elif dataset.startswith("files:"):
        raw = _read_files(dataset)
    else:
        raw = _read_tfds(dataset.removeprefix("tfds:"), source_lang, target_lang)

    splits, read, dropped = {}, {}, {}
    for split, (source, target) in raw.items():
        splits[split], dropped[split] = drop_empty_pairs(source, target)
        read[split] = len(source)
        if not splits[split]:
            raise DataError(f"{dataset}: split {split!r} has no non-empty pairs ({read[split]} read)")

    note = None
    if "validation" not in splits:
        splits["train"], splits["validation"] = hold_out(splits["train"])
        read["validation"], dropped["validation"] = len(splits["validation"]), 0
        read["train"] -= read["validation"]  # So that read = kept + dropped per split.
        note = f"held out {len(splits['validation'])} pairs of train"
    return Corpus(splits=splits, read=read, dropped_empty=dropped, validation_note=note)


def _read_multi30k(source_lang, target_lang):
    for lang in (source_lang, target_lang):
        if lang not in MULTI30K_LANGUAGES:
            raise DataError(
                f"multi30k has no language {lang!r}; it has {', '.join(MULTI30K_LANGUAGES)}"
            )
    raw = {}
    for split, stem in MULTI30K_SPLITS.items():
        raw[split] = read_parallel_lines(
            os.path.join(MULTI30K_DIR, f"{stem}.{source_lang}.gz"),
            os.path.join(MULTI30K_DIR, f"{stem}.{target_lang}.gz"),
        )
    return raw


def _read_files(dataset):
    paths = [path.strip() for path in dataset.removeprefix("files:").split(",")]
    if len(paths) not in (2, 4) or not all(paths):
        raise DataError(
            f"bad dataset {dataset!r}: expected files:TRAIN_SRC,TRAIN_TGT or "
            "files:TRAIN_SRC,TRAIN_TGT,VALID_SRC,VALID_TGT"
        )
    raw = {"train": read_parallel_lines(paths[0], paths[1])}
    if len(paths) == 4:
        raw["validation"] = read_parallel_lines(paths[2], paths[3])
    return raw


def _read_tfds(name, source_lang, target_lang):
    # Imported here: it takes seconds and only this source needs it.
    import tensorflow_datasets as tfds

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
    raw = {}
    for split in _TFDS_SPLITS:
        if split in available:
            raw[split] = _tfds_pairs(tfds, builder, split, source_lang, target_lang)
    return raw


def _tfds_pairs(tfds, builder, split, source_lang, target_lang):
    source, target = [], []
    batches = builder.as_dataset(split=split, shuffle_files=False).batch(4096)
    for batch in tfds.as_numpy(batches):
        source.extend(text.decode("utf-8") for text in batch[source_lang])
        target.extend(text.decode("utf-8") for text in batch[target_lang])
    return source, target
