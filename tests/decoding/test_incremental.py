"""The incremental decoder of inference (app/decoding/incremental.py) computes what the
model's own cached `decode_step` computes, for every model variant, and beam search on
it finds what beam search on `decode_step` finds."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from app.decoding.beam_search import beam_search
from app.decoding.incremental import IncrementalDecoder, _Norm
from app.decoding.model_search import output_lengths, translate_ids
from app.model.transformer import Transformer, build_transformer
from layers.special_tokens import END_ID, PAD_ID, START_ID
from tests.model.test_model import VARIANTS, tiny_config

SOURCE_IDS = np.array([[5, 6, 7, 8, 9, 2], [9, 10, 2, 0, 0, 0], [11, 12, 13, 2, 0, 0]], "int32")


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def transformer(request):
    """Built once per variant for this file's tests, none of which changes its weights."""
    keras.utils.set_random_seed(7)
    config = tiny_config(**VARIANTS[request.param])
    model = build_transformer(config)
    # Trained-looking norms and biases: the initial ones (gamma 1, beta 0, bias 0) would
    # hide a weight read in the wrong place.
    rng = np.random.default_rng(3)
    for weight in model.weights:
        if any(part in weight.path for part in ("gamma", "beta", "bias")):
            weight.assign(weight.numpy() + rng.normal(0, 0.3, weight.shape).astype("float32"))
    return Transformer(model, config)


@pytest.mark.slow
def test_each_step_equals_decode_step_with_several_beams_a_sentence(transformer):
    beams = 3
    memory_states, memory_mask = transformer.encode(SOURCE_IDS)
    decoder = IncrementalDecoder(transformer)
    memory = decoder.memory(memory_states, memory_mask)
    reference_memory = transformer.init_memory_cache(memory_states, memory_mask)
    hypotheses = len(SOURCE_IDS) * beams
    cache, reference_cache = decoder.empty_cache(hypotheses), transformer.empty_self_cache(hypotheses)
    rng = np.random.default_rng(5)
    tokens = rng.integers(3, transformer.config.vocab_size, size=(hypotheses, 6)).astype("int32")
    tokens[:, 0] = START_ID
    for step in range(tokens.shape[1]):
        logits, cache = decoder.step(tokens[:, step], step, cache, memory)
        expected, reference_cache = transformer.decode_step(tokens[:, step], step, reference_cache, reference_memory)
        assert logits.dtype == tf.float32 and logits.shape == (hypotheses, transformer.config.vocab_size)
        np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-5)
        for layer, reference in zip(cache, reference_cache):
            np.testing.assert_allclose(layer["key"], reference["key"], rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(layer["value"], reference["value"], rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_beam_search_on_it_finds_what_beam_search_on_decode_step_finds(transformer):
    source_ids = tf.constant(SOURCE_IDS)
    max_lengths = output_lengths(transformer, source_ids, 6)
    ids, scores = translate_ids(transformer, source_ids, beam_size=4, alpha=0.6, max_extra_length=6)

    memory_states, memory_mask = transformer.encode(source_ids, training=False)
    output_kernel = transformer.output_kernel()

    def reference_step(ids, step, cache, memory_cache):
        return transformer.decode_step(ids[:, step], step, cache, memory_cache, output_kernel)

    expected_ids, expected_scores = beam_search(
        reference_step,
        tf.fill([len(SOURCE_IDS)], START_ID),
        transformer.empty_self_cache(len(SOURCE_IDS)),
        transformer.config.vocab_size,
        max_lengths=max_lengths,
        beam_size=4,
        alpha=0.6,
        end_id=END_ID,
        pad_id=PAD_ID,
        start_id=START_ID,
        sentence_cache=transformer.init_memory_cache(memory_states, memory_mask),
    )
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_allclose(scores, expected_scores, rtol=1e-5)


@pytest.mark.slow
def test_inside_a_tf_function_the_loop_reads_no_variable(transformer):
    # The weights are read once per call, before the loop: a decoding step reads tensors.
    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def translate(source_ids):
        return translate_ids(transformer, source_ids, beam_size=2, alpha=0.6, max_extra_length=4)

    graph = translate.get_concrete_function().graph.as_graph_def()
    bodies = [f for f in graph.library.function if "body" in f.signature.name]
    assert bodies
    assert not [node.name for f in bodies for node in f.node_def if node.op == "ReadVariableOp"]
    np.testing.assert_array_equal(
        translate(tf.constant(SOURCE_IDS))[0], translate_ids(transformer, SOURCE_IDS, 2, 0.6, 4)[0]
    )


def test_an_unknown_normalization_layer_is_refused_by_name():
    with pytest.raises(TypeError, match="no incremental form of BatchNormalization"):
        _Norm(keras.layers.BatchNormalization(), tf.float32)
