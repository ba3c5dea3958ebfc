"""Word alignments from the model's cross-attention: which source words each target word
translates, as Pharaoh links (`i-j`: source word i, target word j, both from 0).

    weights = alignment_weights(model, source_ids, target_ids, AlignmentHead(-2, None))  # [B, T, S]
    links = word_links(weights, source_words, target_words, source_counts, target_counts)  # bool [B, J, I]
    lines = pharaoh(links)                                                               # string [B]: "0-0 1-2"

The weights come from one teacher-forced pass over a given target, as forced decoding
reads it (app/decoding/forced.py), never from the search: the beam loop carries no
attention (as fairseq's SequenceGeneratorWithAlignment, which aligns its hypotheses the
same way afterwards), and the same code aligns a given translation. Row t is the position
that reads `decoder_inputs(target_ids)[t]` and predicts `target_ids[t]`: it aligns the
piece it predicts. One head (app/decoding/config.py's `AlignmentHead`) of one layer is
read, or the mean of the layer's heads, and the pass stops after that layer.

Pieces are lifted to words by data/words.py's rule (`piece_words`: in the graph,
data/tokenizer.py's): each target piece links to its most attended source piece that
belongs to a word (never the source's end token or padding), and a word links to the
words its pieces link to. A target word none of whose pieces were read (the target was
cut to the model's positions) copies the links of the nearest linked target word, the
preceding one first: every target word has a link whenever the source has a word.
app/decoding/word_links.py is this rule over one sentence in numpy, for the CTranslate2
version server, which imports no TensorFlow.

Dimension names: B batch, H heads, S source pieces, T target pieces, I source words,
J target words.
"""

import tensorflow as tf

from app.decoding.ensemble import Ensemble
from app.decoding.forced import decoder_inputs


def select_head(weights, head):
    """One head's attention, or the mean of all heads' where `head` is None.

    Args:
        weights: float `[B, H, T, S]`.
        head: a head's index, from 0, or None.

    Returns:
        float32 `[B, T, S]`.
    """
    weights = tf.cast(weights, tf.float32)  # [B, H, T, S]
    if head is None:
        return tf.reduce_mean(weights, axis=1)
    return weights[:, head]


def alignment_weights(model, source_ids, target_ids, head):
    """The cross-attention of `head` over a given target, from one teacher-forced pass.

    Args:
        model: an `app.model.transformer.Transformer` with its `ModelConfig`, or an
            `Ensemble`, whose first member is read: members may differ in layers and
            heads, and one member's pass costs one member.
        source_ids: int32 `[B, S]`, 0 = padding, each row ending with the end token.
        target_ids: int32 `[B, T]`, the target's pieces then the end token, no start
            token, 0 = padding (`app.decoding.forced.target_ids`).
        head: an `AlignmentHead`, resolved here against the model read.

    Returns:
        float32 `[B, T, S]`: row t, what the position predicting `target_ids[:, t]`
        attends to.

    Raises:
        ValueError naming a head the model does not have.
    """
    member = model.members[0] if isinstance(model, Ensemble) else model
    head = head.resolved(member.config.num_layers, member.config.num_heads)
    memory, memory_mask = member.encode(source_ids, training=False)  # [B, S, D], [B, 1, S]
    weights = member.cross_attention(
        decoder_inputs(target_ids), memory, memory_mask, head.layer, training=False
    )  # [B, H, T, S]
    return select_head(weights, head.head)


def _longest(counts):
    """int32 `[B]` -> int32 scalar: the largest, 0 for an empty batch."""
    return tf.reduce_max(tf.concat([tf.cast(counts, tf.int32), [0]], axis=0))


def word_links(weights, source_words, target_words, source_counts, target_counts):
    """Word alignments from piece attention.

    Args:
        weights: float `[B, T, S]`, from `alignment_weights`.
        source_words: int32 `[B, S]`, each source piece's word, -1 for none (the end
            token, padding, white space at the end).
        target_words: int32 `[B, T]`, each target piece's word, -1 for none (the end
            token, padding).
        source_counts, target_counts: int32 `[B]`, the words of each source and target;
            the words of the pieces are below them.

    Returns:
        bool `[B, J, I]`, J and I the largest counts: target word j is linked to source
        word i. Every target word j < its count has a link where its source has words.
    """
    weights = tf.cast(weights, tf.float32)  # [B, T, S]
    source_words = tf.cast(source_words, tf.int32)
    target_words = tf.cast(target_words, tf.int32)
    target_counts = tf.cast(target_counts, tf.int32)
    source_length, target_length = _longest(source_counts), _longest(target_counts)  # I, J

    # Each target piece's most attended source piece of a word.
    of_a_word = source_words >= 0  # [B, S]
    masked = tf.where(of_a_word[:, None, :], weights, float("-inf"))  # [B, T, S]
    chosen = tf.argmax(masked, axis=2, output_type=tf.int32)  # [B, T]
    # Where a row has no source word, the argmax falls on a piece of none: -1, no link.
    source_word = tf.gather(source_words, chosen, batch_dims=1)  # [B, T]
    # Lifted to words; one_hot of -1 is a row of zeros, so a piece without a word adds none.
    pieces_of_target_words = tf.one_hot(target_words, target_length)  # [B, T, J]
    chosen_source_words = tf.one_hot(source_word, source_length)  # [B, T, I]
    links = tf.einsum("btj,bti->bji", pieces_of_target_words, chosen_source_words) > 0  # [B, J, I]

    # A target word without links copies the nearest linked one's, the preceding first.
    # TensorFlow has no cumulative max: the nearest comes from [B, J, J] masks.
    linked = tf.reduce_any(links, axis=2)  # [B, J]
    j = tf.range(target_length)  # [J]
    at_or_before = linked[:, None, :] & (j[None, None, :] <= j[None, :, None])  # [B, J, J']: j' linked, j' <= j
    at_or_after = linked[:, None, :] & (j[None, None, :] >= j[None, :, None])  # [B, J, J']: j' linked, j' >= j
    preceding = tf.reduce_max(tf.where(at_or_before, j[None, None, :], -1), axis=2)  # [B, J]; -1: none
    following = tf.reduce_min(tf.where(at_or_after, j[None, None, :], target_length), axis=2)  # [B, J]; J: none
    source = tf.where(preceding >= 0, preceding, following)  # [B, J]: itself where linked
    real = (j[None, :] < target_counts[:, None]) & (source < target_length)  # [B, J]
    copied = tf.gather(links, tf.minimum(source, target_length - 1), batch_dims=1)  # [B, J, I]
    return copied & real[:, :, None]


def pharaoh(links):
    """Pharaoh lines of word links: `i-j` pairs by i, then j, separated by spaces.

    Args:
        links: bool `[B, J, I]`, from `word_links`.

    Returns:
        string `[B]`; "" for a sentence without links.
    """
    links = tf.convert_to_tensor(links, tf.bool)  # [B, J, I]
    batch_size = tf.shape(links, out_type=tf.int64)[0]
    # tf.where lists the true places in row-major order: by sentence, then i, then j.
    where = tf.where(tf.transpose(links, [0, 2, 1]))  # [L, 3]: (b, i, j)
    pairs = tf.strings.join([tf.strings.as_string(where[:, 1]), tf.strings.as_string(where[:, 2])], "-")  # [L]
    rows = tf.RaggedTensor.from_value_rowids(pairs, where[:, 0], nrows=batch_size)  # [B, None]
    return tf.strings.reduce_join(rows, axis=1, separator=" ")  # [B]
