"""Command-line flags for data, shared by train.py and every other script that reads data.

    parser = argparse.ArgumentParser()
    add_data_arguments(parser)
    args = parser.parse_args()
    config = data_config_from_args(args)   # raises DataError on impossible values
"""

import argparse

from data.config import DEFAULT_MAX_LENGTH, DEFAULT_VOCAB_SIZE, SUBWORD_MODELS, DataConfig
from data.flag_types import float_at_least, positive_int


def batch_tokens(text):
    """argparse type of a --batch-tokens value: a whole number DataConfig accepts (one that
    holds at least one row of the longest sequences), checked when the flags are parsed."""
    from data.errors import DataError

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    try:
        DataConfig(batch_tokens=value)
    except DataError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return value


def add_data_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds --dataset, --source-lang, --target-lang, --vocab-size, --subword-model,
    --batch-tokens, --max-length, --bpe-dropout and --lowercase."""
    group = parser.add_argument_group("data")
    group.add_argument(
        "--dataset",
        default="multi30k",
        help="'multi30k' (bundled, default), a TensorFlow Datasets translation builder "
        "such as 'wmt14_translate/de-en' or 'ted_hrlr_translate/pt_to_en', or "
        "'files:TRAIN_SRC,TRAIN_TGT[,VALID_SRC,VALID_TGT]' (UTF-8, one sentence per "
        "line, .gz accepted)",
    )
    group.add_argument("--source-lang", default="en", help="source language code (default: en)")
    group.add_argument("--target-lang", default="de", help="target language code (default: de)")
    group.add_argument(
        "--vocab-size",
        type=positive_int,
        default=None,
        help="shared subword vocabulary size (default: per model size and language pair, the paper's for base and "
        f"big: 37,000, and 32,000 for en-fr; {DEFAULT_VOCAB_SIZE:,} for tiny and small, and where no size is given; "
        "a run resumes with its own)",
    )
    group.add_argument(
        "--subword-model",
        choices=SUBWORD_MODELS,
        default="bpe",
        help="how the subword vocabulary is learned: byte-pair encoding (default) or "
        "sentencepiece's unigram language model",
    )
    group.add_argument(
        "--batch-tokens",
        # Not `batch_tokens`, which checks against the default --max-length, not the one given.
        type=positive_int,
        default=None,
        help="source (and target) tokens per batch across all replicas, padding "
        "included (default: chosen per model size)",
    )
    group.add_argument(
        "--max-length",
        type=positive_int,
        default=DEFAULT_MAX_LENGTH,
        help="longest source or target sequence in ids, start/end included; longer "
        f"pairs are dropped and counted (default: {DEFAULT_MAX_LENGTH})",
    )
    group.add_argument(
        "--bpe-dropout",
        type=float_at_least(0),
        default=0.0,
        help="BPE-dropout for training batches: the probability of skipping each merge, "
        "giving each epoch a fresh segmentation (default: 0, off; 0.1 in Provilkov et al.)",
    )
    group.add_argument(
        "--lowercase",
        action="store_true",
        help="lowercase all text before it is segmented, in training and in the exported "
        "model, which then reads and writes lowercase (the published Multi30k baselines' "
        "preprocessing; default: keep case)",
    )


def data_config_from_args(args: argparse.Namespace) -> DataConfig:
    """The `DataConfig` for parsed flags; raises `DataError` on impossible values."""
    return DataConfig(
        dataset=args.dataset,
        source_lang=args.source_lang,
        target_lang=args.target_lang,
        vocab_size=DEFAULT_VOCAB_SIZE if args.vocab_size is None else args.vocab_size,
        subword_model=args.subword_model,
        batch_tokens=args.batch_tokens,
        max_length=args.max_length,
        bpe_dropout=args.bpe_dropout,
        lowercase=args.lowercase,
    )
