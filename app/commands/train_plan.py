"""train.py's flags, and `plan_run`: the parsed flags made into a `RunPlan`, once.

    args = app.commands.train.parse_args(["--size", "base", "--train-steps", "100"])
    devices = device_config_from_args(args)      # the strategy and CPU threads
    strategy = app.training.devices.start_devices(devices)
    plan = plan_train(args, devices)             # configurations, model directory, --init-from run
    app.commands.train.run(plan, strategy)

train.py (`plan_train`) and `python -m app.preflight` take these flags and plan with `plan_run`;
`python -m app.prepare` names its model directory with `default_model_dir`.

A flag whose value the run may take from elsewhere parses as None when it is not given
(--size, the languages, --max-length, the vocabulary's, the model's and most training
flags), so "given" is "not None": `plan_run` decides the rest (the --init-from run's
value, the size's recipe's, or the default, `resolved_flags`) in a copy, and never
changes the namespace. Each default is written in its flag's help text, not in argparse.
`plan_run` reads files (the --init-from run, a model directory's settings.json) but writes
nothing, and with `--precision auto` it may time matrix products, so the CPU threads and
the strategy are set before it runs (app/commands/train.py).
"""

import argparse
import dataclasses
import os
import re

from app.cli.flag_types import FlagError, float_at_least, int_at_least, positive_int
from app.cli.flags import add_data_arguments, add_model_arguments, add_thread_arguments, alignment_head
from app.cli.flags import cpu_threads_from_args
from app.cli.flags import data_config_from_args, given_alignments, model_config_from_args
from app.model.config import DEFAULT_SIZE, ModelConfig, split_table3_row
from app.model_dir.settings import load_settings
from app.training.precision import AUTO, BFLOAT16_MIN_SPEEDUP, PRECISIONS, resolve_precision
from app.training.devices import STRATEGIES, DeviceConfig
from app.training.guidance import COST_TYPES, DEFAULT_HEAD, DEFAULT_WEIGHT
from app.training.recipes import RECIPES, recipe_for
from data.config import DataConfig
from data.corpora import bundled_alignments

non_negative_int = int_at_least(0)
non_negative_float = float_at_least(0)

# What a flag that parses as None takes in a run trained from scratch: the default size,
# and DataConfig's own defaults (data_config_from_args leaves them to DataConfig too).
NOT_GIVEN = {
    "size": DEFAULT_SIZE,
    "source_lang": DataConfig.source_lang,
    "target_lang": DataConfig.target_lang,
    "max_length": DataConfig.max_length,
    "subword_model": DataConfig.subword_model,
    "lowercase": DataConfig.lowercase,
}
# The model flags (argparse destinations) that name one ModelConfig field each.
MODEL_FLAGS = {
    "num_layers": "num_layers", "d_model": "d_model", "d_ff": "d_ff", "num_heads": "num_heads",
    "key_dim": "key_dim", "value_dim": "value_dim", "dropout": "dropout", "attention_dropout": "attention_dropout",
    "inner_dropout": "inner_dropout", "positional": "positional",
    "share_embeddings": "share_embeddings", "normalization": "normalization", "norm_first": "norm_first",
    "attention_bias": "attention_bias", "max_positions": "max_length",
}
# What the model's shape is said in, as the README's table of sizes shows it.
SIZE_FIELDS = ("num_layers", "d_model", "d_ff", "num_heads")
# Data flags that take the init run's value where not given.
INHERITED_DATA_FLAGS = ("source_lang", "target_lang", "max_length")
# The flags that tune guided alignment training (argparse destinations), each refused
# without --guided-alignment, which gives it the gold alignments.
GUIDED_ALIGNMENT_FLAGS = ("guided_alignment_weight", "guided_alignment_type", "guided_alignment_head")


# The flags.

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
    _add_guided_alignment_arguments(parser)


