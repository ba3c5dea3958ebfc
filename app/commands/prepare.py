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
import os
import sys
import time


def parse_args(argv=None):
    # None of these imports TensorFlow: --help and a bad value answer at once.
    from app.training.recipes import RECIPES
    from app.cli.flag_types import positive_int
    from app.cli.flags import add_data_arguments

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_arguments(parser)
    # The vocabulary's default size is the model size's (train.py's --size): a directory
    # prepared for base must hold base's vocabulary, or train.py --size base refuses it.
    parser.add_argument(
        "--size", choices=list(RECIPES), default="tiny",
        help="the model size the data is for: it sets --vocab-size's default, as in train.py (default: tiny)",
    )
    parser.add_argument(
        "--model-dir",
        help="the model directory to prepare (default: train.py's for --size tiny, runs/tiny-<data>-<src>-<tgt>)",
    )
    parser.add_argument(
        "--workers", type=positive_int, default=None, help="preparation processes (default: one per core)"
    )
    return parser.parse_args(argv)


def main(argv=None) -> int:
    started = time.monotonic()
    args = parse_args(argv)
    from app.cli.quiet_tensorflow import import_tensorflow

    import_tensorflow()  # before the data modules, which import it
    if args.vocab_size is None:
        from app.training.recipes import recipe_for

        args.vocab_size = recipe_for(args.size).vocab_size_for(args.source_lang, args.target_lang)
    from data.errors import DataError
    from app.cli.flags import data_config_from_args

    model_dir = args.model_dir or _default_model_dir(args)
    try:
        # The batch size does not shape the shards; any valid one lets prepare_data plan.
        config = data_config_from_args(args)
        if config.batch_tokens is None:
            import dataclasses

            config = dataclasses.replace(config, batch_tokens=max(4096, config.max_length))
        from data.dataset import prepare_data

        data = prepare_data(config, model_dir, workers=args.workers)
    except DataError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for split, counts in data.counts.items():
        print(
            f"  {split:<10} {counts.kept:>11,} pairs kept of {counts.read:,} "
            f"(dropped: {counts.dropped_empty:,} empty, {counts.dropped_too_long:,} too long)"
        )
    print(f"prepared {os.path.join(model_dir, 'data')} in {time.monotonic() - started:.0f} s")
    print(f"next: python train.py --model-dir {model_dir}" + _data_flags(argv))
    return 0


def _default_model_dir(args):
    from app.training.command import default_model_dir

    return default_model_dir(args)


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
