"""Command-line flags shared by the commands: the model's configuration and the data
(train.py, app.preflight, app.prepare), how to decode (export.py, app.evaluate,
app.translate, app.pictures), and TensorFlow's threads. Which weights to load:
app/cli/model_source.py.

    parser = argparse.ArgumentParser()
    add_data_arguments(parser)
    args = parser.parse_args()
    config = data_config_from_args(args)   # raises DataError on impossible values

None of this imports TensorFlow: `--help` and a bad value answer at once.
"""

import argparse

from app.decoding.config import AlignmentHead, DecodingConfig
from app.model.config import (
    DEFAULT_SIZE, NORMALIZATION_KINDS, POSITIONAL_KINDS, SHARING_MODES, SIZES, TABLE3_TRAINING_FIELDS, TABLE3_VARIANTS,
    ModelConfig, split_table3_row,
)
from app.cli.flag_types import float_at_least, int_at_least, positive_int
from app.runtime.threads import CpuThreads
from data.config import DEFAULT_MAX_LENGTH, DEFAULT_VOCAB_SIZE, EFLOMAL, NO_ALIGNMENTS, SUBWORD_MODELS, DataConfig

_fraction = float_at_least(0)
# Flag name -> ModelConfig field, for the Table 3 knobs a user may override.
_OVERRIDES = {
    "num_layers": (positive_int, "N, layers in the encoder and in the decoder (default: per size)"),
    "d_model": (positive_int, "model width (default: per size)"),
    "d_ff": (positive_int, "feed-forward inner width (default: per size)"),
    "num_heads": (positive_int, "attention heads h (default: per size)"),
    "key_dim": (positive_int, "d_k per head (default d_model / h)"),
    "value_dim": (positive_int, "d_v per head (default d_k)"),
    "dropout": (_fraction, "P_drop on sub-layer outputs and embeddings (default: per size)"),
    "attention_dropout": (_fraction, "dropout on attention weights (default: per size)"),
    "inner_dropout": (_fraction, "dropout after the feed-forward ReLU (default: per size)"),
}


def add_model_arguments(parser: argparse.ArgumentParser):
    group = parser.add_argument_group("model")
    # None when not given (as every model flag): --init-from's run then sets it (app/commands/train_plan.py).
    group.add_argument("--size", choices=sorted(SIZES), help=f"named model size (default {DEFAULT_SIZE})")
    group.add_argument(
        "--variant",
        choices=sorted(TABLE3_VARIANTS),
        help="a row of the paper's Table 3, which varies the base model: with --size base only (default: none)",
    )
    for field, (kind, text) in _OVERRIDES.items():
        group.add_argument("--" + field.replace("_", "-"), type=kind, help=text)
    group.add_argument("--positional", choices=POSITIONAL_KINDS, help="positional encoding (default: per size)")
    group.add_argument(
        "--share-embeddings", choices=SHARING_MODES, help="which embedding matrices are shared (default: per size)"
    )
    group.add_argument(
        "--normalization",
        choices=NORMALIZATION_KINDS,
        help="of every residual block: layer (the paper's layer norm, the default) or scale (ScaleNorm, "
        "g x / ||x|| with one learned scalar g)",
    )
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
    group.add_argument(
        "--max-positions", type=positive_int, help="most positions the positional encoding covers (default: per size)"
    )
    return group


def model_config_from_args(args, vocab_size):
    """The ModelConfig the flags describe: --size, then --variant, then single overrides.

    A row that varies a training setting (row D's --label-smoothing) changes nothing
    here; its flag is checked against the row all the same.

    Raises:
        ValueError: a --variant on another size than base (its rows are the base model's
            widths: C4's d_model 256 would double tiny), or a flag that contradicts the row.
    """
    overrides = {field: getattr(args, field) for field in _OVERRIDES if getattr(args, field) is not None}
    overrides.update(
        {
            field: value
            for field, value in dict(
                positional=args.positional,
                share_embeddings=args.share_embeddings,
                normalization=args.normalization,
                norm_first=args.norm_first,
                attention_bias=args.attention_bias,
                max_length=args.max_positions,
            ).items()
            if value is not None
        }
    )
    if args.variant:
        row = TABLE3_VARIANTS[args.variant]
        if args.size != "base":
            raise ValueError(
                f"--variant {args.variant} is a row of the paper's Table 3, which varies the base model "
                f"({' '.join(_flag(field, value) for field, value in row.items())} on base); give --size base, "
                f"or set the knobs for {args.size} with their own flags"
            )
        # The row's training fields (label smoothing) are checked here too, and set by
        # app.commands.train_plan.train_config_from_args.
        given = {**overrides, **{field: getattr(args, field, None) for field in TABLE3_TRAINING_FIELDS}}
        for field, value in row.items():
            if given.get(field) is not None and given[field] != value:
                raise ValueError(
                    f"{_flag(field, given[field])} contradicts --variant {args.variant} "
                    f"({_flag(field, value)}); leave it out, or give the knobs without --variant"
                )
        overrides = {**split_table3_row(args.variant)[0], **overrides}
    return ModelConfig.from_size(args.size, vocab_size=vocab_size, **overrides)


