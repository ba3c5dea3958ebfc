"""What a `python train.py` run needs, made from its parsed flags once: `RunPlan`.

    args = app.commands.train.parse_args(["--size", "base", "--train-steps", "100"])
    plan = plan_run(args)     # configurations, model directory, --init-from run
    app.training.command.run(plan, strategy)

`plan_run` reads the flags and never changes them: what --init-from, the size's recipe
and a model directory's own run decide is resolved into a copy (`resolved_flags`).
It reads files (the --init-from run, a model directory's settings.json) but writes
nothing, and with `--precision auto` it may time matrix products, so the CPU threads and
the strategy are set before it runs (app/commands/train.py).
"""

import argparse
import dataclasses
from typing import Optional

from app.model.config import ModelConfig
from app.training.command import default_model_dir, resolved_vocab_size, train_config_from_args
from app.training.config import TrainConfig
from app.training.init_from import InitRun, check_new_model_dir, flags_from_init, read_init_run
from app.training.precision import AUTO
from app.training.recipes import recipe_for
from data.config import DataConfig


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """One training run, as its flags describe it."""

    # The named size whose recipe gave the training defaults (--size; with --init-from and
    # no --size, the size nearest the init run's model).
    size: str
    # The Table 3 row (--variant), or None.
    variant: Optional[str]
    # Where checkpoints, settings and logs go (--model-dir, or runs/<size>-<data>-<src>-<tgt>).
    model_dir: str
    # The model asked for; its vocabulary size is replaced by the tokenizer's once the data
    # is prepared (a small corpus may give fewer pieces).
    model_config: ModelConfig
    data_config: DataConfig
    train_config: TrainConfig
    # The trained run a fine-tuning run starts from (--init-from), or None.
    init: Optional[InitRun] = None
    # --dry-run: print the model and data summary, train nothing.
    dry_run: bool = False
    # Validation BLEU at each evaluation (False: --no-bleu, the loss only).
    bleu: bool = True
    # --precision auto chose train_config.precision (the run says why).
    auto_precision: bool = False


def plan_run(args):
    """The `RunPlan` of parsed train.py flags `args` (an argparse namespace, left as it is).

    Raises:
        ValueError: a flag that contradicts another, the --init-from run or the data, or a
            model directory that cannot hold this run, named.
    """
    init = None
    if args.init_from:
        init = read_init_run(args.init_from, args.init_checkpoint)
    elif args.init_checkpoint:
        raise ValueError(f"--init-checkpoint {args.init_checkpoint} names the weights of --init-from: give both")
    flags = resolved_flags(args, init)
    data_config = _data_config(flags)
    train_config = train_config_from_args(flags, init)
    model_config = init.model_config if init else _model_config(flags)
    check_new_model_dir(flags.model_dir, init)
    if data_config.max_length > model_config.max_length:
        raise ValueError(
            f"--max-length {data_config.max_length} is longer than the model's {model_config.max_length} "
            "positions (--max-positions): sentences that long could not be encoded"
        )
    return RunPlan(
        size=flags.size, variant=flags.variant, model_dir=flags.model_dir, model_config=model_config,
        data_config=data_config, train_config=train_config, init=init, dry_run=flags.dry_run,
        bleu=not flags.no_bleu, auto_precision=flags.precision == AUTO,
    )


def resolved_flags(args, init=None):
    """A copy of `args` with what the flags leave open decided: the --init-from run's
    size, vocabulary, languages and --max-length where not given (`flags_from_init`), the
    size's --batch-tokens, the model directory, and the vocabulary size (that of the run
    the model directory holds, else the size's recipe's)."""
    values = dict(vars(args))
    if init:
        values.update(flags_from_init(args, init, getattr(args, "flags_given", set())))
    flags = argparse.Namespace(**values)
    if flags.batch_tokens is None:
        flags = _with(flags, batch_tokens=recipe_for(flags.size).batch_tokens)
    flags = _with(flags, model_dir=flags.model_dir or default_model_dir(flags))
    return _with(flags, vocab_size=resolved_vocab_size(flags, flags.model_dir))


def _with(flags, **values):
    return argparse.Namespace(**{**vars(flags), **values})


def _data_config(flags):
    from app.cli.flags import data_config_from_args

    return data_config_from_args(flags)


def _model_config(flags):
    from app.cli.flags import model_config_from_args

    return model_config_from_args(flags, vocab_size=flags.vocab_size)
