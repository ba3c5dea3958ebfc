"""Steering (app/decoding/steering.py): no repeated n-grams and a forced target prefix, in
every strategy, against hand-worked cases, brute force and the unsteered search.

Token ids as in test_beam_search.py: 0 pad, 1 start, 2 end; 3 and up are words.
"""

import itertools
import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from app.decoding.beam_search import BeamSearch, BeamSettings, beam_search
from app.decoding.greedy import GreedySearch
from app.decoding.model_search import greedy_ids, sample_ids, translate_ids
from app.decoding.sampling import SamplingSearch, SamplingSettings
from app.decoding.search import gather_beams, search
from app.decoding.steering import (
    advance_ngram_runs,
    batch_steering,
    forced_prefix,
    padded_prefixes,
    repeated_ngram_tokens,
)
from app.model.config import ModelConfig
from app.model.transformer import Transformer, build_transformer
from tests.decoding.test_beam_search import END, START, ZERO_LOGIT, lp, random_cache, random_fn, start_ids, table_fn


def runs_after(rows):
    """`(runs, ids)` int32 `[A, K, L + 1]` after writing `rows` (A x K lists of tokens, of
    one length) one token a step, as the loop does: ids are the start token, then them."""
    rows = np.asarray(rows, np.int32)  # [A, K, T]
    ids = np.zeros(rows.shape[:2] + (rows.shape[2] + 1,), np.int32)
    ids[:, :, 0] = START
    runs = tf.zeros(ids.shape, tf.int32)
    for t in range(rows.shape[2]):
        ids[:, :, t + 1] = rows[:, :, t]
        runs = advance_ngram_runs(runs, tf.constant(ids), tf.constant(rows[:, :, t]))
    return runs, tf.constant(ids)


def banned_sets(banned):
    """bool `[A, K, V]` -> the banned tokens, a set per hypothesis."""
    return [[set(np.flatnonzero(row).tolist()) for row in sentence] for sentence in banned.numpy()]


def brute_force_bans(tokens, n):
    """The tokens that would repeat an n-gram of `tokens` (a list of output tokens)."""
    if n == 0:
        return set()
    context = tokens[len(tokens) - n + 1 :] if n > 1 else []
    return {
        tokens[i + n - 1]
        for i in range(len(tokens) - n + 1)
        if tokens[i : i + n - 1] == context
    }


@pytest.mark.parametrize(
    "n, expected", [(0, set()), (1, {3, 4, 5}), (2, {5}), (3, {5}), (4, set()), (6, set()), (9, set())]
)
def test_repeated_ngram_tokens_by_hand(n, expected):
    # After S 3 4 5 3 4: the bigram (4, 5) and the trigram (3, 4, 5) are already there.
    runs, ids = runs_after([[[3, 4, 5, 3, 4]]])
    banned = repeated_ngram_tokens(runs, ids, tf.constant(5), tf.constant([n]), 7)
    assert banned.shape == (1, 1, 7)
    assert banned_sets(banned) == [[expected]]


def test_repeated_ngram_tokens_with_mixed_sizes_and_hypotheses():
    # Sentence 0 keeps S 3 4 5 3 4 and S 3 3 3 3 3; sentence 1 the same rows at n = 1, ...
    rows = [[3, 4, 5, 3, 4], [3, 3, 3, 3, 3]]
    runs, ids = runs_after([rows, rows, rows, rows])
    banned = repeated_ngram_tokens(runs, ids, tf.constant(5), tf.constant([3, 1, 0, 5]), 7)
    assert banned_sets(banned) == [[{5}, {3}], [{3, 4, 5}, {3}], [set(), set()], [set(), {3}]]


