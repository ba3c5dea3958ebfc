"""The named sizes: for each, the model and how `python train.py --size NAME` trains it.

    >>> recipe_for("tiny").batch_tokens
    2048
    >>> recipe_for("tiny").model == ModelConfig.from_size("tiny")
    True
    >>> recipe_for("base").vocab_size_for("en", "fr")
    32000

Every flag of `train.py` that says "default: per size" reads its default here
(`app.training.command.train_config_from_args`), and so do the benchmarks and the JAX
tool in `benchmarks/gpu/`. Imports nothing but the standard library and the
TensorFlow-free `app.model.config`: that tool runs where TensorFlow is not installed.

A size's model is `app.model.config.SIZES[name]`, written there once, beside why it is as
it is; its training is written here.

Why each size's values are what they are is said beside them; the runs behind them are
in docs/lab-notebook.md.
"""

import dataclasses
from typing import Optional, Tuple

from app.model.config import ModelConfig


@dataclasses.dataclass(frozen=True)
class Recipe:
    """One named size: its model and the training defaults that go with it."""

    # The model, `ModelConfig.from_size(name)`: its vocabulary size is a placeholder,
    # which the tokenizer replaces by what it holds (a run asks for `vocab_size_for`).
    model: ModelConfig
    # Source (and target) tokens per batch, all replicas together (--batch-tokens).
    batch_tokens: int
    # Optimizer updates in a run of the default length (--train-steps).
    train_steps: int
    # Steps between checkpoints (--checkpoint-every).
    checkpoint_every: int
    # Newest checkpoints kept (--keep-checkpoints).
    keep_checkpoints: int
    # Multiplier on the paper's learning-rate schedule (--learning-rate-scale).
    learning_rate_scale: float = 1.0
    # Final fraction of the run over which the learning rate falls linearly to zero; 0,
    # the paper's schedule to the last step (--cooldown-fraction).
    cooldown_fraction: float = 0.0
    # epsilon_ls of the loss (--label-smoothing): the paper's 0.1 for every size.
    label_smoothing: float = 0.1
    # Decoupled (AdamW) weight decay of the matrices and embeddings; 0, the paper's Adam
    # (--weight-decay).
    weight_decay: float = 0.0
    # The checkpoints export.py averages: the newest K kept ones, fewer if fewer are
    # kept; None, the best by validation BLEU (--average-last).
    average_last: Optional[int] = None
    # Steps between evaluations (--eval-every).
    eval_every: int = 1000
    # Minutes a run of the default length may take, final evaluation included; None, no
    # limit. A length asked for on the command line trains in full (--time-budget).
    time_budget_minutes: Optional[float] = None
    # Pieces of the shared source and target subword vocabulary (--vocab-size), for every
    # language pair but those of `vocab_size_by_pair`. 8,000 suits Multi30k's 29k pairs
    # (data/config.py).
    vocab_size: int = 8000
    # Language pairs with a vocabulary size of their own: ("en-fr", 32000), the pair's two
    # codes in alphabetical order, for either direction.
    vocab_size_by_pair: Tuple[Tuple[str, int], ...] = ()
    # Optimizer updates per call of the training function (--steps-per-loop): the host
    # waits for the device once per call. 1 on a CPU, where the host is the device.
    steps_per_loop: int = 1

    def vocab_size_for(self, source_lang: str, target_lang: str) -> int:
        """The vocabulary size this size trains with for a language pair, in either direction."""
        pair = "-".join(sorted((source_lang, target_lang)))
        return dict(self.vocab_size_by_pair).get(pair, self.vocab_size)


# The paper's vocabularies (section 5.1): byte-pair encoding, one vocabulary shared by
# source and target, of about 37,000 tokens for WMT 2014 English-German; 32,000
# word-pieces for the much larger English-French. Other pairs take the 37,000.
PAPER_VOCAB_SIZE = 37000
PAPER_VOCAB_SIZE_BY_PAIR = (("en-fr", 32000),)


