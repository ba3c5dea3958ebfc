"""`python train.py`: its flags, the training configuration they make, and the run.

app/commands/train.py parses the flags, sets the devices (`start_devices`), makes the
`app.training.run_plan.RunPlan` of the flags and calls `run` with it. The model
directory it writes is described in `app.model_dir`.
"""

import argparse
import dataclasses
import os
import re
import shutil
import sys
import tempfile
import time

from app.cli.flag_types import float_at_least, int_at_least, positive_int
from app.cli.flags import add_thread_arguments
from app.model_dir.lock import ModelDirInUse, ModelDirLock
from app.model_dir.settings import check_resumable, load_settings, save_settings
from app.training.precision import AUTO, BFLOAT16_MIN_SPEEDUP, PRECISIONS, choose_auto_precision, resolve_precision
from app.training.recipes import RECIPES, recipe_for


# app.training.strategy.STRATEGIES, written out: that module imports TensorFlow, and the
# flags are parsed before it loads (a test pins the two equal).
STRATEGIES = ("auto", "mirrored", "multi-worker")
non_negative_int = int_at_least(0)
non_negative_float = float_at_least(0)


def add_training_arguments(parser):
    """The training flags. Importing this module imports no TensorFlow (TrainConfig's
    module does, so it is imported where the configuration is built)."""
    group = parser.add_argument_group("training")
    group.add_argument(
        "--model-dir", help="where checkpoints, settings and logs go (default: runs/<size>-<data>-<src>-<tgt>)"
    )
    _add_length_and_schedule_arguments(group)
    _add_precision_arguments(group)
    _add_evaluation_and_checkpoint_arguments(group)
    group.add_argument("--seed", type=int, default=1, help="seed of initialization, dropout and batches (default 1)")
    group.add_argument(
        "--time-budget",
        type=non_negative_float,
        metavar="MINUTES",
        help="end the run, final evaluation included, within this many minutes of the command's start (across "
        "resumptions), shortening it if needed; 0: no limit (default, for a size's default length only: "
        f"{_per_size('time_budget_minutes', none='none')})",
    )
    _add_device_arguments(group)


def _add_length_and_schedule_arguments(group):
    """How long the run is, and its optimizer, schedule and loss."""
    group.add_argument("--train-steps", type=positive_int, help="total optimizer updates (default: per size)")
    group.add_argument(
        "--epochs", type=positive_int, help="passes over the training data (default: as many as --train-steps takes)"
    )
    group.add_argument(
        "--accumulate", type=positive_int, default=1, help="micro-batches per update (gradient accumulation; default 1)"
    )
    group.add_argument(
        "--steps-per-loop", type=positive_int,
        help="updates per call of the training function: the host waits for the device once per call "
        "(default: per size, 1 for tiny and small, 10 for base and big)",
    )
    group.add_argument(
        "--warmup-steps", type=non_negative_int, help="warmup steps (default: 4000, or 8%% of a shorter run)"
    )
    group.add_argument(
        "--learning-rate-scale", type=non_negative_float, help="multiplier on the paper's schedule (default: per size)"
    )
    group.add_argument(
        "--weight-decay",
        type=non_negative_float,
        help="decoupled weight decay (AdamW) of the weight matrices and embeddings: each step multiplies them by "
        f"1 - learning rate * this; 0: the paper's Adam (default: {_per_size('weight_decay')})",
    )
    group.add_argument(
        "--label-smoothing",
        type=non_negative_float,
        help=f"epsilon_ls of the loss (default: {_per_size('label_smoothing')}, or --variant D3/D4's, or "
        "--init-from's run's)",
    )
    group.add_argument(
        "--cooldown-fraction",
        type=non_negative_float,
        help="final fraction of the run over which the learning rate falls linearly to zero (default: per size)",
    )
    group.add_argument(
        "--bidirectional-fraction",
        type=non_negative_float,
        metavar="F",
        help="bidirectional training: the first epochs, as many whole ones as fit in this fraction of the run, also "
        "train on every pair reversed, target to source (Ding et al., 2021, pretrain on a third; docs/training.md); "
        "default 0: off",
    )


def _add_precision_arguments(group):
    """The numeric precision and XLA."""
    group.add_argument(
        "--precision",
        choices=(AUTO,) + PRECISIONS,
        default=AUTO,
        help="auto (default): mixed_bfloat16 on GPUs that all run it natively (compute capability 8.0 and later), "
        "or without GPUs on a CPU that has bfloat16 instructions (AMX or AVX512-BF16) and, timed at the start, "
        f"multiplies bfloat16 matrices at least {BFLOAT16_MIN_SPEEDUP}x as fast as float32 ones; float32 elsewhere",
    )
    group.add_argument(
        "--jit", action="store_true", help="compile forward and backward passes with XLA (default: off)"
    )


