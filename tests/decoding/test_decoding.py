"""Beam search on a tiny random Transformer: greedy agreement, cached scores equal a full
forward pass, batching changes nothing, tf.function and SavedModel."""

import importlib
import math
import os
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from app.decoding.beam_search import beam_search, largest_alpha, length_penalty
from app.model.config import ModelConfig
from app.decoding.model_search import (
    DecodingConfig,
    make_symbols_to_logits,
    output_lengths,
    search_sizes,
    translate_ids,
)
from app.decoding.model_search import greedy_ids
from app.decoding.incremental import IncrementalDecoder
from app.model.transformer import Transformer, build_transformer

END = 2
# Three sentences of different lengths (0 = padding).
SOURCE_IDS = np.array(
    [[5, 6, 7, 8, 9, 10, 2], [11, 12, 2, 0, 0, 0, 0], [13, 14, 15, 16, 2, 0, 0]], np.int32
)
EXTRA = 8  # max_extra_length: short outputs keep the tests fast


@pytest.fixture(scope="module")
def transformer():
    keras.utils.set_random_seed(1234)
    config = ModelConfig.from_size(
        "tiny", vocab_size=40, num_layers=2, d_model=16, d_ff=32, num_heads=2, max_length=64
    )
    model = build_transformer(config)
    return Transformer(model, config), model


def output_length(row):
    """Tokens up to and including the end token."""
    return list(row).index(END) + 1


@pytest.mark.slow
def test_beam_size_one_at_alpha_0_equals_greedy_search(transformer):
    transformer, _ = transformer
    # alpha = 0: with a length penalty, a beam of 1 may keep looking for a longer
    # hypothesis that scores better than the greedy one.
    ids, _ = translate_ids(transformer, SOURCE_IDS, beam_size=1, alpha=0.0, max_extra_length=EXTRA)
    greedy = greedy_ids(transformer, SOURCE_IDS, max_extra_length=EXTRA)[0]
    assert ids.shape == (3, 1, 7 + EXTRA)
    np.testing.assert_array_equal(ids[:, 0], greedy)


@pytest.mark.slow
def test_scores_equal_a_full_forward_pass(transformer):
    transformer, model = transformer
    ids, scores = translate_ids(transformer, SOURCE_IDS, beam_size=3, alpha=0.6, max_extra_length=EXTRA)
    assert ids.shape == (3, 3, 7 + EXTRA) and scores.shape == (3, 3)
    for sentence in range(3):
        for beam in range(3):
            tokens = ids[sentence, beam].numpy()
            length = output_length(tokens)
            hypothesis = tokens[:length]
            decoder_input = np.concatenate([[1], hypothesis[:-1]])[None, :]  # [1, T]
            logits = model([SOURCE_IDS[sentence : sentence + 1], decoder_input])  # [1, T, V]
            log_probs = tf.nn.log_softmax(logits[0]).numpy()  # [T, V]
            total = log_probs[np.arange(length), hypothesis].sum()
            expected = total / length_penalty(length, 0.6).numpy()
            np.testing.assert_allclose(scores[sentence, beam], expected, rtol=1e-4, atol=1e-4)
        assert np.all(np.diff(scores[sentence]) <= 0)


