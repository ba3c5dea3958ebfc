"""Command-line flags for the model configuration, shared by every entry point."""

import argparse

from app.config import POSITIONAL_KINDS, SHARING_MODES, SIZES, TABLE3_VARIANTS, ModelConfig

# Flag name -> ModelConfig field, for the Table 3 knobs a user may override.
_OVERRIDES = {
    "num_layers": (int, "N, layers in the encoder and in the decoder"),
    "d_model": (int, "model width"),
    "d_ff": (int, "feed-forward inner width"),
    "num_heads": (int, "attention heads h"),
    "key_dim": (int, "d_k per head (default d_model / h)"),
    "value_dim": (int, "d_v per head (default d_k)"),
    "dropout": (float, "P_drop on sub-layer outputs and embeddings"),
    "attention_dropout": (float, "dropout on attention weights"),
    "inner_dropout": (float, "dropout after the feed-forward ReLU"),
    "label_smoothing": (float, "epsilon_ls of the loss"),
}


def add_model_arguments(parser: argparse.ArgumentParser):
    group = parser.add_argument_group("model")
    group.add_argument("--size", default="tiny", choices=sorted(SIZES), help="named model size (default tiny)")
    group.add_argument(
        "--variant",
        choices=sorted(TABLE3_VARIANTS),
        help="a row of the paper's Table 3, applied on top of --size",
    )
    for field, (kind, text) in _OVERRIDES.items():
        group.add_argument("--" + field.replace("_", "-"), type=kind, help=text)
    group.add_argument("--positional", choices=POSITIONAL_KINDS, help="positional encoding")
    group.add_argument("--share-embeddings", choices=SHARING_MODES, help="which embedding matrices are shared")
    # Both ways: tiny is pre-norm by default, so the paper's post-norm needs a flag too.
    group.add_argument(
        "--norm-first",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="pre-norm residual blocks (--norm-first) or the paper's post-norm (--no-norm-first); "
        "default per size: pre-norm for tiny, post-norm otherwise",
    )
    group.add_argument(
        "--attention-bias",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="biases in the attention projections (--attention-bias) or none, as in the paper "
        "(--no-attention-bias); default per size: biases for tiny, none otherwise",
    )
    group.add_argument("--max-positions", type=int, help="most positions the positional encoding covers")
    return group


def model_config_from_args(args, vocab_size):
    """The ModelConfig the flags describe: --size, then --variant, then single overrides."""
    overrides = dict(TABLE3_VARIANTS[args.variant]) if args.variant else {}
    for field in _OVERRIDES:
        if getattr(args, field) is not None:
            overrides[field] = getattr(args, field)
    overrides.update(
        positional=args.positional,
        share_embeddings=args.share_embeddings,
        norm_first=args.norm_first,
        attention_bias=args.attention_bias,
        max_length=args.max_positions,
        vocab_size=vocab_size,
    )
    return ModelConfig.from_size(args.size, **overrides)
