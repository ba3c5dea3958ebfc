"""Lexically constrained beam search: each sentence's translation must hold every one of its
target phrases, in any order (Post & Vilar 2018, "dynamic beam allocation", in the
vectorized form of Hu et al. 2019 that fairseq's `LexicallyConstrainedBeamSearch` runs).

    ids, scores, met = constrained_beam_search(symbols_to_logits_fn, initial_ids, initial_cache,
                                               vocab_size, max_lengths=max_lengths, phrases=phrases,
                                               phrase_lengths=phrase_lengths, beam_size=4, alpha=0.6)

Each step's candidates are beam search's 2K best, each hypothesis's own best, and, for
each hypothesis and each phrase it has not met, the token that goes on with its longest
partial match and the phrase's first token. A candidate's *bank* is how many constraint
tokens it holds: every token of the phrases it has met, and those of its longest phrase
in progress. The K live beams are dealt out among the banks in stripes (the best of the
fullest bank, the best of the next, ..., then each bank's second best, ...), so that a
hypothesis that spent a step on an unlikely constraint token is not crowded out by
likelier ones that did not: a constraint costs beam slots, not a wider beam. The
fullest bank always advances (its best hypothesis's continuation heads the next bank and
takes the first stripe), so given room some hypothesis meets every phrase.

A hypothesis may end only once it has met every phrase, or at its length limit; the
pool of finished hypotheses ranks those that met every phrase first. The tokens of the
first occurrence of each phrase are forced tokens: their log-probs are added to the score
undivided by the length penalty (`beam_search.normalized_scores` says why). At the limit the
best finished hypothesis is the result whatever it met, and `constraints_met` says so.

Matching is exact: every partial match is tracked, so "a a b" is found in "a a a b",
which a restart at the phrase's first token (fairseq's) misses. One occurrence meets a
phrase: a phrase given twice is met once, and one inside another with it (fairseq counts
a multiset). A sentence without phrases gets `BeamSearch`'s result exactly: every
candidate is in bank 0, where the stripes are the order of scores.

Dimension names: A sentences still searched, K beam size, V vocabulary size, C phrases a
sentence, P tokens a phrase (both padded, >= 1), N candidates a step (3K + 2KC), L the
most output tokens; token buffers hold L + 1 positions, the start token at 0.
"""

import typing

import tensorflow as tf

from app.decoding.beam_search import (
    NEG,
    BeamSearch,
    BeamState,
    best_candidates,
    forced_through_prefix,
    normalized_scores,
)
from app.decoding.search import gather_beams, hypothesis_mask, search
from layers.special_tokens import END_ID, PAD_ID, START_ID

# The most phrases one sentence may carry where requests come from outside (the export's
# `constrained` signature refuses more). A step weighs N = 3K + 2KC candidates against
# each other pairwise, O(N^2) per sentence: at K = 4, 64 phrases make N = 524 and about
# 275,000 comparisons a step, where one phrase makes 400. A translator's glossary hits
# per sentence are a handful; the bound keeps one small request from asking the server
# for gigabytes.
MAX_PHRASES = 64


class ConstrainedSettings(typing.NamedTuple):
    """Each sentence's setting (`search.SentenceSettings.strategy`), sentences on axis 0."""

    # float32 [A]: the length-penalty exponent, as `BeamSettings.alpha`.
    alpha: tf.Tensor
    # int32 [A, C, P], C, P >= 1: each sentence's phrases, padded with 0.
    phrases: tf.Tensor
    # int32 [A, C], 0 <= length <= P: each phrase's tokens; 0 = no phrase in this slot.
    phrase_lengths: tf.Tensor


class ConstrainedBeamState(typing.NamedTuple):
    """The constrained search's state in the loop (`search.Strategy`)."""

    # BeamState: beam search's, but the live beams are in stripe order, not best first.
    beam: BeamState
    # bool [A, K, C]: live hypothesis k holds phrase c.
    met: tf.Tensor
    # bool [A, K, C, P]: [..., c, j]: it ends with phrase c's first j + 1 tokens, j + 1 < its length.
    partial: tf.Tensor
    # float32 [A, K, C, P]: the log-probs of those j + 1 tokens (prefix tokens' left out:
    # they count as the prefix's); 0 where there is no such match.
    partial_log_probs: tf.Tensor
    # bool [A, K]: the finished slot's hypothesis holds every phrase (false in an empty slot).
    finished_met: tf.Tensor


