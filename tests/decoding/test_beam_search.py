"""Beam search against fake models whose answers are worked out by hand.

Token ids: 0 pad, 1 start, 2 end; 3 and up are words. A *table* maps a prefix (the
tokens after the start token) to the probabilities of the next token; prefixes not in
the table end at once (the end token with probability 1).
"""

import math

import numpy as np
import pytest
import tensorflow as tf

from app.decoding.beam_search import NEG, beam_search, best_candidates, length_penalty

PAD, START, END = 0, 1, 2
ZERO_LOGIT = -1e4  # exp(-1e4) == 0 in float32: a token the fake model never emits


def table_fn(table, vocab_size, calls=None):
    """A `symbols_to_logits_fn` that looks the whole prefix up in `table`, in TF ops.

    `calls`, a `tf.Variable`, counts the calls (that is, the loop's steps).
    """
    prefixes = sorted(table)
    width = max(len(p) for p in prefixes) + 1
    prefix_ids = np.zeros([len(prefixes), width], np.int32)  # [P, W]: start, tokens, 0
    prefix_ids[:, 0] = START
    logits = np.full([len(prefixes), vocab_size], ZERO_LOGIT, np.float32)  # [P, V]
    for row, prefix in enumerate(prefixes):
        prefix_ids[row, 1 : len(prefix) + 1] = prefix
        for token, probability in table[prefix].items():
            logits[row, token] = math.log(probability)
    prefix_lengths = np.array([len(p) + 1 for p in prefixes], np.int32)  # [P]
    ends_at_once = np.full([vocab_size], ZERO_LOGIT, np.float32)
    ends_at_once[END] = 0.0

    def fn(ids, step, cache):
        if calls is not None:
            calls.assign_add(1)
        length = step + 1  # positions 0..step are filled
        ids = tf.pad(ids, [[0, 0], [0, tf.maximum(0, width - tf.shape(ids)[1])]])[:, :width]  # [N, W]
        compared = tf.range(width) < length  # [W]
        same = tf.equal(ids[:, None, :], prefix_ids[None, :, :]) | ~compared  # [N, P, W]
        matches = tf.reduce_all(same, axis=2) & tf.equal(prefix_lengths, length)[None, :]  # [N, P]
        row = tf.argmax(tf.cast(matches, tf.int32), axis=1)  # [N]
        found = tf.reduce_any(matches, axis=1)  # [N]
        return tf.where(found[:, None], tf.gather(logits, row), ends_at_once), cache

    return fn


def random_fn(vocab_size, seed=0, with_cache=True):
    """A prefix-dependent fake model with random weights; padding and the start token
    are its favourite tokens, so the search must mask them; the end token is rarer.

    The logits depend on the newest token, the step, a hash of the whole prefix and a
    per-sentence bias held in the cache (`{"bias": [B, V], "hash": [B]}`). With
    `with_cache` the hash is carried in the cache (so beams must gather it correctly);
    without, it is recomputed from the token buffer: both must give the same answer.
    """
    rng = np.random.default_rng(seed)
    token_table = rng.normal(size=[vocab_size, vocab_size]).astype(np.float32) * 2
    step_table = rng.normal(size=[64, vocab_size]).astype(np.float32)
    hash_table = rng.normal(size=[7, vocab_size]).astype(np.float32) * 2
    favourites = np.zeros([vocab_size], np.float32)
    favourites[[PAD, START]] = 10.0
    favourites[END] = -2.0  # so that some hypotheses run to their maximum length

    def fn(ids, step, cache):
        newest = ids[:, step]  # [N]
        if with_cache:
            prefix_hash = cache["hash"] + newest * (step + 1)  # [N]
        else:
            filled = tf.range(tf.shape(ids)[1]) <= step  # [L + 1]
            weights = tf.where(filled, tf.range(tf.shape(ids)[1]) + 1, 0)  # [L + 1]
            prefix_hash = tf.reduce_sum(ids * weights[None, :], axis=1)  # [N]
        logits = (
            tf.gather(token_table, newest)
            + tf.gather(step_table, step)
            + tf.gather(hash_table, prefix_hash % 7)
            + cache["bias"]
            + favourites
        )
        return logits, {"hash": prefix_hash, "bias": cache["bias"]}

    return fn


