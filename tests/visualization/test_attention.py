"""app/visualization/attention.py: the attention weights it collects, the sentence it
attends over, and the grids it draws. The command that calls it: tests/commands/test_pictures.py."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from app.visualization.attention import (
    ATTENTION_KINDS,
    SentenceAttention,
    collect_attention,
    plot_attention,
    sentence_attention,
    write_attention_pictures,
)
from tests.visualization.helpers import png_size

ROOT = Path(__file__).resolve().parents[2]

# Two sentences of different lengths, so the second has padding on both sides.
SOURCE = np.array([[5, 6, 7, 8, 9, 2], [10, 11, 2, 0, 0, 0]], np.int32)  # [B=2, S=6]
TARGET = np.array([[1, 12, 13, 14, 15], [1, 16, 17, 0, 0]], np.int32)  # [B=2, T=5]


@pytest.fixture(scope="module", params=[False, True], ids=["post-norm", "pre-norm"])
def transformer(request):
    """An untrained 2-layer, 2-head model: enough layers and heads to tell them apart."""
    import keras

    from app.model.config import ModelConfig
    from app.model.transformer import Transformer, build_transformer

    keras.utils.set_random_seed(7)
    config = ModelConfig.from_size(
        "tiny", vocab_size=40, num_layers=2, d_model=16, d_ff=32, num_heads=2, max_length=16,
        norm_first=request.param,
    )
    model = build_transformer(config)
    return Transformer(model, config), model


@pytest.fixture(scope="module")
def attention(transformer):
    return collect_attention(transformer[0], SOURCE, TARGET)


# Attention weights.


def test_one_array_per_layer_shaped_batch_heads_queries_keys(attention):
    assert [w.shape for w in attention.encoder] == [(2, 2, 6, 6)] * 2  # [B, H, S, S]
    assert [w.shape for w in attention.decoder] == [(2, 2, 5, 5)] * 2  # [B, H, T, T]
    assert [w.shape for w in attention.cross] == [(2, 2, 5, 6)] * 2  # [B, H, T, S]
    assert attention.logits.shape == (2, 5, 40)


def test_rows_sum_to_one_and_hidden_keys_get_exactly_zero(attention):
    for weights in attention.encoder + attention.decoder + attention.cross:
        np.testing.assert_allclose(weights.sum(axis=-1), 1.0, atol=1e-5)
        assert (weights >= 0).all()
    for weights in attention.encoder + attention.cross:
        assert (weights[1, :, :, 3:] == 0).all()  # the second source's padding
        assert (weights[0] > 0).all()  # nothing hidden in the first
    future = np.triu(np.ones((5, 5), bool), k=1)
    for weights in attention.decoder:
        # Lower triangular: no position sees a later one.
        assert (weights[:, :, future] == 0).all()
        assert (weights[0][:, ~future] > 0).all()
        assert (weights[1, :, :, 3:] == 0).all()  # the second target's padding


def reference_weights(layer, query_input, key_input, mask):
    """softmax(Q K^T / sqrt(d_k)) in numpy, from `layer`'s own projection kernels.

    Args:
        layer: a `MultiHeadAttention`.
        query_input: `[B, T, D]`; key_input: `[B, S, D]`.
        mask: bool `[B, T, S]`, True = may attend.

    Returns:
        `[B, H, T, S]`.
    """

    def project(dense, x):
        y = np.asarray(x) @ dense.kernel.numpy() + dense.bias.numpy()  # [B, T, H * K]
        return y.reshape(y.shape[0], y.shape[1], layer.num_heads, -1).transpose(0, 2, 1, 3)  # [B, H, T, K]

    query, key = project(layer.query_dense, query_input), project(layer.key_dense, key_input)
    scores = query @ key.transpose(0, 1, 3, 2) / np.sqrt(layer.key_dim)  # [B, H, T, S]
    scores = np.where(mask[:, None], scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return weights / weights.sum(axis=-1, keepdims=True)


def test_weights_are_what_each_attention_layer_computes_in_a_normal_forward_pass(transformer, attention):
    from layers.masks import decoder_self_attention_mask, padding_mask

    t, model = transformer
    # The masks written out, not taken from layers/masks.py.
    source_real, target_real = SOURCE != 0, TARGET != 0
    encoder_mask = np.broadcast_to(source_real[:, None, :], (2, 6, 6))  # [B, S, S]
    cross_mask = np.broadcast_to(source_real[:, None, :], (2, 5, 6))  # [B, T, S]
    decoder_mask = np.tril(np.ones((5, 5), bool))[None] & target_real[:, None, :]  # [B, T, T]

    # Each layer's input comes from the layers before it, called as the model calls them.
    # Post-norm attends over the block's input x; pre-norm over LayerNorm(x), and each
    # stack then ends with a LayerNorm of its own.
    pre_norm = t.config.norm_first
    x = t.source_positions(t.source_embedding(SOURCE))  # [B, S, D]
    for i, layer in enumerate(t.encoder_layers):
        seen = layer.self_attention_norm(x) if pre_norm else x
        np.testing.assert_allclose(
            attention.encoder[i], reference_weights(layer.self_attention, seen, seen, encoder_mask), atol=1e-5
        )
        x = layer(x, padding_mask=padding_mask(SOURCE))
    memory = t.encoder_norm(x) if pre_norm else x

    y = t.target_positions(t.target_embedding(TARGET))  # [B, T, D]
    for i, layer in enumerate(t.decoder_layers):
        self_mask = decoder_self_attention_mask(TARGET)
        seen = layer.self_attention_norm(y) if pre_norm else y
        np.testing.assert_allclose(
            attention.decoder[i], reference_weights(layer.self_attention, seen, seen, decoder_mask), atol=1e-5
        )
        # Cross-attention queries come out of the self-attention block: post-norm
        # LayerNorm(y + SelfAttention(y)), pre-norm CrossNorm(y + SelfAttention(Norm(y))).
        after_self = y + layer.self_attention(seen, seen, attention_mask=self_mask)
        queries = layer.cross_attention_norm(after_self) if pre_norm else layer.self_attention_norm(after_self)
        expected = reference_weights(layer.cross_attention, queries, memory, cross_mask)
        np.testing.assert_allclose(attention.cross[i], expected, atol=1e-5)
        y = layer(y, memory, self_attention_mask=self_mask, memory_mask=padding_mask(SOURCE))

    # Collecting the weights leaves the computation as it was: the model's own logits.
    np.testing.assert_allclose(attention.logits, model([SOURCE, TARGET], training=False), atol=1e-5)


# One sentence of a trained run.


@pytest.fixture(scope="module")
def translator(model_dir):
    from app.export.saved_model import load_translator

    return load_translator(model_dir)[0]


@pytest.mark.slow  # the tiny run trained and its weights loaded: about 10 s on 2 cores
def test_the_sentence_is_translated_greedily_and_attended_over_with_its_pieces(translator):
    import tensorflow as tf

    from app.decoding.config import DecodingConfig
    from app.decoding.model_search import greedy_ids

    sentence = "A man rides a bike."
    # Beam 1 with alpha 0 is greedy decoding exactly.
    result = sentence_attention(
        translator, sentence, decoding=DecodingConfig(beam_size=1, alpha=0.0, max_extra_length=6)
    )
    source_ids = translator.source_ids(tf.constant([sentence]))
    greedy = greedy_ids(translator.transformer, source_ids, max_extra_length=6)[0][0].numpy().tolist()
    assert result.source_ids == source_ids[0].numpy().tolist()
    assert result.target_ids[1:] + [2] == greedy[: greedy.index(2) + 1]
    assert result.target_ids[0] == 1

    source_length, target_length = len(result.source_ids), len(result.target_ids)
    assert result.encoder_self_attention.shape == (1, 2, source_length, source_length)  # [N, H, S, S]
    assert result.decoder_self_attention.shape == (1, 2, target_length, target_length)
    assert result.encoder_decoder_attention.shape == (1, 2, target_length, source_length)
    assert len(result.source_pieces) == source_length and result.source_pieces[-1] == "</s>"
    assert "".join(result.source_pieces[:-1]).replace("\u2581", " ").strip() == sentence
    assert result.target_pieces[0] == "<s>"
    assert result.predicted_pieces == result.target_pieces[1:] + ["</s>"]
    expected_translation = translator.tokenizer.detokenize([greedy])[0].numpy().decode()
    assert result.translation == expected_translation

    # The forward pass over the produced target agrees with step-by-step decoding: each
    # produced piece is the most likely one (padding and start are never produced), except
    # the last, which may have been forced by the length limit.
    logits = collect_attention(translator.transformer, [result.source_ids], [result.target_ids]).logits[0]
    logits[:, :2] = -np.inf
    assert logits.argmax(axis=-1)[:-1].tolist() == result.target_ids[1:]


@pytest.mark.slow  # the same trained run, loaded here when the test runs alone
def test_a_given_target_is_shown_instead_of_a_translation(translator):
    target = "Ein Mann fährt Fahrrad."
    result = sentence_attention(translator, "A man rides a bike.", target=target)
    pieces = translator.tokenizer.tokenize([target])[0].numpy().tolist()
    assert result.target_ids == [1] + pieces
    assert result.translation == target
    assert result.encoder_decoder_attention.shape[2] == len(pieces) + 1


def test_grids_have_a_row_per_layer_and_a_column_per_head(tmp_path):
    labels = dict(row_labels=list("abcd"), column_labels=list("vwxyz"), title="t", row_axis="r", column_axis="c")
    weights = np.full((3, 2, 4, 5), 0.2, np.float32)  # [N, H, rows, columns]
    plot_attention(weights, path=tmp_path / "three.png", **labels)
    plot_attention(weights[:1], path=tmp_path / "one.png", **labels)
    plot_attention(np.concatenate([weights, weights], axis=1), path=tmp_path / "four_heads.png", **labels)
    (width_3, height_3), (width_1, height_1) = png_size(tmp_path / "three.png"), png_size(tmp_path / "one.png")
    width_4_heads, _ = png_size(tmp_path / "four_heads.png")
    assert height_3 > height_1 and width_3 == width_1
    assert width_4_heads > width_3
    with pytest.raises(ValueError, match="4 x 5 positions, but 4 x 4 labels"):
        plot_attention(weights, path=tmp_path / "x.png", **{**labels, "column_labels": list("wxyz")})


def test_one_picture_per_kind_and_with_per_layer_one_per_kind_and_layer(tmp_path):
    def weights(rows, columns):
        return np.full((2, 1, rows, columns), 1.0 / columns, np.float32)  # [N=2, H=1, rows, columns]

    attention = SentenceAttention(
        sentence="A dog.", translation="Ein Hund.", source_ids=[5, 6, 2], target_ids=[1, 7, 8],
        source_pieces=["\u2581A", "\u2581dog.", "</s>"], target_pieces=["<s>", "\u2581Ein", "\u2581Hund."],
        predicted_pieces=["\u2581Ein", "\u2581Hund.", "</s>"], encoder_self_attention=weights(3, 3),
        decoder_self_attention=weights(3, 3), encoder_decoder_attention=weights(3, 3),
    )
    output = tmp_path / "made" / "attention"
    paths = write_attention_pictures(attention, str(output))
    assert paths == [str(output / f"{kind}.png") for kind in ATTENTION_KINDS]
    per_layer = write_attention_pictures(attention, str(output), per_layer=True)
    assert [Path(p).name for p in per_layer] == [
        name for kind in ATTENTION_KINDS for name in (f"{kind}.png", f"{kind}_layer_1.png", f"{kind}_layer_2.png")
    ]
    for path in per_layer:
        png_size(path)


def test_importing_the_library_imports_neither_matplotlib_nor_tensorflow():
    code = (
        "import sys, app.visualization.attention, app.visualization.curves; "
        "assert not {'matplotlib', 'tensorflow'} & set(sys.modules), 'imported'"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