def padded_phrases(tokens):
    """Tokenized phrases, ragged int `[B, None, None]` (sentences, phrases, tokens), as
    `ConstrainedSettings` holds them: `(phrases int32 [B, C, P], lengths int32 [B, C])`,
    padded with 0 to C, P >= 1, so that no read meets an empty axis (no phrase at all)."""
    phrases = tf.cast(tokens.to_tensor(default_value=0), tf.int32)  # [B, C', P']
    lengths = tf.cast(tokens.row_lengths(axis=2).to_tensor(default_value=0), tf.int32)  # [B, C']
    missing_phrases = tf.maximum(1 - tf.shape(phrases)[1], 0)
    missing_tokens = tf.maximum(1 - tf.shape(phrases)[2], 0)
    phrases = tf.pad(phrases, [[0, 0], [0, missing_phrases], [0, missing_tokens]])  # [B, C, P]
    return phrases, tf.pad(lengths, [[0, 0], [0, missing_phrases]])  # [B, C, P], [B, C]


def checked_phrases(phrases, phrase_lengths):
    """`(phrases int32 [B, C, P], phrase_lengths int32 [B, C])`, refused at once if their
    ranks are wrong (ValueError), and checked when the graph runs: one length per phrase,
    each from 0 to P (InvalidArgumentError)."""
    phrases = tf.convert_to_tensor(phrases, tf.int32)
    phrase_lengths = tf.convert_to_tensor(phrase_lengths, tf.int32)
    if phrases.shape.rank != 3 or phrase_lengths.shape.rank != 2:
        raise ValueError(
            f"phrases must be [B, C, P] and phrase_lengths [B, C], "
            f"got shapes {phrases.shape} and {phrase_lengths.shape}"
        )
    checks = [
        tf.debugging.assert_equal(
            tf.shape(phrases)[:2], tf.shape(phrase_lengths), message="one phrase_lengths per phrase"
        ),
        tf.debugging.assert_non_negative(phrase_lengths, message="phrase_lengths must be >= 0"),
        tf.debugging.assert_less_equal(
            phrase_lengths, tf.shape(phrases)[2], message="phrase_lengths must be at most the phrases' width"
        ),
    ]
    with tf.control_dependencies(checks):
        return tf.identity(phrases), tf.identity(phrase_lengths)


def longest_partial(partial):
    """int32 `[..., C]`: the tokens of each phrase's longest partial match, 0 for none,
    from `partial` bool `[..., C, P]`."""
    tokens_matched = tf.range(1, tf.shape(partial)[-1] + 1)  # [P]: a match ending at j holds j + 1
    return tf.reduce_max(tf.where(partial, tokens_matched, 0), axis=-1)


def advance_matches(met, partial, tokens, phrases, phrase_lengths, end_id=END_ID, log_probs=None):
    """The phrases met and partly matched once hypotheses write `tokens`.

    A match of j + 1 tokens extends one of j tokens (or none, j = 0) by the phrase's token
    j: every partial match goes on at once, so none is lost to a longer one that fails.
    The end token matches nothing.

    Args:
        met: bool `[A, N, C]`, partial: bool `[A, N, C, P]`: the hypotheses' before.
        tokens: int32 `[A, N]`, the tokens they write.
        phrases: int32 `[A, C, P]`; phrase_lengths: int32 `[A, C]`.
        log_probs: None, or `(partial_log_probs float32 [A, N, C, P], token_log_probs
            float32 [A, N])`: the matches' log-probs before (`ConstrainedBeamState`), and
            those of `tokens`.

    Returns:
        `(met bool [A, N, C], partial bool [A, N, C, P])`, and where `log_probs` is
        given, `(partial_log_probs [A, N, C, P], met_log_probs [A, N])`: the matches'
        log-probs after, and the sum over the phrases met by this token, for the first
        time, of their tokens' log-probs.
    """
    positions = tf.range(tf.shape(phrases)[2])  # [P]
    in_phrase = positions < phrase_lengths[:, :, None]  # [A, C, P]
    last = tf.equal(positions, phrase_lengths[:, :, None] - 1)[:, None]  # [A, 1, C, P]
    # [..., j] holds where a match of j tokens is there to extend (j = 0: always).
    extendable = tf.pad(partial[..., :-1], [[0, 0], [0, 0], [0, 0], [1, 0]], constant_values=True)  # [A, N, C, P]
    same = tf.equal(phrases[:, None], tokens[:, :, None, None]) & in_phrase[:, None]  # [A, N, C, P]
    matched = extendable & same & tf.not_equal(tokens, end_id)[:, :, None, None]  # [A, N, C, P]
    now_met = tf.reduce_any(matched & last, axis=3)  # [A, N, C]
    advanced = (met | now_met, matched & ~last)
    if log_probs is None:
        return advanced
    partial_log_probs, token_log_probs = log_probs
    before = tf.pad(partial_log_probs[..., :-1], [[0, 0], [0, 0], [0, 0], [1, 0]])  # [A, N, C, P]
    matched_log_probs = tf.where(matched, before + token_log_probs[:, :, None, None], 0.0)  # [A, N, C, P]
    whole = tf.reduce_sum(tf.where(last, matched_log_probs, 0.0), axis=3)  # [A, N, C]
    met_log_probs = tf.reduce_sum(tf.where(now_met & ~met, whole, 0.0), axis=2)  # [A, N]
    return advanced, (tf.where(last, 0.0, matched_log_probs), met_log_probs)