def _add_guided_alignment_arguments(parser):
    """How guided alignment training weighs and supervises (the data flag --guided-alignment
    gives the gold alignments, and is what makes a run guided)."""
    group = parser.add_argument_group("guided alignment (with --guided-alignment)")
    group.add_argument(
        "--guided-alignment-weight",
        type=non_negative_float,
        metavar="W",
        help="the weight of the guided alignment loss, added to the token loss (Garg et al.'s lambda; each gold "
        f"row is normalized to sum to 1) (default {DEFAULT_WEIGHT})",
    )
    group.add_argument(
        "--guided-alignment-type",
        choices=COST_TYPES,
        help=f"the guided alignment loss: cross-entropy against the gold row, or its squared error (default "
        f"{COST_TYPES[0]})",
    )
    group.add_argument(
        "--guided-alignment-head",
        type=alignment_head,
        metavar="L:H|L:mean",
        help="the decoder cross-attention the loss supervises, and the run's word alignments then read: layer L's "
        "head H, or the mean of its heads; a negative L counts from the end, written "
        f"--guided-alignment-head=-1:0 (default {DEFAULT_HEAD}: the last layer's first head, as OpenNMT-tf)",
    )


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


def device_config_from_args(args):
    """The `DeviceConfig` of the strategy and thread flags (`_add_device_arguments`)."""
    return DeviceConfig(args.strategy, args.cpu_replicas, cpu_threads_from_args(args))


def add_run_arguments(parser):
    """Every flag a run's plan reads but fine-tuning's: the model, the data, training and
    devices (train.py adds --init-from and --dry-run; app.preflight rehearses the same run)."""
    add_model_arguments(parser)
    add_data_arguments(parser)
    add_training_arguments(parser)


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


def _per_size(field, none="0"):
    """A recipe field's value for each size, for --help: "tiny 0.2, small 0, ..."."""
    values = {size: getattr(recipe, field) for size, recipe in RECIPES.items()}
    return ", ".join(f"{size} {none if value is None else f'{value:g}'}" for size, value in values.items())


# The plan.

def plan_run(args, devices, init_from=None, init_checkpoint=None, dry_run=False):
    """The `RunPlan` of parsed `add_run_arguments` flags `args` (an argparse namespace, left
    as it is), run on `devices` (`device_config_from_args`, started first: --precision auto
    may time matrix products): fine-tuned from the run `init_from` (--init-from, with
    --init-checkpoint), or only summarized (--dry-run).

    Raises:
        ValueError: a flag that contradicts another, the --init-from run or the data, or a
            model directory that cannot hold this run, named.
    """
    # Here, not above: these import TensorFlow, and the flags are parsed before it loads.
    from app.training.init_from import check_new_model_dir, read_init_run
    from app.training.run_plan import RunPlan

    init = None
    if init_from:
        init = read_init_run(init_from, init_checkpoint)
    elif init_checkpoint:
        raise ValueError(f"--init-checkpoint {init_checkpoint} names the weights of --init-from: give both")
    flags = resolved_flags(args, init)
    flags = _with(flags, vocab_size=resolved_vocab_size(flags, flags.model_dir))
    flags = _with(flags, guided_alignment=resolved_guided_alignment(flags, flags.model_dir))
    data_config = data_config_from_args(flags)
    model_config = init.model_config if init else model_config_from_args(flags, vocab_size=flags.vocab_size)
    train_config = train_config_from_args(flags, init, model_config)
    check_new_model_dir(flags.model_dir, init)
    if data_config.max_length > model_config.max_length:
        raise ValueError(
            f"--max-length {data_config.max_length} is longer than the model's {model_config.max_length} "
            "positions (--max-positions): sentences that long could not be encoded"
        )
    return RunPlan(
        size=flags.size, variant=flags.variant, model_dir=flags.model_dir, model_config=model_config,
        data_config=data_config, train_config=train_config, init=init, dry_run=dry_run,
        bleu=not flags.no_bleu, auto_precision=flags.precision == AUTO, devices=devices,
    )