# The paper's base and big models (Table 3, rows "base" and "big"): about 25,000 source
# + 25,000 target tokens per batch, 100k / 300k steps; it averaged the last 5 (base) or
# 20 (big) checkpoints, written 10 minutes apart, and export.py does the same for these
# sizes (unmeasured here: no GPU). big is base with its own model, length and averaging.
_BASE = Recipe(
    model=ModelConfig.from_size("base"),
    batch_tokens=25000,
    train_steps=100_000,
    checkpoint_every=1000,
    keep_checkpoints=5,
    average_last=5,
    vocab_size=PAPER_VOCAB_SIZE,
    vocab_size_by_pair=PAPER_VOCAB_SIZE_BY_PAIR,
    # GPU recipes: 10 divides the log, evaluation and checkpoint cadences, so no call is
    # cut short by them; unmeasured here (no GPU), Keras's steps_per_execution idea.
    steps_per_loop=10,
)


RECIPES = {
    # Transformer-Tiny, the published text-only Multi30k baseline's size
    # (docs/lab-notebook.md#quality-multi30k-en-de-the-default-command), trained on a
    # laptop CPU within the hour.
    "tiny": Recipe(
        model=ModelConfig.from_size("tiny"),
        # Half the paper's usual batch for twice the updates: in the same hour it reached a
        # lower validation loss and a higher BLEU, with two seeds, on fewer tokens
        # (docs/lab-notebook.md#what-was-tried). The steps fit in an hour on a 2-core CPU,
        # evaluations included, on a good day; the time budget below covers the others.
        batch_tokens=2048,
        train_steps=16000,
        # The paper's own learning rate (pre-norm trains at it), annealed linearly to zero
        # over the last fifth: with a fixed budget that lowers the validation loss more
        # than the same steps on the paper's slow tail (docs/lab-notebook.md#what-was-tried).
        learning_rate_scale=1.0,
        cooldown_fraction=0.2,
        # AdamW: 0.2 lowered the validation loss below every run of the paper's Adam with
        # two seeds, and 0.15 and 0.3 scored below it (docs/lab-notebook.md#what-was-tried).
        weight_decay=0.2,
        # export.py averages the last 10 checkpoints, 250 steps apart: all inside the
        # cooldown, where the weights move little. That beat the best single checkpoint
        # with both seeds, where at the full batch, whose last 10 reached back before the
        # cooldown, it had not (docs/lab-notebook.md#quality-multi30k-en-de-the-default-command).
        checkpoint_every=250,
        keep_checkpoints=10,
        average_last=10,
        # An evaluation every 2,000 steps, so that twice the steps do not bring twice the
        # evaluations.
        eval_every=2000,
        # A slower machine or day ends the default run, cooldown and all, a little sooner
        # rather than over the hour (app/training/time_budget.py).
        time_budget_minutes=58.0,
    ),
    # Between tiny and base: wide enough for matrix products to use a CPU's vector units
    # well, small enough to train on a laptop; d_k = 64 as in the paper. Post-norm like the
    # paper; the quarter learning rate that post-norm tiny needed on Multi30k is assumed
    # here, unmeasured.
    "small": Recipe(
        model=ModelConfig.from_size("small"),
        batch_tokens=6144,
        train_steps=8000,
        learning_rate_scale=0.25,
        checkpoint_every=250,
        keep_checkpoints=10,
    ),
    "base": _BASE,
    "big": dataclasses.replace(
        _BASE, model=ModelConfig.from_size("big"), train_steps=300_000, keep_checkpoints=20, average_last=20
    ),
}


def recipe_for(size: str) -> Recipe:
    """The recipe of a named size; a ValueError naming the known sizes for any other name."""
    if size not in RECIPES:
        raise ValueError(f"unknown model size {size!r}; known sizes: {', '.join(RECIPES)}")
    return RECIPES[size]
