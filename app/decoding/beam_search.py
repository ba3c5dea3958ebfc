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
  may run on for the rest of the batch without changing its result. A caller that needs
  only the best result (`final_results=1`) has it final sooner: once no live beam can
  beat the best finished hypothesis, which is the same best result.
  The loop ends when every sentence is done, or after L steps.
- A hypothesis that reaches its sentence's `max_lengths` must end: every other token is
  masked. Padding and the start token are never outputs.
"""

import math
import typing

import tensorflow as tf

from layers.multi_head_attention import large_negative
from layers.special_tokens import END_ID, PAD_ID, START_ID

# Stands in for -inf (log 0): finite, so sums and products of it never make NaN. The
# search runs in float32 whatever the model's dtype (logits are cast first).
NEG = large_negative("float32")
# The largest finite float32, where `length_penalty` overflows (`largest_alpha`).
FLOAT32_MAX = tf.float32.max


class BeamState(typing.NamedTuple):
    """The `tf.while_loop` state. A sentences are still being searched (A <= B): the
    others are done, and their results already written to `result_ids`/`result_scores`."""

    # int32 []: buffer position of the newest token of the live beams (0 = start token).
    step: tf.Tensor
    # int32 [A, K, L + 1]: the live beams: start token, then `step` tokens, then 0.
    live_ids: tf.Tensor
    # float32 [A, K]: sum of the live beams' log-probs, best first; <= NEG / 2 for a slot
    # that holds no real hypothesis (it went through a masked token).
    live_log_probs: tf.Tensor
    # Nested tensors [A * K, ...]: the model's cache for the live beams.
    cache: typing.Any
    # int32 [A, K, L + 1]: the finished hypotheses: start token, tokens, end token, 0.
    finished_ids: tf.Tensor
    # float32 [A, K]: their length-normalized scores, best first; NEG in empty slots.
    finished_scores: tf.Tensor
    # bool [A, K]: whether each finished slot holds a hypothesis.
    finished_flags: tf.Tensor
    # int32 [A]: each sentence's row in the batch.
    rows: tf.Tensor
    # int32 [A] and float32 [A]: each sentence's most output tokens and alpha.
    max_lengths: tf.Tensor
    alpha: tf.Tensor
    # Nested tensors [A, ...]: the per-sentence cache (`sentence_cache`).
    sentence_cache: typing.Any
    # int32 [B, K, L + 1] and float32 [B, K]: the results of the sentences done so far.
    result_ids: tf.Tensor
    result_scores: tf.Tensor


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


def _chunk_width(total):
    """The width of the chunks `best_candidates` cuts `total` candidates into: a divisor
    of `total` near 64 where one exists (no padding), else 64."""
    divisors = [width for width in range(32, 257) if total % width == 0]
    return min(divisors, key=lambda width: abs(width - 64)) if divisors else 64


def best_candidates(candidate_log_probs, count):
    """The `count` best continuations of each sentence over all its beams, best first.

    Args:
        candidate_log_probs: float32 `[A, K, V]`, the log-prob of every beam of every
            sentence extended by every token.
        count: a Python int <= K x V.

    Returns:
        `(log_probs float32, beams int32, tokens int32)`, each `[A, count]`: exactly what
        `tf.math.top_k` over each sentence's K x V candidates flattened beam-major gives,
        ties to the lower beam and then the lower token.

    TensorFlow's `TopKV2` costs some 4 ns a candidate on a CPU, 4 ms a step for 32
    sentences of 4 beams over 8,000 tokens, more than the decoder's layers. So the
    candidates are cut into chunks of about 64, and only the `count` chunks with the
    largest maxima (one fast reduction) are searched: each of the best `count`
    candidates lies in one of them, since a chunk outside them is beaten by `count`
    chunks each holding a candidate that beats every one of its own. The chosen chunks
    are searched in their original order, so that ties break as in the flat order.
    """
    num_beams, vocab_size = candidate_log_probs.shape[1], candidate_log_probs.shape[2]
    total = num_beams * vocab_size
    width = _chunk_width(total)
    num_chunks = -(-total // width)
    flat = tf.reshape(candidate_log_probs, [-1, total])  # [A, K * V]
    if num_chunks * width > total:  # padding that no real candidate loses to
        flat = tf.pad(flat, [[0, 0], [0, num_chunks * width - total]], constant_values=-math.inf)
    chunks = tf.reshape(flat, [-1, num_chunks, width])  # [A, C, W]
    searched = min(count, num_chunks)
    _, best_chunks = tf.math.top_k(tf.reduce_max(chunks, axis=2), k=searched)  # [A, searched]
    # Ascending, as -top_k(-x): 3 ops where tf.sort of int32 takes 6.
    best_chunks = -tf.math.top_k(-best_chunks, k=searched).values
    candidates = tf.reshape(tf.gather(chunks, best_chunks, batch_dims=1), [-1, searched * width])
    log_probs, positions = tf.math.top_k(candidates, k=count)  # [A, count]
    indices = tf.gather(best_chunks, positions // width, batch_dims=1) * width + positions % width  # [A, count]
    return log_probs, indices // vocab_size, indices % vocab_size


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


def loose_shape(x):
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
    sentence_cache=None,
    final_results=None,
):
    """Finds the K best output sequences of every sentence.

    A sentence leaves the search as soon as it is done (no live beam can beat its worst
    finished hypothesis): its result is written out, and its beams, cache and settings
    are dropped from the loop's state, so later steps compute only the sentences still
    searched, as CTranslate2 does. Its result is the one it would have at the end.

    Args:
        symbols_to_logits_fn: `(ids, step, cache) -> (logits, new_cache)`, or with
            `sentence_cache` `(ids, step, cache, sentence_cache) -> (logits, new_cache)`.
            `ids` is int32 `[N, L + 1]`, N = A x K hypotheses of the A sentences still
            searched (sentence-major), the whole buffer of tokens so far (position 0 =
            start token, positions <= `step` filled, the rest 0); `step` the int32 scalar
            position of the newest token; `logits` `[N, V]` (any float dtype) are for
            position `step + 1`. `cache` has N on axis 0 of every tensor, and
            `sentence_cache` A.
        initial_ids: int32 `[B]`, the start token of each sentence.
        initial_cache: nested tensors with the batch `B` on axis 0; tiled K times here,
            and reordered with the beams at every step.
        vocab_size: V, a Python int.
        max_lengths: int32 `[B]` (or a scalar for all): the most output tokens of each
            sentence, end token included, >= 1. A hypothesis of that length ends there.
        beam_size: K, a Python int >= 1.
        alpha: the length-penalty exponent, float32 `[B]` (or a scalar for all, which
            may be a Python float); 0 ranks by plain log-probability.
        end_id, pad_id, start_id: the special token ids.
        sentence_cache: nested tensors with the batch `B` on axis 0 that all beams of a
            sentence read alike (such as the encoder output's keys and values): never
            tiled nor reordered, only narrowed to the sentences still searched.
        final_results: how many of the K results, best first, must be final before a
            sentence leaves the search: K (the default, the whole n-best list) or fewer.
            With 1 the best result is the one K would give, in fewer steps (on Multi30k
            test, beam 4, alpha 0.6: 19.6 steps a sentence for K, against outputs of 14
            tokens), and the others are the best found by then.

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
    final_results = k if final_results is None else final_results
    if not isinstance(final_results, int) or not 1 <= final_results <= k:
        raise ValueError(f"final_results must be a Python int from 1 to beam_size {k}, got {final_results!r}")
    initial_ids = tf.convert_to_tensor(initial_ids, tf.int32)  # [B]
    batch_size = shape_list(initial_ids)[0]
    max_lengths = tf.broadcast_to(tf.convert_to_tensor(max_lengths, tf.int32), tf.shape(initial_ids))  # [B]
    max_output_length = longest_output(max_lengths)  # L
    # Per sentence, like the maximum lengths, so one batch can mix decoding settings.
    alpha = tf.broadcast_to(tf.cast(alpha, tf.float32), tf.shape(initial_ids))  # [B]
    sentence_cache = {} if sentence_cache is None else sentence_cache
    with_sentence_cache = bool(tf.nest.flatten(sentence_cache))

    # Padding and the start token are never outputs; at its maximum length, only the end.
    vocabulary = tf.range(vocab_size)  # [V]
    allowed_tokens = (vocabulary != pad_id) & (vocabulary != start_id)  # [V]
    is_end_token = tf.equal(vocabulary, end_id)  # [V]

    def continuation_log_probs(logits, step, max_lengths):
        """Log-probs `[A, K, V]` of the token at position `step + 1`, masked tokens NEG."""
        log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32))  # [A * K, V]
        log_probs = tf.reshape(log_probs, [-1, k, vocab_size])  # [A, K, V]
        must_end = step + 1 >= max_lengths  # [A]: the next token is the last allowed
        allowed = allowed_tokens & (is_end_token | ~must_end[:, None])  # [A, V]
        return tf.where(allowed[:, None, :], log_probs, NEG)  # [A, K, V]

    def done(state):
        """bool [A]: whether each sentence's result is final."""
        # A live beam of `step` tokens ends with between step + 1 and max_lengths tokens.
        largest_penalty = tf.maximum(
            length_penalty(state.step + 1, state.alpha), length_penalty(state.max_lengths, state.alpha)
        )  # [A]
        best_live_scores = state.live_log_probs[:, 0] / largest_penalty  # [A]
        # The pool is sorted best first, empty slots last: the last result that must be
        # final, or NEG while that slot is empty.
        last = final_results - 1
        last_final_scores = tf.where(
            state.finished_flags[:, last], state.finished_scores[:, last], NEG
        )  # [A]
        no_live_beam = state.live_log_probs[:, 0] <= NEG / 2  # [A]
        return (last_final_scores > best_live_scores) | no_live_beam

    def results(state):
        """`(ids [A, K, L + 1], scores [A, K])`: the finished hypotheses; a sentence that
        finished nothing falls back to its live beams."""
        has_finished = tf.reduce_any(state.finished_flags, axis=1)  # [A]
        live_scores = state.live_log_probs / length_penalty(state.step, state.alpha)[:, None]  # [A, K]
        finished_ids = tf.where(state.finished_flags[:, :, None], state.finished_ids, 0)  # [A, K, L + 1]
        ids = tf.where(has_finished[:, None, None], finished_ids, state.live_ids)  # [A, K, L + 1]
        scores = tf.where(has_finished[:, None], state.finished_scores, live_scores)  # [A, K]
        return ids, scores

    def write_results(state, which):
        """The state with the results of the sentences `which` (bool [A]) written out."""
        ids, scores = results(state)
        rows = tf.boolean_mask(state.rows, which)[:, None]  # [D, 1]
        return state._replace(
            result_ids=tf.tensor_scatter_nd_update(state.result_ids, rows, tf.boolean_mask(ids, which)),
            result_scores=tf.tensor_scatter_nd_update(state.result_scores, rows, tf.boolean_mask(scores, which)),
        )

    def narrow(state, keep, cache_rows):
        """The state of the sentences `keep` (bool [A]) only, its cache `cache_rows`
        (int32 `[A, K]`) of `state.cache`: the rows the kept sentences' beams read."""
        kept = tf.where(keep)[:, 0]  # [A']

        def per_sentence(x):
            return tf.gather(x, kept)

        rows = tf.reshape(per_sentence(cache_rows), [-1])  # [A' * K]
        return state._replace(
            live_ids=per_sentence(state.live_ids),
            live_log_probs=per_sentence(state.live_log_probs),
            cache=tf.nest.map_structure(lambda x: tf.gather(x, rows), state.cache),
            finished_ids=per_sentence(state.finished_ids),
            finished_scores=per_sentence(state.finished_scores),
            finished_flags=per_sentence(state.finished_flags),
            rows=per_sentence(state.rows),
            max_lengths=per_sentence(state.max_lengths),
            alpha=per_sentence(state.alpha),
            sentence_cache=tf.nest.map_structure(per_sentence, state.sentence_cache),
        )

    def body(state):
        step = state.step
        searched = tf.shape(state.rows)[0]  # A

        # Score every continuation of every live beam, keep the 2K best of each sentence.
        live_ids = flatten_beam_dim(state.live_ids)
        if with_sentence_cache:
            logits, cache = symbols_to_logits_fn(live_ids, step, state.cache, state.sentence_cache)
        else:
            logits, cache = symbols_to_logits_fn(live_ids, step, state.cache)
        log_probs = continuation_log_probs(logits, step, state.max_lengths)  # [A, K, V]
        candidate_log_probs = state.live_log_probs[:, :, None] + log_probs  # [A, K, V]
        topk_log_probs, topk_beams, topk_tokens = best_candidates(candidate_log_probs, 2 * k)  # [A, 2K] each
        topk_ids = gather_beams(state.live_ids, topk_beams)  # [A, 2K, L + 1]
        # Positions after `step` are 0, so adding writes the new token at step + 1.
        new_position = tf.one_hot(step + 1, max_output_length + 1, dtype=tf.int32)  # [L + 1]
        topk_ids += topk_tokens[:, :, None] * new_position  # [A, 2K, L + 1]
        topk_ends = tf.equal(topk_tokens, end_id)  # [A, 2K]

        # Live: the K best candidates that do not end.
        live_scores = topk_log_probs + NEG * tf.cast(topk_ends, tf.float32)  # [A, 2K]
        live_log_probs, live_positions = tf.math.top_k(live_scores, k=k)  # [A, K]
        live_ids = gather_beams(topk_ids, live_positions)  # [A, K, L + 1]
        # Each new live beam's cache is that of the beam it extends. The cache is
        # [A * K, ...], sentence-major: beam j of sentence a is row a K + j. It is
        # gathered once, below, with the sentences that stay.
        source_beams = tf.gather(topk_beams, live_positions, batch_dims=1)  # [A, K]
        cache_rows = source_beams + k * tf.range(searched)[:, None]  # [A, K]

        # Finished: the real candidates among the top K that end join the pool of K.
        new_flags = topk_ends[:, :k] & (topk_log_probs[:, :k] > NEG / 2)  # [A, K]
        new_scores = topk_log_probs[:, :k] / length_penalty(step + 1, state.alpha)[:, None]  # [A, K]
        new_scores = tf.where(new_flags, new_scores, NEG)  # [A, K]
        # The old pool comes first, so on a tie it stays (top_k is stable).
        pool_scores = tf.concat([state.finished_scores, new_scores], axis=1)  # [A, 2K]
        pool_ids = tf.concat([state.finished_ids, topk_ids[:, :k]], axis=1)  # [A, 2K, L + 1]
        pool_flags = tf.concat([state.finished_flags, new_flags], axis=1)  # [A, 2K]
        finished_scores, finished_ids, finished_flags = gather_topk_beams(
            (pool_scores, pool_ids, pool_flags), pool_scores, k
        )  # [A, K], [A, K, L + 1], [A, K]

        state = state._replace(
            step=step + 1,
            live_ids=live_ids,
            live_log_probs=live_log_probs,
            cache=cache,
            finished_ids=finished_ids,
            finished_scores=finished_scores,
            finished_flags=finished_flags,
        )
        # The sentences now done leave the search with their results.
        finished = done(state)  # [A]
        state = tf.cond(
            tf.reduce_any(finished),
            lambda: narrow(write_results(state, finished), ~finished, cache_rows),
            lambda: state._replace(
                cache=tf.nest.map_structure(lambda x: tf.gather(x, tf.reshape(cache_rows, [-1])), cache)
            ),
        )
        return (state,)

    def keep_going(state):
        return (state.step < max_output_length) & (tf.size(state.rows) > 0)

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
        rows=tf.range(batch_size),  # [B]
        max_lengths=max_lengths,
        alpha=alpha,
        sentence_cache=sentence_cache,
        result_ids=tf.zeros(buffer_shape, tf.int32),  # [B, K, L + 1]
        result_scores=tf.fill([batch_size, k], NEG),  # [B, K]
    )
    invariants = BeamState(
        step=tf.TensorShape([]),
        live_ids=tf.TensorShape([None, k, None]),
        live_log_probs=tf.TensorShape([None, k]),
        cache=tf.nest.map_structure(loose_shape, initial_state.cache),
        finished_ids=tf.TensorShape([None, k, None]),
        finished_scores=tf.TensorShape([None, k]),
        finished_flags=tf.TensorShape([None, k]),
        rows=tf.TensorShape([None]),
        max_lengths=tf.TensorShape([None]),
        alpha=tf.TensorShape([None]),
        sentence_cache=tf.nest.map_structure(loose_shape, sentence_cache),
        result_ids=tf.TensorShape([None, k, None]),
        result_scores=tf.TensorShape([None, k]),
    )
    (state,) = tf.while_loop(
        keep_going, body, (initial_state,), shape_invariants=(invariants,), parallel_iterations=1
    )

    # The sentences still searched when the longest output was reached.
    state = write_results(state, tf.ones_like(state.rows, tf.bool))
    return state.result_ids[:, :, 1:], state.result_scores  # [B, K, L], [B, K]