@pytest.mark.slow
def test_cached_decoding_finds_what_a_search_over_the_whole_model_finds(transformer):
    # The reference runs the full model over the whole prefix at every step: no caches,
    # no per-sentence memory, no output kernel made in advance. The sentences have other
    # output limits, so they leave the cached search at different steps.
    transformer, model = transformer
    extra = tf.constant([3, EXTRA, 5])
    max_lengths = output_lengths(transformer, SOURCE_IDS, extra)

    def whole_model(ids, step, cache, sentences):
        sources = tf.repeat(sentences["source_ids"], 3, axis=0)  # [A * K, S]
        return model([sources, ids[:, : step + 1]])[:, -1], cache

    for alpha in (0.0, 0.6, 1.4):
        ids, scores = translate_ids(transformer, SOURCE_IDS, beam_size=3, alpha=alpha, max_extra_length=extra)
        expected_ids, expected_scores = beam_search(
            whole_model, tf.fill([3], 1), {}, 40, max_lengths=max_lengths, beam_size=3, alpha=alpha,
            sentence_cache={"source_ids": tf.constant(SOURCE_IDS)},
        )
        np.testing.assert_array_equal(ids, expected_ids)
        np.testing.assert_allclose(scores, expected_scores, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_batching_does_not_change_results(transformer):
    transformer, _ = transformer
    ids, scores = translate_ids(transformer, SOURCE_IDS, beam_size=2, max_extra_length=EXTRA)
    for sentence, source in enumerate(SOURCE_IDS):
        source = source[source != 0][None, :]  # [1, S], no padding
        alone_ids, alone_scores = translate_ids(transformer, source, beam_size=2, max_extra_length=EXTRA)
        width = source.shape[1] + EXTRA
        np.testing.assert_array_equal(alone_ids[0], ids[sentence, :, :width])
        assert np.all(ids[sentence, :, width:] == 0)
        np.testing.assert_allclose(alone_scores[0], scores[sentence], rtol=1e-5, atol=1e-5)


# Batches of 0 to 4 sentences, so some searches get none (5 searches), and one sentence
# with another alpha and output limit than the rest: each search gets its own share of
# the per-sentence settings and memory.
PARALLEL_SOURCES = np.concatenate([SOURCE_IDS, SOURCE_IDS[1:2]])  # [4, 7]
PARALLEL_ALPHA = [0.6, 1.4, 0.0, 0.6]
PARALLEL_EXTRA = [EXTRA, 3, EXTRA, 5]


def traced_searches(transformer, count):
    """`count` parallel beam searches over PARALLEL_SOURCES' settings, traced once for
    every batch size as an export runs them."""
    alpha, extra = tf.constant(PARALLEL_ALPHA), tf.constant(PARALLEL_EXTRA)
    return tf.function(
        lambda source_ids: translate_ids(
            transformer, source_ids, beam_size=3, alpha=alpha[: tf.shape(source_ids)[0]],
            max_extra_length=extra[: tf.shape(source_ids)[0]], parallel_searches=count,
        ),
        input_signature=[tf.TensorSpec([None, None], tf.int32)],
    )


@pytest.fixture(scope="module")
def one_search(transformer):
    """What one search finds for the first 0 to 4 sentences of PARALLEL_SOURCES: the
    reference of every count of parallel searches, traced once for all of them."""
    search = traced_searches(transformer[0], 1)
    return [search(PARALLEL_SOURCES[:batch_size]) for batch_size in range(5)]


@pytest.mark.slow
@pytest.mark.parametrize("parallel_searches", [2, 3, 5])
def test_parallel_searches_give_the_same_results_as_one(transformer, one_search, parallel_searches):
    several = traced_searches(transformer[0], parallel_searches)
    for batch_size, (expected_ids, expected_scores) in enumerate(one_search):
        ids, scores = several(PARALLEL_SOURCES[:batch_size])
        assert ids.shape == expected_ids.shape and scores.shape == expected_scores.shape
        np.testing.assert_array_equal(ids, expected_ids)
        np.testing.assert_allclose(scores, expected_scores, rtol=1e-6, atol=1e-6)


@pytest.mark.slow
def test_greedy_search_in_parallel_gives_the_same_results_as_one(transformer):
    # Greedy outputs are [B, L]: each search's are padded to the batch's longest on their last axis.
    transformer, _ = transformer
    sources = np.concatenate([SOURCE_IDS, SOURCE_IDS[1:2]])  # [4, 7]
    extra = tf.constant([EXTRA, 3, EXTRA, 5])
    one = greedy_ids(transformer, sources, extra)
    for count in (2, 5):
        ids, scores = greedy_ids(transformer, sources, extra, parallel_searches=count)
        np.testing.assert_array_equal(ids, one[0])
        np.testing.assert_allclose(scores, one[1], rtol=1e-6, atol=1e-6)


def test_parallel_searches_deal_the_sentences_out_evenly():
    assert search_sizes(5, 2).numpy().tolist() == [3, 2]
    assert search_sizes(1, 2).numpy().tolist() == [1, 0]
    assert search_sizes(0, 3).numpy().tolist() == [0, 0, 0]
    assert search_sizes(32, 3).numpy().tolist() == [11, 11, 10]
    for searches in (0, 2.0):
        with pytest.raises(ValueError, match=f"parallel_searches must be a positive int, got {searches}"):
            translate_ids(None, SOURCE_IDS, parallel_searches=searches)


@pytest.mark.slow  # traces the decoder twice and saves it: about half of this file's time
def test_runs_under_tf_function_and_from_a_saved_model(transformer, tmp_path):
    transformer, model = transformer

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def translate(source_ids):
        return translate_ids(transformer, source_ids, beam_size=2, max_extra_length=EXTRA)

    @tf.function(
        input_signature=[
            tf.TensorSpec([None, None], tf.int32),
            tf.TensorSpec([], tf.float32),
            tf.TensorSpec([], tf.int32),
        ]
    )
    def translate_with_options(source_ids, alpha, max_extra_length):
        return translate_ids(transformer, source_ids, 2, alpha, max_extra_length)

    # The serving path: the traced function saved to a SavedModel and loaded back, with the
    # weights it reads tracked as the export tracks them (a Keras model tracked instead
    # would have its own call traced and saved too, 3 s more).
    module = tf.Module()
    module.model_variables, module.translate = [weight.value for weight in model.weights], translate
    tf.saved_model.save(module, str(tmp_path))
    loaded = tf.saved_model.load(str(tmp_path))

    eager_ids, eager_scores = translate_ids(transformer, SOURCE_IDS, beam_size=2, max_extra_length=EXTRA)
    for ids, scores in (
        translate(SOURCE_IDS),
        translate_with_options(SOURCE_IDS, tf.constant(0.6), tf.constant(EXTRA)),
        loaded.translate(tf.constant(SOURCE_IDS)),
    ):
        np.testing.assert_array_equal(ids, eager_ids)
        np.testing.assert_allclose(scores, eager_scores, rtol=1e-5, atol=1e-5)
    # Another batch size and length with the same traced function.
    ids, _ = translate(SOURCE_IDS[1:, :5])
    assert ids.shape == (2, 2, 5 + EXTRA)
    ids, _ = translate_with_options(SOURCE_IDS[1:, :5], tf.constant(0.0), tf.constant(3))
    assert ids.shape == (2, 2, 5 + 3)


def test_max_length_never_exceeds_the_models_positions():
    config = ModelConfig.from_size(
        "tiny", vocab_size=40, num_layers=1, d_model=8, d_ff=8, num_heads=2, max_length=10
    )
    transformer = Transformer(build_transformer(config), config)
    ids, _ = translate_ids(transformer, SOURCE_IDS[:1], beam_size=1, max_extra_length=100)
    assert ids.shape == (1, 1, 10)


def test_greedy_decoding_stays_within_a_learned_position_table():
    # A learned table has no row past max_length: greedy decoding (validation BLEU) read
    # one, which failed on a CPU (GatherV2) and gave zeros on a GPU.
    config = ModelConfig.from_size(
        "tiny", vocab_size=40, num_layers=1, d_model=8, d_ff=8, num_heads=2, max_length=10, positional="learned"
    )
    transformer = Transformer(build_transformer(config), config)
    greedy = greedy_ids(transformer, SOURCE_IDS, max_extra_length=100)[0]
    assert greedy.shape == (3, 10)
    beam, _ = translate_ids(transformer, SOURCE_IDS, beam_size=1, alpha=0.0, max_extra_length=100)
    np.testing.assert_array_equal(greedy, beam[:, 0])


def test_a_huge_max_extra_length_is_capped_before_it_can_overflow():
    config = ModelConfig.from_size(
        "tiny", vocab_size=40, num_layers=1, d_model=8, d_ff=8, num_heads=2, max_length=10
    )
    transformer = Transformer(build_transformer(config), config)
    huge, _ = translate_ids(transformer, SOURCE_IDS, beam_size=2, max_extra_length=np.iinfo(np.int32).max)
    capped, _ = translate_ids(transformer, SOURCE_IDS, beam_size=2, max_extra_length=10)
    assert huge.shape == (3, 2, 10)
    np.testing.assert_array_equal(huge, capped)


@pytest.mark.slow
def test_an_empty_batch_decodes_to_empty_outputs(transformer):
    transformer, _ = transformer
    translate = tf.function(
        lambda source_ids: translate_ids(transformer, source_ids, beam_size=3, max_extra_length=EXTRA),
        input_signature=[tf.TensorSpec([None, None], tf.int32)],
    )
    greedy = tf.function(
        lambda source_ids: greedy_ids(transformer, source_ids, max_extra_length=EXTRA)[0],
        input_signature=[tf.TensorSpec([None, None], tf.int32)],
    )
    for source_ids in (np.zeros([0, 7], np.int32), np.zeros([0, 0], np.int32)):
        ids, scores = translate(source_ids)
        assert ids.shape[:2] == (0, 3) and scores.shape == (0, 3)
        assert greedy(source_ids).shape == (0, 1)


def test_symbols_to_logits_feeds_only_the_newest_token(transformer):
    transformer, _ = transformer
    decoder = IncrementalDecoder(transformer)
    memory = decoder.memory(*transformer.encode(SOURCE_IDS[:1], training=False))
    cache = decoder.empty_cache(1)
    ids = tf.constant([[1, 7, 0, 0, 0]])
    fn = make_symbols_to_logits(decoder)
    logits, _ = fn(ids, tf.constant(0), cache, memory)
    expected, _ = decoder.step(tf.constant([1]), tf.constant(0), cache, memory)
    np.testing.assert_array_equal(logits, expected)


@pytest.mark.parametrize(
    "max_length, limit",
    [(2, 575.55), (10, 96.82), (64, 36.32), (256, 23.51), (1000, 17.32), (100_000, 9.12), (1, math.inf)],
)
def test_largest_alpha_is_the_last_hundredth_whose_longest_penalty_is_finite(max_length, limit):
    assert largest_alpha(max_length) == limit
    if max_length > 1:
        # Rounded down far enough that float32's power stays finite at the limit itself.
        assert np.isfinite(float(length_penalty(max_length, limit)))
        assert np.isinf(float(length_penalty(max_length, limit + 0.01)))


@pytest.mark.slow
def test_an_alpha_past_the_models_limit_is_refused_and_one_at_it_still_ranks(transformer):
    transformer, _ = transformer  # 64 positions: alpha at most 36.32
    message = (
        "alpha must be at most 36.32 for a model of 64 positions: beyond it the length penalty "
        "((5 + length) / 6) ** alpha of its longest outputs overflows float32"
    )
    # Known when the graph is built: a ValueError at once. Before, every hypothesis that
    # could reach 64 tokens scored -0.0, and the first of them won.
    with pytest.raises(ValueError, match=re.escape(f"{message}; got 36.33")):
        translate_ids(transformer, SOURCE_IDS, beam_size=3, alpha=36.33, max_extra_length=100)
    with pytest.raises(ValueError, match=re.escape(f"{message}; got 40")):
        translate_ids(transformer, SOURCE_IDS, beam_size=3, alpha=np.array([0.6, 40.0, 1.0]), max_extra_length=100)
    # Fed at run time, as a serving request's alpha is: the graph's assertion names both.
    traced = tf.function(
        lambda alpha: translate_ids(transformer, SOURCE_IDS, beam_size=3, alpha=alpha, max_extra_length=100),
        input_signature=[tf.TensorSpec([None], tf.float32)],
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(message) + r".*\[0.6 36.33 1\]"):
        traced(tf.constant([0.6, 36.33, 1.0]))
    # At the limit every score is still a number below zero, best first.
    _, eager_scores = translate_ids(transformer, SOURCE_IDS, beam_size=3, alpha=36.32, max_extra_length=100)
    _, traced_scores = traced(tf.constant([36.32] * 3))
    for scores in (eager_scores.numpy(), traced_scores.numpy()):
        assert np.all(scores < 0) and np.all(scores[:, :-1] >= scores[:, 1:])


def test_decoding_config_checks_its_fields():
    assert DecodingConfig() == DecodingConfig(beam_size=4, alpha=0.6, max_extra_length=50, parallel_searches=2)
    with pytest.raises(ValueError, match="beam_size"):
        DecodingConfig(beam_size=0)
    for searches in (0, 1.5):
        with pytest.raises(ValueError, match=f"parallel_searches must be a positive int, got {searches}"):
            DecodingConfig(parallel_searches=searches)
    with pytest.raises(ValueError, match="max_extra_length must be positive, got 0"):
        DecodingConfig(max_extra_length=0)
    for alpha, rule in ((-1.0, "must not be negative"), (float("nan"), "must be finite"), (math.inf, "must be finite")):
        with pytest.raises(ValueError, match=f"alpha {rule}, got {alpha}"):
            DecodingConfig(alpha=alpha)
    assert DecodingConfig(alpha=0.0).alpha == 0.0  # plain log-probability is allowed


@pytest.mark.parametrize(
    "module_name, argv, plan_function",
    [
        ("app.commands.export", [], "plan_export"),
        ("app.commands.evaluate", ["--model-dir", "run"], "plan_evaluation"),
        ("app.commands.pictures", ["attention", "--model-dir", "run", "--sentence", "A dog."], "plan_pictures"),
    ],
)
def test_every_command_line_decodes_by_default_as_decoding_config(module_name, argv, plan_function, tmp_path,
                                                                  monkeypatch):
    # The flags take their defaults from DecodingConfig (app/cli/flags.py, without
    # TensorFlow, for --help); each command's plan must hold the paper's decoding.
    monkeypatch.chdir(tmp_path)  # the plans check that the model directories are there
    for run in (os.path.join("runs", "tiny-multi30k-en-de"), "run"):
        os.makedirs(run)
    module = importlib.import_module(module_name)
    plan = getattr(module, plan_function)(module.parse_args(argv))
    # The export chooses alpha on validation unless given (app/export/alpha_search.py),
    # holding the paper's until then.
    assert plan.decoding == DecodingConfig()
    assert getattr(plan, "choose_alpha", True)
    assert (plan.model.checkpoint, plan.model.average_last) == (None, None)


@pytest.mark.slow
@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.4])
def test_a_search_for_the_best_result_only_finds_the_same_best_in_no_more_steps(transformer, alpha):
    # final_results=1 stops a sentence once its best result is final, not its whole
    # n-best list: the same best ids and score, in as many steps or fewer.
    transformer, _ = transformer
    source_ids = tf.constant(SOURCE_IDS)
    decoder = IncrementalDecoder(transformer)
    memory_states, memory_mask = transformer.encode(source_ids, training=False)
    results, steps = {}, {}
    for final_results in (1, 4):
        calls = []
        step = make_symbols_to_logits(decoder)

        def counting(*args, step=step, calls=calls):
            calls.append(int(args[1]))  # eager: one Python call per loop step
            return step(*args)

        results[final_results] = beam_search(
            counting,
            tf.fill([len(SOURCE_IDS)], 1),
            decoder.empty_cache(len(SOURCE_IDS)),
            transformer.config.vocab_size,
            max_lengths=output_lengths(transformer, source_ids, 30),
            beam_size=4,
            alpha=alpha,
            sentence_cache=decoder.memory(memory_states, memory_mask),
            final_results=final_results,
        )
        steps[final_results] = len(calls)
    (best_ids, best_scores), (ids, scores) = results[1], results[4]
    np.testing.assert_array_equal(best_ids[:, 0], ids[:, 0])
    # Sentences leave at other steps, so later steps' products see other batches: the
    # score may move in its last bits.
    np.testing.assert_allclose(best_scores[:, 0], scores[:, 0], rtol=1e-6)
    assert steps[1] <= steps[4]
    if alpha < 1:  # on this model (35 steps against 37): the n-best list settles later
        assert steps[1] < steps[4]


def test_final_results_must_be_from_one_to_the_beam_size():
    with pytest.raises(ValueError, match="final_results must be a Python int from 1 to beam_size 4, got 5"):
        beam_search(None, tf.constant([1]), {}, 10, max_lengths=3, beam_size=4, final_results=5)


def test_the_best_only_signatures_stop_sooner_and_agree_with_nbest(transformer):
    # serving_default's search stops once its best is final; nbest's once all K are: the
    # best translation and score are the same.
    from app.export.saved_model import Translator

    transformer, model = transformer
    assert Translator.translate.__doc__ and "best_only" in Translator.translate.__doc__
    ids_1, scores_1 = translate_ids(transformer, SOURCE_IDS, 4, 0.6, EXTRA, final_results=1)
    ids_k, scores_k = translate_ids(transformer, SOURCE_IDS, 4, 0.6, EXTRA)
    np.testing.assert_array_equal(ids_1[:, 0], ids_k[:, 0])
    np.testing.assert_allclose(scores_1[:, 0], scores_k[:, 0], rtol=1e-6)