def _flag(field, value):
    name = "max-positions" if field == "max_length" else field.replace("_", "-")
    return f"--{name} {value}"


# The data.

def batch_tokens(text):
    """argparse type of a --batch-tokens value: a whole number DataConfig accepts (one that
    holds at least one row of the longest sequences), checked when the flags are parsed."""
    from data.errors import DataError

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    try:
        DataConfig(batch_tokens=value)
    except DataError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return value


def alignment_head(text):
    """argparse's type of a flag naming a cross-attention head (`L:H` or `L:mean`, such as
    export.py's --alignment-head): an `AlignmentHead`, or its error rather than argparse's
    "invalid value"."""
    try:
        return AlignmentHead.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_data_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds --dataset, --source-lang, --target-lang, --vocab-size, --subword-model,
    --batch-tokens, --max-length, --bpe-dropout, --lowercase and --guided-alignment.

    The flags a fine-tuned run may take from its init run (the languages, the vocabulary's,
    --max-length) parse as None when not given; `data_config_from_args` leaves those to
    `DataConfig`'s defaults, which their help texts say.
    """
    group = parser.add_argument_group("data")
    group.add_argument(
        "--dataset",
        default="multi30k",
        help="'multi30k' (bundled, default), a TensorFlow Datasets translation builder "
        "such as 'wmt14_translate/de-en' or 'ted_hrlr_translate/pt_to_en', or "
        "'files:TRAIN_SRC,TRAIN_TGT[,VALID_SRC,VALID_TGT]' (UTF-8, one sentence per "
        "line, .gz accepted)",
    )
    group.add_argument("--source-lang", help=f"source language code (default: {DataConfig.source_lang})")
    group.add_argument("--target-lang", help=f"target language code (default: {DataConfig.target_lang})")
    group.add_argument(
        "--vocab-size",
        type=positive_int,
        default=None,
        help="shared subword vocabulary size (default: per model size and language pair, the paper's for base and "
        f"big: 37,000, and 32,000 for en-fr; {DEFAULT_VOCAB_SIZE:,} for tiny and small, and where no size is given; "
        "a run resumes with its own)",
    )
    group.add_argument(
        "--subword-model",
        choices=SUBWORD_MODELS,
        help="how the subword vocabulary is learned: byte-pair encoding (default) or "
        "sentencepiece's unigram language model",
    )
    group.add_argument(
        "--batch-tokens",
        # Not `batch_tokens`, which checks against the default --max-length, not the one given.
        type=positive_int,
        default=None,
        help="source (and target) tokens per batch across all replicas, padding "
        "included (default: chosen per model size)",
    )
    group.add_argument(
        "--max-length",
        type=positive_int,
        help="longest source or target sequence in ids, start/end included; longer "
        f"pairs are dropped and counted (default: {DEFAULT_MAX_LENGTH})",
    )
    group.add_argument(
        "--bpe-dropout",
        type=float_at_least(0),
        default=0.0,
        help="BPE-dropout for training batches: the probability of skipping each merge, "
        "giving each epoch a fresh segmentation (default: 0, off; 0.1 in Provilkov et al.)",
    )
    group.add_argument(
        "--lowercase",
        action="store_true",
        default=None,
        help="lowercase all text before it is segmented, in training and in the exported "
        "model, which then reads and writes lowercase (the published Multi30k baselines' "
        "preprocessing; default: keep case)",
    )
    group.add_argument(
        "--guided-alignment",
        metavar=f"FILE|{EFLOMAL}|{NO_ALIGNMENTS}",
        help="guided alignment training (Garg et al., 2019): gold word alignments of train, a file of one Pharaoh "
        "line ('0-0 1-2': source word i, target word j, from 0; words split at white space) per train line, or "
        f"'{EFLOMAL}' to align train with eflomal when the data is prepared (pip install -r "
        f"requirements-alignment.txt), or '{NO_ALIGNMENTS}'; stored with the prepared pairs (default, per size: "
        "tiny trains Multi30k en-de with its bundled alignments, data/multi30k/README.md; none otherwise)",
    )


def given_alignments(flag):
    """--guided-alignment's value as `DataConfig.alignments` takes it: None for NO_ALIGNMENTS
    ("none") or no value, else the value (a file, or EFLOMAL)."""
    if flag is None or flag.strip().lower() == NO_ALIGNMENTS:
        return None
    return flag


def data_config_from_args(args: argparse.Namespace) -> DataConfig:
    """The `DataConfig` for parsed flags, a flag that is None (not given) taking
    `DataConfig`'s default; raises `DataError` on impossible values."""
    values = dict(
        dataset=args.dataset,
        source_lang=args.source_lang,
        target_lang=args.target_lang,
        vocab_size=args.vocab_size,
        subword_model=args.subword_model,
        batch_tokens=args.batch_tokens,
        max_length=args.max_length,
        bpe_dropout=args.bpe_dropout,
        lowercase=args.lowercase,
        alignments=given_alignments(getattr(args, "guided_alignment", None)),
    )
    return DataConfig(**{field: value for field, value in values.items() if value is not None})


