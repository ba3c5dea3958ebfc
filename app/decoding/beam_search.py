"""Beam search over any `symbols_to_logits_fn`, as one static-shaped `tf.while_loop`.

    ids, scores = beam_search(symbols_to_logits_fn, initial_ids, initial_cache,
                              vocab_size, max_lengths=max_lengths, beam_size=4, alpha=0.6)

Only core TensorFlow ops and fixed-size tensors, so it runs eagerly and inside a
`tf.function` exported to a SavedModel. The model is seen only through
`symbols_to_logits_fn(ids, step, cache) -> (logits, cache)`, so tests drive it with a
fake function whose answer is known by hand.

Dimension names: B batch, K beam size, V vocabulary size, L the most output tokens
(the largest of `max_lengths`); the token buffers hold L + 1 positions, the start token
at position 0.

The search (Flax `examples/wmt` decode.py, with fairseq's rule for what may finish):
- Each step extends the K live beams of every sentence by every token and keeps the
  2 x K most likely candidates. At most K of them end (one end token per live beam), so
  the best K that do not end always exist: they are the new live beams, and finishing
  beams never starve the live set.
- The candidates among the top K that end with the end token are the ones a plain beam
  of width K would have finished; they join a pool of the K best finished hypotheses,
  ranked by score. (Taking every ending candidate of the 2 x K, as Flax does, would let
  a beam of width 1 finish a hypothesis greedy decoding never picked.)
- Score = sum of log-probs / ((5 + length) / 6) ** alpha, the GNMT length penalty,
  where length counts the output tokens *including* the end token.
- A sentence is done once no live beam can beat its worst finished hypothesis: the best
  a live beam can still reach is its log-prob (log-probs only fall) divided by the
  largest penalty it may still get, at its shortest or longest possible length (the
  penalty is monotonic in the length for any alpha), or once it has no real live beam
  left (all were forced to end). Once done, nothing can enter its pool, so the loop
  may run on for the rest of the batch without changing its result.
  The loop ends when every sentence is done, or after L steps.
- A hypothesis that reaches its sentence's `max_lengths` must end: every other token is
  masked. Padding and the start token are never outputs.
"""

import math
import typing

import tensorflow as tf

from data.special_tokens import END_ID, PAD_ID, START_ID
from layers.multi_head_attention import large_negative

# Stands in for -inf (log 0): finite, so sums and products of it never make NaN. The
# search runs in float32 whatever the model's dtype (logits are cast first).
NEG = large_negative("float32")
# The largest finite float32, where `length_penalty` overflows (`largest_alpha`).
FLOAT32_MAX = tf.float32.max


class BeamState(typing.NamedTuple):
    """The `tf.while_loop` state."""

    # int32 []: buffer position of the newest token of the live beams (0 = start token).
    step: tf.Tensor
    # int32 [B, K, L + 1]: the live beams: start token, then `step` tokens, then 0.
    live_ids: tf.Tensor
    # float32 [B, K]: sum of the live beams' log-probs, best first; <= NEG / 2 for a slot
    # that holds no real hypothesis (it went through a masked token).
    live_log_probs: tf.Tensor
    # Nested tensors [B * K, ...]: the model's cache for the live beams.
    cache: typing.Any
    # int32 [B, K, L + 1]: the finished hypotheses: start token, tokens, end token, 0.
    finished_ids: tf.Tensor
    # float32 [B, K]: their length-normalized scores, best first; NEG in empty slots.
    finished_scores: tf.Tensor
    # bool [B, K]: whether each finished slot holds a hypothesis.
    finished_flags: tf.Tensor


# Shape helpers.


def shape_list(x):
    """The shape of `x` as a list: Python ints where static, scalar tensors elsewhere."""
    static = x.shape.as_list()
    dynamic = tf.shape(x)
    return [dim if dim is not None else dynamic[i] for i, dim in enumerate(static)]


def expand_to_beam_size(x, beam_size):
    """`[B, ...]` -> `[B, K, ...]`, each sentence's entry repeated K times."""
    multiples = [1, beam_size] + [1] * (x.shape.rank - 1)
    return tf.tile(tf.expand_dims(x, 1), multiples)  # [B, K, ...]


