"""Lexically constrained beam search (app/decoding/constrained_beam_search.py): beam search's
result exactly without phrases, hand-traced searches with them, and its parts alone.

Token ids as in test_beam_search.py: 0 pad, 1 start, 2 end; 3 and up are words. A table
prefix missing from a table ends at once; ZERO_LOGIT marks a token the model never emits.
"""

import numpy as np
import pytest
import tensorflow as tf

from app.decoding.beam_search import beam_search
from app.decoding.constrained_beam_search import (
    advance_matches,
    banks,
    constrained_beam_search,
    first_real,
    padded_phrases,
    stripe_order,
)
from app.decoding.model_search import constrained_ids, translate_ids
from app.decoding.steering import batch_steering
from tests.decoding.test_beam_search import END, random_cache, random_fn, start_ids, table_fn
from tests.decoding.test_steering import (  # noqa: F401 (transformer: a fixture)
    SOURCE_IDS,
    forced_score,
    token_log_probs,
    transformer,
)

V = 9


def no_phrases(batch_size, count=2, width=3):
    """`(phrases [B, C, P], phrase_lengths [B, C])` with no phrase at all."""
    return np.zeros([batch_size, count, width], np.int32), np.zeros([batch_size, count], np.int32)


def phrase_arrays(sentences, width=3):
    """`(phrases [B, C, P], phrase_lengths [B, C])` from each sentence's list of phrases."""
    count = max(1, max(len(phrases) for phrases in sentences))
    phrases = np.zeros([len(sentences), count, width], np.int32)
    lengths = np.zeros([len(sentences), count], np.int32)
    for row, sentence in enumerate(sentences):
        for column, phrase in enumerate(sentence):
            phrases[row, column, : len(phrase)] = phrase
            lengths[row, column] = len(phrase)
    return phrases, lengths


def random_searches(seed, k, final_results, phrases, phrase_lengths, max_lengths=(5, 9, 3)):
    """`beam_search` and `constrained_beam_search` over `random_fn(V, seed)`, three sentences."""
    common = dict(max_lengths=list(max_lengths), beam_size=k, final_results=final_results)
    arguments = (start_ids(3), random_cache(3, V, seed + 1), V)
    plain = beam_search(random_fn(V, seed), *arguments, **common)
    constrained = constrained_beam_search(
        random_fn(V, seed), *arguments, phrases=phrases, phrase_lengths=phrase_lengths, **common
    )
    return plain, constrained


@pytest.mark.parametrize("k, final_results", [(1, 1), (2, 1), (2, 2), (4, 1), (4, 4)])
def test_without_phrases_it_is_beam_search_exactly(k, final_results):
    for seed in range(5):
        (ids, scores), (constrained, constrained_scores, met) = random_searches(
            seed, k, final_results, *no_phrases(3)
        )
        np.testing.assert_array_equal(constrained, ids)
        np.testing.assert_array_equal(constrained_scores, scores)
        np.testing.assert_array_equal(met, scores > -1e8)  # true in each slot that holds a hypothesis


@pytest.mark.parametrize("k", [2, 4])
def test_the_rows_without_phrases_of_a_mixed_batch_are_beam_search_exactly(k):
    # Sentence 1 has two phrases (one of two tokens), sentence 2 none in two slots of three.
    phrases, lengths = phrase_arrays([[], [[7, 8], [5]], []])
    for seed in range(5):
        (ids, scores), (constrained, constrained_scores, met) = random_searches(
            seed, k, k, phrases, lengths, max_lengths=(5, 9, 9)
        )
        for row in (0, 2):
            np.testing.assert_array_equal(constrained[row], ids[row])
            np.testing.assert_array_equal(constrained_scores[row], scores[row])
        assert met[1, 0] and contains(constrained[1, 0], [7, 8]) and contains(constrained[1, 0], [5])


def contains(row, phrase):
    """Whether the output `row` holds `phrase` as contiguous tokens."""
    row = list(np.asarray(row))
    return any(row[i : i + len(phrase)] == list(phrase) for i in range(len(row) - len(phrase) + 1))


def search_table(table, sentences, max_lengths, k=2, alpha=0.6, vocab_size=7):
    """`constrained_beam_search` of one sentence per phrase list over `table`."""
    phrases, lengths = phrase_arrays(sentences)
    return constrained_beam_search(
        table_fn(table, vocab_size), start_ids(len(sentences)), {}, vocab_size, max_lengths=max_lengths,
        phrases=phrases, phrase_lengths=lengths, beam_size=k, alpha=alpha,
    )


