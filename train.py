"""Trains the Transformer.

    python train.py                                    # tiny model, Multi30k en->de
    python train.py --size base --vocab-size 37000 --dry-run   # print the model, exit
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    from app.cli import add_model_arguments

    add_model_arguments(parser)
    parser.add_argument("--vocab-size", type=int, default=8000, help="shared subword vocabulary size")
    parser.add_argument("--dry-run", action="store_true", help="build the model, print it and exit")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    from app.cli import model_config_from_args
    from app.model import build_transformer

    try:
        config = model_config_from_args(args, vocab_size=args.vocab_size)
    except ValueError as error:
        sys.exit(f"error: {error}")
    model = build_transformer(config)
    print(f"model size: {args.size}" + (f", Table 3 variant {args.variant}" if args.variant else ""))
    for field, value in config.to_dict().items():
        print(f"  {field}: {value}")
    print(f"parameters: {model.count_params()}")
    if args.dry_run:
        return 0
    sys.exit("error: training is not implemented yet; run with --dry-run")


if __name__ == "__main__":
    sys.exit(main())
