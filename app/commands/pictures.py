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
import json
import os
import sys
from typing import Optional

import numpy as np

from app.cli.flags import add_decoding_arguments, add_weights_arguments
from app.cli.quiet_tensorflow import import_tensorflow
from app.decoding.config import DecodingConfig
from app.decoding.truncation import subwords_kept

# The three kinds of attention: file name, title, and which pieces label rows and columns.
ATTENTION_KINDS = {
    "encoder_self_attention": ("Encoder self-attention", "source_pieces", "source_pieces"),
    "decoder_self_attention": ("Decoder self-attention", "target_pieces", "target_pieces"),
    "encoder_decoder_attention": ("Encoder-decoder attention", "predicted_pieces", "source_pieces"),
}
AXIS_NAMES = {
    "source_pieces": "source",
    "target_pieces": "decoder input",
    "predicted_pieces": "predicted piece",
}
# The curves, by metrics.jsonl key (see app/training/metrics_log.py): (panel, legend label). Panels
# appear in this order. Both losses are label-smoothed, so they compare.
CURVES = {
    "loss": ("loss per target token (label-smoothed cross-entropy)", "training"),
    "valid_loss": ("loss per target token (label-smoothed cross-entropy)", "validation"),
    "bleu": ("validation BLEU (greedy decoding, sacreBLEU)", None),
    "learning_rate": ("learning rate", None),
}
# Recorded at evaluations only, a few points: each gets a marker.
EVALUATION_KEYS = ("valid_loss", "bleu")


class PicturesError(ValueError):
    pass


# Attention weights.


@dataclasses.dataclass(frozen=True)
class Attention:
    """Every attention layer's weights from one forward pass, and its logits.

    Each list has one array per layer, first layer first; weights are float32 numpy
    arrays, a row per query position (summing to 1), a column per key position.
    """

    encoder: list  # N x [B, H, S, S]
    decoder: list  # N x [B, H, T, T]
    cross: list  # N x [B, H, T, S]
    logits: np.ndarray  # [B, T, V]


def collect_attention(transformer, source_ids, target_ids):
    """Runs the whole model once (inference: no dropout) and keeps every attention weight.

    The same layers and code path as the model's forward pass (`Transformer.encode` and
    `Transformer.decode`), asked to return the weights their attention layers computed,
    so the logits are the model's own.

    Args:
        transformer: an `app.model.transformer.Transformer`.
        source_ids: int32 `[B, S]`, 0 = padding, the end token last.
        target_ids: int32 `[B, T]`, the decoder input: the start token, then the target.

    Returns:
        An `Attention`.
    """
    import tensorflow as tf

    source_ids = tf.convert_to_tensor(source_ids, tf.int32)
    target_ids = tf.convert_to_tensor(target_ids, tf.int32)
    memory, memory_mask, encoder = transformer.encode(source_ids, training=False, return_attention_scores=True)
    logits, decoder, cross = transformer.decode(
        target_ids, memory, memory_mask, training=False, return_attention_scores=True
    )

    def numpy(weights):
        return [np.array(w, dtype=np.float32) for w in weights]

    return Attention(numpy(encoder), numpy(decoder), numpy(cross), np.array(logits))


@dataclasses.dataclass(frozen=True)
class SentenceAttention:
    """One sentence, its translation and the model's attention over them."""

    sentence: str
    translation: str
    source_ids: list  # S ids: the sentence's pieces, then the end token
    target_ids: list  # T ids: the start token, then the translation's pieces
    source_pieces: list  # S pieces of source_ids
    target_pieces: list  # T pieces of target_ids (what each decoder position reads)
    predicted_pieces: list  # T pieces: target_pieces[1:], then "</s>" (what each position predicts)
    encoder_self_attention: np.ndarray  # float32 [N, H, S, S]
    decoder_self_attention: np.ndarray  # float32 [N, H, T, T]
    encoder_decoder_attention: np.ndarray  # float32 [N, H, T, S]