@pytest.mark.parametrize("seed", range(3))
def test_incremental_runs_equal_brute_force(seed):
    # Many small random searches at once: hypotheses that follow random parents, as beams
    # do, over a vocabulary of 4 words (so that n-grams repeat often), n from 0 to 5.
    rng = np.random.default_rng(seed)
    sentences, width, steps, vocab_size = 200, 3, 9, 7
    sizes = rng.integers(0, 6, size=[sentences])
    ids = np.zeros([sentences, width, steps + 1], np.int32)
    ids[:, :, 0] = START
    ids, runs = tf.constant(ids), tf.zeros(ids.shape, tf.int32)
    for step in range(steps):
        parents = rng.integers(0, width, size=[sentences, width])
        tokens = tf.constant(rng.integers(3, vocab_size, size=[sentences, width]), tf.int32)
        ids, runs = gather_beams((ids, runs), parents)
        ids = ids + tokens[:, :, None] * tf.one_hot(step + 1, steps + 1, dtype=tf.int32)
        runs = advance_ngram_runs(runs, ids, tokens)
        banned = banned_sets(
            repeated_ngram_tokens(runs, ids, tf.constant(step + 1), tf.constant(sizes, tf.int32), vocab_size)
        )
        written_ids = ids.numpy()[:, :, 1 : step + 2]  # [A, K, step + 1]
        for a, k in itertools.product(range(sentences), range(width)):
            written = written_ids[a, k].tolist()
            assert banned[a][k] == brute_force_bans(written, sizes[a]), (seed, step, a, k, written, sizes[a])


def test_forced_prefix_forces_each_prefix_token_then_lets_go():
    steering = batch_steering(3, prefix=[[5, 3, 0], [4, 0, 0], [0, 0, 0]], prefix_lengths=[2, 1, 0])
    allowed = tf.constant([[False, False, True, True, True, True]] * 3)  # [A, V]
    for step, expected_forcing in [(0, [True, True, False]), (1, [True, False, False]), (2, [False] * 3)]:
        masked, forcing = forced_prefix(allowed, steering, tf.constant(step))
        assert forcing.numpy().tolist() == expected_forcing
        for row, forced in enumerate(expected_forcing):
            expected = [token == steering.prefix[row, step] for token in range(6)] if forced else allowed[row]
            assert masked[row].numpy().tolist() == list(np.asarray(expected))


def test_padded_prefixes_have_at_least_one_column():
    prefix, lengths = padded_prefixes(tf.ragged.constant([[5, 3], [], [4]], tf.int32))
    assert prefix.numpy().tolist() == [[5, 3], [0, 0], [4, 0]] and lengths.numpy().tolist() == [2, 0, 1]
    prefix, lengths = padded_prefixes(tf.ragged.constant([[], []], tf.int32))
    assert prefix.numpy().tolist() == [[0], [0]] and lengths.numpy().tolist() == [0, 0]
    no_sentence = tf.RaggedTensor.from_row_lengths(tf.zeros([0], tf.int32), tf.zeros([0], tf.int64))
    prefix, lengths = padded_prefixes(no_sentence)
    assert prefix.shape == (0, 1) and lengths.shape == (0,)


def bigram_fn(table, vocab_size):
    """A `symbols_to_logits_fn` whose next token depends on the newest token only:
    `table[token]` maps it to the probabilities of the next; other tokens end at once."""
    logits = np.full([vocab_size, vocab_size], ZERO_LOGIT, np.float32)
    logits[:, END] = 0.0
    for token, probabilities in table.items():
        logits[token] = ZERO_LOGIT
        for following, probability in probabilities.items():
            logits[token, following] = math.log(probability)

    def fn(ids, step, cache):
        return tf.gather(logits, ids[:, step]), cache

    return fn


# A model that loops on "3 4 3 4 ...": with no bigram twice, 3 4 3 must go on with 5.
LOOPING = {START: {3: 0.6, 4: 0.4}, 3: {4: 0.9, 5: 0.1}, 4: {3: 0.9, END: 0.1}, 5: {END: 1.0}}