def plan_train(args, devices):
    """train.py's `RunPlan`: `plan_run` with its fine-tuning flags and --dry-run."""
    return plan_run(
        args, devices, init_from=args.init_from, init_checkpoint=args.init_checkpoint, dry_run=args.dry_run
    )


def resolved_flags(args, init=None):
    """A copy of `args` with what the flags leave open decided, reading no file: the
    --init-from run's size, vocabulary, languages and --max-length where not given
    (`flags_from_init`), else the defaults (`NOT_GIVEN`); the size's --batch-tokens; and
    the model directory. The vocabulary size, where neither given nor the init run's, is
    left to `resolved_vocab_size`, which reads the model directory."""
    values = dict(vars(args))
    if init:
        values.update(flags_from_init(args, init))
    values.update({dest: default for dest, default in NOT_GIVEN.items() if values[dest] is None})
    flags = argparse.Namespace(**values)
    if flags.batch_tokens is None:
        flags = _with(flags, batch_tokens=recipe_for(flags.size).batch_tokens)
    model_dir = flags.model_dir or default_model_dir(flags.size, flags.dataset, flags.source_lang, flags.target_lang)
    return _with(flags, model_dir=model_dir)


def _with(flags, **values):
    return argparse.Namespace(**{**vars(flags), **values})


def given_flags(args):
    """The argparse destinations of the flags given on the command line, of those
    `flags_from_init` reads: each parses as None when left out."""
    return {dest for dest, value in vars(args).items() if value is not None}


def flags_from_init(args, init):
    """The train.py flag values that a run fine-tuned from `init` (an `InitRun`) takes
    from it, as a dict of argparse destinations; `args`, the parsed flags, are left as
    they are.

    The vocabulary flags are the init run's, and the languages, --max-length and --size
    its where not given. The model is `init.model_config` itself.

    Raises:
        InitFromError: a flag given that contradicts the init run's model or vocabulary,
            naming the flag, its value and the init run's.
    """
    from app.training.init_from import InitFromError, nearest_size

    model, data, given = init.model_config, init.data_config, given_flags(args)

    def contradiction(flag, value, theirs):
        given_text = flag if value is None else f"{flag} {value}"
        return InitFromError(
            f"{given_text} contradicts --init-from {init.model_dir}, whose {theirs}: a fine-tuned run keeps "
            f"its init run's model and vocabulary; leave {flag} out"
        )

    for dest, field in MODEL_FLAGS.items():
        value, theirs = getattr(args, dest, None), getattr(model, field)
        if dest in given and value != theirs:
            flag = "--" + dest.replace("_", "-")
            if isinstance(value, bool):  # --norm-first / --no-norm-first
                raise contradiction(flag if value else flag.replace("--", "--no-", 1), None, f"{field} is {theirs}")
            raise contradiction(flag, value, f"{field} is {theirs}")
    if "variant" in given:
        # The row's training fields (label smoothing) are the new run's own to set.
        differing = {k: v for k, v in split_table3_row(args.variant)[0].items() if getattr(model, k) != v}
        if differing:
            theirs = ", ".join(f"{k} is {getattr(model, k)} (the row's {v})" for k, v in differing.items())
            raise contradiction("--variant", args.variant, theirs)
    values = {}
    if "size" in given:
        sized = ModelConfig.from_size(args.size, vocab_size=model.vocab_size)
        if any(getattr(sized, field) != getattr(model, field) for field in SIZE_FIELDS):
            raise contradiction("--size", args.size, f"model has {_shape(model)} ({args.size}: {_shape(sized)})")
    else:
        values["size"] = nearest_size(model)
    if "vocab_size" in given and args.vocab_size not in (data.vocab_size, model.vocab_size):
        raise contradiction("--vocab-size", args.vocab_size, f"vocabulary has {model.vocab_size} subwords")
    if "subword_model" in given and args.subword_model != data.subword_model:
        raise contradiction("--subword-model", args.subword_model, f"vocabulary is {data.subword_model}")
    if "lowercase" in given and args.lowercase != data.lowercase:
        raise contradiction("--lowercase", None, "vocabulary keeps case")
    values.update(vocab_size=data.vocab_size, subword_model=data.subword_model, lowercase=data.lowercase)
    values.update({dest: getattr(data, dest) for dest in INHERITED_DATA_FLAGS if dest not in given})
    return values


