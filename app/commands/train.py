"""Trains the Transformer: `python train.py` at the root, or `transformer-train` once installed.

    python train.py                                   # tiny model, Multi30k en->de, this CPU
    python train.py --size base                       # the paper's base model, every GPU
    python train.py --size base --vocab-size 37000 --dry-run   # print model and data, exit
    python train.py --cpu-replicas 8                  # mirror over 8 logical CPU devices
    TF_CONFIG='{...}' python train.py --strategy multi-worker

Running the same command again resumes from the newest checkpoint in --model-dir.
"""

import time

# A time budget (--time-budget) counts from here: the imports take seconds too.
STARTED = time.monotonic()

import argparse  # noqa: E402
import sys  # noqa: E402


def parse_args(argv=None):
    from app.cli.flags import add_model_arguments
    from app.training.command import add_init_arguments, add_training_arguments, flags_given
    from app.cli.flags import add_data_arguments

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # None of these imports TensorFlow: --help and a bad value answer at once.
    add_model_arguments(parser)
    add_data_arguments(parser)
    add_training_arguments(parser)
    add_init_arguments(parser)
    parser.add_argument(
        "--dry-run", action="store_true", help="print the model and data summary, then exit (default: train)"
    )
    args = parser.parse_args(argv)
    args.flags_given = flags_given(parser, argv)  # --init-from tells a flag given from its default
    return args


def main(argv=None, started=None):
    """`started`: the time.monotonic() a --time-budget counts from (default: this module's import)."""
    args = parse_args(argv)  # no TensorFlow yet: a bad flag costs no import
    from app.cli.gpu_warning import warn_if_gpu_unseen
    from app.cli.quiet_tensorflow import import_tensorflow

    import_tensorflow()
    warn_if_gpu_unseen()
    from app.training.command import fail, run, start_devices

    try:
        strategy = start_devices(args)  # before TensorFlow runs an op: the plan may time some
        from app.training.run_plan import plan_run

        plan = plan_run(args)
    except ValueError as error:
        return fail(error)
    return run(plan, strategy, started=STARTED if started is None else started)


if __name__ == "__main__":
    sys.exit(main())