def banks(met, partial, phrase_lengths):
    """int32 `[A, N]`: the constraint tokens each hypothesis holds, from 0 to the sum of
    its phrase lengths: every token of the phrases it has met, and those of its longest
    partial match of a phrase it has not (Post & Vilar's and fairseq's count).

    Args:
        met: bool `[A, N, C]`; partial: bool `[A, N, C, P]`; phrase_lengths: int32 `[A, C]`.
    """
    whole = tf.reduce_sum(tf.where(met, phrase_lengths[:, None, :], 0), axis=2)  # [A, N]
    in_progress = tf.reduce_max(tf.where(met, 0, longest_partial(partial)), axis=2)  # [A, N]
    return whole + in_progress


def phrase_candidates(met, partial, phrases, phrase_lengths):
    """Each live hypothesis's tokens toward each phrase it has not met: the token after
    its longest partial match, and the phrase's first (a fresh start).

    Args:
        met: bool `[A, K, C]`; partial: bool `[A, K, C, P]`: the live hypotheses'.
        phrases: int32 `[A, C, P]`; phrase_lengths: int32 `[A, C]`.

    Returns:
        `(beams int32, tokens int32, wanted bool)`, each `[A, 2KC]`: the hypothesis each
        extends, its token, and whether it is a candidate at all (an unmet real phrase).
    """
    positions = tf.range(tf.shape(phrases)[2])  # [P]
    following = tf.equal(positions, longest_partial(partial)[..., None])  # [A, K, C, P]
    next_tokens = tf.reduce_sum(tf.where(following, phrases[:, None], 0), axis=3)  # [A, K, C]
    first_tokens = tf.broadcast_to(phrases[:, None, :, 0], tf.shape(next_tokens))  # [A, K, C]
    tokens = tf.stack([next_tokens, first_tokens], axis=3)  # [A, K, C, 2]
    wanted = ~met & (phrase_lengths > 0)[:, None, :]  # [A, K, C]
    wanted = tf.broadcast_to(wanted[..., None], tf.shape(tokens))  # [A, K, C, 2]
    beams = tf.broadcast_to(tf.range(met.shape[1])[None, :, None, None], tf.shape(tokens))  # [A, K, C, 2]
    num_sentences = tf.shape(met)[0]
    return tuple(tf.reshape(x, [num_sentences, -1]) for x in (beams, tokens, wanted))  # [A, 2KC] each


def first_real(keys, real):
    """bool `[A, N]`: the `real` candidates whose key (beam V + token) no earlier real
    candidate of the sentence has: a hypothesis must never take two live slots."""
    positions = tf.range(tf.shape(keys)[1])  # [N]
    earlier = positions[None, :] < positions[:, None]  # [N, N]: [i, j], j before i
    repeated = tf.equal(keys[:, :, None], keys[:, None, :]) & earlier & real[:, None, :]  # [A, N, N]
    return real & ~tf.reduce_any(repeated, axis=2)