def random_cache(batch_size, vocab_size, seed=1):
    bias = np.random.default_rng(seed).normal(size=[batch_size, vocab_size]).astype(np.float32)
    return {"hash": tf.zeros([batch_size], tf.int32), "bias": tf.constant(bias)}


def start_ids(batch_size):
    return tf.fill([batch_size], START)


def lp(length, alpha):
    return ((5.0 + length) / 6.0) ** alpha


def assert_well_formed(ids, scores):
    """Rows are word tokens, one end token, then padding; n-best sorted best first."""
    for sentence_ids, sentence_scores in zip(ids, scores):
        assert np.all(np.diff(sentence_scores) <= 0), sentence_scores
        for row in sentence_ids:
            length = list(row).index(END) + 1
            assert np.all(row[: length - 1] >= 3), row
            assert np.all(row[length:] == PAD), row


# A hand-traced search, V = 5, K = 2 (see test_exact_ids_scores_and_early_stop).
TRACED_TABLE = {
    (): {3: 0.5, 4: 0.3, END: 0.2},
    (3,): {END: 0.6, 4: 0.4},
    (4,): {END: 0.1, 3: 0.9},
    (4, 3): {END: 0.8, 4: 0.2},
    (3, 4): {END: 0.9, 3: 0.1},
}


@pytest.mark.slow
@pytest.mark.parametrize("compiled", [False, True])
def test_exact_ids_scores_and_early_stop(compiled):
    # Step 0: live [3] .5, [4] .3 ([end] .2 is third: outside the top K, so not kept).
    # Step 1: [3 end] .30 finishes; live [4 3] .27, [3 4] .20 ([4 end] .03 dropped).
    # Step 2: [4 3 end] .216 and [3 4 end] .18 finish; the pool keeps .30 and .216.
    #         The best live beam, [4 3 4] .054, cannot beat .216 even at length 10: stop.
    calls = tf.Variable(0)
    fn = table_fn(TRACED_TABLE, 5, calls)

    def search(initial_ids, max_lengths):
        return beam_search(fn, initial_ids, {}, 5, max_lengths=max_lengths, beam_size=2, alpha=0.6)

    if compiled:
        search = tf.function(search)
    ids, scores = search(start_ids(1), tf.constant([10]))

    expected_ids = np.zeros([1, 2, 10], np.int32)
    expected_ids[0, 0, :2] = [3, END]
    expected_ids[0, 1, :3] = [4, 3, END]
    np.testing.assert_array_equal(ids, expected_ids)
    expected_scores = [[math.log(0.3) / lp(2, 0.6), math.log(0.216) / lp(3, 0.6)]]
    np.testing.assert_allclose(scores, expected_scores, rtol=1e-6)
    assert int(calls.numpy()) == 3  # not 10: the loop stopped early


# A short hypothesis [end] (.4) against a long one [3 3 end] (.6 * .9 * .65 = .351).
PENALTY_TABLE = {
    (): {END: 0.4, 3: 0.6},
    (3,): {3: 0.9, END: 0.1},
    (3, 3): {END: 0.65, 4: 0.35},
}


def test_length_penalty_changes_the_winner():
    fn = table_fn(PENALTY_TABLE, 5)
    short, long = math.log(0.4), math.log(0.6 * 0.9 * 0.65)

    ids, scores = beam_search(fn, start_ids(1), {}, 5, max_lengths=[10], beam_size=2, alpha=0.0)
    np.testing.assert_array_equal(ids[0, :, :3], [[END, 0, 0], [3, 3, END]])
    np.testing.assert_allclose(scores, [[short, long]], rtol=1e-6)

    # alpha = 1: short / 1 = -0.916 < long / (8 / 6) = -0.785.
    ids, scores = beam_search(fn, start_ids(1), {}, 5, max_lengths=[10], beam_size=2, alpha=1.0)
    np.testing.assert_array_equal(ids[0, :, :3], [[3, 3, END], [END, 0, 0]])
    np.testing.assert_allclose(scores, [[long / lp(3, 1.0), short / lp(1, 1.0)]], rtol=1e-6)