def sentence_attention(translator, sentence, target=None, decoding=None):
    """Translates `sentence` and collects the attention over it and its translation.

    Args:
        translator: an `app.export.saved_model.Translator` (tokenizer and model).
        sentence: raw source text.
        target: raw target text to show instead of the model's translation (e.g. the
            reference); None translates.
        decoding: an `app.decoding.config.DecodingConfig`; None is the paper's beam 4, alpha 0.6.

    Returns:
        A `SentenceAttention`.
    """
    import sentencepiece
    import tensorflow as tf

    from app.decoding.model_search import translate_ids
    from layers.special_tokens import END_ID, PAD_ID, START_ID

    decoding = decoding or DecodingConfig()
    tokenizer = translator.tokenizer
    transformer = translator.transformer
    # Truncated to the model's positions and ended, exactly as the exported model does.
    source_ids = translator.source_ids(tf.constant([sentence]))  # [1, S]
    if target is None:
        # Only the best is drawn: the search may stop once it is final (beam_search).
        ids, _ = translate_ids(
            transformer, source_ids, decoding.beam_size, decoding.alpha, decoding.max_extra_length, final_results=1
        )  # [1, K, L], best first
        output = ids[0, 0].numpy().tolist()
        output = output[: output.index(END_ID)] if END_ID in output else [i for i in output if i != PAD_ID]
    else:
        # The decoder has max_length positions, the start token among them.
        output = tokenizer.tokenize(tf.constant([target]))[0].numpy().tolist()
        output = output[: transformer.config.max_length - 1]
    target_ids = [START_ID] + output  # [T]
    attention = collect_attention(transformer, source_ids, [target_ids])

    processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.model_proto)

    def pieces(ids):
        return [processor.id_to_piece(int(i)) for i in ids]

    def stacked(weights):
        return np.stack([w[0] for w in weights])  # [N, H, rows, columns]

    source_list = source_ids[0].numpy().tolist()
    return SentenceAttention(
        sentence=sentence,
        translation=tokenizer.detokenize([output + [END_ID]])[0].numpy().decode("utf-8"),
        source_ids=source_list,
        target_ids=target_ids,
        source_pieces=pieces(source_list),
        target_pieces=pieces(target_ids),
        predicted_pieces=pieces(output + [END_ID]),
        encoder_self_attention=stacked(attention.encoder),
        decoder_self_attention=stacked(attention.decoder),
        encoder_decoder_attention=stacked(attention.cross),
    )


def plot_attention(weights, row_labels, column_labels, path, title, row_axis, column_axis, first_layer=1):
    """Draws a grid of heatmaps, one row per layer and one column per head, to a PNG.

    Args:
        weights: `[N, H, rows, columns]`, each row of each panel summing to 1.
        row_labels, column_labels: the pieces along each panel's rows and columns.
        path: the PNG to write.
        title: the figure's title.
        row_axis, column_axis: what the rows and columns are ("source", ...).
        first_layer: the number of the first row's layer, counted from 1.
    """
    from matplotlib.figure import Figure

    num_layers, num_heads, rows, columns = weights.shape
    if (rows, columns) != (len(row_labels), len(column_labels)):
        raise ValueError(
            f"weights of {rows} x {columns} positions, but {len(row_labels)} x {len(column_labels)} labels"
        )
    # About a sixth of an inch per piece, so the 7-point labels never overlap; the
    # constants leave room for labels, titles and the color bar.
    panel_width, panel_height = max(1.8, 0.17 * columns), max(1.8, 0.17 * rows)
    figure = Figure(
        figsize=(1.5 + num_heads * (panel_width + 0.3), 1.5 + num_layers * (panel_height + 0.3)),
        layout="constrained",
    )
    axes = figure.subplots(num_layers, num_heads, squeeze=False, sharex=True, sharey=True)
    for layer in range(num_layers):
        for head in range(num_heads):
            ax = axes[layer, head]
            image = ax.imshow(
                weights[layer, head], cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest"
            )
            ax.set_xticks(range(columns), column_labels, rotation=90, fontsize=7)
            ax.set_yticks(range(rows), row_labels, fontsize=7)
            ax.tick_params(length=0, labelbottom=layer == num_layers - 1, labelleft=head == 0)
            if layer == 0:
                ax.set_title(f"head {head + 1}", fontsize=9)
            if head == 0:
                ax.set_ylabel(f"layer {first_layer + layer}\n{row_axis}", fontsize=9)
            if layer == num_layers - 1:
                ax.set_xlabel(column_axis, fontsize=9)
    figure.colorbar(image, ax=axes, shrink=1.0 if num_layers < 3 else 0.5, label="weight")
    figure.suptitle(title, fontsize=10)
    figure.savefig(path, dpi=120)


def write_attention_pictures(attention: SentenceAttention, output_dir, per_layer=False):
    """Writes the PNGs of `attention` into `output_dir` (created); returns their paths."""
    prepare_output(output_dir, "directory")
    caption = f"{attention.sentence}  \u2192  {attention.translation}"
    paths = []
    for kind, (title, rows, columns) in ATTENTION_KINDS.items():
        weights = getattr(attention, kind)  # [N, H, rows, columns]
        labels = dict(
            row_labels=getattr(attention, rows),
            column_labels=getattr(attention, columns),
            row_axis=AXIS_NAMES[rows],
            column_axis=AXIS_NAMES[columns],
        )
        path = os.path.join(output_dir, f"{kind}.png")
        plot_attention(weights, path=path, title=f"{title}\n{caption}", **labels)
        paths.append(path)
        if per_layer:
            num_layers = weights.shape[0]
            for layer in range(num_layers):
                path = os.path.join(output_dir, f"{kind}_layer_{layer + 1}.png")
                layer_title = f"{title}, layer {layer + 1} of {num_layers}\n{caption}"
                plot_attention(
                    weights[layer : layer + 1], path=path, title=layer_title, first_layer=layer + 1, **labels
                )
                paths.append(path)
    return paths


# Training curves.


