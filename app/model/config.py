"""Model configuration: one frozen dataclass, the named sizes' models, and the paper's Table 3 rows.

How each size is trained (batch, steps, schedule) is its recipe: `app/training/recipes.py`.

    >>> ModelConfig.from_size("base", vocab_size=37000)
    >>> ModelConfig.from_size("base", num_heads=16)          # Table 3 row (A): d_k follows
    >>> ModelConfig.from_size("base", **TABLE3_VARIANTS["E"])  # learned positions
    >>> split_table3_row("D3")   # label smoothing: a training setting, not the model's
    ({}, {'label_smoothing': 0.0})
"""

import dataclasses
import json
from typing import Optional

POSITIONAL_KINDS = ("sinusoidal", "learned")
# Which embedding matrices are one and the same.
#   all:    source embedding = target embedding = pre-softmax projection (the paper)
#   target: target embedding = pre-softmax projection; the source has its own
#   none:   three separate matrices
SHARING_MODES = ("all", "target", "none")
# The normalization of every residual block: the paper's layer norm, or ScaleNorm
# (layers/scale_normalization.py).
NORMALIZATION_KINDS = ("layer", "scale")
# Fields an older settings.json's model block may hold that are training settings now
# (`app.training.config.TrainConfig`): read, and left out of the model.
FORMER_FIELDS = ("label_smoothing",)


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Every hyperparameter of the model; the named sizes are copies with a few changed."""

    # Shared subword vocabulary size, the reserved ids (layers/special_tokens.py) included.
    vocab_size: int = 8000
    # N, the number of layers in the encoder and in the decoder.
    num_layers: int = 6
    # d_model, the width of every residual stream and embedding.
    d_model: int = 512
    # d_ff, the inner width of the position-wise feed-forward blocks.
    d_ff: int = 2048
    # h, the number of attention heads.
    num_heads: int = 8
    # d_k, the query/key width of each head; None means d_model / h (the paper's choice).
    key_dim: Optional[int] = None
    # d_v, the value width of each head; None means the same as key_dim.
    value_dim: Optional[int] = None
    # P_drop: on sub-layer outputs and on embeddings + positional encodings.
    dropout: float = 0.1
    # Dropout on the attention weights (not in the paper; tensor2tensor used it).
    attention_dropout: float = 0.0
    # Dropout after the feed-forward ReLU (not in the paper; tensor2tensor used it).
    inner_dropout: float = 0.0
    # "sinusoidal" (the paper) or "learned" (Table 3 row E).
    positional: str = "sinusoidal"
    # The most positions the positional encoding covers, source and target alike.
    max_length: int = 512
    # Which embedding matrices are shared: see SHARING_MODES.
    share_embeddings: str = "all"
    # Pre-norm residual blocks (x + Sublayer(LayerNorm(x))) instead of the paper's post-norm.
    norm_first: bool = False
    # Biases in the attention projections W^Q, W^K, W^V and W^O. The paper has none
    # (tiny has them, see SIZES); the feed-forward block's biases stay either way.
    attention_bias: bool = False
    # The normalization's epsilon.
    layer_norm_epsilon: float = 1e-6
    # "layer" (the paper's layer norm) or "scale" (ScaleNorm: g x / ||x||, one learned
    # scalar per norm); see NORMALIZATION_KINDS.
    normalization: str = "layer"

    def __post_init__(self):
        def check(condition, message):
            if not condition:
                raise ValueError(f"invalid model configuration: {message}")

        for name in ("vocab_size", "num_layers", "d_model", "d_ff", "num_heads", "max_length"):
            value = getattr(self, name)
            check(isinstance(value, int) and value > 0, f"{name} must be a positive int, got {value!r}")
        if self.key_dim is None:
            check(
                self.d_model % self.num_heads == 0,
                f"d_model={self.d_model} is not divisible by num_heads={self.num_heads}; "
                "set key_dim explicitly",
            )
            object.__setattr__(self, "key_dim", self.d_model // self.num_heads)
        if self.value_dim is None:
            object.__setattr__(self, "value_dim", self.key_dim)
        for name in ("key_dim", "value_dim"):
            value = getattr(self, name)
            check(isinstance(value, int) and value > 0, f"{name} must be a positive int, got {value!r}")
        for name in ("dropout", "attention_dropout", "inner_dropout"):
            value = getattr(self, name)
            check(0.0 <= value < 1.0, f"{name} must be in [0, 1), got {value!r}")
        check(
            self.positional in POSITIONAL_KINDS,
            f"positional={self.positional!r}, expected one of {POSITIONAL_KINDS}",
        )
        check(
            self.normalization in NORMALIZATION_KINDS,
            f"normalization={self.normalization!r}, expected one of {NORMALIZATION_KINDS}",
        )
        check(
            self.share_embeddings in SHARING_MODES,
            f"share_embeddings={self.share_embeddings!r}, expected one of {SHARING_MODES}",
        )
        check(
            self.positional == "learned" or self.d_model % 2 == 0,
            f"d_model={self.d_model} must be even for sinusoidal positions",
        )

    @classmethod
    def from_size(cls, name, **overrides):
        """A named size's model (`SIZES`) with any field overridden.

        None-valued overrides are ignored. An override of num_heads or d_model re-derives
        d_k = d_model / h unless key_dim is overridden too, as in Table 3 rows (A) and (C).
        """
        if name not in SIZES:
            raise ValueError(f"unknown model size {name!r}; known sizes: {', '.join(SIZES)}")
        unknown = set(overrides) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"unknown model configuration fields: {sorted(unknown)}")
        fields = dict(SIZES[name])
        fields.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**fields)

    def to_dict(self):
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, fields):
        # Configurations written before attention_bias existed described models with the
        # biases: read them as such, so their checkpoints still load. Those written while
        # label smoothing was a model field hold it too: a training setting now
        # (app/model_dir/settings.py moves it there), nothing to the model.
        if isinstance(fields, dict):
            fields = {k: v for k, v in fields.items() if k not in FORMER_FIELDS}
        return cls(**{"attention_bias": True, **fields})

    def to_json(self):
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text):
        return cls.from_dict(json.loads(text))


# The named sizes' models, as the fields that differ from the defaults. key_dim is left to
# follow d_model / num_heads.
SIZES = {
    # Transformer-Tiny, the published text-only Multi30k baseline's size, with dropout 0.2
    # rather than the published 0.3, pre-norm rather than the paper's post-norm (which
    # trained well only at a quarter of the paper's learning rate), and biases in the
    # attention projections like the published model (fairseq's), with which the recipe
    # was tuned. Each was chosen on validation (docs/training.md; docs/lab-notebook/2026-11-21-en-de-what-was-tried.md).
    "tiny": dict(
        num_layers=4, d_model=128, d_ff=256, num_heads=4, max_length=256, dropout=0.2, norm_first=True,
        attention_bias=True,
    ),
    # Between tiny and base: wide enough for matrix products to use a CPU's vector units
    # well, small enough to train on a laptop; d_k = 64 as in the paper.
    "small": dict(num_layers=3, d_model=256, d_ff=1024, num_heads=4, max_length=256),
    # The paper's base and big models (Table 3, rows "base" and "big").
    "base": dict(num_layers=6, d_model=512, d_ff=2048, num_heads=8, dropout=0.1),
    "big": dict(num_layers=6, d_model=1024, d_ff=4096, num_heads=16, dropout=0.3),
}

# The size train.py trains, and app.prepare prepares a vocabulary for, when given none.
DEFAULT_SIZE = "tiny"

# The rows of the paper's Table 3, as overrides of the base size: of the model's fields,
# but for those in TABLE3_TRAINING_FIELDS (`split_table3_row`).
TABLE3_VARIANTS = {
    # (A) number of heads, with d_k = d_v = d_model / h.
    "A1": dict(num_heads=1, key_dim=512),
    "A2": dict(num_heads=4, key_dim=128),
    "A3": dict(num_heads=16, key_dim=32),
    "A4": dict(num_heads=32, key_dim=16),
    # (B) smaller attention keys.
    "B1": dict(key_dim=16, value_dim=64),
    "B2": dict(key_dim=32, value_dim=64),
    # (C) depth and width.
    "C1": dict(num_layers=2),
    "C2": dict(num_layers=4),
    "C3": dict(num_layers=8),
    "C4": dict(d_model=256, key_dim=32),
    "C5": dict(d_model=1024, key_dim=128),
    "C6": dict(d_ff=1024),
    "C7": dict(d_ff=4096),
    # (D) regularization.
    "D1": dict(dropout=0.0),
    "D2": dict(dropout=0.2),
    "D3": dict(label_smoothing=0.0),
    "D4": dict(label_smoothing=0.2),
    # (E) learned positional embeddings instead of sinusoids.
    "E": dict(positional="learned"),
}

# The fields of Table 3's rows that are training settings, not the model's (rows D3 and
# D4 vary the loss's epsilon_ls: `app.training.config.TrainConfig.label_smoothing`).
TABLE3_TRAINING_FIELDS = ("label_smoothing",)


def split_table3_row(name):
    """`(model_overrides, training_overrides)`: the fields Table 3's row `name` changes,
    those of `ModelConfig` apart from the training settings (TABLE3_TRAINING_FIELDS)."""
    row = TABLE3_VARIANTS[name]
    training = {field: value for field, value in row.items() if field in TABLE3_TRAINING_FIELDS}
    return {field: value for field, value in row.items() if field not in training}, training