def test_each_sentence_ranks_by_its_own_alpha():
    # The batch of test_length_penalty_changes_the_winner's two cases at once.
    fn = table_fn(PENALTY_TABLE, 5)
    short, long = math.log(0.4), math.log(0.6 * 0.9 * 0.65)
    ids, scores = beam_search(fn, start_ids(2), {}, 5, max_lengths=[10, 10], beam_size=2, alpha=[0.0, 1.0])
    np.testing.assert_array_equal(ids[:, :, :3], [[[END, 0, 0], [3, 3, END]], [[3, 3, END], [END, 0, 0]]])
    np.testing.assert_allclose(scores, [[short, long], [long / lp(3, 1.0), short / lp(1, 1.0)]], rtol=1e-6)


# At step 1 both top-K candidates end ([3 end] .30, [4 end] .28). Were finished
# hypotheses kept in the beam, nothing would be left to extend; kept apart, the live
# beams [4 4] .22 and [3 3] .20 go on, and with alpha = 1 [4 4 4 end] wins.
CROWDING_TABLE = {
    (): {3: 0.5, 4: 0.5},
    (3,): {END: 0.6, 3: 0.4},
    (4,): {END: 0.56, 4: 0.44},
    (4, 4): {4: 1.0},
}


def test_finished_beams_do_not_crowd_out_live_ones():
    fn = table_fn(CROWDING_TABLE, 5)
    ids, scores = beam_search(fn, start_ids(1), {}, 5, max_lengths=[6], beam_size=2, alpha=1.0)
    np.testing.assert_array_equal(ids[0, :, :4], [[4, 4, 4, END], [3, END, 0, 0]])
    expected = [math.log(0.5 * 0.44) / lp(4, 1.0), math.log(0.5 * 0.6) / lp(2, 1.0)]
    np.testing.assert_allclose(scores, [expected], rtol=1e-6)


# As CROWDING_TABLE, but the live beam that wins is the second one: [3 3] (.20), below
# [4 4] (.22). Of the 2 x K = 4 candidates of step 1 the two that end go to the pool and
# both others stay live; keeping only K + 1 candidates would drop [3 3] and never find
# [3 3 3 3 3 end], whose .20 over six tokens beats [3 end]'s .30 over two at alpha = 1.
SECOND_LIVE_BEAM_TABLE = {
    (): {3: 0.5, 4: 0.5},
    (3,): {END: 0.6, 3: 0.4},
    (4,): {END: 0.56, 4: 0.44},
    (3, 3): {3: 1.0},
    (3, 3, 3): {3: 1.0},
    (3, 3, 3, 3): {3: 1.0},
}


def test_both_live_beams_survive_a_step_where_k_candidates_end():
    fn = table_fn(SECOND_LIVE_BEAM_TABLE, 5)
    ids, scores = beam_search(fn, start_ids(1), {}, 5, max_lengths=[10], beam_size=2, alpha=1.0)
    np.testing.assert_array_equal(ids[0, :, :6], [[3, 3, 3, 3, 3, END], [3, END, 0, 0, 0, 0]])
    expected = [math.log(0.5 * 0.4) / lp(6, 1.0), math.log(0.5 * 0.6) / lp(2, 1.0)]
    np.testing.assert_allclose(scores, [expected], rtol=1e-6)


# The first sentence (max_lengths 1) has one hypothesis, [end], and no live beam after
# step 1; its pool keeps an empty slot (NEG), which the bound of its masked live beams
# (n NEG after n steps, divided by a penalty that alpha = 5 makes grow faster than n)
# would beat at every step. The second is done after step 2: [end] .9 and [3 end] .09
# fill its pool, and [3 3] (.01) cannot beat .09 even at length 10.
EARLY_END_TABLE = {(): {END: 0.9, 3: 0.1}, (3,): {END: 0.9, 3: 0.1}}


def test_a_sentence_with_no_live_beam_left_is_done():
    calls = tf.Variable(0)
    fn = table_fn(EARLY_END_TABLE, 4, calls)
    ids, scores = beam_search(fn, start_ids(2), {}, 4, max_lengths=[1, 10], beam_size=2, alpha=[5.0, 0.6])
    np.testing.assert_array_equal(ids[0, :, :2], [[END, 0], [PAD, 0]])
    np.testing.assert_array_equal(ids[1, :, :2], [[END, 0], [3, END]])
    np.testing.assert_allclose(scores[0, 0], math.log(0.9), rtol=1e-6)
    assert scores[0, 1] == NEG
    np.testing.assert_allclose(scores[1], [math.log(0.9), math.log(0.09) / lp(2, 0.6)], rtol=1e-6)
    assert int(calls.numpy()) == 2  # not 10: both sentences are done after step 2


