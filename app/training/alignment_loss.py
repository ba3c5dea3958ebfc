"""Guided alignment (Garg et al., 2019; OpenNMT-tf's `guided_alignment_type`): a loss
that draws one head of the decoder's cross-attention towards gold word alignments.

    attention = select_head(cross_weights[layer], head)             # [B, T, S]
    loss_sum = guided_alignment_sum(attention, gold, "ce")          # float32 scalar, summed

The gold is a 0/1 matrix per target position (data/shards.py assembles it: row t is the
position that predicts label t, column s a source piece). Each row is normalized to sum
to 1, so a target piece linked to two source pieces asks for half the attention on
each, as fairseq's alignment loss does (which is why the weight's default is Garg et al.'s
0.05 and not OpenNMT-tf's 1, whose rows are not normalized):

    ce:   -sum_s p_ts log(a_ts + 1e-6)          (OpenNMT-tf's epsilon)
    mse:  sum_s (a_ts - p_ts)^2, rows with a link only

with p = gold / max(links in the row, 1). A row without a link (the end token, padding,
an unaligned word, a pair whose links were dropped) adds 0. The sum is over rows and
sentences, divided by the global batch's target tokens by the caller as the translation
loss is (app/training/step.py), so that 1 replica and 8 give the same update.

Dimension names: B batch, T target positions, S source pieces.
"""

import tensorflow as tf

from app.training.guidance import COST_TYPES

# Added to the attention before the log: a gold link on a weight of exactly 0 (a masked
# position cannot have one, but a saturated softmax can) costs -log(1e-6), not infinity.
EPSILON = 1e-6


def guided_alignment_sum(attention, gold, cost_type="ce"):
    """The guided alignment loss of a batch, summed over its rows.

    Args:
        attention: float `[B, T, S]`, one head's (or a layer's mean) cross-attention,
            each row a distribution over the source pieces.
        gold: `[B, T, S]`, 1 where target position t's label is linked to source piece s,
            else 0 (any numeric dtype; data/shards.py's is uint8).
        cost_type: "ce" or "mse" (`COST_TYPES`).

    Returns:
        float32 scalar.
    """
    if cost_type not in COST_TYPES:
        raise ValueError(f"guided alignment type {cost_type!r}: expected one of {', '.join(COST_TYPES)}")
    attention = tf.cast(attention, tf.float32)  # [B, T, S]
    gold = tf.cast(gold, tf.float32)  # [B, T, S]
    links = tf.reduce_sum(gold, axis=-1, keepdims=True)  # [B, T, 1]
    target = gold / tf.maximum(links, 1.0)  # [B, T, S], each linked row sums to 1
    if cost_type == "ce":
        return -tf.reduce_sum(target * tf.math.log(attention + EPSILON))
    linked = tf.cast(links > 0, tf.float32)  # [B, T, 1]
    return tf.reduce_sum(tf.square(attention - target) * linked)