def test_greedy_search_never_repeats_a_bigram():
    fn = bigram_fn(LOOPING, 7)
    looping, _ = search(GreedySearch(), fn, start_ids(1), {}, 7, max_lengths=[10])
    assert looping.numpy().tolist() == [[3, 4, 3, 4, 3, 4, 3, 4, 3, END]]
    steering = batch_steering(1, no_repeat_ngram_size=2)
    ids, scores = search(GreedySearch(), fn, start_ids(1), {}, 7, max_lengths=[10], steering=steering)
    assert ids.numpy().tolist() == [[3, 4, 3, 5, END] + [0] * 5]
    np.testing.assert_allclose(scores, [math.log(0.6 * 0.9 * 0.9 * 0.1)], rtol=1e-6)


def test_beam_search_never_repeats_a_bigram():
    # Step 1: live 3 4 (.54), 4 3 (.36). Step 2: live 3 4 3 (.486), 4 3 4 (.324); 3 4 end
    # (.054) is third, so it does not finish. Step 3: 3 4 3 may not go on with 4, nor
    # 4 3 4 with 3: 3 4 3 5 (.0486) stays live and 4 3 4 end (.0324) finishes; the rest
    # are tokens the model never emits. Step 4: 3 4 3 5 end (.0486) finishes: the pool is
    # full and no live beam can beat it.
    ids, scores = beam_search(
        bigram_fn(LOOPING, 7), start_ids(1), {}, 7, max_lengths=[10], beam_size=2, alpha=0.6,
        steering=batch_steering(1, no_repeat_ngram_size=2),
    )
    assert ids.numpy().tolist() == [[[3, 4, 3, 5, END] + [0] * 5, [4, 3, 4, END] + [0] * 6]]
    expected = [[math.log(0.6 * 0.9 * 0.9 * 0.1) / lp(5, 0.6), math.log(0.4 * 0.9 * 0.9 * 0.1) / lp(4, 0.6)]]
    np.testing.assert_allclose(scores, expected, rtol=1e-6)


def has_repeated_ngram(row, n):
    """Whether the output `row` (up to its end token) holds an n-gram twice."""
    tokens = list(row[: list(row).index(END) + 1]) if END in list(row) else list(row)
    ngrams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(ngrams) != len(set(ngrams))


STRATEGIES = {
    "beam 1": lambda: (BeamSearch(1), BeamSettings(tf.constant(0.6))),
    "beam 2": lambda: (BeamSearch(2), BeamSettings(tf.constant(0.6))),
    "beam 4": lambda: (BeamSearch(4), BeamSettings(tf.constant(0.6))),
    "greedy": lambda: (GreedySearch(), ()),
    "sampling": lambda: (
        SamplingSearch(),
        SamplingSettings(tf.constant([7, 8, 9], tf.int64), tf.constant(0), tf.constant(1.0), tf.constant(1.0)),
    ),
}
MAX_LENGTHS = [5, 9, 3]


def run(strategy, seed, steering=None, sentences=slice(None), max_lengths=MAX_LENGTHS):
    """`strategy`'s search over `random_fn(9, seed)` for the three sentences (or some)."""
    strategy, settings = STRATEGIES[strategy]()
    cache = tf.nest.map_structure(lambda x: x[sentences], random_cache(3, 9, seed=seed + 1))
    settings = tf.nest.map_structure(lambda x: x[sentences] if x.shape.rank else x, settings)
    return search(
        strategy, random_fn(9, seed), start_ids(tf.shape(cache["hash"])[0]), cache, 9,
        max_lengths=np.asarray(max_lengths)[sentences], settings=settings, steering=steering,
    )


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_steering_that_does_nothing_gives_the_unsteered_search_exactly(strategy):
    for seed in range(5):
        ids, scores = run(strategy, seed)
        steered_ids, steered_scores = run(strategy, seed, batch_steering(3, no_repeat_ngram_size=0))
        np.testing.assert_array_equal(steered_ids, ids)
        np.testing.assert_array_equal(steered_scores, scores)


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_no_output_repeats_an_ngram(strategy):
    for seed, n in itertools.product(range(3), (1, 2, 3)):
        ids, _ = run(strategy, seed, batch_steering(3, no_repeat_ngram_size=n), max_lengths=[9, 9, 9])
        rows = np.reshape(ids.numpy(), [-1, ids.shape[-1]])
        assert not any(has_repeated_ngram(row, n) for row in rows), (seed, n, rows)


