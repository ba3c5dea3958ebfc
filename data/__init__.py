"""Data input: parallel text -> shared subword vocabulary -> token-budget batches.

The entry points; the modules below hold one idea each.

    data.cli          add_data_arguments, data_config_from_args
    data.config       DataConfig
    data.dataset      prepare_data, PreparedData, SplitCounts
    data.summary      summarize, format_summary (for train.py --dry-run)
    data.tokenizer    SubwordTokenizer, load_or_train
    data.errors       DataError
    data.corpora      reading Multi30k, TFDS and files:...
    data.buckets      BucketScheme: token-budget bucketing and its batch shapes
    data.pipeline     tokenized pairs -> tf.data batches
"""

from data.cli import add_data_arguments, data_config_from_args
from data.config import DataConfig
from data.dataset import PreparedData, SplitCounts, prepare_data
from data.errors import DataError
from data.summary import format_summary, summarize
from data.tokenizer import SubwordTokenizer, load_or_train

__all__ = [
    "DataConfig",
    "DataError",
    "PreparedData",
    "SplitCounts",
    "SubwordTokenizer",
    "add_data_arguments",
    "data_config_from_args",
    "format_summary",
    "load_or_train",
    "prepare_data",
    "summarize",
]
