"""Trains the Transformer: the command is app/commands/train.py (`python train.py --help`)."""

import time

# A time budget (--time-budget) counts from here: the imports take seconds too.
STARTED = time.monotonic()

import sys  # noqa: E402

from app.commands.train import main, parse_args  # noqa: E402, F401  (parse_args: tests build configs from flags)

if __name__ == "__main__":
    sys.exit(main(started=STARTED))
