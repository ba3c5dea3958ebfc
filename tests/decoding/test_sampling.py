"""Sampling (app/decoding/sampling.py, run by model_search.sample_ids): the draw from a fixed distribution, the seeded
uniform numbers, and the loop on a tiny random Transformer against greedy decoding and a
full forward pass."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from app.decoding.model_search import greedy_ids, sample_ids
from app.decoding.model_search import checked_request
from app.decoding.sampling import choose_tokens, uniform_per_sentence
from app.model.config import ModelConfig
from app.model.transformer import Transformer, build_transformer

END = 2
# Three sentences of different lengths (0 = padding).
SOURCE_IDS = np.array([[5, 6, 7, 8, 9, 10, 2], [11, 12, 2, 0, 0, 0, 0], [13, 14, 15, 16, 2, 0, 0]], np.int32)
EXTRA = 8  # max_extra_length: short outputs keep the tests fast
# A fixed next-token distribution over 4 tokens; cumulative 0.5, 0.8, 0.95, 1.
PROBS = np.array([0.5, 0.3, 0.15, 0.05], np.float32)


def draw(uniform, top_k=0, top_p=1.0, temperature=1.0, probs=PROBS):
    """The tokens `choose_tokens` draws from `probs` for each number of `uniform`."""
    n = len(uniform)
    with np.errstate(divide="ignore"):  # log 0 = -inf, on purpose
        logits = np.log(np.tile(probs, (n, 1)))
    return choose_tokens(
        tf.constant(logits, tf.float32),
        tf.constant(uniform, tf.float32),
        tf.fill([n], top_k),
        tf.fill([n], float(top_p)),
        tf.fill([n], float(temperature)),
    ).numpy().tolist()


def test_the_draw_inverts_the_cumulative_distribution():
    assert draw([0.0, 0.4, 0.6, 0.9, 0.97, 0.99999994]) == [0, 0, 1, 2, 3, 3]


def test_top_k_and_top_p_cut_the_distribution_and_renormalize_it():
    # The top 2 renormalized: 0.625, 0.375.
    assert draw([0.6, 0.7, 0.99999994], top_k=2) == [0, 1, 1]
    assert draw([0.6, 0.7, 0.99999994], top_k=1) == [0, 0, 0]
    # Mass 0.75 is reached by the top 2 (0.8), 0.85 by the top 3 (0.95, renormalized
    # cumulative 0.526, 0.842, 1).
    assert draw([0.6, 0.7, 0.99999994], top_p=0.75) == [0, 1, 1]
    assert draw([0.5, 0.9, 0.99999994], top_p=0.85) == [0, 2, 2]
    # top_k larger than the vocabulary is the whole vocabulary; both cuts: the smaller.
    assert draw([0.99999994], top_k=9) == [3]
    assert draw([0.99999994], top_k=3, top_p=0.75) == [1]


def test_temperature_flattens_or_sharpens_the_distribution():
    # At T = 2 the probabilities go as sqrt(p): cumulative 0.379, 0.673, 0.880, 1.
    assert draw([0.45, 0.85], temperature=1.0) == [0, 2]
    assert draw([0.45, 0.85], temperature=2.0) == [1, 2]
    # A temperature near 0 is greedy, without NaN.
    assert draw([0.99999994], temperature=1e-30) == [0]


def test_a_banned_token_is_never_drawn():
    probs = np.array([0.0, 0.5, 0.5, 0.0], np.float32)  # -inf logits, as the loop bans tokens
    assert draw([0.0, 0.99999994], probs=probs) == [1, 2]


def test_uniform_numbers_depend_on_the_seed_and_the_step_only():
    seeds = tf.constant([0, 1, 2**32 + 1], tf.int64)
    first = uniform_per_sentence(seeds, tf.constant(0)).numpy()
    # Pinned: they are the promise that a seed gives the same translations on any machine.
    np.testing.assert_array_equal(first, np.array([0.1805306077003479, 0.9658679366111755, 0.11337566375732422]))
    np.testing.assert_array_equal(uniform_per_sentence(seeds[::-1], tf.constant(0)).numpy(), first[::-1])
    second = uniform_per_sentence(seeds, tf.constant(1)).numpy()
    assert np.all(second != first)


def test_uniform_numbers_are_uniform_and_neighbours_uncorrelated():
    # Neighbouring seeds are the usual case: app.translate gives line n the seed base + n.
    seeds = tf.range(2**32 - 10_000, 2**32 + 10_000, dtype=tf.int64)  # across the seed's 32-bit halves
    first = uniform_per_sentence(seeds, tf.constant(0)).numpy()
    second = uniform_per_sentence(seeds, tf.constant(1)).numpy()
    counts, _ = np.histogram(first, bins=10, range=(0, 1))
    assert counts.min() > 1_800 and counts.max() < 2_200  # 2,000 expected per bin
    assert abs(np.corrcoef(first[:-1], first[1:])[0, 1]) < 0.03
    assert abs(np.corrcoef(first, second)[0, 1]) < 0.03


@pytest.fixture(scope="module")
def transformer():
    keras.utils.set_random_seed(1234)
    config = ModelConfig.from_size("tiny", vocab_size=40, num_layers=2, d_model=16, d_ff=32, num_heads=2, max_length=64)
    model = build_transformer(config)
    return Transformer(model, config), model


@pytest.fixture(scope="module")
def sample(transformer):
    """`sample_ids` on the tiny model, traced once (a graph loop runs faster than an eager one):
    `sample(source_ids, seeds, top_k=0, top_p=1.0, temperature=1.0, max_extra_length=EXTRA)`."""
    transformer, _ = transformer
    ints, floats = tf.TensorSpec([None], tf.int32), tf.TensorSpec([None], tf.float32)
    source, seeds = tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None], tf.int64)
    traced = tf.function(
        lambda *args: sample_ids(transformer, *args), input_signature=[source, seeds, ints, floats, floats, ints]
    )

    def run(source_ids, seeds, top_k=0, top_p=1.0, temperature=1.0, max_extra_length=EXTRA):
        n = len(source_ids)
        settings = [(top_k, tf.int32), (top_p, tf.float32), (temperature, tf.float32), (max_extra_length, tf.int32)]
        return traced(
            tf.constant(source_ids, tf.int32),
            tf.broadcast_to(tf.constant(seeds, tf.int64), [n]),
            *(tf.broadcast_to(tf.constant(value, dtype), [n]) for value, dtype in settings),
        )

    return run


@pytest.mark.slow
def test_top_k_1_is_greedy_decoding(transformer, sample):
    transformer, _ = transformer
    greedy = tf.function(lambda source_ids: greedy_ids(transformer, source_ids, max_extra_length=EXTRA)[0])(SOURCE_IDS)
    for temperature in (0.5, 3.0):
        ids, _ = sample(SOURCE_IDS, 7, top_k=1, temperature=temperature)
        np.testing.assert_array_equal(ids, greedy)


def test_the_same_seeds_give_the_same_samples_and_other_seeds_others(sample):
    seeds = np.array([3, 4, 5])
    first, first_scores = sample(SOURCE_IDS, seeds, temperature=5.0)
    again, again_scores = sample(SOURCE_IDS, seeds, temperature=5.0)
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(first_scores, again_scores)
    other, _ = sample(SOURCE_IDS, seeds + 100, temperature=5.0)
    for row in range(3):
        assert not np.array_equal(first[row], other[row])


@pytest.mark.slow
def test_a_sentence_samples_the_same_alone_as_in_a_batch(sample):
    seeds = np.array([3, 4, 5])
    batch, batch_scores = sample(SOURCE_IDS, seeds, temperature=5.0)
    for row in range(3):
        alone, alone_scores = sample(SOURCE_IDS[row : row + 1], seeds[row : row + 1], temperature=5.0)
        length = alone.shape[1]
        np.testing.assert_array_equal(alone[0], batch[row, :length])
        assert not np.any(batch[row, length:])
        np.testing.assert_allclose(alone_scores[0], batch_scores[row], rtol=1e-5)


@pytest.mark.slow
def test_scores_are_the_model_log_probabilities_of_the_samples(transformer, sample):
    _, model = transformer
    ids, scores = sample(SOURCE_IDS, [1, 2, 3], top_p=0.9)
    assert ids.shape == (3, 7 + EXTRA) and scores.shape == (3,)
    for sentence in range(3):
        tokens = ids[sentence].numpy()
        length = list(tokens).index(END) + 1 if END in tokens else len(tokens)
        hypothesis = tokens[:length]
        assert np.all(tokens[length:] == 0) and not np.any(np.isin(hypothesis, [0, 1]))
        decoder_input = np.concatenate([[1], hypothesis[:-1]])[None, :]  # [1, T]
        log_probs = tf.nn.log_softmax(model([SOURCE_IDS[sentence : sentence + 1], decoder_input])[0]).numpy()
        expected = log_probs[np.arange(length), hypothesis].sum()
        np.testing.assert_allclose(scores[sentence], expected, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_each_sentence_stops_at_its_own_maximum_length(sample):
    ids, _ = sample(SOURCE_IDS, [1, 2, 3], temperature=5.0, max_extra_length=[1, 4, 2])
    for row, most in enumerate([7 + 1, 3 + 4, 5 + 2]):
        tokens = ids[row].numpy()
        assert END in tokens[:most] and not np.any(tokens[most:])


def test_settings_given_as_numbers_are_checked_at_once(transformer):
    transformer, _ = transformer
    for name, value, message in (
        ("top_k", -1, r"top_k must be >= 0 \(0: the whole vocabulary\), got -1"),
        ("top_p", 0.0, r"top_p must be in \(0, 1\], got 0.0"),
        ("top_p", 1.5, r"top_p must be in \(0, 1\], got 1.5"),
        ("temperature", 0.0, "temperature must be a finite number > 0, got 0.0"),
        ("max_extra_length", 0, "max_extra_length must be positive, got 0"),
    ):
        with pytest.raises(ValueError, match=message):
            sample_ids(transformer, SOURCE_IDS, 1, **{name: value})


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("top_k", [-1], "top_k must be >= 0"),
        ("top_p", [0.0], "top_p must be in"),
        ("temperature", [float("nan")], "temperature must be a finite number > 0"),
        ("max_extra_length", [0], "max_extra_length must be positive"),
        ("seed", [1, 2], "one seed per input"),
    ],
)
def test_the_signature_settings_are_checked_when_the_graph_runs(name, value, message):
    settings = dict(seed=[1], top_k=[0], top_p=[1.0], temperature=[1.0], max_extra_length=[5])
    settings[name] = value
    dtypes = dict(seed=tf.int64, top_k=tf.int32, top_p=tf.float32, temperature=tf.float32, max_extra_length=tf.int32)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        checked_request(tf.constant(1), **{k: tf.constant(v, dtypes[k]) for k, v in settings.items()})