def stripe_order(scores, candidate_banks, valid, total_tokens, count):
    """int32 `[A, count]`: the first `count` candidates in dynamic beam allocation's
    order: each bank's best, fullest bank first, then each bank's second best, and so
    on; the invalid ones last, in list order.

    A candidate's rank in its bank is the number of valid ones of the bank ahead of it
    (a higher score, or the same score earlier in the list); its key is rank (T + 1) +
    (T - bank), T the sentence's constraint tokens, and `top_k` of the negated keys
    sorts them, pairwise counts and no sort per bank. Without constraints (T = 0) this
    is the order of scores, ties to the earlier candidate, as `tf.math.top_k`'s.

    Args:
        scores: float32 `[A, N]`; candidate_banks: int32 `[A, N]`; valid: bool `[A, N]`.
        total_tokens: int32 `[A]`, T: the sum of each sentence's phrase lengths.
        count: a Python int <= N.
    """
    positions = tf.range(tf.shape(scores)[1])  # [N]
    earlier = positions[None, :] < positions[:, None]  # [N, N]: [i, j], j before i
    mine, theirs = scores[:, :, None], scores[:, None, :]  # [A, N, 1], [A, 1, N]
    ahead = (theirs > mine) | (tf.equal(theirs, mine) & earlier)  # [A, N, N]
    same_bank = tf.equal(candidate_banks[:, :, None], candidate_banks[:, None, :])  # [A, N, N]
    ranks = tf.reduce_sum(tf.cast(ahead & same_bank & valid[:, None, :], tf.int32), axis=2)  # [A, N]
    total = total_tokens[:, None]  # [A, 1]
    keys = tf.where(valid, ranks * (total + 1) + (total - candidate_banks), tf.int32.max)  # [A, N]
    return tf.math.top_k(-keys, k=count).indices  # stable: the invalid ones in list order


