"""Beam search: the strategy that keeps the K most likely hypotheses of each sentence.

    ids, scores = beam_search(symbols_to_logits_fn, initial_ids, initial_cache, vocab_size,
                              max_lengths=max_lengths, beam_size=4, alpha=0.6)

As Flax's `examples/wmt` decode.py, with fairseq's rule for what may finish: each step
keeps the 2K best continuations of the K live beams; the K best that do not end stay
live, and those among the top K that end join a pool of the K best finished
hypotheses. Score = sum of log-probs / ((5 + length) / 6) ** alpha (GNMT's length
penalty), the length counting the end token. `BeamSearch` chooses the tokens; the loop
around it is app/decoding/search.py's.

Forced tokens (a target prefix; the phrases of a constrained search) are scored apart:
score = their log-probs + the other tokens' log-probs / the penalty (`normalized_scores`).
The penalty makes up for each token the search chose costing log-probability, so that
longer translations are not ruled out; a forced token's cost is the same whatever the
length, and divided with the rest, a large one (an unlikely word the user asked for)
shrinks with every token added, so a high alpha would prefer runs of babble to a
translation that ends (docs/lab-notebook/2026-11-29-steering-the-search.md).

Dimension names: B batch, A sentences still searched, K beam size, V vocabulary size,
L the most output tokens; token buffers hold L + 1 positions, the start token at 0.
"""
import math
import typing

import tensorflow as tf

from app.decoding.config import check
from app.decoding.search import gather_beams, hypothesis_mask, search
from layers.multi_head_attention import large_negative
from layers.special_tokens import END_ID, PAD_ID, START_ID

# Stands in for -inf (log 0): finite, so sums and products of it never make NaN. The
# search runs in float32 whatever the model's dtype (logits are cast first).
NEG = large_negative("float32")
# The largest finite float32, where `length_penalty` overflows (`largest_alpha`).
FLOAT32_MAX = tf.float32.max


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

    A `tf.math.top_k` over all K x V candidates of a step can cost more than the
    decoder's layers on a CPU (docs/lab-notebook/, the second round of decoding against
    CTranslate2). So the candidates are cut into chunks of about 64, and only the
    `count` chunks with the largest maxima (one fast reduction) are searched: each of
    the best `count` candidates lies in one of them, since a chunk outside them is beaten by `count`
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


def normalized_scores(log_probs, forced_log_probs, length, alpha):
    """The score of hypotheses of `length` tokens (end token included): the log-probs of
    their forced tokens, plus the others' over `length_penalty`. Without forced tokens
    (`forced_log_probs` 0) exactly GNMT's log-prob / penalty.

    Args:
        log_probs: float32 `[A, N]`, the sums of all the tokens' log-probs.
        forced_log_probs: float32 `[A, N]`, the sums of the forced tokens' among them.
        length: int32 scalar or `[A]`; alpha: float32 `[A]`.
    """
    penalty = length_penalty(length, alpha)  # [A]
    return forced_log_probs + (log_probs - forced_log_probs) / penalty[:, None]


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


def forced_through_prefix(parent_forced, candidate_log_probs, step, settings):
    """float32 `[A, N]`: the forced log-prob of candidates that extend hypotheses whose
    forced log-prob is `parent_forced` `[A, N]` and score `candidate_log_probs` `[A, N]`
    with the token at `step + 1`. A sentence still in its prefix (`steering.Steering`)
    has written forced tokens only, so all of a candidate's log-prob is forced; an
    unsteered search forces nothing."""
    if not settings.steering:  # () unsteered: the graph stays as it was
        return parent_forced
    in_prefix = step < settings.steering.prefix_lengths  # [A]
    return tf.where(in_prefix[:, None], candidate_log_probs, parent_forced)


class BeamSettings(typing.NamedTuple):
    """Beam search's own setting of each sentence (`search.SentenceSettings.strategy`)."""

    # float32 [A]: the length-penalty exponent; 0 ranks by plain log-probability.
    alpha: tf.Tensor


class BeamState(typing.NamedTuple):
    """Beam search's own state in the loop (`search.Strategy`)."""

    # float32 [A, K]: sum of the live beams' log-probs, best first; <= NEG / 2 for a slot
    # that holds no real hypothesis (it went through a masked token).
    live_log_probs: tf.Tensor
    # float32 [A, K]: the part of it that forced tokens wrote (`normalized_scores`); 0
    # where nothing is forced.
    live_forced_log_probs: tf.Tensor
    # int32 [A, K, L + 1]: the finished hypotheses: start token, tokens, end token, 0.
    finished_ids: tf.Tensor
    # float32 [A, K]: their length-normalized scores, best first; NEG in empty slots.
    finished_scores: tf.Tensor
    # bool [A, K]: whether each finished slot holds a hypothesis.
    finished_flags: tf.Tensor


