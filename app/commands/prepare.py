"""Prepares a model directory's data once: the vocabulary, and every split as shards.

    python -m app.prepare                                         # Multi30k en->de, runs/tiny-multi30k-en-de
    python -m app.prepare --size base --dataset wmt14_translate/de-en --model-dir runs/base-wmt
    python -m app.prepare --dataset files:train.en,train.de --model-dir runs/mine --workers 8

Like `fairseq-preprocess`: the text is tokenized in parallel over the machine's cores
into binary shards under MODEL_DIR/data/<split>/ that training memory-maps
(docs/data.md). `python train.py` runs this itself when the shards are missing or were
made from other data or settings; run it alone to prepare a large corpus ahead of
training, or on another machine. It takes the data flags of train.py.
"""

import argparse
import dataclasses
import os
import sys
import time
from typing import Optional

from data.config import DataConfig


@dataclasses.dataclass(frozen=True)
class PreparePlan:
    """What to prepare, and where."""

    # The data flags' configuration, the vocabulary size resolved; batch_tokens as given,
    # None if not: the shards do not depend on it.
    data_config: DataConfig
    # The model directory whose data/ and vocabulary are prepared (--model-dir, or train.py's default).
    model_dir: str
    # Preparation processes (--workers; None: one per core).
    workers: Optional[int]


def parse_args(argv=None):
    # None of these imports TensorFlow: --help and a bad value answer at once.
    from app.cli.flag_types import positive_int
    from app.cli.flags import add_data_arguments
    from app.model.config import DEFAULT_SIZE
    from app.training.recipes import RECIPES

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_arguments(parser)
    # The vocabulary's default size is the model size's (train.py's --size): a directory
    # prepared for base must hold base's vocabulary, or train.py --size base refuses it.
    parser.add_argument(
        "--size", choices=list(RECIPES), default=DEFAULT_SIZE,
        help=f"the model size the data is for: it sets --vocab-size's default, as in train.py "
        f"(default: {DEFAULT_SIZE})",
    )
    parser.add_argument(
        "--model-dir",
        help=f"the model directory to prepare (default: train.py's for --size {DEFAULT_SIZE}, "
        f"runs/{DEFAULT_SIZE}-<data>-<src>-<tgt>)",
    )
    parser.add_argument(
        "--workers", type=positive_int, default=None, help="preparation processes (default: one per core)"
    )
    return parser.parse_args(argv)


def plan_prepare(args):
    """The `PreparePlan` of parsed flags `args` (left as they are): without --vocab-size,
    the vocabulary train.py --size asks for on a new run of the language pair; without
    --guided-alignment, the gold alignments it trains with (its recipe's); without
    --model-dir, the directory train.py takes for the size and data.

    Raises:
        DataError: an impossible data flag, named.
    """
    from app.cli.flags import data_config_from_args
    from app.commands.train_plan import default_guided_alignment, default_model_dir
    from app.training.recipes import recipe_for

    config = data_config_from_args(args)
    if args.vocab_size is None:
        vocab_size = recipe_for(args.size).vocab_size_for(config.source_lang, config.target_lang)
        config = dataclasses.replace(config, vocab_size=vocab_size)
    if args.guided_alignment is None:
        alignments = default_guided_alignment(args.size, config.dataset, config.source_lang, config.target_lang)
        config = dataclasses.replace(config, alignments=alignments)
    model_dir = args.model_dir or default_model_dir(args.size, config.dataset, config.source_lang, config.target_lang)
    return PreparePlan(data_config=config, model_dir=model_dir, workers=args.workers)


def main(argv=None) -> int:
    started = time.monotonic()
    args = parse_args(argv)
    from app.runtime.quiet_tensorflow import import_tensorflow

    import_tensorflow()  # before the data modules, which import it
    from data.dataset import prepare_shards
    from data.errors import DataError

    try:
        plan = plan_prepare(args)
        counts = prepare_shards(plan.data_config, plan.model_dir, workers=plan.workers)
    except DataError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for split, split_counts in counts.items():
        print(
            f"  {split:<10} {split_counts.kept:>11,} pairs kept of {split_counts.read:,} "
            f"(dropped: {split_counts.dropped_empty:,} empty, {split_counts.dropped_too_long:,} too long)"
        )
    print(f"prepared {os.path.join(plan.model_dir, 'data')} in {time.monotonic() - started:.0f} s")
    print(f"next: python train.py --model-dir {plan.model_dir}" + _data_flags(argv))
    return 0


def _data_flags(argv):
    """The flags given, repeated for train.py (less --workers and --model-dir)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in ("--workers", "--model-dir"):
            skip = True
            continue
        if arg.startswith(("--workers=", "--model-dir=")):
            continue
        kept.append(arg)
    return "".join(f" {arg}" for arg in kept)


if __name__ == "__main__":
    sys.exit(main())