def flatten_beam_dim(x):
    """`[B, K, ...]` -> `[B * K, ...]`, the layout the model sees (sentence-major)."""
    shape = shape_list(x)
    return tf.reshape(x, [shape[0] * shape[1]] + shape[2:])  # [B * K, ...]


def unflatten_beam_dim(x, batch_size, beam_size):
    """`[B * K, ...]` -> `[B, K, ...]`, the inverse of `flatten_beam_dim`."""
    return tf.reshape(x, [batch_size, beam_size] + shape_list(x)[1:])  # [B, K, ...]


def gather_beams(nested, beam_indices):
    """Picks beams: every tensor `[B, N, ...]` in `nested` -> `[B, M, ...]`.

    Args:
        nested: a nested structure of tensors with the batch on axis 0, beams on axis 1.
        beam_indices: int32 `[B, M]`, values in `[0, N)`.
    """
    return tf.nest.map_structure(lambda x: tf.gather(x, beam_indices, batch_dims=1), nested)


def gather_topk_beams(nested, scores, k):
    """The `k` beams of highest `scores` `[B, N]`, best first: `[B, N, ...]` -> `[B, k, ...]`.

    Ties go to the lower index (`tf.math.top_k` is stable).
    """
    _, indices = tf.math.top_k(scores, k=k)  # [B, k]
    return gather_beams(nested, indices)


def length_penalty(length, alpha):
    """GNMT length penalty `((5 + length) / 6) ** alpha`, float32, `length` in tokens."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


def largest_alpha(max_length):
    """The largest alpha, to two decimals, whose `length_penalty` of `max_length` tokens
    is finite in float32 (inf for one token, whose penalty is 1 at any alpha).

    Past it the penalty of the longest outputs overflows to inf, every such hypothesis
    scores -0.0, and beam search ranks them by their order, not their log-probability.
    Rounded down, so that float32's rounding of the power cannot overflow at the limit:
    a step of 0.01 in alpha moves the penalty's logarithm by at least 0.01 * log(7/6).
    """
    if max_length <= 1:
        return math.inf
    exact = math.log(FLOAT32_MAX) / math.log((5.0 + max_length) / 6.0)
    return math.floor(exact * 100.0) / 100.0


def _loose_shape(x):
    """A `tf.while_loop` shape invariant that lets every axis but the last change."""
    return tf.TensorShape([None] * (x.shape.rank - 1) + x.shape[-1:].as_list())


# The search.


def longest_output(max_lengths):
    """L, the largest of `max_lengths` (int32 `[B]`), as long as the decoding cache must be.
    An empty batch (B = 0), whose reduce_max would be int32's minimum, gets 1."""
    return tf.reduce_max(tf.concat([max_lengths, [1]], axis=0))


