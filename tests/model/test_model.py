"""The assembled model: causality, padding invariance, cached decoding, saving, sizes."""

import keras
import numpy as np
import pytest

from app.model.config import TABLE3_VARIANTS, ModelConfig
from app.model.transformer import Transformer, build_transformer

SOURCE_IDS = np.array([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0]], "int32")
TARGET_IDS = np.array([[1, 11, 12, 13, 14], [1, 15, 16, 0, 0]], "int32")


def tiny_config(**overrides):
    fields = dict(vocab_size=40, num_layers=2, d_model=16, d_ff=32, num_heads=2, max_length=32)
    fields.update(overrides)
    return ModelConfig.from_size("tiny", **fields)


VARIANTS = {
    "paper": {},
    "pre_norm": dict(norm_first=True),
    "learned_positions": dict(positional="learned"),
    "unshared": dict(share_embeddings="none"),
    "target_shared": dict(share_embeddings="target"),
    "small_keys": dict(key_dim=4, value_dim=6),
    "no_attention_bias": dict(attention_bias=False),
    "scale_norm": dict(normalization="scale"),
    "scale_norm_post_norm": dict(normalization="scale", norm_first=False),
}


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def model_and_config(request):
    """Built once per variant for this file's tests, none of which changes its weights;
    seeded as tests/conftest.py seeds each test, so its weights are those it had when
    each test built its own."""
    keras.utils.set_random_seed(1234)
    config = tiny_config(**VARIANTS[request.param])
    return build_transformer(config), config


def test_logits_have_the_vocabulary_shape_and_float32(model_and_config):
    model, config = model_and_config
    logits = model([SOURCE_IDS, TARGET_IDS])
    assert tuple(logits.shape) == (2, 5, config.vocab_size)
    assert logits.dtype == "float32"


def test_changing_a_target_token_never_changes_earlier_logits(model_and_config):
    model, _ = model_and_config
    before = np.asarray(model([SOURCE_IDS, TARGET_IDS]))
    changed = TARGET_IDS.copy()
    changed[0, 3] = 30
    after = np.asarray(model([SOURCE_IDS, changed]))
    np.testing.assert_array_equal(after[0, :3], before[0, :3])
    assert not np.allclose(after[0, 3:], before[0, 3:])


def test_appending_source_padding_never_changes_logits(model_and_config):
    model, _ = model_and_config
    before = np.asarray(model([SOURCE_IDS, TARGET_IDS]))
    padded = np.pad(SOURCE_IDS, ((0, 0), (0, 4)))
    after = np.asarray(model([padded, TARGET_IDS]))
    np.testing.assert_allclose(after, before, atol=1e-5)


def test_cached_step_decoding_equals_the_full_forward_pass(model_and_config):
    model, config = model_and_config
    full = np.asarray(model([SOURCE_IDS, TARGET_IDS]))
    transformer = Transformer(model, config)
    memory, memory_mask = transformer.encode(SOURCE_IDS)
    memory_cache = transformer.init_memory_cache(memory, memory_mask)
    cache = transformer.empty_self_cache(len(TARGET_IDS))
    for step in range(TARGET_IDS.shape[1]):
        logits, cache = transformer.decode_step(TARGET_IDS[:, step], step, cache, memory_cache)
        real = TARGET_IDS[:, step] != 0
        np.testing.assert_allclose(np.asarray(logits)[real], full[real, step], atol=2e-5)
    assert [tuple(layer["key"].shape)[:3] for layer in cache] == [(len(TARGET_IDS), config.num_heads, step + 1)] * 2