class BeamSearch:
    """The K best hypotheses of each sentence (`search.Strategy`), with the `BeamSettings`
    of each sentence.

    Args:
        beam_size: K, a Python int >= 1.
        final_results: how many of the K results, best first, must be final before a
            sentence leaves the search: K (the default, the whole n-best list) or fewer.
            With 1 the best result is the one K would give, in fewer steps, and the
            others are the best found by then.
        end_id: the end token's id.
    """

    def __init__(self, beam_size, final_results=None, end_id=END_ID):
        check("beam_size", beam_size)
        final_results = beam_size if final_results is None else final_results
        if not isinstance(final_results, int) or not 1 <= final_results <= beam_size:
            raise ValueError(
                f"final_results must be a Python int from 1 to beam_size {beam_size}, got {final_results!r}"
            )
        self.width = beam_size
        self.final_results = final_results
        self.end_id = end_id

    def start(self, batch_size, buffer_length, settings):
        k = self.width
        # Only beam 0 is live at the start: the others are copies that must not be extended.
        initial_log_probs = tf.concat([[0.0], tf.fill([k - 1], NEG)], axis=0)  # [K]
        return BeamState(
            live_log_probs=tf.tile(initial_log_probs[None, :], [batch_size, 1]),  # [B, K]
            live_forced_log_probs=tf.zeros([batch_size, k]),  # [B, K]
            finished_ids=tf.zeros([batch_size, k, buffer_length], tf.int32),  # [B, K, L + 1]
            finished_scores=tf.fill([batch_size, k], NEG),  # [B, K]
            finished_flags=tf.zeros([batch_size, k], tf.bool),  # [B, K]
        )

    def no_results(self, batch_size, buffer_length):
        k = self.width
        return tf.zeros([batch_size, k, buffer_length], tf.int32), tf.fill([batch_size, k], NEG)

    def extend(self, state, ids, logits, allowed, step, settings):
        """At most K of the 2K best candidates end (one end token per live beam), so K
        that do not end always exist and finishing beams never starve the live set. Only
        the ending candidates among the top K finish, the ones a plain beam of width K
        would have finished: taking every ending candidate of the 2K, as Flax does, would
        let a beam of width 1 finish a hypothesis greedy search never picks."""
        k = self.width
        log_probs = tf.where(hypothesis_mask(allowed), tf.nn.log_softmax(logits), NEG)  # [A, K, V]
        candidate_log_probs = state.live_log_probs[:, :, None] + log_probs  # [A, K, V]
        topk_log_probs, topk_beams, topk_tokens = best_candidates(candidate_log_probs, 2 * k)  # [A, 2K] each
        topk_forced = forced_through_prefix(
            gather_beams(state.live_forced_log_probs, topk_beams), topk_log_probs, step, settings
        )  # [A, 2K]
        topk_ends = tf.equal(topk_tokens, self.end_id)  # [A, 2K]

        # Live: the K best candidates that do not end.
        live_scores = topk_log_probs + NEG * tf.cast(topk_ends, tf.float32)  # [A, 2K]
        live_log_probs, live_positions = tf.math.top_k(live_scores, k=k)  # [A, K]
        parents, tokens, live_forced = gather_beams((topk_beams, topk_tokens, topk_forced), live_positions)

        # Finished: the real candidates among the top K that end join the pool of K.
        new_position = tf.one_hot(step + 1, tf.shape(ids)[2], dtype=tf.int32)  # [L + 1]
        new_ids = gather_beams(ids, topk_beams[:, :k]) + topk_tokens[:, :k, None] * new_position  # [A, K, L + 1]
        new_flags = topk_ends[:, :k] & (topk_log_probs[:, :k] > NEG / 2)  # [A, K]
        new_scores = normalized_scores(topk_log_probs[:, :k], topk_forced[:, :k], step + 1, settings.strategy.alpha)
        new_scores = tf.where(new_flags, new_scores, NEG)  # [A, K]
        # The old pool comes first, so on a tie it stays (top_k is stable).
        pool_scores = tf.concat([state.finished_scores, new_scores], axis=1)  # [A, 2K]
        pool_ids = tf.concat([state.finished_ids, new_ids], axis=1)  # [A, 2K, L + 1]
        pool_flags = tf.concat([state.finished_flags, new_flags], axis=1)  # [A, 2K]
        finished_scores, finished_ids, finished_flags = gather_topk_beams(
            (pool_scores, pool_ids, pool_flags), pool_scores, k
        )  # [A, K], [A, K, L + 1], [A, K]
        beam = BeamState(live_log_probs, live_forced, finished_ids, finished_scores, finished_flags)
        return beam, parents, tokens

    def done(self, state, ids, step, settings):
        """Once no live beam can beat the last result that must be final, or once no real
        live beam is left (all were forced to end).

        The best a live beam can still reach is its forced log-prob plus the rest over the
        largest penalty it may still get, at its shortest or longest length (the penalty
        is monotonic in the length for any alpha): log-probs only fall, and a token that
        becomes forced later (the rest of a constraint phrase) moves its log-prob p <= 0
        from the divided part to the undivided one, which changes the score by
        p (1 - 1 / penalty) <= 0, as the penalty is >= 1."""
        alpha = settings.strategy.alpha
        # A live beam of `step` tokens ends with between step + 1 and max_lengths tokens.
        largest_penalty = tf.maximum(
            length_penalty(step + 1, alpha), length_penalty(settings.max_lengths, alpha)
        )  # [A]
        best_live_scores = tf.reduce_max(
            state.live_forced_log_probs
            + (state.live_log_probs - state.live_forced_log_probs) / largest_penalty[:, None],
            axis=1,
        )  # [A]
        # The pool is sorted best first, empty slots last: the last result that must be
        # final, or NEG while that slot is empty.
        last = self.final_results - 1
        last_final_scores = tf.where(state.finished_flags[:, last], state.finished_scores[:, last], NEG)  # [A]
        no_live_beam = tf.reduce_max(state.live_log_probs, axis=1) <= NEG / 2  # [A]
        return (last_final_scores > best_live_scores) | no_live_beam

    def results(self, state, ids, step, settings):
        """`(ids [A, K, L + 1], scores [A, K])`: the finished hypotheses; a sentence that
        finished nothing falls back to its live beams."""
        has_finished = tf.reduce_any(state.finished_flags, axis=1)  # [A]
        live_scores = normalized_scores(
            state.live_log_probs, state.live_forced_log_probs, step, settings.strategy.alpha
        )  # [A, K]
        finished_ids = tf.where(state.finished_flags[:, :, None], state.finished_ids, 0)  # [A, K, L + 1]
        ids = tf.where(has_finished[:, None, None], finished_ids, ids)  # [A, K, L + 1]
        scores = tf.where(has_finished[:, None], state.finished_scores, live_scores)  # [A, K]
        return ids, scores


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
    steering=None,
):
    """Finds the K best output sequences of every sentence: `search` with `BeamSearch`.

    Args:
        symbols_to_logits_fn, initial_ids, initial_cache, vocab_size, max_lengths,
            sentence_cache, end_id, pad_id, start_id, steering: as `search.search`
            takes them.
        beam_size: K, a Python int >= 1.
        alpha: the length-penalty exponent, float32 `[B]` (or a scalar for all, which
            may be a Python float); 0 ranks by plain log-probability.
        final_results: `BeamSearch`'s: K (default) or fewer results that must be final.

    Returns:
        `(ids, scores)`: ids int32 `[B, K, L]`, the output tokens without the start
        token, each row ending with the end token and padded with 0 after it; scores
        float32 `[B, K]`, the sum of the tokens' log-probs divided by
        `length_penalty(number of tokens including the end token, alpha)`, a forced
        prefix's log-probs added undivided (`normalized_scores`). Sorted best
        first. A sentence that finished nothing (impossible while `max_lengths` forces
        an end) returns its live beams, scored at their length, without end tokens. A
        slot for which no hypothesis exists (fewer than K possible sequences, e.g.
        `max_lengths` 1) holds zeros and score NEG.
    """
    return search(
        BeamSearch(beam_size, final_results, end_id), symbols_to_logits_fn, initial_ids, initial_cache, vocab_size,
        max_lengths=max_lengths, settings=BeamSettings(alpha=tf.cast(alpha, tf.float32)), sentence_cache=sentence_cache,
        end_id=end_id, pad_id=pad_id, start_id=start_id, steering=steering,
    )  # [B, K, L], [B, K]
