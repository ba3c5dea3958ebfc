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
import os  # noqa: E402
import sys  # noqa: E402


def parse_args(argv=None):
    from app.commands.train_plan import add_init_arguments, add_run_arguments

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # None of these imports TensorFlow: --help and a bad value answer at once.
    add_run_arguments(parser)
    add_init_arguments(parser)
    parser.add_argument(
        "--dry-run", action="store_true", help="print the model and data summary, then exit (default: train)"
    )
    return parser.parse_args(argv)


def main(argv=None, started=None):
    """`started`: the time.monotonic() a --time-budget counts from (default: this module's import)."""
    args = parse_args(argv)  # no TensorFlow yet: a bad flag costs no import
    from app.runtime.gpu_warning import warn_if_gpu_unseen
    from app.runtime.quiet_tensorflow import import_tensorflow

    import_tensorflow()
    warn_if_gpu_unseen()
    from app.commands.train_plan import device_config_from_args, plan_train
    from app.training.devices import start_devices

    try:
        devices = device_config_from_args(args)
        strategy = start_devices(devices)  # before TensorFlow runs an op: the plan may time some
        plan = plan_train(args, devices)
    except ValueError as error:
        return fail(error)
    return run(plan, strategy, started=STARTED if started is None else started)


def run(plan, strategy, started=None):
    """Runs `python train.py` as `plan` (`app.training.run_plan.RunPlan`) says, under
    `strategy`; returns the process exit code.

    `started`: `time.monotonic()` when the command began, where a time budget counts
    from (default: now); the data preparation counts too.
    """
    started = time.monotonic() if started is None else started
    if plan.dry_run:
        return _dry_run(plan, strategy)
    from app.model_dir.lock import ModelDirInUse
    from app.training.start import lock_model_dir, prepare_model_dir
    from data.errors import DataError

    # A first start whose data fails leaves no empty model directory behind.
    created_model_dir = not os.path.exists(plan.model_dir)
    try:
        # Held while this name holds it: until run() returns, or the process ends.
        _model_dir_lock = lock_model_dir(plan, strategy)  # noqa: F841
        plan, data = prepare_model_dir(plan, strategy, created_model_dir)
    except (DataError, ValueError, OSError, ModelDirInUse) as error:
        return fail(error)
    for line in _summary_lines(data):
        print(line)
    return _train(plan, strategy, data, started)


def _dry_run(plan, strategy):
    """--dry-run: prints the model, the data summary and the epochs trained both ways,
    and writes nothing to a new model directory; returns the exit code."""
    from app.model.transformer import build_transformer
    from app.training.start import dry_run_data
    from data.errors import DataError
    from data.summary import format_summary

    init, train_config = plan.init, plan.train_config
    print(f"model size: {plan.size}" + (f", Table 3 variant {plan.variant}" if plan.variant else ""))
    if init:
        print(f"fine-tuning from {init.model_dir}, its model and vocabulary; weights: {init.weights}; "
              f"learning-rate scale {train_config.learning_rate_scale:.4g}")
    for field, value in plan.model_config.to_dict().items():
        print(f"  {field}: {value}")
    print(f"label smoothing: {train_config.label_smoothing:g}")
    print(f"parameters: {build_transformer(plan.model_config).count_params()}")
    print(f"replicas: {strategy.num_replicas_in_sync}")
    try:
        data, summary = dry_run_data(plan, strategy)
    except DataError as error:
        return fail(error)
    for line in format_summary(summary):
        print(line)
    if train_config.bidirectional_fraction:
        from app.training.run_length import plan_bidirectional_epochs, run_length

        try:
            plan_bidirectional_epochs(train_config, data, run_length(train_config, data), print)
        except ValueError as error:
            return fail(error)
    return 0


def _summary_lines(data):
    from data.summary import format_summary, summarize

    return format_summary(summarize(data))


def _train(plan, strategy, data, started):
    """Trains the prepared run to its end; returns the exit code."""
    from app.model_dir.checkpoints import CheckpointError
    from app.training.loop import NonFiniteLoss, train
    from app.training.precision import choose_auto_precision
    from app.training.strategy import WorkersDisagree
    from app.training.validation import make_bleu_evaluator

    train_config, model_dir = plan.train_config, plan.model_dir
    evaluate_fn = None
    if plan.bleu:
        validation = data.text["validation"]
        evaluate_fn = make_bleu_evaluator(
            data.tokenizer, list(validation.source), list(validation.target), train_config.eval_sentences
        )
    # The auto choice was made, and its timing cached, when the plan was made.
    auto = f" (auto: {choose_auto_precision().reason})" if plan.auto_precision else ""
    print(
        f"training {plan.size} in {model_dir} on {strategy.num_replicas_in_sync} replica(s), "
        f"precision {train_config.precision}{auto}"
    )
    try:
        result = train(plan, data, strategy, evaluate_fn, started=started)
    except (NonFiniteLoss, WorkersDisagree, CheckpointError) as error:
        return fail(error)
    except KeyboardInterrupt:
        return 130
    print(f"done: step {result['step']}, model in {model_dir}")
    print(f"next: python export.py --model-dir {model_dir}")
    return 0


def fail(error):
    """Prints `error` as the command's error line; returns the exit code 1."""
    print(f"error: {error}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
