"""Greedy decoding with the key/value cache, as one `tf.while_loop`.

Beam size 1: at each step take the most likely next token. Used for validation BLEU
during training, where it is several times cheaper than beam search and ranks
checkpoints the same way.
"""

import tensorflow as tf

from app.decoding.beam_search import longest_output, loose_shape
from app.decoding.incremental import IncrementalDecoder
from app.decoding.translate import output_lengths
from app.model.transformer import Transformer
from layers.special_tokens import END_ID, PAD_ID, START_ID


def greedy_decode(transformer: Transformer, source_ids, max_extra_length=50):
    """Translates a batch greedily.

    Args:
        transformer: the model's decoding view.
        source_ids: int32 `[B, S]`, 0 = padding.
        max_extra_length: each sentence stops at its source length + this many tokens,
            and never past the model's `max_length` positions.

    Returns:
        int32 `[B, L]`: the output tokens without the start token, each row ending with
        the end token (unless cut at its maximum length) and padded with 0 after it.
    """
    source_ids = tf.convert_to_tensor(source_ids, tf.int32)
    batch_size = tf.shape(source_ids)[0]
    # As beam search: within the model's positions, and 1 for an empty batch.
    max_lengths = output_lengths(transformer, source_ids, max_extra_length)  # [B]
    output_length = longest_output(max_lengths)  # L

    memory, memory_mask = transformer.encode(source_ids, training=False)
    decoder = IncrementalDecoder(transformer)  # reads the weights once, outside the loop
    memory_cache = decoder.memory(memory, memory_mask)
    vocab_size = transformer.config.vocab_size
    # Padding and the start token are never outputs.
    banned = tf.one_hot([PAD_ID, START_ID], vocab_size, on_value=-1e9, dtype=tf.float32)
    banned = tf.reduce_sum(banned, axis=0)  # [V]

    def body(step, tokens, outputs, finished, cache):
        logits, cache = decoder.step(tokens, step, cache, memory_cache)  # [B, V]
        next_tokens = tf.argmax(logits + banned, axis=-1, output_type=tf.int32)  # [B]
        # A sentence at its maximum length ends there.
        next_tokens = tf.where(step + 1 >= max_lengths, END_ID, next_tokens)
        next_tokens = tf.where(finished, PAD_ID, next_tokens)
        outputs = outputs + tf.one_hot(step, output_length, dtype=tf.int32)[None, :] * next_tokens[:, None]
        finished = finished | tf.equal(next_tokens, END_ID)
        return step + 1, next_tokens, outputs, finished, cache

    def keep_going(step, tokens, outputs, finished, cache):
        return tf.logical_and(step < output_length, tf.logical_not(tf.reduce_all(finished)))

    start = tf.fill([batch_size], START_ID)
    outputs = tf.zeros([batch_size, output_length], tf.int32)  # [B, L]
    finished = tf.zeros([batch_size], tf.bool)
    cache = decoder.empty_cache(batch_size)
    # The self-attention cache grows by a position a step (axis 2).
    cache_invariants = tf.nest.map_structure(loose_shape, cache)
    _, _, outputs, _, _ = tf.while_loop(
        keep_going, body, (tf.constant(0), start, outputs, finished, cache),
        shape_invariants=(
            tf.TensorShape([]), tf.TensorShape([None]), tf.TensorShape([None, None]), tf.TensorShape([None]),
            cache_invariants,
        ),
    )
    return outputs
