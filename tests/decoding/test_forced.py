"""Forced decoding: each target token's log-prob equals the model's own forward pass, the
cached step-by-step decoder's, and beam search's score of the same hypothesis at alpha 0."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from app.decoding.forced import decoder_inputs, forced_log_probs, target_ids
from app.decoding.model_search import translate_ids
from app.model.config import ModelConfig
from app.model.transformer import Transformer, build_transformer

MAX_LENGTH = 12
SOURCE_IDS = np.array([[5, 6, 7, 8, 9, 10, 2], [11, 12, 2, 0, 0, 0, 0], [2, 0, 0, 0, 0, 0, 0]], np.int32)
# Tokens then the end token (2), 0-padded: the third is an empty target, its end token alone.
TARGET_IDS = np.array([[20, 21, 22, 23, 2], [24, 2, 0, 0, 0], [2, 0, 0, 0, 0]], np.int32)


@pytest.fixture(scope="module")
def transformer():
    keras.utils.set_random_seed(1234)
    config = ModelConfig.from_size(
        "tiny", vocab_size=40, num_layers=2, d_model=16, d_ff=32, num_heads=2, max_length=MAX_LENGTH
    )
    model = build_transformer(config)
    return Transformer(model, config), model


def reference_log_probs(model, source_ids, target_ids):
    """The functional model's logits for [start, target[:-1]], log_softmax, read at the targets."""
    rows = []
    for source, target in zip(source_ids, target_ids):
        length = int(np.count_nonzero(target))
        tokens = target[:length]
        decoder_input = np.concatenate([[1], tokens[:-1]])[None, :]  # [1, T]
        logits = model([source[None, :], decoder_input])  # [1, T, V]
        log_probs = tf.nn.log_softmax(logits[0]).numpy()  # [T, V]
        row = np.zeros(target.shape, np.float32)
        row[:length] = log_probs[np.arange(length), tokens]
        rows.append(row)
    return np.stack(rows)  # [B, T]


def test_decoder_inputs_are_the_start_token_then_the_target_shifted_right():
    np.testing.assert_array_equal(
        decoder_inputs(TARGET_IDS), [[1, 20, 21, 22, 23], [1, 24, 2, 0, 0], [1, 2, 0, 0, 0]]
    )
    assert decoder_inputs(tf.zeros([2, 0], tf.int32)).shape == (2, 0)


def test_target_ids_append_the_end_token_and_cut_to_the_positions():
    tokens = tf.ragged.constant([[5, 6, 7], [], [4] * 6, [8, 9, 10]], tf.int32)
    ids, cut = target_ids(tokens, 4)
    # [8, 9, 10] with its end token fills the 4 positions exactly: not cut.
    np.testing.assert_array_equal(ids, [[5, 6, 7, 2], [2, 0, 0, 0], [4, 4, 4, 4], [8, 9, 10, 2]])
    np.testing.assert_array_equal(cut, [False, False, True, False])
    assert ids.dtype == tf.int32


def test_forced_log_probs_equal_the_models_own_forward_pass(transformer):
    transformer, model = transformer
    token_log_probs, log_probs = forced_log_probs(transformer, SOURCE_IDS, TARGET_IDS)
    expected = reference_log_probs(model, SOURCE_IDS, TARGET_IDS)
    assert token_log_probs.shape == (3, 5) and token_log_probs.dtype == tf.float32
    np.testing.assert_allclose(token_log_probs, expected, atol=1e-5)
    np.testing.assert_array_equal(token_log_probs.numpy()[TARGET_IDS == 0], 0.0)
    np.testing.assert_allclose(log_probs, expected.sum(axis=1), atol=1e-5)
    assert np.all(token_log_probs.numpy()[TARGET_IDS != 0] < 0)


def test_forced_log_probs_equal_cached_step_by_step_decoding(transformer):
    transformer, _ = transformer
    token_log_probs, _ = forced_log_probs(transformer, SOURCE_IDS, TARGET_IDS)
    memory, memory_mask = transformer.encode(SOURCE_IDS, training=False)
    memory_cache = transformer.init_memory_cache(memory, memory_mask)
    self_cache = transformer.empty_self_cache(3)
    inputs = decoder_inputs(TARGET_IDS).numpy()
    expected = np.zeros(TARGET_IDS.shape, np.float32)
    for step in range(TARGET_IDS.shape[1]):
        logits, self_cache = transformer.decode_step(
            tf.constant(inputs[:, step]), step, self_cache, memory_cache, transformer.output_kernel()
        )  # [B, V]
        log_probs = tf.nn.log_softmax(logits).numpy()
        expected[:, step] = np.where(TARGET_IDS[:, step] != 0, log_probs[np.arange(3), TARGET_IDS[:, step]], 0.0)
    np.testing.assert_allclose(token_log_probs, expected, atol=1e-5)


def test_the_best_beam_at_alpha_0_scores_its_forced_log_prob(transformer):
    transformer, _ = transformer
    ids, scores = translate_ids(transformer, SOURCE_IDS, beam_size=3, alpha=0.0, max_extra_length=4)
    best = ids[:, 0, :]  # [B, L]: tokens, the end token (or cut at the longest allowed), 0s
    _, log_probs = forced_log_probs(transformer, SOURCE_IDS, best)
    np.testing.assert_allclose(log_probs, scores[:, 0], atol=1e-5)


def test_a_prefix_scores_as_the_first_tokens_of_the_whole_target(transformer):
    # Why a target cut to the positions is scored on its first tokens: each position
    # reads only the earlier ones, so the prefix's log-probs are the whole target's.
    transformer, _ = transformer
    whole, _ = forced_log_probs(transformer, SOURCE_IDS[:1], TARGET_IDS[:1])
    prefix, _ = forced_log_probs(transformer, SOURCE_IDS[:1], TARGET_IDS[:1, :3])
    np.testing.assert_allclose(prefix, whole[:, :3], atol=1e-6)


def test_a_target_longer_than_the_positions_is_refused_naming_it(transformer):
    transformer, _ = transformer
    too_long = np.full([1, MAX_LENGTH + 1], 5, np.int32)
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"target_ids longer than the model's {MAX_LENGTH}"):
        forced_log_probs(transformer, SOURCE_IDS[:1], too_long)