def first_occurrence(row, phrase):
    """The positions of the first occurrence of `phrase` in `row`, [] if none."""
    row = list(row)
    for start in range(len(row) - len(phrase) + 1):
        if row[start : start + len(phrase)] == list(phrase):
            return list(range(start, start + len(phrase)))
    return []


def expected_scores(table, rows, phrases=(), alpha=0.6, vocab_size=7):
    """Each output row's score as the fake model scores it: the log-probs of the first
    occurrence of each of `phrases` that the row holds whole undivided, the others over
    lp(length)."""
    scores = []
    for row in rows:
        forced = {position for phrase in phrases for position in first_occurrence(row, phrase)}
        scores.append(forced_score(token_log_probs(table_fn(table, vocab_size), {}, row), forced, alpha))
    return scores


# 3 (.6) or 4 (.4) first; 3 then ends (.7) or 4 (.3), 4 ends (.9) or 3 (.1). 5 and 6 never.
TABLE = {(): {3: 0.6, 4: 0.4}, (3,): {END: 0.7, 4: 0.3}, (4,): {END: 0.9, 3: 0.1}}


def test_a_phrase_the_model_never_writes_appears():
    # Phrase [6], K = 2, at most 3 tokens. Step 0: the end token is masked; candidates
    # 3, 4, 5 (bank 0) and 6 (bank 1, the phrase met): stripes 6, 3 stay live. Step 1:
    # "6" may end (met): "6 end" leads bank 1 and finishes; "3 4" (bank 0) and "3 6"
    # (bank 1) stay live, "3 end" is masked. Step 2, the limit: "3 6 end" (met) and
    # "3 4 end" (unmet, far likelier) finish. The pool ranks the met first: "6 end" (the
    # forced 6's -1e4 undivided in both, and nothing else to pay), then "3 6 end"; "3 4
    # end" is dropped.
    ids, scores, met = search_table(TABLE, [[[6]]], max_lengths=[3])
    rows = [[6, END, 0], [3, 6, END]]
    assert ids.numpy().tolist() == [rows]
    assert met.numpy().tolist() == [[True, True]]
    np.testing.assert_allclose(scores[0], expected_scores(TABLE, np.array(rows), [[6]]), rtol=1e-6)


# Runs of 3 cost little (.9 a step) and never need to end; 6 the model never writes.
CHEAP_RUNS = {(3,) * n: {3: 0.9, END: 0.1} for n in range(40)}


def test_a_sentence_with_phrases_stops_once_k_hypotheses_that_met_them_finished():
    # The live "3 3 3 ..." have not met [6]: bounded as if its -1e4 were free, they would
    # stay above "6 end" (-1e4 paid) to the limit of 40. The search stops once K = 2
    # hypotheses holding 6 have finished, a few steps in; a sentence without phrases keeps
    # the bound's rule (its own test: it is beam search exactly).
    calls = tf.Variable(0)
    phrases, lengths = phrase_arrays([[[6]]])
    ids, _, met = constrained_beam_search(
        table_fn(CHEAP_RUNS, 7, calls), start_ids(1), {}, 7, max_lengths=[40], phrases=phrases,
        phrase_lengths=lengths, beam_size=2, alpha=0.6,
    )
    assert met.numpy().tolist() == [[True, True]] and all(contains(row, [6]) for row in ids.numpy()[0])
    assert int(calls.numpy()) <= 4


def test_at_a_limit_too_short_for_the_phrase_the_best_finished_hypothesis_is_returned():
    # Three phrase tokens cannot fit in two: at step 0 the end token is masked, the
    # stripes keep "5" (bank 1, the phrase begun) and "3"; at step 1 both must end.
    ids, scores, met = search_table(TABLE, [[[5, 6, 3]]], max_lengths=[2])
    rows = [[3, END], [5, END]]
    assert ids.numpy().tolist() == [rows]
    assert met.numpy().tolist() == [[False, False]]
    np.testing.assert_allclose(scores[0], expected_scores(TABLE, np.array(rows)), rtol=1e-6)


# After 5 the model goes on with 3 (.9), rarely with 6 (.1); "5 3 6" holds 5 and 6 apart.
SPLIT_TABLE = {
    (): {3: 0.5, 5: 0.5},
    (3,): {END: 0.9, 5: 0.1},
    (5,): {3: 0.9, 6: 0.1},
    (5, 3): {6: 0.9, END: 0.1},
    (5, 6): {END: 1.0},
}