def test_a_finished_hypothesis_keeps_its_place_against_a_later_one_of_equal_score():
    # [end] finishes at step 0 with log .5; [3 end] at step 1 with log .5 + log 1, the
    # same float32. The pool's old entries come first, so the earlier one stays first.
    fn = table_fn({(): {3: 0.5, END: 0.5}, (3,): {END: 1.0}}, 5)
    ids, scores = beam_search(fn, start_ids(1), {}, 5, max_lengths=[4], beam_size=2, alpha=0.0)
    np.testing.assert_array_equal(ids[0, :, :2], [[END, 0], [3, END]])
    assert scores[0, 0] == scores[0, 1]  # the premise: an exact tie
    np.testing.assert_allclose(scores[0, 0], math.log(0.5), rtol=1e-6)


def test_each_sentence_stops_at_its_own_max_length():
    # The end token is always unlikely (.01), so every hypothesis runs to its maximum.
    never_ends = {(): {END: 0.01, 3: 0.6, 4: 0.39}}
    table = {}
    for length in range(5):
        for prefix in np.ndindex(*([2] * length)):
            table[tuple(3 + np.array(prefix, int))] = never_ends[()]
    fn = table_fn(table, 5)
    ids, scores = beam_search(fn, start_ids(2), {}, 5, max_lengths=[2, 5], beam_size=2, alpha=0.0)

    assert ids.shape == (2, 2, 5)
    assert_well_formed(ids.numpy(), scores.numpy())
    np.testing.assert_array_equal(ids[0], [[3, END, 0, 0, 0], [4, END, 0, 0, 0]])
    np.testing.assert_array_equal(ids[1, 0], [3, 3, 3, 3, END])
    assert list(ids[1, 1].numpy()).index(END) == 4
    end = math.log(0.01)
    np.testing.assert_allclose(
        scores,
        [
            [math.log(0.6) + end, math.log(0.39) + end],
            [4 * math.log(0.6) + end, 3 * math.log(0.6) + math.log(0.39) + end],
        ],
        rtol=1e-5,
    )

    # Each sentence alone gives what it gives in the batch.
    for sentence, max_length in enumerate([2, 5]):
        alone_ids, alone_scores = beam_search(
            fn, start_ids(1), {}, 5, max_lengths=[max_length], beam_size=2, alpha=0.0
        )
        np.testing.assert_array_equal(alone_ids[0], ids[sentence, :, :max_length])
        np.testing.assert_allclose(alone_scores[0], scores[sentence], rtol=1e-6)


def test_n_best_rows_are_sorted_and_well_formed_and_never_pad_or_start():
    fn = random_fn(9)
    ids, scores = beam_search(
        fn, start_ids(3), random_cache(3, 9), 9, max_lengths=[4, 7, 12], beam_size=4, alpha=0.6
    )
    assert ids.shape == (3, 4, 12) and ids.dtype == tf.int32
    assert scores.dtype == tf.float32
    assert_well_formed(ids.numpy(), scores.numpy())
    assert np.all(scores.numpy() > NEG / 2)  # every slot holds a real hypothesis
    for sentence, max_length in enumerate([4, 7, 12]):
        assert np.all(ids[sentence, :, max_length:] == PAD)


def test_the_cache_follows_its_beam():
    # The prefix hash carried in the cache must equal the one recomputed from the ids.
    args = dict(max_lengths=[5, 9], beam_size=3, alpha=0.6)
    with_cache = beam_search(random_fn(9), start_ids(2), random_cache(2, 9), 9, **args)
    without = beam_search(random_fn(9, with_cache=False), start_ids(2), random_cache(2, 9), 9, **args)
    np.testing.assert_array_equal(with_cache[0], without[0])
    np.testing.assert_allclose(with_cache[1], without[1], rtol=1e-6)


def test_batching_does_not_change_results():
    cache = random_cache(3, 9)
    max_lengths = [6, 3, 9]
    ids, scores = beam_search(random_fn(9), start_ids(3), cache, 9, max_lengths=max_lengths, beam_size=3)
    for sentence in range(3):
        alone = tf.nest.map_structure(lambda x: x[sentence : sentence + 1], cache)
        alone_ids, alone_scores = beam_search(
            random_fn(9), start_ids(1), alone, 9, max_lengths=max_lengths[sentence : sentence + 1], beam_size=3
        )
        width = max_lengths[sentence]
        np.testing.assert_array_equal(alone_ids[0], ids[sentence, :, :width])
        np.testing.assert_allclose(alone_scores[0], scores[sentence], rtol=1e-6)