class ConstrainedBeamSearch(BeamSearch):
    """The K best hypotheses of each sentence that hold all its phrases (`search.Strategy`),
    with the `ConstrainedSettings` of each sentence. `BeamSearch`'s `done` and results,
    and a third output: `(ids [A, K, L + 1], scores [A, K], constraints_met bool [A, K])`.
    The arguments are `BeamSearch`'s.
    """

    def start(self, batch_size, buffer_length, settings):
        k = self.width
        phrases = tf.shape(settings.strategy.phrases)  # [3]: B, C, P
        return ConstrainedBeamState(
            beam=super().start(batch_size, buffer_length, settings),
            met=tf.zeros([batch_size, k, phrases[1]], tf.bool),  # [B, K, C]
            partial=tf.zeros([batch_size, k, phrases[1], phrases[2]], tf.bool),  # [B, K, C, P]
            partial_log_probs=tf.zeros([batch_size, k, phrases[1], phrases[2]]),  # [B, K, C, P]
            finished_met=tf.zeros([batch_size, k], tf.bool),  # [B, K]
        )

    def no_results(self, batch_size, buffer_length):
        return (*super().no_results(batch_size, buffer_length), tf.zeros([batch_size, self.width], tf.bool))

    def extend(self, state, ids, logits, allowed, step, settings):
        """The candidates (`_candidates`) in stripe order: as `BeamSearch.extend`, the
        first K that end join the pool, and the first K that do not stay live. At most K
        of the first 2K end, so K that do not always exist: no (beam, end token) pair is
        there twice, as the valid ones are first occurrences, and the invalid ones that
        fill the rest all come from beam search's 2K (at least as many of those are
        invalid as there are slots to fill), whose pairs are distinct."""
        k, phrases, lengths = self.width, settings.strategy.phrases, settings.strategy.phrase_lengths
        log_probs = self._log_probs(state, logits, allowed, step, settings)  # [A, K, V]
        scores, token_log_probs, beams, tokens, valid = self._candidates(state, log_probs, settings.strategy)
        # A prefix's tokens are forced as the prefix's, not again as a phrase's.
        parent_forced = gather_beams(state.beam.live_forced_log_probs, beams)  # [A, N]
        if settings.steering:
            token_log_probs = tf.where((step < settings.steering.prefix_lengths)[:, None], 0.0, token_log_probs)
        (met, partial), (partial_log_probs, met_log_probs) = advance_matches(
            gather_beams(state.met, beams), gather_beams(state.partial, beams), tokens, phrases, lengths, self.end_id,
            log_probs=(gather_beams(state.partial_log_probs, beams), token_log_probs),
        )  # [A, N, C], [A, N, C, P], [A, N, C, P], [A, N]
        forced = forced_through_prefix(parent_forced + met_log_probs, scores, step, settings)  # [A, N]
        order = stripe_order(scores, banks(met, partial, lengths), valid, tf.reduce_sum(lengths, axis=1), 2 * k)
        scores, forced, beams, tokens, valid, met, partial, partial_log_probs = gather_beams(
            (scores, forced, beams, tokens, valid, met, partial, partial_log_probs), order
        )  # [A, 2K, ...]
        ends = tf.equal(tokens, self.end_id)  # [A, 2K]
        first = (scores[:, :k], forced[:, :k], beams[:, :k], tokens[:, :k], ends[:, :k] & valid[:, :k], met[:, :k])
        finished_scores, finished_ids, finished_flags, finished_met = self._pool(state, ids, step, settings, first)
        _, live_positions = tf.math.top_k(tf.cast(~ends, tf.int32), k=k)  # [A, K]: stable, so stripe order
        live_log_probs, live_forced, parents, tokens, met, partial, partial_log_probs = gather_beams(
            (scores, forced, beams, tokens, met, partial, partial_log_probs), live_positions
        )  # [A, K, ...]
        beam = BeamState(live_log_probs, live_forced, finished_ids, finished_scores, finished_flags)
        return ConstrainedBeamState(beam, met, partial, partial_log_probs, finished_met), parents, tokens

    def _log_probs(self, state, logits, allowed, step, settings):
        """float32 `[A, K, V]`: the log-probs of the tokens each hypothesis may write, NEG
        for the others: `allowed`, and the end token only once every phrase is met, or at
        the sentence's length limit (where the loop allows nothing else)."""
        unused = tf.equal(settings.strategy.phrase_lengths, 0)  # [A, C]: no phrase in the slot
        must_end = step + 1 >= settings.max_lengths  # [A]
        may_end = tf.reduce_all(state.met | unused[:, None, :], axis=2) | must_end[:, None]  # [A, K]
        is_end = tf.equal(tf.range(logits.shape[2]), self.end_id)  # [V]
        mask = hypothesis_mask(allowed) & (may_end[:, :, None] | ~is_end)  # [A, K, V]
        return tf.where(mask, tf.nn.log_softmax(logits), NEG)

    def _candidates(self, state, log_probs, settings):
        """A step's candidates, N = 3K + 2KC: beam search's 2K best (in its order, which
        a sentence without phrases keeps), each hypothesis's own best (fairseq's: a
        hypothesis of a low bank stays in reach), and its tokens toward each phrase it
        has not met (`phrase_candidates`), from `log_probs` `[A, K, V]`, the tokens'
        log-probs as `_log_probs` masked them.

        Returns:
            `(scores float32, token_log_probs float32, beams int32, tokens int32, valid
            bool)`, each `[A, N]`: `valid` the real candidates seen first; the others
            score NEG, so that none fills a live slot.
        """
        k, vocab_size = self.width, log_probs.shape[2]
        candidate_log_probs = state.beam.live_log_probs[:, :, None] + log_probs  # [A, K, V]
        _, top_beams, top_tokens = best_candidates(candidate_log_probs, 2 * k)  # [A, 2K] each
        own_tokens = tf.argmax(candidate_log_probs, axis=2, output_type=tf.int32)  # [A, K]
        own_beams = tf.broadcast_to(tf.range(k), tf.shape(own_tokens))  # [A, K]
        phrase_beams, phrase_tokens, wanted = phrase_candidates(
            state.met, state.partial, settings.phrases, settings.phrase_lengths
        )  # [A, 2KC] each
        beams = tf.concat([top_beams, own_beams, phrase_beams], axis=1)  # [A, N]
        tokens = tf.concat([top_tokens, own_tokens, phrase_tokens], axis=1)  # [A, N]
        keys = beams * vocab_size + tokens  # [A, N]: the flat index of each candidate
        # Gathered, so that each phrase token is scored as the mask left it (forced prefix, limit).
        scores, token_log_probs = (
            tf.gather(tf.reshape(x, [-1, k * vocab_size]), keys, batch_dims=1) for x in (candidate_log_probs, log_probs)
        )  # [A, N] each
        wanted = tf.concat([tf.ones_like(top_beams, tf.bool), tf.ones_like(own_beams, tf.bool), wanted], axis=1)
        valid = first_real(keys, wanted & (scores > NEG / 2))  # [A, N]
        return tf.where(valid, scores, NEG), token_log_probs, beams, tokens, valid

    def _pool(self, state, ids, step, settings, first):
        """The pool of finished hypotheses once the ending candidates among `first`, the
        first K of the stripe order, join it: `(scores [A, K], ids [A, K, L + 1], flags
        [A, K], met [A, K])`, those that met every phrase first, by score within (so its
        first slot is the best that met them all, whatever beat it unmet at the limit).

        Args:
            first: `(scores, forced, beams, tokens, ends, met)`, `[A, K]` each (`forced`:
                the forced part of the log-prob; `ends`: the valid candidates that end;
                `met` `[A, K, C]`).
        """
        k = self.width
        scores, forced, beams, tokens, ends, met = first
        unused = tf.equal(settings.strategy.phrase_lengths, 0)  # [A, C]
        new_position = tf.one_hot(step + 1, tf.shape(ids)[2], dtype=tf.int32)  # [L + 1]
        new_ids = gather_beams(ids, beams) + tokens[:, :, None] * new_position  # [A, K, L + 1]
        new_scores = tf.where(ends, normalized_scores(scores, forced, step + 1, settings.strategy.alpha), NEG)
        new_met = ends & tf.reduce_all(met | unused[:, None, :], axis=2)  # [A, K]
        old = (state.beam.finished_scores, state.beam.finished_ids, state.beam.finished_flags, state.finished_met)
        new = (new_scores, new_ids, ends, new_met)
        pool = tuple(tf.concat([a, b], axis=1) for a, b in zip(old, new))  # [A, 2K, ...]
        # By score (the old pool first on a tie, as `BeamSearch`'s), then met first: both stable.
        pool = gather_beams(pool, tf.math.top_k(pool[0], k=2 * k).indices)
        return gather_beams(pool, tf.math.top_k(tf.cast(pool[3], tf.int32), k=k).indices)  # [A, K, ...]

    def done(self, state, ids, step, settings):
        """`BeamSearch.done` on the beams (the pool's slots that count hold hypotheses that
        met every phrase: one that did not ends only at the length limit, the last step),
        or, for a sentence with phrases, once K hypotheses that met them all have finished,
        as fairseq's search stops at K finished ones.

        The bound alone would rarely stop such a sentence: a live hypothesis that has not
        met its phrases will pay for their tokens undivided, but no bound can know how much,
        so it is bounded as if they were free, far above the finished hypotheses, which have
        paid; the search would run every such sentence to its length limit."""
        has_phrases = tf.reduce_any(settings.strategy.phrase_lengths > 0, axis=1)  # [A]
        finished_met = tf.reduce_sum(tf.cast(state.finished_met, tf.int32), axis=1)  # [A]
        return super().done(state.beam, ids, step, settings) | (has_phrases & (finished_met >= self.width))

    def results(self, state, ids, step, settings):
        """`BeamSearch.results` of the pool, and whether each holds every phrase: bool
        `[A, K]`, false in a slot that holds no hypothesis."""
        return (*super().results(state.beam, ids, step, settings), state.finished_met)