def _add_evaluation_and_checkpoint_arguments(group):
    """Records, evaluations, early stopping and the checkpoints kept."""
    group.add_argument("--log-every", type=positive_int, default=50, help="steps between metrics records (default 50)")
    group.add_argument(
        "--eval-every",
        type=non_negative_int,
        help="steps between evaluations (0: only at the end; default: per size, else 1000)",
    )
    group.add_argument(
        "--eval-sentences", type=positive_int, help="validation sentences decoded for BLEU (default: all)"
    )
    group.add_argument(
        "--no-bleu", action="store_true", help="evaluate validation loss only (default: BLEU too)"
    )
    group.add_argument(
        "--checkpoint-every", type=non_negative_int, help="steps between checkpoints (default: per size)"
    )
    group.add_argument(
        "--checkpoint-minutes",
        type=non_negative_float,
        help="also checkpoint every this many minutes (default: by steps only)",
    )
    group.add_argument(
        "--keep-checkpoints", type=positive_int, help="newest checkpoints kept (default: per size)"
    )
    group.add_argument(
        "--average-last",
        type=non_negative_int,
        metavar="K",
        help="the weights export.py and app.evaluate take from this run by default: the average of the newest K "
        "kept checkpoints; 0: the best by validation BLEU (default: "
        f"{_per_size('average_last', none='0')}; base and big average as the paper did)",
    )
    group.add_argument(
        "--patience",
        type=non_negative_int,
        help="stop after this many evaluations without a better BLEU (default: never)",
    )


def _add_device_arguments(group):
    """The tf.distribute strategy and the CPU's threads."""
    group.add_argument(
        "--strategy", choices=STRATEGIES, default="auto", help="tf.distribute strategy (default auto)"
    )
    group.add_argument(
        "--cpu-replicas", type=positive_int, help="split the CPU into N mirrored devices (default: no split)"
    )
    add_thread_arguments(
        group, "which is fastest depends on the model and the CPU (docs/training.md, --intra-op-threads)"
    )


def add_init_arguments(parser):
    """--init-from and --init-checkpoint: fine-tuning (app/training/init_from.py)."""
    group = parser.add_argument_group("fine-tuning")
    group.add_argument(
        "--init-from",
        metavar="MODEL_DIR",
        help="start a new run from this trained run: its weights, model and vocabulary, with a schedule of its "
        "own from step 0 in its own --model-dir (default: train from scratch)",
    )
    group.add_argument(
        "--init-checkpoint",
        metavar="CHECKPOINT",
        help="with --init-from: 'best', 'latest', a checkpoint path, or the name of a kept one such as ckpt-16000 "
        "(default: the weights export.py takes from that run, as its settings.json says)",
    )


def flags_given(parser, argv=None):
    """The argparse destinations of the flags on the command line `argv` (default: sys.argv),
    as `parser` parses it: what --init-from checks against the init run, where a default
    must not count as asked for."""
    # Parsed again with every default suppressed: argparse then sets only what it reads.
    defaults = [(action, action.default) for action in parser._actions]
    try:
        for action, _ in defaults:
            action.default = argparse.SUPPRESS
        return set(vars(parser.parse_args(argv))) - set(parser._defaults)
    finally:
        for action, default in defaults:
            action.default = default


def _per_size(field, none="0"):
    """A recipe field's value for each size, for --help: "tiny 0.2, small 0, ..."."""
    values = {size: getattr(recipe, field) for size, recipe in RECIPES.items()}
    return ", ".join(f"{size} {none if value is None else f'{value:g}'}" for size, value in values.items())


def default_model_dir(args):
    dataset = re.sub(r"[^A-Za-z0-9_.-]+", "_", args.dataset.split(",")[0].replace("files:", "files-"))
    return os.path.join("runs", f"{args.size}-{dataset}-{args.source_lang}-{args.target_lang}")


