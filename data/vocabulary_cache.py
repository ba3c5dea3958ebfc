"""A cache of trained vocabularies, keyed by what determines one, shared by model directories.

Training a vocabulary reads a sample of train and takes minutes on WMT. `python train.py
--dry-run` writes nothing to the model directory, so without a cache it trained the
vocabulary again at every dry run. Now every vocabulary trained is also stored here,
named by a hash of the dataset, its input files' sizes and mtimes (or the TFDS name and
version), the two languages, the vocabulary size, the subword model, lowercasing and the
cap on the sentences it is trained on (`data.prepare.MAX_VOCAB_TRAINING_SENTENCES`); a dry
run, or a new model directory with the same data and settings, copies it instead of
training. Training is deterministic, so the copy is the file training would write.

    $TRANSFORMER_VOCAB_CACHE, else ~/.cache/transformer/vocabularies/<hash>.model
"""

import hashlib
import json
import os
from typing import Optional

from data.atomic_files import write_atomically
from data.prepare import MAX_VOCAB_TRAINING_SENTENCES

CACHE_ENV = "TRANSFORMER_VOCAB_CACHE"


def cache_dir() -> str:
    """Where cached vocabularies live."""
    return os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "transformer", "vocabularies")


class VocabularyCache:
    """One cache entry: `read()` its bytes (None if absent), `write(bytes)` them."""

    def __init__(self, path: str):
        self.path = path

    def read(self) -> Optional[bytes]:
        try:
            with open(self.path, "rb") as file:
                return file.read()
        except OSError:  # Missing or unreadable: the vocabulary is trained instead.
            return None

    def write(self, model_proto: bytes) -> None:
        try:
            write_atomically(self.path, model_proto)
        except OSError:  # A read-only home: the cache is an optimization, never a failure.
            pass


def cached_vocabulary(config, corpus) -> VocabularyCache:
    """The cache entry for `config`'s vocabulary over `corpus` (a `CorpusStream`)."""
    key = {
        "dataset": config.dataset,
        "input": corpus.fingerprint(),
        "source_lang": config.source_lang,
        "target_lang": config.target_lang,
        "vocab_size": config.vocab_size,
        "subword_model": config.subword_model,
        "lowercase": config.lowercase,
        # A corpus past the cap is sampled: another cap, another vocabulary.
        "sample_sentences": MAX_VOCAB_TRAINING_SENTENCES,
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode("utf-8")).hexdigest()[:32]
    return VocabularyCache(os.path.join(cache_dir(), f"{digest}.model"))
