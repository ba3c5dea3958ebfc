"""`python train.py`: its flags, the training configuration they make, and the run.

The model directory it writes is described in `app.model_dir`.
"""

import dataclasses
import os
import re
import shutil
import sys
import tempfile
import time

from app.model_dir.lock import ModelDirInUse, ModelDirLock
from app.model_dir.settings import check_resumable, load_settings, save_settings
from app.training.config import TrainConfig
from app.training.precision import AUTO, BFLOAT16_MIN_SPEEDUP, PRECISIONS, choose_auto_precision, resolve_precision
from app.training.recipes import RECIPES, recipe_for


def add_training_arguments(parser):
    from app.training.strategy import STRATEGIES

    group = parser.add_argument_group("training")
    group.add_argument(
        "--model-dir", help="where checkpoints, settings and logs go (default: runs/<size>-<data>-<src>-<tgt>)"
    )
    group.add_argument("--train-steps", type=int, help="total optimizer updates (default: per size)")
    group.add_argument("--epochs", type=int, help="passes over the training data")
    group.add_argument("--accumulate", type=int, default=1, help="micro-batches per update (gradient accumulation)")
    group.add_argument(
        "--steps-per-loop", type=int,
        help="updates per call of the training function: the host waits for the device once per call "
        "(default: per size, 1 for tiny and small, 10 for base and big)",
    )
    group.add_argument("--warmup-steps", type=int, help="warmup steps (default: 4000, or 8%% of a shorter run)")
    group.add_argument(
        "--learning-rate-scale", type=float, help="multiplier on the paper's schedule (default: per size)"
    )
    group.add_argument(
        "--weight-decay",
        type=float,
        help="decoupled weight decay (AdamW) of the weight matrices and embeddings: each step multiplies them by "
        f"1 - learning rate * this; 0: the paper's Adam (default: {_per_size('weight_decay')})",
    )
    group.add_argument(
        "--cooldown-fraction",
        type=float,
        help="final fraction of the run over which the learning rate falls linearly to zero (default: per size)",
    )
    group.add_argument(
        "--bidirectional-fraction",
        type=float,
        metavar="F",
        help="bidirectional training: the first epochs, as many whole ones as fit in this fraction of the run, also "
        "train on every pair reversed, target to source (Ding et al., 2021, pretrain on a third; it did not help "
        "tiny on Multi30k); default 0: off",
    )
    group.add_argument(
        "--precision",
        choices=(AUTO,) + PRECISIONS,
        default=AUTO,
        help="auto (default): mixed_bfloat16 on GPUs that all run it natively (compute capability 8.0 and later), "
        "or without GPUs on a CPU that has bfloat16 instructions (AMX or AVX512-BF16) and, timed at the start, "
        f"multiplies bfloat16 matrices at least {BFLOAT16_MIN_SPEEDUP}x as fast as float32 ones; float32 elsewhere",
    )
    group.add_argument("--jit", action="store_true", help="compile forward and backward passes with XLA")
    group.add_argument("--log-every", type=int, default=50, help="steps between metrics records")
    group.add_argument(
        "--eval-every", type=int, help="steps between evaluations (0: only at the end; default: per size, else 1000)"
    )
    group.add_argument("--eval-sentences", type=int, help="validation sentences decoded for BLEU (default: all)")
    group.add_argument("--no-bleu", action="store_true", help="evaluate validation loss only")
    group.add_argument("--checkpoint-every", type=int, help="steps between checkpoints (default: per size)")
    group.add_argument("--checkpoint-minutes", type=float, help="also checkpoint every this many minutes")
    group.add_argument("--keep-checkpoints", type=int, help="newest checkpoints kept (default: per size)")
    group.add_argument(
        "--average-last",
        type=int,
        metavar="K",
        help="the weights export.py and app.evaluate take from this run by default: the average of the newest K "
        "kept checkpoints; 0: the best by validation BLEU (default: "
        f"{_per_size('average_last', none='0')}; base and big average as the paper did)",
    )
    group.add_argument("--patience", type=int, help="stop after this many evaluations without a better BLEU")
    group.add_argument("--seed", type=int, default=1)
    group.add_argument(
        "--time-budget",
        type=float,
        metavar="MINUTES",
        help="end the run, final evaluation included, within this many minutes of the command's start (across "
        "resumptions), shortening it if needed; 0: no limit (default, for a size's default length only: "
        f"{_per_size('time_budget_minutes', none='none')})",
    )
    group.add_argument("--strategy", choices=STRATEGIES, default="auto", help="tf.distribute strategy")
    group.add_argument("--cpu-replicas", type=int, help="split the CPU into N mirrored devices")
    group.add_argument(
        "--intra-op-threads",
        type=int,
        metavar="N",
        help="threads one op may use on the CPU (default, 0: TensorFlow's choice, every core); on a 2-core CPU, 1 "
        "trains tiny faster and small slower (docs/lab-notebook.md#one-thread-per-op)",
    )
    group.add_argument(
        "--inter-op-threads",
        type=int,
        metavar="N",
        help="ops run at once on the CPU (default, 0: TensorFlow's choice, one per core)",
    )