def token_log_probs(fn, cache, row):
    """The fake model's log-prob of each token of the output `row` (up to its end token)
    of one sentence, its step's log-softmax, teacher-forced one step at a time."""
    tokens = list(row[: list(row).index(END) + 1])
    ids = np.zeros([1, len(tokens) + 1], np.int32)
    ids[0, 0] = START
    log_probs = []
    for step, token in enumerate(tokens):
        logits, cache = fn(tf.constant(ids), tf.constant(step), cache)
        log_probs.append(float(tf.nn.log_softmax(tf.cast(logits, tf.float32))[0, token]))
        ids[0, step + 1] = token
    return log_probs


def forced_score(log_probs, forced_positions, alpha):
    """A search's score of a hypothesis of these token `log_probs`: those at
    `forced_positions` undivided, the others over the length penalty
    (`beam_search.normalized_scores`)."""
    forced = sum(log_probs[i] for i in forced_positions)
    return forced + (sum(log_probs) - forced) / lp(len(log_probs), alpha)


# After the prefix 5 3 (5 a token the model never emits first): 4 (.7) or the end (.3).
PREFIX_TABLE = {(): {3: 0.5, 4: 0.3, END: 0.2}, (5, 3): {4: 0.7, END: 0.3}, (5, 3, 4): {END: 1.0}}


def test_a_prefix_starts_every_result_and_is_scored_with_its_log_probs_undivided():
    fn = table_fn(PREFIX_TABLE, 7)
    steering = batch_steering(1, prefix=[[5, 3]])
    ids, scores = beam_search(fn, start_ids(1), {}, 7, max_lengths=[6], beam_size=2, alpha=0.6, steering=steering)
    assert ids.numpy().tolist() == [[[5, 3, 4, END, 0, 0], [5, 3, END, 0, 0, 0]]]
    log_probs = [token_log_probs(fn, {}, row) for row in ids.numpy()[0]]
    assert sum(log_probs[0]) == pytest.approx(2 * ZERO_LOGIT + math.log(0.7), abs=1e-2)  # forced, at the model's cost
    np.testing.assert_allclose(scores, [[forced_score(row, [0, 1], 0.6) for row in log_probs]], rtol=1e-6)
    ids, _ = search(GreedySearch(), fn, start_ids(1), {}, 7, max_lengths=[6], steering=steering)
    assert ids.numpy().tolist() == [[5, 3, 4, END, 0, 0]]


# After "5", which the model never writes first: the end (.6) or 3 (.4); after "5 3 ...",
# 3 again (.9) or the end (.1).
RAMBLING_TABLE = {
    (): {3: 1.0},
    (5,): {END: 0.6, 3: 0.4},
    **{(5,) + (3,) * n: {3: 0.9, END: 0.1} for n in range(1, 10)},
}


def test_a_costly_prefix_does_not_make_a_high_alpha_prefer_rambling():
    # Divided by the penalty with the rest, the prefix's cost (about -1e4) shrinks as
    # the output grows: at alpha 2, "5", nine 3s and the end would beat "5 end". Forced
    # tokens count undivided, so the likelier continuation wins.
    fn = table_fn(RAMBLING_TABLE, 7)
    steering = batch_steering(1, prefix=[[5]])
    ids, scores = beam_search(fn, start_ids(1), {}, 7, max_lengths=[11], beam_size=2, alpha=2.0, steering=steering)
    assert ids.numpy()[0, 0].tolist()[:2] == [5, END]
    long_row = [5] + [3] * 9 + [END]  # the length limit
    short, rambling = (token_log_probs(fn, {}, row) for row in ([5, END], long_row))
    assert sum(short) / lp(2, 2.0) < sum(rambling) / lp(11, 2.0)  # the rule it replaces picks the rambling one
    assert forced_score(short, [0], 2.0) > forced_score(rambling, [0], 2.0)
    np.testing.assert_allclose(scores[0, 0], forced_score(short, [0], 2.0), rtol=1e-6)


