"""Attention weights, collected from one forward pass and drawn as heatmaps.

`collect_attention` runs the model once with every attention layer returning its
weights; `sentence_attention` does so for one sentence and its translation (the model's,
or one given), with the subword pieces that label each axis; `plot_attention` draws a
grid of N layers (rows) by H heads (columns), and `write_attention_pictures` one PNG per
kind of attention (and per layer):

    encoder_self_attention.png      source pieces attending to source pieces     [N, H, S, S]
    decoder_self_attention.png      decoder inputs attending to earlier inputs   [N, H, T, T]
    encoder_decoder_attention.png   decoder positions attending to the source    [N, H, T, S]

The decoder reads `<s>` and the translation's pieces (T positions) and position t
predicts piece t + 1, the last one `</s>`: decoder self-attention is labeled with what
each position reads, encoder-decoder attention's rows with what each position predicts,
so its rows line up with the source words they translate. Colors run from 0 to 1 in
every panel, so heads compare at a glance.

matplotlib and TensorFlow are imported only inside the functions that need them.
Figures are `matplotlib.figure.Figure` objects saved through the Agg renderer, never
pyplot: no display, no global figure state.

Dimension names: B batch, N layers, H heads, S source length, T target length,
V vocabulary size.
"""

import dataclasses
import os

import numpy as np

from app.decoding.config import DecodingConfig
from app.visualization.output import prepare_output

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
