"""Forced decoding: the log-probability the model gives a given translation of a source.

    transformer = Transformer(model, config)
    ids, cut = target_ids(tokenizer.tokenize(targets), config.max_length)   # [B, T], [B]
    token_log_probs, log_probs = forced_log_probs(transformer, source_ids, ids)  # [B, T], [B]

One teacher-forced pass of the decoder, as in training: the decoder reads the start token
and the target shifted right, and each position's natural-log softmax is read at the
target token there. No label smoothing, no length penalty: `log_probs` is the sum of
log P(token | source, earlier tokens) over the target's tokens and its end token, the
score beam search gives the same hypothesis at alpha 0 (both normalize over the whole
vocabulary; beam search masks tokens only after normalizing).

Positions: the decoder has `max_length` of them, so a target is scored on at most that
many tokens, end token included. `target_ids` cuts a longer one to its first
`max_length` tokens and says so: those tokens' log-probs are exactly the ones of the
whole target (each position reads only earlier ones), the rest and the end token are
not scored. Sources are cut by the caller as for translation
(`app.export.saved_model.Translator.source_ids`).

Dimension names: B batch, S source length, T target length (end token included),
V vocabulary size.
"""

import tensorflow as tf

from app.decoding.ensemble import Ensemble
from app.model.transformer import Transformer
from layers.special_tokens import END_ID, PAD_ID, START_ID


def target_ids(tokens, max_length):
    """The tokenizer's subwords of each target, with the end token, cut to `max_length`.

    Args:
        tokens: int32 RaggedTensor `[B, None]`, no start or end token.
        max_length: the model's positions (`ModelConfig.max_length`), a Python int.

    Returns:
        `(ids int32 [B, T], cut bool [B])`: tokens then the end token, 0-padded, at most
        `max_length` columns; `cut` where a target had more (it lost its tail and its
        end token).
    """
    end = tf.fill([tokens.nrows(), 1], tf.constant(END_ID, tokens.dtype))  # [B, 1]
    with_end = tf.concat([tokens, tf.RaggedTensor.from_tensor(end)], axis=1)  # [B, None]
    cut = with_end.row_lengths() > max_length  # [B]
    return tf.cast(with_end[:, :max_length].to_tensor(), tf.int32), cut


def decoder_inputs(target_ids):
    """int32 `[B, T]` -> int32 `[B, T]`: the start token, then the target shifted right.

    Position t reads the target's token t - 1 and predicts token t. At a padded row's
    first padding position the input is its end token; that position's output is
    padding and is not scored.
    """
    start = tf.fill([tf.shape(target_ids)[0], 1], START_ID)  # [B, 1]
    # Concatenated then cut, so that an empty [B, 0] target stays [B, 0].
    return tf.concat([start, target_ids], axis=1)[:, :-1]  # [B, T]


def forced_log_probs(transformer: Transformer | Ensemble, source_ids, target_ids):
    """Each target token's log-probability given the source and the earlier tokens.

    Args:
        transformer: the model's decoding view (its configuration names the positions),
            or an `Ensemble`: each token's log of the mean of the members' probabilities
            (its `decode` gives them normalized, which log_softmax leaves as they are).
        source_ids: int32 `[B, S]`, 0 = padding, each row ending with the end token;
            S at most the model's `max_length`.
        target_ids: int32 `[B, T]`, the target's tokens then the end token (no start
            token), 0 = padding; T at most the model's `max_length` (`target_ids`).

    Returns:
        `(token_log_probs float32 [B, T], log_probs float32 [B])`: natural logs, 0 at
        padding, and their sum over each row.
    """
    source_ids = tf.convert_to_tensor(source_ids, tf.int32)  # [B, S]
    target_ids = tf.convert_to_tensor(target_ids, tf.int32)  # [B, T]
    max_length = transformer.config.max_length
    # A learned position table has no row past its end (on a GPU, reading one gives
    # zeros rather than an error): refused, naming the lengths.
    checks = [
        tf.debugging.assert_less_equal(
            tf.shape(ids)[1], max_length, message=f"{name} longer than the model's {max_length} positions"
        )
        for name, ids in (("source_ids", source_ids), ("target_ids", target_ids))
    ]
    with tf.control_dependencies(checks):
        source_ids = tf.identity(source_ids)
    memory, memory_mask = transformer.encode(source_ids, training=False)  # [B, S, D], [B, 1, S]
    logits = transformer.decode(decoder_inputs(target_ids), memory, memory_mask, training=False)  # [B, T, V]
    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32))  # [B, T, V]
    token_log_probs = tf.gather(log_probs, target_ids, batch_dims=2)  # [B, T]
    token_log_probs = tf.where(target_ids != PAD_ID, token_log_probs, 0.0)  # [B, T]
    return token_log_probs, tf.reduce_sum(token_log_probs, axis=1)