def train_config_from_args(args, init=None):
    """The `TrainConfig` of parsed flags: each flag not given takes the size's recipe's value.

    With `init`, the `InitRun` of --init-from: the learning-rate scale, where not given,
    peaks at the rate the init run had reached (`InitRun.learning_rate_scale`), and the
    label smoothing, where neither given nor set by --variant, is the init run's.
    """
    from app.training.config import TrainConfig
    from app.training.schedule import resolve_warmup_steps

    recipe = recipe_for(args.size)
    train_steps, epochs = args.train_steps, args.epochs
    # The size's budget goes with the size's length: a length asked for is trained in full.
    time_budget = None
    if train_steps is None and epochs is None:
        train_steps = recipe.train_steps
        time_budget = recipe.time_budget_minutes
    if args.time_budget is not None:
        if args.time_budget < 0:
            raise ValueError(f"--time-budget must be a number of minutes, 0 for no limit; got {args.time_budget}")
        time_budget = args.time_budget or None
    keep_checkpoints = _or_default(args.keep_checkpoints, recipe.keep_checkpoints)
    # The size's averaging shrinks to fit fewer kept checkpoints; one asked for must fit.
    average_last = args.average_last
    if average_last is None:
        average_last = min(recipe.average_last or 0, keep_checkpoints)
    config = TrainConfig(
        label_smoothing=resolved_label_smoothing(args, init.label_smoothing if init else None),
        train_steps=train_steps,
        epochs=epochs,
        accumulate=args.accumulate,
        steps_per_loop=_or_default(args.steps_per_loop, recipe.steps_per_loop),
        warmup_steps=args.warmup_steps,
        learning_rate_scale=_or_default(args.learning_rate_scale, recipe.learning_rate_scale),
        cooldown_fraction=_or_default(args.cooldown_fraction, recipe.cooldown_fraction),
        bidirectional_fraction=_or_default(args.bidirectional_fraction, 0.0),
        weight_decay=_or_default(args.weight_decay, recipe.weight_decay),
        precision=resolve_precision(args.precision),
        jit=args.jit,
        log_every=args.log_every,
        eval_every=_or_default(args.eval_every, recipe.eval_every),
        eval_sentences=args.eval_sentences,
        checkpoint_every=_or_default(args.checkpoint_every, recipe.checkpoint_every),
        checkpoint_minutes=args.checkpoint_minutes,
        keep_checkpoints=keep_checkpoints,
        average_last=average_last or None,
        patience=args.patience,
        seed=args.seed,
        time_budget_minutes=time_budget,
    )
    if init and args.learning_rate_scale is None:
        warmup = resolve_warmup_steps(config.warmup_steps, config.train_steps)
        config = dataclasses.replace(config, learning_rate_scale=init.learning_rate_scale(warmup))
    return config


def resolved_label_smoothing(args, init_label_smoothing=None):
    """--label-smoothing; if not given, that of the --variant row (Table 3's D3 and D4),
    else `init_label_smoothing` (the --init-from run's, where it has one), else the size's
    recipe's."""
    from app.model.config import split_table3_row

    if args.label_smoothing is not None:
        return args.label_smoothing
    row = split_table3_row(args.variant)[1] if args.variant else {}
    if "label_smoothing" in row:
        return row["label_smoothing"]
    if init_label_smoothing is not None:
        return init_label_smoothing
    return recipe_for(args.size).label_smoothing


def resolved_vocab_size(args, model_dir):
    """--vocab-size; if not given, that of the run `model_dir` holds (a run resumes with its
    own vocabulary), else the size's recipe's for the language pair.

    Raises:
        ValueError: naming the file, if `model_dir` holds a settings.json that cannot be read.
    """
    if args.vocab_size is not None:
        return args.vocab_size
    if os.path.exists(os.path.join(model_dir, "settings.json")):
        return load_settings(model_dir)[1].vocab_size
    return recipe_for(args.size).vocab_size_for(args.source_lang, args.target_lang)


def _or_default(value, default):
    return default if value is None else value


def start_devices(args):
    """Sets TensorFlow's CPU thread pools and makes the tf.distribute strategy the flags ask
    for: both before TensorFlow runs an op or touches a device. Returns the strategy.

    Raises:
        ValueError: a strategy or thread setting that cannot be had, named.
    """
    from app.cli.threads import describe_cpu_threads, set_cpu_threads
    from app.training.strategy import make_strategy

    set_cpu_threads(args.intra_op_threads, args.inter_op_threads)
    strategy = make_strategy(args.strategy, args.cpu_replicas)
    if args.intra_op_threads or args.inter_op_threads:
        print(describe_cpu_threads())
    return strategy


def run(plan, strategy, started=None):
    """Runs `python train.py` as `plan` (`app.training.run_plan.RunPlan`) says, under
    `strategy`; returns the process exit code.

    `started`: `time.monotonic()` when the command began, where a time budget counts
    from (default: now); the data preparation counts too.
    """
    started = time.monotonic() if started is None else started
    if plan.dry_run:
        return _dry_run(plan, strategy)
    from data.errors import DataError

    # A first start whose data fails leaves no empty model directory behind.
    created_model_dir = not os.path.exists(plan.model_dir)
    try:
        # Held while this name holds it: until run() returns, or the process ends.
        _model_dir_lock = _lock_model_dir(plan, strategy)  # noqa: F841
        data, model_config = _prepare_model_dir(plan, strategy, created_model_dir)
    except (DataError, ValueError, OSError, ModelDirInUse) as error:
        return fail(error)
    for line in _summary_lines(data):
        print(line)
    return _train(plan, strategy, data, model_config, started)