def test_a_phrase_of_two_tokens_appears_contiguous():
    ids, scores, met = search_table(SPLIT_TABLE, [[[5, 6]], []], max_lengths=[6, 6])
    assert ids.numpy()[0, 0].tolist() == [5, 6, END, 0, 0, 0] and met.numpy()[0, 0]
    for row, row_met in zip(ids.numpy()[0], met.numpy()[0]):
        assert row_met == contains(row, [5, 6])
    # Unconstrained, the best holds 5 and 6 apart, and nothing holds them side by side.
    assert ids.numpy()[1, 0].tolist() == [5, 3, 6, END, 0, 0]
    assert not any(contains(row, [5, 6]) for row in ids.numpy()[1])
    np.testing.assert_allclose(scores[0, 0], expected_scores(SPLIT_TABLE, ids.numpy()[0, :1], [[5, 6]]), rtol=1e-6)


def test_two_phrases_both_appear():
    ids, scores, met = search_table(TABLE, [[[5, 6], [4]]], max_lengths=[6], k=2)
    best = ids.numpy()[0, 0]
    assert met.numpy()[0, 0] and contains(best, [5, 6]) and contains(best, [4])
    for row, row_met in zip(ids.numpy()[0], met.numpy()[0]):
        assert row_met == (contains(row, [5, 6]) and contains(row, [4]))
    np.testing.assert_allclose(scores[0], expected_scores(TABLE, ids.numpy()[0], [[5, 6], [4]]), rtol=1e-6)


def test_a_phrase_that_repeats_a_banned_ngram_is_never_met():
    # "3 3" repeats the unigram 3: under no_repeat_ngram_size 1 it cannot be written, so
    # the search runs to the limit and returns the best it finished, met false.
    phrases, lengths = phrase_arrays([[[3, 3]], [[3, 3]]])
    ids, _, met = constrained_beam_search(
        table_fn(TABLE, 7), start_ids(2), {}, 7, max_lengths=[5, 5], phrases=phrases, phrase_lengths=lengths,
        beam_size=2, steering=batch_steering(2, no_repeat_ngram_size=[1, 0]),
    )
    assert met.numpy().tolist() == [[False, False], [True, True]]
    assert np.all(ids.numpy()[0, :, -1] == END)  # both at the limit
    assert all(contains(row, [3, 3]) for row in ids.numpy()[1])


def matches_after(tokens, phrases):
    """`(met [C], partial [C, P])` of one hypothesis after writing `tokens`, one a step."""
    phrases, lengths = phrase_arrays([phrases])
    met = tf.zeros([1, 1, phrases.shape[1]], tf.bool)
    partial = tf.zeros([1, 1] + list(phrases.shape[1:]), tf.bool)
    for token in tokens:
        met, partial = advance_matches(met, partial, tf.constant([[token]]), phrases, lengths)
    return met.numpy()[0, 0].tolist(), partial.numpy()[0, 0]


def test_every_partial_match_is_followed():
    # "a a a b" holds "a a b": after "a a a" both "a" and "a a" are partial matches.
    a, b = 3, 4
    assert matches_after([a, a, a, b], [[a, a, b]])[0] == [True]
    assert matches_after([a, a, a], [[a, a, b]])[0] == [False]
    met, partial = matches_after([a, a], [[a, a, b], [a, b], [b]])
    assert met == [False, False, False]
    assert partial.tolist() == [[True, True, False], [True, False, False], [False, False, False]]
    # Nested and repeated phrases: one occurrence meets each; the end token matches nothing.
    assert matches_after([a, b], [[a, b], [b], [a, b]])[0] == [True, True, True]
    assert matches_after([a, END], [[a, END]])[0] == [False]