def _per_size(field, none="0"):
    """A recipe field's value for each size, for --help: "tiny 0.2, small 0, ..."."""
    values = {size: getattr(recipe, field) for size, recipe in RECIPES.items()}
    return ", ".join(f"{size} {none if value is None else f'{value:g}'}" for size, value in values.items())


def default_model_dir(args):
    dataset = re.sub(r"[^A-Za-z0-9_.-]+", "_", args.dataset.split(",")[0].replace("files:", "files-"))
    return os.path.join("runs", f"{args.size}-{dataset}-{args.source_lang}-{args.target_lang}")


def train_config_from_args(args):
    """The `TrainConfig` of parsed flags: each flag not given takes the size's recipe's value."""
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
    return TrainConfig(
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


def run(args, started=None):
    """Runs `python train.py` for parsed flags; returns the process exit code.

    `started`: `time.monotonic()` when the command began, where a time budget counts
    from (default: now); the data preparation counts too.
    """
    started = time.monotonic() if started is None else started
    # Threads and strategy first: both must be set before TensorFlow runs an op or
    # touches a device.
    from app.training.strategy import WorkersDisagree, is_chief, make_strategy
    from app.training.threads import describe_cpu_threads, set_cpu_threads

    try:
        set_cpu_threads(args.intra_op_threads, args.inter_op_threads)
        strategy = make_strategy(args.strategy, args.cpu_replicas)
    except ValueError as error:
        return _fail(error)
    if args.intra_op_threads or args.inter_op_threads:
        print(describe_cpu_threads())

    from app.cli.flags import model_config_from_args
    from app.model.transformer import build_transformer
    from data.dataset import prepare_data
    from data.errors import DataError
    from data.flags import data_config_from_args
    from data.summary import format_summary, summarize
    from data.tokenizer import MODEL_FILENAME

    if args.batch_tokens is None:
        args.batch_tokens = recipe_for(args.size).batch_tokens
    model_dir = args.model_dir or default_model_dir(args)
    try:
        args.vocab_size = resolved_vocab_size(args, model_dir)
        data_config = data_config_from_args(args)
        train_config = train_config_from_args(args)
        requested = model_config_from_args(args, vocab_size=args.vocab_size)
    except ValueError as error:
        return _fail(error)

    if data_config.max_length > requested.max_length:
        return _fail(
            f"--max-length {data_config.max_length} is longer than the model's {requested.max_length} "
            "positions (--max-positions): sentences that long could not be encoded"
        )

    if args.dry_run:
        print(f"model size: {args.size}" + (f", Table 3 variant {args.variant}" if args.variant else ""))
        for field, value in requested.to_dict().items():
            print(f"  {field}: {value}")
        print(f"parameters: {build_transformer(requested).count_params()}")
        print(f"replicas: {strategy.num_replicas_in_sync}")
        # A dry run leaves no trace in a new model directory: its vocabulary and shards go
        # to a scratch directory, the vocabulary copied from the cache of trained ones
        # (data/vocabulary_cache.py) or trained once and cached, so the next dry run and
        # the real run reuse it. A model directory that has a vocabulary is prepared in place.
        has_vocab = os.path.exists(os.path.join(model_dir, MODEL_FILENAME))
        vocab_dir = model_dir if has_vocab else tempfile.mkdtemp(prefix="dry-run-data-")
        try:
            data = prepare_data(data_config, vocab_dir, num_replicas=strategy.num_replicas_in_sync)
            summary = summarize(data)
        except DataError as error:
            return _fail(error)
        finally:
            if not has_vocab:
                shutil.rmtree(vocab_dir, ignore_errors=True)  # The tokenizer holds it in memory.
        for line in format_summary(summary):
            print(line)
        if train_config.bidirectional_fraction:
            from app.training.run_length import plan_bidirectional_epochs, run_length

            try:
                plan_bidirectional_epochs(train_config, data, run_length(train_config, data), print)
            except ValueError as error:
                return _fail(error)
        return 0

    # A first start whose data fails (a missing file, misaligned lines) leaves no empty
    # model directory behind; one that already existed is left as it was.
    created_model_dir = not os.path.exists(model_dir)
    # Multi-worker: only the chief writes to the model directory. Another worker reads the
    # vocabulary there once a complete earlier start left one (settings.json is written
    # after it); otherwise it trains the same vocabulary (training is deterministic, and
    # train() checks it) in a scratch directory rather than race the chief for the file.
    chief = is_chief(strategy)
    try:
        os.makedirs(model_dir, exist_ok=True)
        # Held while this name holds it: until run() returns, or the process ends.
        _model_dir_lock = ModelDirLock(model_dir) if chief else None
    except (OSError, ModelDirInUse) as error:
        return _fail(error)  # Not removed if created: the run holding it may have made it.
    try:
        # Before the data is read and tokenized (minutes on WMT): a directory holding a
        # run with other languages or another model is refused at once. The vocabulary
        # size is compared once the tokenizer says what it holds (save_settings).
        check_resumable(model_dir, requested, data_config, train_config, ignore=("vocab_size",))
    except ValueError as error:
        return _fail(error)
    vocab_dir = model_dir
    if not chief and not os.path.exists(os.path.join(model_dir, "settings.json")):
        vocab_dir = tempfile.mkdtemp(prefix="vocab-worker-")
    try:
        data = prepare_data(data_config, vocab_dir, num_replicas=strategy.num_replicas_in_sync)
        # The model's vocabulary is the tokenizer's real one, which can be smaller than asked.
        model_config = dataclasses.replace(requested, vocab_size=data.tokenizer.vocab_size)
        if chief:
            save_settings(model_dir, model_config, data_config, train_config, replicas=strategy.num_replicas_in_sync)
    except (DataError, ValueError, OSError) as error:  # OSError: a read-only or full disk.
        if created_model_dir:
            shutil.rmtree(model_dir, ignore_errors=True)
        return _fail(error)
    finally:
        if vocab_dir != model_dir:
            shutil.rmtree(vocab_dir, ignore_errors=True)  # The tokenizer holds it in memory.
    for line in format_summary(summarize(data)):
        print(line)

    from app.model_dir.checkpoints import CheckpointError
    from app.training.loop import NonFiniteLoss, train
    from app.training.validation import make_bleu_evaluator

    evaluate_fn = None
    if not args.no_bleu:
        validation = data.text["validation"]
        evaluate_fn = make_bleu_evaluator(
            data.tokenizer, list(validation.source), list(validation.target), train_config.eval_sentences
        )
    # The auto choice was made, and its timing cached, by train_config_from_args.
    auto = f" (auto: {choose_auto_precision().reason})" if args.precision == AUTO else ""
    print(
        f"training {args.size} in {model_dir} on {strategy.num_replicas_in_sync} replica(s), "
        f"precision {train_config.precision}{auto}"
    )
    try:
        result = train(model_config, data, train_config, model_dir, strategy, evaluate_fn, started=started)
    except (NonFiniteLoss, WorkersDisagree, CheckpointError) as error:
        return _fail(error)
    except KeyboardInterrupt:
        return 130
    print(f"done: step {result['step']}, model in {model_dir}")
    print(f"next: python export.py --model-dir {model_dir}")
    return 0


def _fail(error):
    print(f"error: {error}", file=sys.stderr)
    return 1