def greedy_reference(fn, cache, max_lengths, vocab_size):
    """Argmax decoding in plain Python: the ids `[B, L]` and the summed log-probs `[B]`."""
    batch_size, max_length = len(max_lengths), max(max_lengths)
    ids = np.zeros([batch_size, max_length + 1], np.int32)
    ids[:, 0] = START
    total = np.zeros([batch_size])
    finished = np.zeros([batch_size], bool)
    for step in range(max_length):
        logits, cache = fn(tf.constant(ids), tf.constant(step), cache)
        log_probs = tf.nn.log_softmax(logits).numpy()
        log_probs[:, [PAD, START]] = -np.inf
        for b in range(batch_size):
            if finished[b]:
                continue
            token = END if step + 1 >= max_lengths[b] else int(np.argmax(log_probs[b]))
            ids[b, step + 1] = token
            total[b] += log_probs[b, token]
            finished[b] = token == END
    return ids[:, 1:], total


def test_beam_size_one_is_greedy():
    max_lengths = [3, 8, 12, 5]
    cache = random_cache(4, 9, seed=3)
    expected_ids, expected_log_probs = greedy_reference(random_fn(9, seed=2), cache, max_lengths, 9)
    # alpha = 0: with a length penalty a beam of 1 may go on looking for a longer
    # hypothesis that scores better than the greedy one, which greedy cannot.
    ids, scores = beam_search(
        random_fn(9, seed=2), start_ids(4), cache, 9, max_lengths=max_lengths, beam_size=1, alpha=0.0
    )
    assert ids.shape == (4, 1, 12)
    np.testing.assert_array_equal(ids[:, 0], expected_ids)
    np.testing.assert_allclose(scores[:, 0], expected_log_probs, rtol=1e-5)


@pytest.mark.slow
def test_runs_inside_tf_function_with_dynamic_batch_and_request_time_alpha():
    fn = random_fn(9)

    @tf.function(
        input_signature=[
            tf.TensorSpec([None], tf.int32),
            tf.TensorSpec([None, 9], tf.float32),
            tf.TensorSpec([None], tf.int32),
            tf.TensorSpec([], tf.float32),
        ]
    )
    def search(initial_ids, bias, max_lengths, alpha):
        cache = {"hash": tf.zeros_like(initial_ids), "bias": bias}
        return beam_search(fn, initial_ids, cache, 9, max_lengths=max_lengths, beam_size=3, alpha=alpha)

    cache = random_cache(2, 9)
    for alpha in (0.0, 0.6):
        ids, scores = search(start_ids(2), cache["bias"], tf.constant([5, 9]), tf.constant(alpha))
        eager_ids, eager_scores = beam_search(fn, start_ids(2), cache, 9, max_lengths=[5, 9], beam_size=3, alpha=alpha)
        np.testing.assert_array_equal(ids, eager_ids)
        np.testing.assert_allclose(scores, eager_scores, rtol=1e-6)


def test_max_length_one_leaves_empty_slots_as_padding():
    # Only one hypothesis, [end], exists for the first sentence: its other slot is all
    # padding, scored NEG, also while the loop runs on for the second sentence (whose
    # masked continuations must never count as finished hypotheses).
    fn = random_fn(9)
    ids, scores = beam_search(fn, start_ids(2), random_cache(2, 9), 9, max_lengths=[1, 4], beam_size=2)
    np.testing.assert_array_equal(ids[0], [[END, 0, 0, 0], [PAD, 0, 0, 0]])
    assert scores[0, 0] > NEG / 2 and scores[0, 1] == NEG
    assert_well_formed(ids[1:].numpy(), scores[1:].numpy())


def test_length_penalty_is_gnmt():
    np.testing.assert_allclose(length_penalty(tf.constant([1, 7]), 0.6), [1.0, 2.0**0.6], rtol=1e-6)
    np.testing.assert_allclose(length_penalty(3, 0.0), 1.0)


