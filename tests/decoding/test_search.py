"""The one decoding loop (app/decoding/search.py) with strategies other than beam search:
greedy search against a fake model worked out by hand, sentences leaving the loop as they
finish, a sentence's maximum length, and a strategy written in a test (the seam a new one
plugs into)."""

import numpy as np
import tensorflow as tf

from app.decoding.beam_search import beam_search
from app.decoding.greedy import GreedySearch
from app.decoding.search import first_hypothesis_mask, search
from app.decoding.steering import batch_steering
from tests.decoding.test_beam_search import END, ZERO_LOGIT, random_cache, random_fn, start_ids, table_fn

# After the start token: 3 (0.6) or 4 (0.4); after 3: the end (0.45) or 5 (0.55); after 3 5:
# the end. After 4: 6 (0.9). Greedy takes 3, then 5, then the end.
TABLE = {(): {3: 0.6, 4: 0.4}, (3,): {END: 0.45, 5: 0.55}, (4,): {6: 0.9, END: 0.1}}


def test_greedy_search_takes_the_most_likely_token_at_each_step():
    ids, scores = search(GreedySearch(), table_fn(TABLE, 7), start_ids(1), {}, 7, max_lengths=[10])
    assert ids.numpy().tolist() == [[3, 5, END] + [0] * 7]
    np.testing.assert_allclose(scores, [np.log(0.6) + np.log(0.55) + np.log(1.0)], rtol=1e-6)


def test_greedy_search_ends_a_sentence_at_its_maximum_length():
    ids, scores = search(GreedySearch(), table_fn(TABLE, 7), start_ids(2), {}, 7, max_lengths=[2, 1])
    assert ids.numpy().tolist() == [[3, END], [END, 0]]
    # The forced end token is scored by the model's own log-probability of it: the fake
    # model's logit for a token it never emits, less log(0.6 + 0.4) = 0.
    np.testing.assert_allclose(scores, [np.log(0.6) + np.log(0.45), ZERO_LOGIT], rtol=1e-6)


def test_greedy_search_equals_a_beam_of_one_at_alpha_0():
    cache = random_cache(3, 9)
    max_lengths = [5, 9, 3]
    greedy_ids, greedy_scores = search(GreedySearch(), random_fn(9), start_ids(3), cache, 9, max_lengths=max_lengths)
    beam_ids, beam_scores = beam_search(
        random_fn(9), start_ids(3), cache, 9, max_lengths=max_lengths, beam_size=1, alpha=0.0
    )
    np.testing.assert_array_equal(greedy_ids, beam_ids[:, 0])
    np.testing.assert_allclose(greedy_scores, beam_scores[:, 0], rtol=1e-6)


def test_sentences_leave_the_loop_as_they_finish():
    seen = []

    def counting(ids, step, cache):
        seen.append(int(tf.shape(ids)[0]))
        return table_fn({(): {3: 1.0}, (3,): {4: 1.0}, (3, 4): {5: 1.0}}, 7)(ids, step, cache)

    ids, _ = search(GreedySearch(), counting, start_ids(3), {}, 7, max_lengths=[1, 2, 10])
    # Sentence 1 must end at once, sentence 2 after one word; sentence 3 runs 3 4 5 end.
    assert ids.numpy().tolist() == [[END, 0, 0, 0, 0, 0, 0, 0, 0, 0], [3, END] + [0] * 8, [3, 4, 5, END] + [0] * 6]
    assert seen == [3, 2, 1, 1]


class LastAllowedToken:
    """A strategy written for this test: one hypothesis, always the highest allowed word
    (the end token only where no word is allowed), its score the number of tokens."""

    width = 1

    def start(self, batch_size, buffer_length, settings):
        return tf.zeros([batch_size], tf.float32)

    def no_results(self, batch_size, buffer_length):
        return tf.zeros([batch_size, buffer_length], tf.int32), tf.zeros([batch_size], tf.float32)

    def extend(self, count, ids, logits, allowed, step, settings):
        allowed = first_hypothesis_mask(allowed)  # [A, V], from [A, V] or a steered search's [A, 1, V]
        vocabulary = tf.range(tf.shape(allowed)[1])[None, :]  # [1, V]
        words = allowed & (vocabulary != END)  # [A, V]
        highest = tf.reduce_max(tf.where(words, vocabulary, -1), axis=1)  # [A]: -1 where only the end is allowed
        tokens = tf.where(highest < 0, END, highest)
        return count + 1.0, None, tokens[:, None]

    def done(self, count, ids, step, settings):
        return tf.equal(ids[:, 0, step], END)

    def results(self, count, ids, step, settings):
        return ids[:, 0], count


def test_a_new_strategy_is_one_small_class():
    ids, scores = search(LastAllowedToken(), table_fn(TABLE, 7), start_ids(2), {}, 7, max_lengths=[3, 1])
    assert ids.numpy().tolist() == [[6, 6, END], [END, 0, 0]]
    assert scores.numpy().tolist() == [3.0, 1.0]
    # Steered, it reads each hypothesis's mask: the prefix first, then no token twice.
    steering = batch_steering(2, prefix=[[4], [0]], prefix_lengths=[1, 0], no_repeat_ngram_size=1)
    ids, _ = search(LastAllowedToken(), table_fn(TABLE, 7), start_ids(2), {}, 7, max_lengths=[4, 3], steering=steering)
    assert ids.numpy().tolist() == [[4, 6, 5, END], [6, 5, END, 0]]