def test_a_prefix_that_fills_the_length_limit_is_followed_by_the_end_token():
    steering = batch_steering(1, prefix=[[5, 3, 4]])
    fn = table_fn(PREFIX_TABLE, 7)
    ids, _ = beam_search(fn, start_ids(1), {}, 7, max_lengths=[4], beam_size=2, steering=steering)
    assert ids.numpy()[0, 0].tolist() == [5, 3, 4, END]
    with pytest.raises(tf.errors.InvalidArgumentError, match="prefix_lengths must be below max_lengths"):
        search(GreedySearch(), fn, start_ids(1), {}, 7, max_lengths=[3], steering=steering)


# Three sentences: prefixes of 0, 1 and 4 tokens, n from 0 to 2; the third leaves at once
# after its prefix (max length 5), the first after at most 3 tokens.
MIXED = dict(
    prefix=[[0, 0, 0, 0], [7, 0, 0, 0], [7, 3, 8, 4]], prefix_lengths=[0, 1, 4], no_repeat_ngram_size=[2, 0, 1]
)
MIXED_MAX_LENGTHS = [3, 9, 5]


@pytest.mark.parametrize("strategy", ["beam 2", "greedy", "sampling"])
def test_each_sentence_of_a_mixed_batch_equals_its_own_search(strategy):
    for seed in range(2):
        ids, scores = run(strategy, seed, batch_steering(3, **MIXED), max_lengths=MIXED_MAX_LENGTHS)
        for sentence in range(3):
            own = {name: np.asarray(value)[sentence : sentence + 1] for name, value in MIXED.items()}
            alone = batch_steering(1, **own)
            own_ids, own_scores = run(strategy, seed, alone, slice(sentence, sentence + 1), MIXED_MAX_LENGTHS)
            length = own_ids.shape[-1]
            np.testing.assert_array_equal(ids[sentence : sentence + 1, ..., :length], own_ids)
            assert not np.any(ids[sentence, ..., length:])
            np.testing.assert_allclose(scores[sentence : sentence + 1], own_scores, rtol=1e-6)


def test_beam_results_start_with_the_prefix_are_distinct_and_scored_from_the_model_log_probs():
    for seed in range(3):
        ids, scores = run("beam 4", seed, batch_steering(3, **MIXED), max_lengths=[6, 9, 7])
        cache = random_cache(3, 9, seed=seed + 1)
        for sentence, (prefix, length) in enumerate(zip(MIXED["prefix"], MIXED["prefix_lengths"])):
            rows = [tuple(row) for row in ids.numpy()[sentence]]
            assert len(set(rows)) == len(rows)
            for row, score in zip(rows, scores.numpy()[sentence]):
                assert list(row[:length]) == prefix[:length]
                one = tf.nest.map_structure(lambda x: x[sentence : sentence + 1], cache)
                log_probs = token_log_probs(random_fn(9, seed), one, row)
                assert score == pytest.approx(forced_score(log_probs, range(length), 0.6), rel=1e-5)


def test_a_steered_search_runs_inside_a_tf_function_of_any_batch():
    fn = random_fn(9, seed=3)
    specs = (
        tf.TensorSpec([None], tf.int32),  # initial ids
        {"hash": tf.TensorSpec([None], tf.int32), "bias": tf.TensorSpec([None, 9], tf.float32)},
        tf.TensorSpec([None], tf.int32),  # max lengths
        tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None], tf.int32), tf.TensorSpec([None], tf.int32),
    )

    def beam(initial_ids, cache, max_lengths, prefix, prefix_lengths, sizes):
        steering = batch_steering(tf.shape(initial_ids)[0], prefix=prefix, prefix_lengths=prefix_lengths,
                                  no_repeat_ngram_size=sizes)
        return beam_search(fn, initial_ids, cache, 9, max_lengths=max_lengths, beam_size=2, steering=steering)

    arguments = (start_ids(3), random_cache(3, 9, seed=4), tf.constant(MIXED_MAX_LENGTHS)) + tuple(
        tf.constant(value, tf.int32) for value in MIXED.values()
    )
    compiled = tf.function(beam, input_signature=specs)
    for got, expected in zip(compiled(*arguments), beam(*arguments)):
        np.testing.assert_allclose(got, expected, rtol=1e-6)