def constrained_beam_search(
    symbols_to_logits_fn,
    initial_ids,
    initial_cache,
    vocab_size,
    *,
    max_lengths,
    phrases,
    phrase_lengths,
    beam_size=4,
    alpha=0.6,
    end_id=END_ID,
    pad_id=PAD_ID,
    start_id=START_ID,
    sentence_cache=None,
    final_results=None,
    steering=None,
):
    """The K best output sequences of every sentence that hold all its phrases: `search`
    with `ConstrainedBeamSearch`.

    Args:
        symbols_to_logits_fn, initial_ids, initial_cache, vocab_size, max_lengths,
            sentence_cache, end_id, pad_id, start_id, steering: as `search.search`
            takes them. `max_lengths` must leave room for the phrases (the model-level
            `constrained_ids` grows it by their tokens).
        phrases: int32 `[B, C, P]`, C, P >= 1: each sentence's phrases, 0-padded
            (`padded_phrases`).
        phrase_lengths: int32 `[B, C]`: their tokens; 0 = no phrase in the slot.
        beam_size, alpha, final_results: as `beam_search.beam_search` takes them.

    Returns:
        `(ids int32 [B, K, L], scores float32 [B, K], constraints_met bool [B, K])`:
        `beam_search`'s ids and scores, the hypotheses that hold every phrase first
        (best first among them), and whether each does. A sentence without phrases
        gets `beam_search`'s ids and scores exactly, met true (false in a slot that
        holds no hypothesis).
    """
    phrases, phrase_lengths = checked_phrases(phrases, phrase_lengths)
    settings = ConstrainedSettings(alpha=tf.cast(alpha, tf.float32), phrases=phrases, phrase_lengths=phrase_lengths)
    return search(
        ConstrainedBeamSearch(beam_size, final_results, end_id), symbols_to_logits_fn, initial_ids, initial_cache,
        vocab_size, max_lengths=max_lengths, settings=settings, sentence_cache=sentence_cache, end_id=end_id,
        pad_id=pad_id, start_id=start_id, steering=steering,
    )  # [B, K, L], [B, K], [B, K]