def beam_search(
    symbols_to_logits_fn,
    initial_ids,
    initial_cache,
    vocab_size,
    *,
    max_lengths,
    beam_size=4,
    alpha=0.6,
    end_id=END_ID,
    pad_id=PAD_ID,
    start_id=START_ID,
):
    """Finds the K best output sequences of every sentence.

    Args:
        symbols_to_logits_fn: `(ids, step, cache) -> (logits, new_cache)`. `ids` is int32
            `[B * K, L + 1]`, the whole buffer of tokens so far (position 0 = start
            token, positions <= `step` filled, the rest 0); `step` the int32 scalar
            position of the newest token; `logits` `[B * K, V]` (any float dtype) are for
            position `step + 1`. `cache` has `B * K` on axis 0 of every tensor.
        initial_ids: int32 `[B]`, the start token of each sentence.
        initial_cache: nested tensors with the batch `B` on axis 0; tiled K times here.
        vocab_size: V, a Python int.
        max_lengths: int32 `[B]` (or a scalar for all): the most output tokens of each
            sentence, end token included, >= 1. A hypothesis of that length ends there.
        beam_size: K, a Python int >= 1.
        alpha: the length-penalty exponent, float32 `[B]` (or a scalar for all, which
            may be a Python float); 0 ranks by plain log-probability.
        end_id, pad_id, start_id: the special token ids.

    Returns:
        `(ids, scores)`: ids int32 `[B, K, L]`, the output tokens without the start
        token, each row ending with the end token and padded with 0 after it; scores
        float32 `[B, K]`, the sum of the tokens' log-probs divided by
        `length_penalty(number of tokens including the end token, alpha)`. Sorted best
        first. A sentence that finished nothing (impossible while `max_lengths` forces
        an end) returns its live beams, scored at their length, without end tokens. A
        slot for which no hypothesis exists (fewer than K possible sequences, e.g.
        `max_lengths` 1) holds zeros and score NEG.
    """
    if not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"beam_size must be a positive Python int, got {beam_size!r}")
    if not isinstance(vocab_size, int) or vocab_size < 2:
        raise ValueError(f"vocab_size must be a Python int >= 2, got {vocab_size!r}")
    k = beam_size
    initial_ids = tf.convert_to_tensor(initial_ids, tf.int32)  # [B]
    batch_size = shape_list(initial_ids)[0]
    max_lengths = tf.broadcast_to(tf.convert_to_tensor(max_lengths, tf.int32), tf.shape(initial_ids))  # [B]
    max_output_length = longest_output(max_lengths)  # L
    # Per sentence, like the maximum lengths, so one batch can mix decoding settings.
    alpha = tf.broadcast_to(tf.cast(alpha, tf.float32), tf.shape(initial_ids))  # [B]

    # Padding and the start token are never outputs; at its maximum length, only the end.
    vocabulary = tf.range(vocab_size)  # [V]
    allowed_tokens = (vocabulary != pad_id) & (vocabulary != start_id)  # [V]
    is_end_token = tf.equal(vocabulary, end_id)  # [V]

    def continuation_log_probs(logits, step):
        """Log-probs `[B, K, V]` of the token at position `step + 1`, masked tokens NEG."""
        log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32))  # [B * K, V]
        log_probs = unflatten_beam_dim(log_probs, batch_size, k)  # [B, K, V]
        must_end = step + 1 >= max_lengths  # [B]: the next token is the last allowed
        allowed = allowed_tokens & (is_end_token | ~must_end[:, None])  # [B, V]
        return tf.where(allowed[:, None, :], log_probs, NEG)  # [B, K, V]

    def body(state):
        step = state.step

        # Score every continuation of every live beam, keep the 2K best of each sentence.
        logits, cache = symbols_to_logits_fn(flatten_beam_dim(state.live_ids), step, state.cache)
        log_probs = continuation_log_probs(logits, step)  # [B, K, V]
        candidate_log_probs = state.live_log_probs[:, :, None] + log_probs  # [B, K, V]
        candidate_log_probs = tf.reshape(candidate_log_probs, [batch_size, k * vocab_size])  # [B, K * V]
        topk_log_probs, topk_indices = tf.math.top_k(candidate_log_probs, k=2 * k)  # [B, 2K]
        topk_beams = topk_indices // vocab_size  # [B, 2K]: the live beam each extends
        topk_tokens = topk_indices % vocab_size  # [B, 2K]
        topk_ids = gather_beams(state.live_ids, topk_beams)  # [B, 2K, L + 1]
        # Positions after `step` are 0, so adding writes the new token at step + 1.
        new_position = tf.one_hot(step + 1, max_output_length + 1, dtype=tf.int32)  # [L + 1]
        topk_ids += topk_tokens[:, :, None] * new_position  # [B, 2K, L + 1]
        topk_ends = tf.equal(topk_tokens, end_id)  # [B, 2K]

        # Live: the K best candidates that do not end.
        live_scores = topk_log_probs + NEG * tf.cast(topk_ends, tf.float32)  # [B, 2K]
        live_log_probs, live_positions = tf.math.top_k(live_scores, k=k)  # [B, K]
        live_ids = gather_beams(topk_ids, live_positions)  # [B, K, L + 1]
        # Each new live beam's cache is that of the beam it extends.
        source_beams = tf.gather(topk_beams, live_positions, batch_dims=1)  # [B, K]
        cache = tf.nest.map_structure(
            lambda x: flatten_beam_dim(  # [B * K, ...]
                gather_beams(unflatten_beam_dim(x, batch_size, k), source_beams)  # [B, K, ...]
            ),
            cache,
        )

        # Finished: the real candidates among the top K that end join the pool of K.
        new_flags = topk_ends[:, :k] & (topk_log_probs[:, :k] > NEG / 2)  # [B, K]
        new_scores = topk_log_probs[:, :k] / length_penalty(step + 1, alpha)[:, None]  # [B, K]
        new_scores = tf.where(new_flags, new_scores, NEG)  # [B, K]
        # The old pool comes first, so on a tie it stays (top_k is stable).
        pool_scores = tf.concat([state.finished_scores, new_scores], axis=1)  # [B, 2K]
        pool_ids = tf.concat([state.finished_ids, topk_ids[:, :k]], axis=1)  # [B, 2K, L + 1]
        pool_flags = tf.concat([state.finished_flags, new_flags], axis=1)  # [B, 2K]
        finished_scores, finished_ids, finished_flags = gather_topk_beams(
            (pool_scores, pool_ids, pool_flags), pool_scores, k
        )  # [B, K], [B, K, L + 1], [B, K]

        return (
            BeamState(
                step=step + 1,
                live_ids=live_ids,
                live_log_probs=live_log_probs,
                cache=cache,
                finished_ids=finished_ids,
                finished_scores=finished_scores,
                finished_flags=finished_flags,
            ),
        )

    def keep_going(state):
        # A live beam of `step` tokens ends with between step + 1 and max_lengths tokens.
        largest_penalty = tf.maximum(
            length_penalty(state.step + 1, alpha), length_penalty(max_lengths, alpha)
        )  # [B]
        best_live_scores = state.live_log_probs[:, 0] / largest_penalty  # [B]
        worst_finished_scores = tf.reduce_min(
            tf.where(state.finished_flags, state.finished_scores, NEG), axis=1
        )  # [B]
        no_live_beam = state.live_log_probs[:, 0] <= NEG / 2  # [B]
        done = (worst_finished_scores > best_live_scores) | no_live_beam  # [B]
        return (state.step < max_output_length) & ~tf.reduce_all(done)

    # Only beam 0 is live at the start: the others are copies that must not be extended.
    initial_log_probs = tf.concat([[0.0], tf.fill([k - 1], NEG)], axis=0)  # [K]
    buffer_shape = [batch_size, k, max_output_length + 1]
    initial_state = BeamState(
        step=tf.constant(0, tf.int32),
        live_ids=tf.where(
            tf.range(max_output_length + 1) == 0, expand_to_beam_size(initial_ids, k)[:, :, None], 0
        ),  # [B, K, L + 1]
        live_log_probs=tf.tile(initial_log_probs[None, :], [batch_size, 1]),  # [B, K]
        cache=tf.nest.map_structure(
            lambda x: flatten_beam_dim(expand_to_beam_size(x, k)), initial_cache
        ),  # [B * K, ...]
        finished_ids=tf.zeros(buffer_shape, tf.int32),  # [B, K, L + 1]
        finished_scores=tf.fill([batch_size, k], NEG),  # [B, K]
        finished_flags=tf.zeros([batch_size, k], tf.bool),  # [B, K]
    )
    invariants = BeamState(
        step=tf.TensorShape([]),
        live_ids=tf.TensorShape([None, k, None]),
        live_log_probs=tf.TensorShape([None, k]),
        cache=tf.nest.map_structure(_loose_shape, initial_state.cache),
        finished_ids=tf.TensorShape([None, k, None]),
        finished_scores=tf.TensorShape([None, k]),
        finished_flags=tf.TensorShape([None, k]),
    )
    (state,) = tf.while_loop(
        keep_going, body, (initial_state,), shape_invariants=(invariants,), parallel_iterations=1
    )

    # Sentences that finished nothing fall back to their live beams.
    has_finished = tf.reduce_any(state.finished_flags, axis=1)  # [B]
    live_scores = state.live_log_probs / length_penalty(state.step, alpha)[:, None]  # [B, K]
    finished_ids = tf.where(state.finished_flags[:, :, None], state.finished_ids, 0)  # [B, K, L + 1]
    ids = tf.where(has_finished[:, None, None], finished_ids, state.live_ids)  # [B, K, L + 1]
    scores = tf.where(has_finished[:, None], state.finished_scores, live_scores)  # [B, K]
    return ids[:, :, 1:], scores  # [B, K, L], [B, K]