def _dry_run(plan, strategy):
    """--dry-run: prints the model, the data summary and the epochs trained both ways,
    and writes nothing to a new model directory; returns the exit code."""
    from app.model.transformer import build_transformer
    from data.dataset import prepare_data
    from data.errors import DataError
    from data.tokenizer import MODEL_FILENAME

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
    # The vocabulary and shards go to a scratch directory, the vocabulary copied from the
    # cache of trained ones (data/vocabulary_cache.py) or trained once and cached, so the
    # next dry run and the real run reuse it. A model directory that has a vocabulary is
    # prepared in place.
    has_vocab = os.path.exists(os.path.join(plan.model_dir, MODEL_FILENAME))
    vocab_dir = plan.model_dir if has_vocab else tempfile.mkdtemp(prefix="dry-run-data-")
    try:
        if init and not has_vocab:
            init.copy_vocabulary(vocab_dir)
        data = prepare_data(plan.data_config, vocab_dir, num_replicas=strategy.num_replicas_in_sync)
        summary_lines = _summary_lines(data)
    except DataError as error:
        return fail(error)
    finally:
        if not has_vocab:
            shutil.rmtree(vocab_dir, ignore_errors=True)  # The tokenizer holds it in memory.
    for line in summary_lines:
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


def _lock_model_dir(plan, strategy):
    """Makes the model directory and takes its lock (the chief's alone: only the chief
    writes there); returns the lock, None on another worker.

    Raises:
        OSError, ModelDirInUse: the directory cannot be made, or another run holds it (it
            is not removed: the run holding it may have made it).
        ValueError: it holds a run with other languages or another model, refused before
            the data is read and tokenized (minutes on WMT). The vocabulary size is
            compared once the tokenizer says what it holds (save_settings).
    """
    from app.training.strategy import is_chief

    os.makedirs(plan.model_dir, exist_ok=True)
    lock = ModelDirLock(plan.model_dir) if is_chief(strategy) else None
    check_resumable(plan.model_dir, plan.model_config, plan.data_config, plan.train_config, ignore=("vocab_size",))
    return lock


def _prepare_model_dir(plan, strategy, created_model_dir):
    """Prepares the data with the run's vocabulary and, on the chief, writes settings.json;
    returns `(data, model_config)`, the model with the tokenizer's real vocabulary size
    (which can be smaller than asked).

    Multi-worker: another worker than the chief reads the vocabulary in the model
    directory once a complete earlier start left one (settings.json is written after it);
    otherwise it trains the same vocabulary (training is deterministic, and train() checks
    it) in a scratch directory rather than race the chief for the file.

    Raises:
        DataError, ValueError, OSError (a read-only or full disk): the model directory
            is removed if this start `created_model_dir` (a missing file, misaligned
            lines leave no empty one behind); one that already existed is left as it was.
    """
    from app.training.init_from import settings_record
    from app.training.strategy import is_chief
    from data.dataset import prepare_data
    from data.errors import DataError

    model_dir, init, chief = plan.model_dir, plan.init, is_chief(strategy)
    first_start = not os.path.exists(os.path.join(model_dir, "settings.json"))
    vocab_dir = tempfile.mkdtemp(prefix="vocab-worker-") if not chief and first_start else model_dir
    try:
        if init and first_start:
            init.copy_vocabulary(vocab_dir)  # A first start: the new corpus is prepared with it.
        data = prepare_data(plan.data_config, vocab_dir, num_replicas=strategy.num_replicas_in_sync)
        model_config = dataclasses.replace(plan.model_config, vocab_size=data.tokenizer.vocab_size)
        if chief:
            save_settings(
                model_dir, model_config, plan.data_config, plan.train_config,
                replicas=strategy.num_replicas_in_sync,
                init_from=settings_record(model_dir, init) if init else None,
            )
    except (DataError, ValueError, OSError):
        if created_model_dir:
            shutil.rmtree(model_dir, ignore_errors=True)
        raise
    finally:
        if vocab_dir != model_dir:
            shutil.rmtree(vocab_dir, ignore_errors=True)  # The tokenizer holds it in memory.
    return data, model_config


def _train(plan, strategy, data, model_config, started):
    """Trains the prepared run to its end; returns the exit code."""
    from app.model_dir.checkpoints import CheckpointError
    from app.training.loop import NonFiniteLoss, train
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
        result = train(
            model_config, data, train_config, model_dir, strategy, evaluate_fn, started=started,
            initialize=plan.init.initialize if plan.init else None,
        )
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