def test_a_met_phrase_is_forced_at_its_own_tokens_log_probs_once():
    # Token t is written with log-prob -t. "a a a b" meets "a a b" with its last three
    # tokens (-3, -3, -4), not the first "a"; "b" is met by the last token, and met
    # again nothing is added. The partial match "a" alone of "a b" after "a" holds -3.
    a, b = 3, 4
    phrases, lengths = phrase_arrays([[[a, a, b], [b]]])
    met = tf.zeros([1, 1, 2], tf.bool)
    partial = tf.zeros([1, 1, 2, 3], tf.bool)
    partial_log_probs = tf.zeros([1, 1, 2, 3])
    added = []
    for token in [a, a, a, b, b]:
        (met, partial), (partial_log_probs, met_log_probs) = advance_matches(
            met, partial, tf.constant([[token]]), phrases, lengths,
            log_probs=(partial_log_probs, tf.constant([[-float(token)]])),
        )
        added.append(float(met_log_probs[0, 0]))
    assert added == [0.0, 0.0, 0.0, -10.0 - 4.0, 0.0]
    (_, _), (partial_log_probs, _) = advance_matches(
        tf.zeros([1, 1, 2], tf.bool), tf.zeros([1, 1, 2, 3], tf.bool), tf.constant([[a]]), phrases, lengths,
        log_probs=(tf.zeros([1, 1, 2, 3]), tf.constant([[-3.0]])),
    )
    assert partial_log_probs.numpy()[0, 0].tolist() == [[-3.0, 0.0, 0.0], [0.0, 0.0, 0.0]]


def test_a_search_finds_a_phrase_that_overlaps_itself():
    # The model writes "3 3 3 4 end" and nothing else: it holds "3 3 4", so the
    # constrained search returns it unchanged, met.
    table = {(): {3: 1.0}, (3,): {3: 1.0}, (3, 3): {3: 1.0}, (3, 3, 3): {4: 1.0}, (3, 3, 3, 4): {END: 1.0}}
    ids, _, met = search_table(table, [[[3, 3, 4]]], max_lengths=[6], k=2)
    assert ids.numpy()[0, 0].tolist() == [3, 3, 3, 4, END, 0] and met.numpy()[0, 0]


def test_banks_count_the_constraint_tokens_held():
    phrases, lengths = phrase_arrays([[[3, 4, 5], [6, 7], [8]]])
    met = tf.constant([[[False, True, False], [False, False, False], [True, True, True]]])  # [1, 3, C]
    partial = np.zeros([1, 3, 3, 3], bool)
    partial[0, 0, 0, 1] = True  # "3 4" of the first phrase: 2 tokens, with 2 met
    partial[0, 1, 0, 0] = partial[0, 1, 1, 0] = True  # the longest is 1 token
    partial[0, 2, 0, 1] = True  # a partial match of a met phrase counts for nothing more
    assert banks(met, tf.constant(partial), lengths).numpy().tolist() == [[4, 1, 6]]


def test_the_stripes_deal_the_beam_among_the_banks():
    # fairseq's example: banks 3 3 3 2 2 2 2 1 1 1 0 0, best first within each.
    candidate_banks = tf.constant([[3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 0, 0]])
    scores = -tf.range(12, dtype=tf.float32)[None, :]
    order = stripe_order(scores, candidate_banks, tf.ones([1, 12], tf.bool), tf.constant([3]), 12)
    assert tf.gather(candidate_banks[0], order[0]).numpy().tolist() == [3, 2, 1, 0, 3, 2, 1, 0, 3, 2, 1, 2]
    assert order.numpy()[0].tolist() == [0, 3, 7, 10, 1, 4, 8, 11, 2, 5, 9, 6]
    # Invalid candidates come last, in list order; without constraints, the order of scores.
    valid = tf.constant([[False, True, True, False]])
    order = stripe_order(tf.constant([[0.0, -2.0, -1.0, -1.0]]), tf.zeros([1, 4], tf.int32), valid, tf.constant([0]), 4)
    assert order.numpy().tolist() == [[2, 1, 0, 3]]


def test_a_candidate_seen_twice_counts_once():
    keys = tf.constant([[5, 7, 5, 9, 7, 5]])
    real = tf.constant([[False, True, True, True, True, True]])
    assert first_real(keys, real).numpy().tolist() == [[False, True, True, True, False, False]]


def test_padded_phrases_have_at_least_one_phrase_and_token():
    phrases, lengths = padded_phrases(tf.ragged.constant([[[5, 6], [7]], [], [[], [8]]], tf.int32))
    assert phrases.numpy().tolist() == [[[5, 6], [7, 0]], [[0, 0], [0, 0]], [[0, 0], [8, 0]]]
    assert lengths.numpy().tolist() == [[2, 1], [0, 0], [0, 1]]
    phrases, lengths = padded_phrases(tf.ragged.constant([[], []], tf.int32, ragged_rank=2, inner_shape=()))
    assert phrases.shape == (2, 1, 1) and lengths.numpy().tolist() == [[0], [0]]