def test_rejects_a_beam_size_that_is_not_a_positive_int():
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(table_fn(TRACED_TABLE, 5), start_ids(1), {}, 5, max_lengths=[3], beam_size=0)


def test_rejects_a_vocabulary_of_fewer_than_two_tokens():
    with pytest.raises(ValueError, match=r"^vocab_size must be a Python int >= 2, got 1$"):
        beam_search(table_fn(TRACED_TABLE, 5), start_ids(1), {}, 1, max_lengths=[3], beam_size=1)


def sentence_bias_fn(vocab_size, beam_size, rows=None):
    """`random_fn`'s model with its per-sentence bias read from `sentence_cache`
    (`{"bias": [A, V]}`, one row per sentence still searched) instead of the tiled cache.
    `rows`, a `tf.Variable`, sums the hypotheses of every call."""
    tiled = random_fn(vocab_size)

    def fn(ids, step, cache, sentence_cache):
        if rows is not None:
            rows.assign_add(tf.shape(ids)[0])
        bias = tf.repeat(sentence_cache["bias"], beam_size, axis=0)  # [A * K, V]
        logits, new_cache = tiled(ids, step, {"hash": cache["hash"], "bias": bias})
        return logits, {"hash": new_cache["hash"]}

    return fn


def test_a_sentence_cache_is_read_per_sentence_like_a_tiled_one():
    args = dict(max_lengths=[6, 3, 9], beam_size=3, alpha=0.6)
    cache = random_cache(3, 9)
    tiled = beam_search(random_fn(9), start_ids(3), cache, 9, **args)
    per_sentence = beam_search(
        sentence_bias_fn(9, 3), start_ids(3), {"hash": cache["hash"]}, 9, sentence_cache={"bias": cache["bias"]},
        **args,
    )
    np.testing.assert_array_equal(per_sentence[0], tiled[0])
    np.testing.assert_array_equal(per_sentence[1], tiled[1])


def test_a_done_sentence_leaves_the_search_and_keeps_its_result():
    # Sentence 0 may write one token: at step 0 it must end, and then has no live beam.
    # From step 1 on only sentence 1's 3 hypotheses are computed.
    rows, calls = tf.Variable(0), tf.Variable(0)
    cache = random_cache(2, 9)
    fn = sentence_bias_fn(9, 3, rows)

    def counted(ids, step, cache, sentence_cache):
        calls.assign_add(1)
        return fn(ids, step, cache, sentence_cache)

    ids, scores = beam_search(
        counted, start_ids(2), {"hash": cache["hash"]}, 9, max_lengths=[1, 6], beam_size=3,
        sentence_cache={"bias": cache["bias"]},
    )
    assert int(calls.numpy()) > 1
    assert int(rows.numpy()) == 6 + 3 * (int(calls.numpy()) - 1)
    np.testing.assert_array_equal(ids[0, 0, :1], [END])
    assert scores[0, 1] == NEG and scores[0, 2] == NEG
    alone = beam_search(random_fn(9), start_ids(1), tf.nest.map_structure(lambda x: x[1:], cache), 9,
                        max_lengths=[6], beam_size=3)
    np.testing.assert_array_equal(ids[1], alone[0][0])
    np.testing.assert_array_equal(scores[1], alone[1][0])


@pytest.mark.parametrize("beams, vocab_size", [(4, 8000), (4, 37000), (1, 10), (2, 7), (3, 5), (8, 101)])
@pytest.mark.parametrize("values", ["ties", "normal"])
def test_best_candidates_equal_top_k_over_the_flattened_beams(beams, vocab_size, values):
    # Chunked or padded (37000 x 4 has a divisor near 64, 101 x 8 has none), with many
    # ties: the same values and the same beam-major order as one top_k over K x V.
    rng = np.random.default_rng(beams * vocab_size)
    shape = (5, beams, vocab_size)
    if values == "ties":
        candidates = rng.integers(-4, 1, size=shape).astype(np.float32)
    else:
        candidates = rng.normal(size=shape).astype(np.float32)
    count = min(2 * beams, beams * vocab_size)
    log_probs, beam, token = best_candidates(tf.constant(candidates), count)
    expected_log_probs, expected_indices = tf.math.top_k(candidates.reshape(5, -1), count)
    np.testing.assert_array_equal(log_probs, expected_log_probs)
    np.testing.assert_array_equal(beam.numpy() * vocab_size + token.numpy(), expected_indices)
