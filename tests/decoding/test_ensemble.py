"""Ensembles (app/decoding/ensemble.py): a step is the log of the mean of the members'
distributions, computed by hand here; forced decoding likewise; an ensemble of one model,
and of two copies of the same weights, translates exactly as the model does."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from app.decoding.ensemble import Ensemble, EnsembleDecoder, ensemble_of
from app.decoding.forced import forced_log_probs
from app.decoding.incremental import IncrementalDecoder
from app.decoding.model_search import constrained_ids, greedy_ids, sample_ids, translate_ids
from app.decoding.steering import batch_steering
from app.model.config import ModelConfig
from app.model.transformer import Transformer, build_transformer
from layers.special_tokens import START_ID

SOURCE_IDS = np.array([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0], [11, 12, 13, 2, 0]], np.int32)
TARGET_IDS = np.array([[20, 21, 22, 2], [24, 2, 0, 0], [2, 0, 0, 0]], np.int32)
EXTRA = 4  # max_extra_length: short outputs keep the tests fast


def tiny_model(seed, max_length=16, **changes):
    """`(Transformer, its Keras model)`: random weights drawn from `seed`."""
    keras.utils.set_random_seed(seed)
    sizes = dict(vocab_size=40, num_layers=1, d_model=16, d_ff=32, num_heads=2, max_length=max_length)
    config = ModelConfig.from_size("tiny", **{**sizes, **changes})
    model = build_transformer(config)
    return Transformer(model, config), model


@pytest.fixture(scope="module")
def two_models():
    """Two different models of one vocabulary: another seed, another shape, fewer positions."""
    return tiny_model(1), tiny_model(2, max_length=12, d_model=8, d_ff=16, norm_first=False)


@pytest.fixture(scope="module")
def model_and_copy(two_models):
    """The first model, and a second one built apart holding the very same weights."""
    (transformer, model), _ = two_models
    copy, copy_model = tiny_model(3)
    copy_model.set_weights(model.get_weights())
    return transformer, copy


def log_mean_softmax(logits):
    """numpy float64: log(mean_m softmax(logits_m)) of `[M, ..., V]` logits."""
    logits = np.asarray(logits, np.float64)
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    return np.log(probs.mean(axis=0))


def test_an_ensemble_of_one_model_is_that_model(two_models):
    (transformer, _), _ = two_models
    assert ensemble_of([transformer]) is transformer
    with pytest.raises(ValueError, match="two or more members, got 1; ensemble_of takes one"):
        Ensemble([transformer])


def test_members_share_a_vocabulary_and_the_fewest_positions_hold(two_models):
    (first, _), (second, _) = two_models
    ensemble = ensemble_of([first, second])
    assert (ensemble.config.vocab_size, ensemble.config.max_length) == (40, 12)
    other, _ = tiny_model(5, vocab_size=41)
    with pytest.raises(ValueError, match=r"share one vocabulary; their vocab_size are \[40, 41\]"):
        Ensemble([first, other])


def test_a_step_is_the_log_of_the_mean_of_the_members_distributions(two_models):
    (first, _), (second, _) = two_models
    ensemble = ensemble_of([first, second])
    beams = 2
    hypotheses = len(SOURCE_IDS) * beams
    decoder = EnsembleDecoder(ensemble)
    memory = decoder.memory(*ensemble.encode(SOURCE_IDS, training=False))
    cache = decoder.empty_cache(hypotheses)
    # Each member alone, by its own incremental decoder.
    members = []
    for member in (first, second):
        member_decoder = IncrementalDecoder(member)
        member_memory = member_decoder.memory(*member.encode(SOURCE_IDS, training=False))
        members.append([member_decoder, member_memory, member_decoder.empty_cache(hypotheses)])
    tokens = np.random.default_rng(0).integers(3, 40, size=(hypotheses, 4)).astype(np.int32)
    tokens[:, 0] = START_ID
    for step in range(tokens.shape[1]):
        log_probs, cache = decoder.step(tokens[:, step], step, cache, memory)
        logits = []
        for entry in members:
            member_logits, entry[2] = entry[0].step(tokens[:, step], step, entry[2], entry[1])
            logits.append(member_logits.numpy())
        assert log_probs.dtype == tf.float32 and log_probs.shape == (hypotheses, 40)
        np.testing.assert_allclose(log_probs, log_mean_softmax(logits), atol=1e-5)
        np.testing.assert_allclose(np.exp(log_probs.numpy()).sum(axis=1), 1.0, atol=1e-5)
    # The members differ: the mean is neither's own distribution.
    assert np.abs(log_mean_softmax(logits[:1]) - log_mean_softmax(logits)).max() > 1e-2


def test_forced_log_probs_are_the_log_of_the_mean_of_the_members_probabilities(two_models):
    (first, first_model), (second, second_model) = two_models
    token_log_probs, log_probs = forced_log_probs(ensemble_of([first, second]), SOURCE_IDS, TARGET_IDS)
    decoder_input = np.concatenate([np.full([3, 1], START_ID, np.int32), TARGET_IDS[:, :-1]], axis=1)  # [B, T]
    logits = [model([SOURCE_IDS, decoder_input]).numpy() for model in (first_model, second_model)]  # M x [B, T, V]
    by_hand = np.take_along_axis(log_mean_softmax(logits), TARGET_IDS[..., None], axis=-1)[..., 0]  # [B, T]
    by_hand[TARGET_IDS == 0] = 0.0
    np.testing.assert_allclose(token_log_probs, by_hand, atol=1e-5)
    np.testing.assert_allclose(log_probs, by_hand.sum(axis=1), atol=1e-5)


SEARCHES = {
    "nbest": lambda model: translate_ids(model, SOURCE_IDS, beam_size=3, alpha=0.6, max_extra_length=EXTRA),
    "beam": lambda model: translate_ids(model, SOURCE_IDS, 3, 0.6, EXTRA, final_results=1),  # as served
    "greedy": lambda model: greedy_ids(model, SOURCE_IDS, EXTRA),
    "sample": lambda model: sample_ids(model, SOURCE_IDS, np.array([1, 2, 3], np.int64), top_k=5,
                                       max_extra_length=EXTRA),
    # A prefix on one sentence, no repeated bigram on another.
    "steered": lambda model: translate_ids(model, SOURCE_IDS, 2, 0.6, EXTRA, steering=batch_steering(
        3, prefix=[[7, 8], [0, 0], [0, 0]], prefix_lengths=[2, 0, 0], no_repeat_ngram_size=[0, 2, 0])),
    # A phrase of two tokens on the second sentence, none on the third.
    "constrained": lambda model: constrained_ids(
        model, SOURCE_IDS[1:], [[[20, 21]], [[0, 0]]], [[2], [0]], 2, 0.6, EXTRA)[:2],
}


@pytest.mark.parametrize("search", sorted(SEARCHES))
def test_two_copies_of_the_same_weights_translate_as_the_model(model_and_copy, search):
    transformer, copy = model_and_copy
    (ids, scores), (ensemble_ids, ensemble_scores) = (
        SEARCHES[search](model) for model in (transformer, ensemble_of([transformer, copy]))
    )
    np.testing.assert_array_equal(ensemble_ids, ids)
    np.testing.assert_allclose(ensemble_scores, scores, atol=1e-5)


def test_parallel_searches_split_every_members_memory_with_the_sentences(two_models):
    (first, _), (second, _) = two_models
    ensemble = ensemble_of([first, second])
    ids, scores = translate_ids(ensemble, SOURCE_IDS, 2, 0.6, EXTRA, parallel_searches=2)
    expected_ids, expected_scores = translate_ids(ensemble, SOURCE_IDS, 2, 0.6, EXTRA)
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_allclose(scores, expected_scores, atol=1e-5)