def test_wrong_phrase_shapes_and_lengths_are_refused():
    with pytest.raises(ValueError, match="phrases must be"):
        constrained_beam_search(
            table_fn(TABLE, 7), start_ids(1), {}, 7, max_lengths=[3], phrases=[[6]], phrase_lengths=[1]
        )
    with pytest.raises(tf.errors.InvalidArgumentError, match="at most the phrases' width"):
        constrained_beam_search(
            table_fn(TABLE, 7), start_ids(1), {}, 7, max_lengths=[3], phrases=[[[6]]], phrase_lengths=[[2]]
        )


def test_a_constrained_search_runs_inside_a_tf_function_of_any_batch():
    fn = random_fn(V, seed=3)
    specs = (
        tf.TensorSpec([None], tf.int32),
        {"hash": tf.TensorSpec([None], tf.int32), "bias": tf.TensorSpec([None, V], tf.float32)},
        tf.TensorSpec([None], tf.int32),
        tf.TensorSpec([None, None, None], tf.int32),
        tf.TensorSpec([None, None], tf.int32),
    )

    def search(initial_ids, cache, max_lengths, phrases, phrase_lengths):
        return constrained_beam_search(
            fn, initial_ids, cache, V, max_lengths=max_lengths, phrases=phrases, phrase_lengths=phrase_lengths,
            beam_size=2,
        )

    phrases, lengths = phrase_arrays([[[7, 8], [5]], [], [[4, 4, 6]]])
    arguments = (start_ids(3), random_cache(3, V, seed=4), tf.constant([9, 5, 9]), tf.constant(phrases),
                 tf.constant(lengths))
    compiled = tf.function(search, input_signature=specs)
    for got, expected in zip(compiled(*arguments), search(*arguments)):
        np.testing.assert_allclose(got, expected, rtol=1e-6)


MODEL_PHRASES = [[[21, 22], [30]], [], [[9]]]


def test_the_model_level_search_meets_its_phrases_and_splits_them_with_the_sentences(transformer):  # noqa: F811
    phrases, lengths = phrase_arrays(MODEL_PHRASES)
    ids, scores, met = constrained_ids(transformer, SOURCE_IDS, phrases, lengths, beam_size=2, max_extra_length=2)
    # Source length + 2 + the phrases' tokens, end token included.
    assert ids.shape[-1] == 5 + 2 + 3
    plain, plain_scores = translate_ids(transformer, SOURCE_IDS, beam_size=2, max_extra_length=2)
    np.testing.assert_array_equal(ids[1, :, : plain.shape[-1]], plain[1])
    np.testing.assert_array_equal(scores[1], plain_scores[1])
    assert met.numpy()[:, 0].tolist() == [True, True, True]
    for row in (0, 2):
        assert all(contains(ids[row, 0], phrase) for phrase in MODEL_PHRASES[row])
    split = constrained_ids(
        transformer, SOURCE_IDS, phrases, lengths, beam_size=2, max_extra_length=2, parallel_searches=2
    )
    np.testing.assert_array_equal(split[0], ids)
    np.testing.assert_allclose(split[1], scores, rtol=1e-5)
    np.testing.assert_array_equal(split[2], met)


def test_a_steered_constrained_search_meets_a_phrase_inside_its_prefix(transformer):  # noqa: F811
    phrases, lengths = phrase_arrays([[[9, 10]], [], []])
    steering = batch_steering(3, prefix=[[9, 10], [0, 0], [0, 0]], prefix_lengths=[2, 0, 0])
    ids, _, met = constrained_ids(
        transformer, SOURCE_IDS, phrases, lengths, beam_size=2, max_extra_length=1, steering=steering
    )
    assert np.all(ids.numpy()[0, :, :2] == [9, 10]) and met.numpy()[0].tolist() == [True, True]


def test_the_model_level_search_runs_inside_a_tf_function_split_in_two(transformer):  # noqa: F811
    specs = [tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None, None, None], tf.int32),
             tf.TensorSpec([None, None], tf.int32)]

    def translate(source_ids, phrases, phrase_lengths):
        return constrained_ids(
            transformer, source_ids, phrases, phrase_lengths, beam_size=2, max_extra_length=2, parallel_searches=2
        )

    arguments = [tf.constant(SOURCE_IDS), *(tf.constant(x) for x in phrase_arrays(MODEL_PHRASES))]
    for got, expected in zip(tf.function(translate, input_signature=specs)(*arguments), translate(*arguments)):
        np.testing.assert_allclose(got, expected, rtol=1e-5)
