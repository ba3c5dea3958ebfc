"""The named sizes: for each, the model and how `python train.py --size NAME` trains it.

    >>> recipe_for("tiny").batch_tokens
    2048
    >>> recipe_for("tiny").model == ModelConfig.from_size("tiny")
    True
    >>> recipe_for("base").vocab_size_for("en", "fr")
    32000

Every flag of `train.py` that says "default: per size" reads its default here, and so
do the benchmarks and the JAX tool in `benchmarks/gpu/`, which runs without TensorFlow:
this module imports only the standard library and `app.model.config`. A size's model is
`app.model.config.SIZES[name]`; how each recipe was chosen is in docs/training.md and
the lab notebook.
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
    # Guided alignment training (--guided-alignment) on the bundled gold alignments of the
    # corpus, where it has some (`data.corpora.bundled_alignments`: Multi30k en-de); other
    # corpora train without unless given alignments.
    guided_alignment: bool = False

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
# + 25,000 target tokens per batch, 100k / 300k steps, the last 5 (base) or 20 (big)
# checkpoints averaged. big is base with its own model, length and averaging.
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
    # cut short by them (Keras's steps_per_execution idea).
    steps_per_loop=10,
)


RECIPES = {
    # Transformer-Tiny, the published text-only Multi30k baseline's size, trained on a
    # laptop CPU within the hour. Its values were chosen on Multi30k validation
    # (docs/training.md, "The recipe"; the runs are in the lab notebook).
    "tiny": Recipe(
        model=ModelConfig.from_size("tiny"),
        # Half the paper's usual batch for twice the updates, as many as fit in the hour.
        batch_tokens=2048,
        train_steps=16000,
        # The paper's own learning rate (pre-norm trains at it), annealed linearly to zero
        # over the last fifth: a fixed budget ends on a steeper descent than the paper's tail.
        learning_rate_scale=1.0,
        cooldown_fraction=0.2,
        # AdamW.
        weight_decay=0.2,
        # export.py averages the last 10 checkpoints, 250 steps apart: all inside the
        # cooldown, where the weights move little.
        checkpoint_every=250,
        keep_checkpoints=10,
        average_last=10,
        # An evaluation every 2,000 steps, so that twice the steps do not bring twice the
        # evaluations.
        eval_every=2000,
        # A slower machine or day ends the default run, cooldown and all, a little sooner
        # rather than over the hour (app/training/time_budget.py).
        time_budget_minutes=58.0,
        # Eflomal's alignments supervise the last layer's first head: its word alignments
        # of test2016 agree with eflomal's 10 points better than the best head of the same
        # run without, at no cost in BLEU (docs/results.md, "Word alignments and markup").
        guided_alignment=True,
    ),
    # Between tiny and base: wide enough for matrix products to use a CPU's vector units
    # well, small enough to train on a laptop. Post-norm like the paper, at the quarter
    # learning rate that post-norm needed on tiny.
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