def _shape(model_config):
    return ", ".join(f"{field} {getattr(model_config, field)}" for field in SIZE_FIELDS)


def default_model_dir(size, dataset, source_lang, target_lang):
    """runs/<size>-<data>-<src>-<tgt>: where train.py (and app.prepare) put a run not given
    a --model-dir. `dataset` as --dataset gives it; its first file names a files: one."""
    dataset = re.sub(r"[^A-Za-z0-9_.-]+", "_", dataset.split(",")[0].replace("files:", "files-"))
    return os.path.join("runs", f"{size}-{dataset}-{source_lang}-{target_lang}")


def train_config_from_args(flags, init=None, model_config=None):
    """The `TrainConfig` of `flags` (as `resolved_flags` makes them): each flag not given
    takes the size's recipe's value.

    With `init`, the `InitRun` of --init-from: the learning-rate scale, where not given,
    peaks at the rate the init run had reached (`InitRun.learning_rate_scale`), and the
    label smoothing, where neither given nor set by --variant, is the init run's.
    With `model_config`, the guided alignment head is resolved against it
    (`guided_alignment_fields`).

    Raises:
        FlagError: as `guided_alignment_fields`.
    """
    from app.training.config import TrainConfig
    from app.training.schedule import resolve_warmup_steps

    recipe = recipe_for(flags.size)
    train_steps, epochs = flags.train_steps, flags.epochs
    # The size's budget goes with the size's length: a length asked for is trained in full.
    time_budget = None
    if train_steps is None and epochs is None:
        train_steps = recipe.train_steps
        time_budget = recipe.time_budget_minutes
    if flags.time_budget is not None:
        if flags.time_budget < 0:
            raise ValueError(f"--time-budget must be a number of minutes, 0 for no limit; got {flags.time_budget}")
        time_budget = flags.time_budget or None
    keep_checkpoints = _or_default(flags.keep_checkpoints, recipe.keep_checkpoints)
    # The size's averaging shrinks to fit fewer kept checkpoints; one asked for must fit.
    average_last = flags.average_last
    if average_last is None:
        average_last = min(recipe.average_last or 0, keep_checkpoints)
    config = TrainConfig(
        label_smoothing=resolved_label_smoothing(flags, init.label_smoothing if init else None),
        train_steps=train_steps,
        epochs=epochs,
        accumulate=flags.accumulate,
        steps_per_loop=_or_default(flags.steps_per_loop, recipe.steps_per_loop),
        warmup_steps=flags.warmup_steps,
        learning_rate_scale=_or_default(flags.learning_rate_scale, recipe.learning_rate_scale),
        cooldown_fraction=_or_default(flags.cooldown_fraction, recipe.cooldown_fraction),
        bidirectional_fraction=_or_default(flags.bidirectional_fraction, 0.0),
        weight_decay=_or_default(flags.weight_decay, recipe.weight_decay),
        precision=resolve_precision(flags.precision),
        jit=flags.jit,
        log_every=flags.log_every,
        eval_every=_or_default(flags.eval_every, recipe.eval_every),
        eval_sentences=flags.eval_sentences,
        checkpoint_every=_or_default(flags.checkpoint_every, recipe.checkpoint_every),
        checkpoint_minutes=flags.checkpoint_minutes,
        keep_checkpoints=keep_checkpoints,
        average_last=average_last or None,
        patience=flags.patience,
        seed=flags.seed,
        time_budget_minutes=time_budget,
        **guided_alignment_fields(flags, model_config),
    )
    if init and flags.learning_rate_scale is None:
        warmup = resolve_warmup_steps(config.warmup_steps, config.train_steps)
        config = dataclasses.replace(config, learning_rate_scale=init.learning_rate_scale(warmup))
    return config