@pytest.mark.slow
def test_the_beams_of_a_sentence_share_its_memory_cache_and_decode_as_it_alone(model_and_config):
    # N = B x 3 hypotheses, sentence-major, read one memory cache of B sentences: each
    # gets the logits of its sentence decoded on its own, step after step.
    model, config = model_and_config
    transformer = Transformer(model, config)
    memory, memory_mask = transformer.encode(SOURCE_IDS)
    memory_cache = transformer.init_memory_cache(memory, memory_mask)
    beams = 3
    rng = np.random.default_rng(5)
    tokens = rng.integers(3, config.vocab_size, size=(len(SOURCE_IDS), beams, 4)).astype("int32")  # [B, K, T]
    cache = transformer.empty_self_cache(len(SOURCE_IDS) * beams)
    alone = [
        [transformer.empty_self_cache(1) for _ in range(beams)] for _ in range(len(SOURCE_IDS))
    ]
    # Each sentence's memory cache on its own, made once: the same at every step.
    own = [
        transformer.init_memory_cache(memory[sentence : sentence + 1], memory_mask[sentence : sentence + 1])
        for sentence in range(len(SOURCE_IDS))
    ]
    for step in range(tokens.shape[2]):
        logits, cache = transformer.decode_step(tokens[:, :, step].reshape(-1), step, cache, memory_cache)
        logits = np.asarray(logits).reshape(len(SOURCE_IDS), beams, -1)
        for sentence in range(len(SOURCE_IDS)):
            for beam in range(beams):
                expected, alone[sentence][beam] = transformer.decode_step(
                    tokens[sentence, beam, step : step + 1], step, alone[sentence][beam], own[sentence]
                )
                np.testing.assert_allclose(logits[sentence, beam], np.asarray(expected)[0], atol=1e-5)


@pytest.mark.slow
def test_model_round_trips_through_config_and_save(model_and_config, tmp_path):
    model, _ = model_and_config
    expected = np.asarray(model([SOURCE_IDS, TARGET_IDS]))

    clone = keras.Model.from_config(model.get_config())
    clone.set_weights(model.get_weights())
    np.testing.assert_array_equal(np.asarray(clone([SOURCE_IDS, TARGET_IDS])), expected)

    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_array_equal(np.asarray(loaded([SOURCE_IDS, TARGET_IDS])), expected)


@pytest.mark.slow
def test_a_loaded_model_decodes_step_by_step(tmp_path):
    config = tiny_config()
    model = build_transformer(config)
    model.save(tmp_path / "model.keras")
    loaded = keras.models.load_model(tmp_path / "model.keras")
    transformer = Transformer(loaded, config)
    memory, memory_mask = transformer.encode(SOURCE_IDS)
    memory_cache = transformer.init_memory_cache(memory, memory_mask)
    self_cache = transformer.empty_self_cache(len(TARGET_IDS))
    logits, _ = transformer.decode_step(TARGET_IDS[:, 0], 0, self_cache, memory_cache)
    np.testing.assert_allclose(np.asarray(logits), np.asarray(model([SOURCE_IDS, TARGET_IDS[:, :1]]))[:, 0], atol=1e-5)


def test_a_model_that_does_not_match_the_config_is_named():
    model = build_transformer(tiny_config(num_layers=1))
    with pytest.raises(ValueError, match=r"'transformer' does not match.*encoder_layers"):
        Transformer(model, tiny_config(num_layers=2))


@pytest.mark.parametrize(
    "sharing, matrices", [("all", 1), ("target", 2), ("none", 3)]
)
def test_embedding_sharing_modes_count_their_matrices(sharing, matrices):
    config = tiny_config(share_embeddings=sharing)
    model = build_transformer(config)
    vocab_by_width = [w for w in model.weights if tuple(w.shape) in ((40, 16), (16, 40))]
    assert len(vocab_by_width) == matrices


@pytest.mark.slow
@pytest.mark.parametrize("size, paper_millions", [("base", 65), ("big", 213)])
def test_paper_sizes_match_the_papers_parameter_counts(size, paper_millions):
    # With the paper's shared 37k vocabulary; the paper rounds its counts.
    model = build_transformer(ModelConfig.from_size(size, vocab_size=37000))
    assert abs(model.count_params() / (paper_millions * 1e6) - 1) < 0.04