def read_metrics(path):
    """The records of a `metrics.jsonl` written by `app.training.metrics_log`, in file order.

    A last line without its newline is skipped if it does not parse: training is
    writing it right now (the file is read while a run goes on).

    Raises:
        PicturesError: naming the file, if it is missing, empty or not JSON lines of
            objects that each have a "step".
    """
    if not os.path.isfile(path):
        raise PicturesError(f"{path} not found: no metrics yet (training writes it every --log-every steps)")
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    records = []
    for number, raw in enumerate(lines, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise PicturesError(f"{path} line {number} is not UTF-8 ({error.reason} at byte {error.start})") from None
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            if number == len(lines):  # the unfinished last line
                continue
            raise PicturesError(f"{path} line {number} is not JSON ({error.msg}): {line[:80]!r}") from None
        step = record.get("step") if isinstance(record, dict) else None
        if not isinstance(step, int) or isinstance(step, bool):
            raise PicturesError(f"{path} line {number} is not a record with an integer \"step\": {line[:80]!r}")
        records.append(record)
    if not records:
        raise PicturesError(f"{path} is empty: no metrics recorded yet")
    return records


def curve_series(records):
    """`{key: (steps, values)}` for every key of `CURVES` that the records hold.

    Steps are sorted and each appears once, with its last recorded value: a run that
    resumes from a checkpoint repeats the steps it had logged after that checkpoint, and
    the later records are the ones its weights descend from.
    """
    series = {}
    for key in CURVES:
        by_step = {}
        for record in records:
            value = record.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                by_step[record["step"]] = float(value)
        if by_step:
            steps = sorted(by_step)
            series[key] = (np.array(steps), np.array([by_step[s] for s in steps]))
    return series


def plot_curves(records, path, title=""):
    """Draws one panel per quantity of `CURVES` that `records` hold, against the step.

    Raises:
        PicturesError: if the records hold none of them.
    """
    from matplotlib.figure import Figure

    series = curve_series(records)
    if not series:
        raise PicturesError(f"no curves to draw: the records have none of {', '.join(CURVES)}")
    panels = list(dict.fromkeys(CURVES[key][0] for key in series))
    figure = Figure(figsize=(7.0, 2.4 * len(panels) + 0.6), layout="constrained")
    axes = figure.subplots(len(panels), 1, squeeze=False, sharex=True)[:, 0]
    for key, (steps, values) in series.items():
        panel, label = CURVES[key]
        ax = axes[panels.index(panel)]
        marker = "o" if key in EVALUATION_KEYS else None
        ax.plot(steps, values, marker=marker, markersize=3, label=label)
        ax.set_title(panel, loc="left", fontsize=9)
        ax.grid(True, alpha=0.3)
        if label:
            ax.legend(fontsize=8)
    axes[-1].set_xlabel("step")
    figure.suptitle(title, fontsize=10)
    prepare_output(path, "file")
    # format given: a name without ".png" is written as named, not with ".png" appended.
    figure.savefig(path, dpi=120, format="png")
    return path


def prepare_output(path, kind):
    """Makes sure `path` can be written as a `kind` ("file" or "directory"), creating the
    directories it needs; PicturesError naming it otherwise. Called before the slow work."""
    if kind == "file" and os.path.isdir(path):
        raise PicturesError(f"--output {path} is a directory; name the PNG file to write")
    if kind == "directory" and os.path.exists(path) and not os.path.isdir(path):
        raise PicturesError(f"--output {path} is a file; name a directory for the PNGs")
    directory = path if kind == "directory" else os.path.dirname(path)
    try:
        if directory:
            os.makedirs(directory, exist_ok=True)
    except OSError as error:
        raise PicturesError(f"--output {path}: cannot create {directory} ({error.strerror})") from None


# Command line.


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

    # The training run (--model-dir) and which of its weights (--checkpoint,
    # --average-last; None: as its settings.json says).
    model_dir: str
    checkpoint: Optional[str]
    average_last: Optional[int]
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
    """
    if args.command == "curves":
        return CurvesPlan(args.model_dir, args.output or os.path.join(args.model_dir, "pictures", "curves.png"))
    for flag, text in (("--sentence", args.sentence), ("--target", args.target)):
        if text is not None and not text.strip():
            raise PicturesError(f"{flag} is empty ({text!r}); give the text to draw")
    return AttentionPlan(
        model_dir=args.model_dir,
        checkpoint=args.checkpoint,
        average_last=args.average_last,
        sentence=args.sentence,
        target=args.target,
        output=args.output or os.path.join(args.model_dir, "pictures", "attention"),
        per_layer=args.per_layer,
        decoding=DecodingConfig(args.beam_size, args.alpha, args.max_extra_length),
    )


def run_attention(plan):
    from app.export.saved_model import ExportError, load_translator

    prepare_output(plan.output, "directory")  # before the model loads
    try:
        translator, weights = load_translator(plan.model_dir, plan.checkpoint, plan.average_last)
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
