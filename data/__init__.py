"""Data input: parallel text -> shared subword vocabulary -> token-budget batches.

The entry points; the modules below hold one idea each.

    data.config             DataConfig
    data.dataset            prepare_data, PreparedData, SplitCounts
    data.summary            summarize, format_summary (for train.py --dry-run)
    data.tokenizer          SubwordTokenizer, load_or_train
    data.text_files         reading line-aligned parallel text files, plain or gzip
    data.atomic_files       writing a file whole or not at all
    data.errors             DataError
    data.corpora            streaming Multi30k, TFDS and files:... split by split
    data.prepare            the one-time preparation: text -> token-id shards, in worker processes
    data.shards             the shard format and its memory-mapped reader
    data.vocabulary_cache   trained vocabularies, reused by dry runs and new model directories
    data.lowercase          Python lowercasing equal to the graph's
    data.buckets            BucketScheme: token-budget bucketing and its batch shapes
    data.pipeline           shards (or ids in memory) -> tf.data batches
"""

import importlib

# Each public name and the module that defines it. They are imported when first asked for
# (PEP 562), so that `import data.buckets` (numpy only) does not import TensorFlow through
# the modules that need it: benchmarks/gpu/ runs the bucketing on machines without it.
_EXPORTS = {
    "DataConfig": "data.config",
    "DataError": "data.errors",
    "PreparedData": "data.dataset",
    "SplitCounts": "data.dataset",
    "SubwordTokenizer": "data.tokenizer",
    "format_summary": "data.summary",
    "load_or_train": "data.tokenizer",
    "prepare_data": "data.dataset",
    "summarize": "data.summary",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'data' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