@pytest.mark.parametrize("attention_bias, biases", [(False, 0), (True, 4 * 6)])
def test_attention_projections_have_biases_only_when_configured(attention_bias, biases):
    # 2 layers: 2 encoder self-attentions, 2 decoder self- and 2 cross-attentions.
    model = build_transformer(tiny_config(attention_bias=attention_bias))
    attention_biases = [w.path for w in model.weights if "attention" in w.path and w.path.endswith("/bias")]
    assert len(attention_biases) == biases
    # The feed-forward blocks keep theirs either way.
    assert len([w for w in model.weights if "feed_forward" in w.path and w.path.endswith("/bias")]) == 2 * 2 * 2


def test_a_configuration_written_before_attention_bias_reads_as_with_biases():
    # The paper's sizes have none; tiny, like the published Transformer-Tiny, has them.
    assert not ModelConfig().attention_bias and not ModelConfig.from_size("base").attention_bias
    assert ModelConfig.from_size("tiny").attention_bias
    written_before = ModelConfig.from_size("base", attention_bias=True).to_dict()
    del written_before["attention_bias"]
    assert ModelConfig.from_dict(written_before) == ModelConfig.from_size("base", attention_bias=True)
    without = ModelConfig.from_size("base")
    assert ModelConfig.from_dict(without.to_dict()) == without


@pytest.mark.parametrize("norm_first", [True, False])
def test_scale_norm_replaces_every_layer_norm_with_one_scalar(norm_first):
    # 2 layers: 2 norms per encoder layer, 3 per decoder layer, and under pre-norm a final
    # norm after each stack.
    norms = 2 * 2 + 2 * 3 + (2 if norm_first else 0)
    layer_norm = build_transformer(tiny_config(norm_first=norm_first))
    scale_norm = build_transformer(tiny_config(norm_first=norm_first, normalization="scale"))
    assert {w.path for w in layer_norm.weights} - {w.path for w in scale_norm.weights} == {
        w.path for w in layer_norm.weights if w.path.endswith("/beta")
    }
    scales = [w for w in scale_norm.weights if w.path.endswith("_norm/gamma")]
    assert len(scales) == norms and all(w.shape == () for w in scales)
    np.testing.assert_allclose([w.numpy() for w in scales], 16**0.5)  # sqrt(d_model)
    assert layer_norm.count_params() - scale_norm.count_params() == norms * (2 * 16 - 1)
    # Configurations written before the option read as layer norm.
    written_before = tiny_config().to_dict()
    del written_before["normalization"]
    assert ModelConfig.from_dict(written_before).normalization == "layer"


def test_config_overrides_rederive_the_head_width():
    assert ModelConfig.from_size("base").key_dim == 64
    assert ModelConfig.from_size("base", num_heads=16).key_dim == 32
    assert ModelConfig.from_size("big").key_dim == 64
    row_b = ModelConfig.from_size("base", **TABLE3_VARIANTS["B1"])
    assert (row_b.key_dim, row_b.value_dim) == (16, 64)
    config = ModelConfig.from_size("tiny", positional="learned")
    assert ModelConfig.from_json(config.to_json()) == config


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(num_heads=3), "d_model=128 is not divisible by num_heads=3"),
        (dict(dropout=1.5), "dropout must be in \\[0, 1\\), got 1.5"),
        (dict(positional="rotary"), "positional='rotary'"),
        (dict(share_embeddings="some"), "share_embeddings='some'"),
        (dict(normalization="rms"), "normalization='rms', expected one of \\('layer', 'scale'\\)"),
        (dict(num_layers=0), "num_layers must be a positive int, got 0"),
        (dict(value_dim=-1), "value_dim must be a positive int, got -1"),
        (dict(key_dim=0), "key_dim must be a positive int, got 0"),
        (dict(heads=4), "unknown model configuration fields: \\['heads'\\]"),
    ],
)
def test_bad_configurations_name_the_bad_value(overrides, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig.from_size("tiny", **overrides)


def test_unknown_size_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown model size 'huge'; known sizes: tiny, small, base, big"):
        ModelConfig.from_size("huge")