# A tiny random Transformer (no training): the model-level entry points, steered.
SOURCE_IDS = np.array([[5, 6, 7, 8, 2], [11, 12, 2, 0, 0], [13, 14, 15, 2, 0]], np.int32)
MODEL_STEERING = dict(
    prefix=[[9, 10, 11], [0, 0, 0], [20, 0, 0]], prefix_lengths=[3, 0, 1], no_repeat_ngram_size=[2, 1, 0]
)


@pytest.fixture(scope="module")
def transformer():
    keras.utils.set_random_seed(90)
    config = ModelConfig.from_size("tiny", vocab_size=40, num_layers=1, d_model=16, d_ff=32, num_heads=2, max_length=16)
    return Transformer(build_transformer(config), config)


@pytest.mark.slow
def test_the_model_searches_take_steering_and_grow_the_length_limit_by_the_prefix(transformer):
    steering = batch_steering(3, **MODEL_STEERING)
    ids, scores = translate_ids(transformer, SOURCE_IDS, beam_size=2, max_extra_length=1, steering=steering)
    for sentence, length in enumerate(MODEL_STEERING["prefix_lengths"]):
        assert np.all(ids[sentence, :, :length] == MODEL_STEERING["prefix"][sentence][:length])
    # At most source length + 1 + prefix length tokens, end token included.
    assert ids.shape[-1] == 5 + 1 + 3
    greedy, _ = greedy_ids(transformer, SOURCE_IDS, max_extra_length=1, steering=steering)
    sampled, _ = sample_ids(transformer, SOURCE_IDS, tf.constant([1, 2, 3], tf.int64), max_extra_length=1,
                            steering=steering)
    for outputs in (greedy, sampled):
        assert outputs[0, :3].numpy().tolist() == [9, 10, 11] and outputs[2, 0] == 20
    for sentence, n in enumerate(MODEL_STEERING["no_repeat_ngram_size"][:2]):
        rows = [ids[sentence, 0], ids[sentence, 1], greedy[sentence], sampled[sentence]]
        assert not any(has_repeated_ngram(list(row.numpy()), n) for row in rows)
    # Steering that does nothing changes nothing; parallel searches split it with the sentences.
    plain = translate_ids(transformer, SOURCE_IDS, beam_size=2, max_extra_length=4)
    idle = translate_ids(transformer, SOURCE_IDS, beam_size=2, max_extra_length=4, steering=batch_steering(3))
    for got, expected in zip(idle, plain):
        np.testing.assert_array_equal(got, expected)
    split = translate_ids(transformer, SOURCE_IDS, beam_size=2, max_extra_length=1, steering=steering,
                          parallel_searches=2)
    np.testing.assert_array_equal(split[0], ids)
    np.testing.assert_allclose(split[1], scores, rtol=1e-5)


@pytest.mark.slow
def test_a_steered_model_search_runs_inside_a_tf_function_split_in_two(transformer):
    specs = [tf.TensorSpec([None, None], tf.int32)] * 2 + [tf.TensorSpec([None], tf.int32)] * 2

    def translate(source_ids, prefix, prefix_lengths, sizes):
        steering = batch_steering(tf.shape(source_ids)[0], prefix=prefix, prefix_lengths=prefix_lengths,
                                  no_repeat_ngram_size=sizes)
        return greedy_ids(transformer, source_ids, max_extra_length=2, parallel_searches=2, steering=steering)

    arguments = [tf.constant(SOURCE_IDS)] + [tf.constant(value, tf.int32) for value in MODEL_STEERING.values()]
    compiled_ids, compiled_scores = tf.function(translate, input_signature=specs)(*arguments)
    ids, scores = translate(*arguments)
    np.testing.assert_array_equal(compiled_ids, ids)
    np.testing.assert_allclose(compiled_scores, scores, rtol=1e-5)