def guided_alignment_fields(flags, model_config=None):
    """`TrainConfig`'s guided alignment fields of `flags`: none without --guided-alignment;
    else the head (resolved against `model_config` where given), the weight and the type,
    each flag not given taking its default.

    Raises:
        FlagError: a --guided-alignment-* flag given without --guided-alignment, naming both;
            a head the model does not have.
    """
    given = [dest for dest in GUIDED_ALIGNMENT_FLAGS if getattr(flags, dest, None) is not None]
    if not getattr(flags, "guided_alignment", None):
        if given:
            flag = "--" + given[0].replace("_", "-")
            raise FlagError(
                f"{flag} tunes guided alignment training, which needs --guided-alignment FILE|eflomal (the gold "
                f"alignments of train): give it, or leave {flag} out"
            )
        return {}
    head = flags.guided_alignment_head or DEFAULT_HEAD
    if model_config is not None:
        try:
            head = head.resolved(model_config.num_layers, model_config.num_heads)
        except ValueError as error:
            raise FlagError(f"--guided-alignment-head: {error}") from None
    return {
        "guided_alignment_head": str(head),
        "guided_alignment_weight": _or_default(flags.guided_alignment_weight, DEFAULT_WEIGHT),
        "guided_alignment_type": flags.guided_alignment_type or COST_TYPES[0],
    }


def resolved_label_smoothing(flags, init_label_smoothing=None):
    """--label-smoothing; if not given, that of the --variant row (Table 3's D3 and D4),
    else `init_label_smoothing` (the --init-from run's, where it has one), else the size's
    recipe's (`flags` as `resolved_flags` makes them)."""
    if flags.label_smoothing is not None:
        return flags.label_smoothing
    row = split_table3_row(flags.variant)[1] if flags.variant else {}
    if "label_smoothing" in row:
        return row["label_smoothing"]
    if init_label_smoothing is not None:
        return init_label_smoothing
    return recipe_for(flags.size).label_smoothing


def resolved_vocab_size(flags, model_dir):
    """--vocab-size; if not given, that of the run `model_dir` holds (a run resumes with its
    own vocabulary), else the size's recipe's for the language pair (`flags` as
    `resolved_flags` makes them).

    Raises:
        ValueError: naming the file, if `model_dir` holds a settings.json that cannot be read.
    """
    if flags.vocab_size is not None:
        return flags.vocab_size
    if os.path.exists(os.path.join(model_dir, "settings.json")):
        return load_settings(model_dir)[1].vocab_size
    return recipe_for(flags.size).vocab_size_for(flags.source_lang, flags.target_lang)


def resolved_guided_alignment(flags, model_dir):
    """--guided-alignment: as given, "none" meaning none; if not given, that of the run
    `model_dir` holds (a run resumes as it began), else the size's recipe's: the corpus's
    bundled gold alignments where the recipe trains with them
    (`data.corpora.bundled_alignments`: Multi30k en-de), else none.

    Raises:
        ValueError: naming the file, if `model_dir` holds a settings.json that cannot be read.
    """
    given = getattr(flags, "guided_alignment", None)
    if given is not None:
        return given_alignments(given)
    if os.path.exists(os.path.join(model_dir, "settings.json")):
        return load_settings(model_dir)[1].alignments
    return default_guided_alignment(flags.size, flags.dataset or DataConfig.dataset, flags.source_lang,
                                    flags.target_lang)


def default_guided_alignment(size, dataset, source_lang, target_lang):
    """The gold alignments a new run of `size` on the data trains with where
    --guided-alignment is not given: the corpus's bundled ones where the size's recipe
    trains with them, else None (app.prepare prepares for the same)."""
    if recipe_for(size).guided_alignment:
        return bundled_alignments(dataset, source_lang, target_lang)
    return None


def _or_default(value, default):
    return default if value is None else value
