"""Pictures of a trained model: attention heatmaps for one sentence, and training curves.

    python -m app.pictures attention --model-dir runs/tiny-multi30k-en-de \\
        --sentence "A man in an orange hat starring at something." --output docs/attention
    python -m app.pictures attention --model-dir DIR --sentence "..." --target "..." --per-layer
    python -m app.pictures curves --model-dir runs/tiny-multi30k-en-de --output docs/curves.png

`attention` translates the sentence (beam search, as `app.evaluate` does; `--target`
gives the translation instead), runs the model once over the source and that
translation with every attention layer returning its weights, and writes one PNG per
kind of attention, a grid of N layers (rows) by H heads (columns):

    encoder_self_attention.png      source pieces attending to source pieces     [N, H, S, S]
    decoder_self_attention.png      decoder inputs attending to earlier inputs   [N, H, T, T]
    encoder_decoder_attention.png   decoder positions attending to the source    [N, H, T, S]

and with `--per-layer` one larger figure per kind and layer,
`encoder_self_attention_layer_1.png` ... (layers counted from 1, as in the paper's
"layer 5 of 6"; layer 1 is the Keras layer `encoder_layer_0`). Axes are labeled with the
subword pieces ("▁" starts a word). The decoder reads `<s>` and the translation's pieces
(T positions) and position t predicts piece t + 1, the last one `</s>`: decoder
self-attention is labeled with what each position reads, encoder-decoder attention's
rows with what each position predicts, so its rows line up with the source words they
translate. Colors run from 0 to 1 in every panel, so heads compare at a glance.

`curves` reads the run's `metrics.jsonl` and plots training and validation loss,
validation BLEU and the learning rate against the optimizer step.

Plotting needs matplotlib (in requirements.txt), imported only inside the drawing
functions, so nothing else in the project needs it. Figures are `matplotlib.figure.Figure`
objects saved through the Agg renderer, never pyplot: no display, no global figure state.

Dimension names: B batch, N layers, H heads, S source length, T target length,
V vocabulary size.
"""

import argparse
import dataclasses
import os
import sys
from typing import Optional

from app.cli.flags import add_decoding_arguments
from app.cli.model_source import add_weights_arguments, model_source_from_args
from app.decoding.config import DecodingConfig
from app.decoding.truncation import subwords_kept
from app.export.model_source import ModelSource
from app.runtime.quiet_tensorflow import import_tensorflow
from app.visualization.attention import sentence_attention, write_attention_pictures
from app.visualization.curves import plot_curves, read_metrics
from app.visualization.output import PicturesError, prepare_output


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m app.pictures", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)

    attention = commands.add_parser("attention", help="attention heatmaps for one sentence")
    attention.add_argument("--model-dir", required=True, help="a training run's directory")
    attention.add_argument("--sentence", required=True, help="the source sentence")
    attention.add_argument(
        "--target", help="show this translation instead of the model's own (default: the model's own)"
    )
    attention.add_argument("--output", help="directory for the PNGs (default: MODEL_DIR/pictures/attention)")
    attention.add_argument(
        "--per-layer", action="store_true", help="also one figure per kind and layer (default: one per kind)"
    )
    add_weights_arguments(attention)
    add_decoding_arguments(attention)

    curves = commands.add_parser("curves", help="training curves from metrics.jsonl")
    curves.add_argument("--model-dir", required=True, help="a training run's directory")
    curves.add_argument("--output", help="the PNG to write (default: MODEL_DIR/pictures/curves.png)")
    return parser.parse_args(argv)


@dataclasses.dataclass(frozen=True)
class AttentionPlan:
    """`attention`: the pictures of one sentence, as its flags describe them."""

    # The training run (--model-dir) and which of its weights (--checkpoint, --average-last).
    model: ModelSource
    # The source (--sentence), and the translation shown instead of the model's (--target), or None.
    sentence: str
    target: Optional[str]
    # The directory of the PNGs (--output; MODEL_DIR/pictures/attention by default), and
    # one figure per layer too (--per-layer).
    output: str
    per_layer: bool
    # How the sentence is translated where no --target is given.
    decoding: DecodingConfig


@dataclasses.dataclass(frozen=True)
class CurvesPlan:
    """`curves`: the training curves of a run."""

    # The training run whose metrics.jsonl is read (--model-dir).
    model_dir: str
    # The PNG written (--output; MODEL_DIR/pictures/curves.png by default).
    output: str


def plan_pictures(args):
    """The `AttentionPlan` or `CurvesPlan` of parsed app.pictures flags `args` (left as they are).

    Raises:
        PicturesError: an empty --sentence or --target, with nothing to attend over but
            the end token.
        FlagError: no model directory where --model-dir says (attention).
    """
    if args.command == "curves":
        return CurvesPlan(args.model_dir, args.output or os.path.join(args.model_dir, "pictures", "curves.png"))
    for flag, text in (("--sentence", args.sentence), ("--target", args.target)):
        if text is not None and not text.strip():
            raise PicturesError(f"{flag} is empty ({text!r}); give the text to draw")
    return AttentionPlan(
        model=model_source_from_args(args),
        sentence=args.sentence,
        target=args.target,
        output=args.output or os.path.join(args.model_dir, "pictures", "attention"),
        per_layer=args.per_layer,
        decoding=DecodingConfig(args.beam_size, args.alpha, args.max_extra_length),
    )


def run_attention(plan):
    from app.export.saved_model import ExportError

    prepare_output(plan.output, "directory")  # before the model loads
    try:
        translator, weights = plan.model.load_translator()
    except ExportError as error:  # no vocabulary, no checkpoint yet, ...
        raise PicturesError(str(error)) from error
    warn_if_truncated(translator, plan.sentence, plan.target)
    attention = sentence_attention(translator, plan.sentence, plan.target, plan.decoding)
    paths = write_attention_pictures(attention, plan.output, plan.per_layer)
    print(f"weights: {weights}")
    print(f"source:      {' '.join(attention.source_pieces)}")
    print(f"translation: {attention.translation}" + ("  (given by --target)" if plan.target is not None else ""))
    print("\n".join(f"wrote {path}" for path in paths))


def warn_if_truncated(translator, sentence, target):
    """Says on stderr when the pictures show only the start of a text: the model reads
    (and its decoder writes) at most its positions, as the exported model does."""
    import tensorflow as tf

    measured = translator.source_lengths(tf.constant([sentence]))
    length, limit = int(measured["lengths"][0]), int(measured["limit"])  # with the end token
    if length > limit:
        kept = subwords_kept(limit)
        print(f"warning: --sentence has {length - 1} subwords; the model reads its first {kept}", file=sys.stderr)
    if target is not None:
        pieces = int(translator.tokenizer.tokenize(tf.constant([target])).row_lengths()[0])
        if pieces > limit - 1:
            print(f"warning: --target has {pieces} subwords; the pictures show its first {limit - 1}", file=sys.stderr)


def run_curves(plan):
    prepare_output(plan.output, "file")
    path = os.path.join(plan.model_dir, "metrics.jsonl")
    plot_curves(read_metrics(path), plan.output, title=os.path.basename(os.path.normpath(plan.model_dir)))
    print(f"wrote {plan.output}")


def main(argv=None):
    args = parse_args(argv)
    import_tensorflow()
    try:
        plan = plan_pictures(args)
        if isinstance(plan, AttentionPlan):
            run_attention(plan)
        else:
            run_curves(plan)
    # DataError (a bad vocabulary file, ...) is a ValueError.
    except (PicturesError, FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