def add_decoding_arguments(
    parser: argparse.ArgumentParser,
    beam_size_help: str = "beams; 1 is greedy",
    alpha_chosen_by: str = None,
    max_extra_length_from: str = None,
):
    """--beam-size, --alpha and --max-extra-length, with the paper's values as defaults
    (`DecodingConfig`'s).

    `beam_size_help` says what --beam-size means to this command; the default is appended.
    `alpha_chosen_by`: for a command that chooses alpha itself when --alpha is not given
    (export.py, on validation), what it does, for the help; --alpha is then None by default.
    `max_extra_length_from`: the same for --max-extra-length (a SavedModel's own).
    """
    parser.add_argument(
        "--beam-size",
        type=positive_int,
        default=DecodingConfig.beam_size,
        help=f"{beam_size_help} (default {DecodingConfig.beam_size})",
    )
    parser.add_argument(
        "--alpha",
        type=float_at_least(0),
        default=None if alpha_chosen_by else DecodingConfig.alpha,
        help="length penalty exponent, GNMT's ((5 + length) / 6) ** alpha "
        f"(default {alpha_chosen_by or DecodingConfig.alpha})",
    )
    parser.add_argument(
        "--max-extra-length",
        type=positive_int,
        default=None if max_extra_length_from else DecodingConfig.max_extra_length,
        help="output length limit beyond the input's "
        f"(default {max_extra_length_from or DecodingConfig.max_extra_length})",
    )


def add_thread_arguments(parser, advice=None, decoding=False):
    """`--intra-op-threads` and `--inter-op-threads`: TensorFlow's two CPU thread pools
    (`cpu_threads_from_args`, `app.runtime.threads.CpuThreads`), each left to TensorFlow unless given, but
    for a `decoding` command's threads per op (app/runtime/decoding_threads.py). `advice`, if
    any, ends the first one's help: where to read which pool size suits the command."""
    intra_op_help = "threads one op may use on the CPU (default, 0: TensorFlow's choice, every core)"
    if decoding:
        intra_op_help = (
            "threads one op may use on the CPU (default: a quarter of the cores, at least 1, why: "
            "docs/serving.md#threads; 0: TensorFlow's choice, every core)"
        )
    parser.add_argument(
        "--intra-op-threads",
        type=int_at_least(0),
        metavar="N",
        help=f"{intra_op_help}; {advice}" if advice else intra_op_help,
    )
    parser.add_argument(
        "--inter-op-threads",
        type=int_at_least(0),
        metavar="N",
        help="ops run at once on the CPU (default, 0: TensorFlow's choice, one per core)",
    )


def cpu_threads_from_args(args, decoding=False):
    """The `CpuThreads` of `add_thread_arguments`' flags; a `decoding` command's ops get
    decoding's threads where --intra-op-threads is not given."""
    return CpuThreads(args.intra_op_threads, args.inter_op_threads, decoding)
