"""app.pictures: the attention weights it collects, the pictures it draws, the curves it reads."""

import json
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from app.commands.pictures import (
    ATTENTION_KINDS,
    PicturesError,
    collect_attention,
    curve_series,
    main,
    plot_attention,
    read_metrics,
)

ROOT = Path(__file__).resolve().parents[2]

# Two sentences of different lengths, so the second has padding on both sides.
SOURCE = np.array([[5, 6, 7, 8, 9, 2], [10, 11, 2, 0, 0, 0]], np.int32)  # [B=2, S=6]
TARGET = np.array([[1, 12, 13, 14, 15], [1, 16, 17, 0, 0]], np.int32)  # [B=2, T=5]


def png_size(path):
    """`(width, height)` of a PNG file, after checking its signature and header."""
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert width > 0 and height > 0
    return width, height


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


def test_the_sentence_is_translated_greedily_and_attended_over_with_its_pieces(translator):
    import tensorflow as tf

    from app.decoding.config import DecodingConfig
    from app.decoding.model_search import greedy_ids
    from app.commands.pictures import sentence_attention

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


def test_a_given_target_is_shown_instead_of_a_translation(translator):
    from app.commands.pictures import sentence_attention

    target = "Ein Mann fährt Fahrrad."
    result = sentence_attention(translator, "A man rides a bike.", target=target)
    pieces = translator.tokenizer.tokenize([target])[0].numpy().tolist()
    assert result.target_ids == [1] + pieces
    assert result.translation == target
    assert result.encoder_decoder_attention.shape[2] == len(pieces) + 1


def test_the_command_writes_one_grid_per_kind_and_one_figure_per_layer(model_dir, tmp_path, capsys):
    output = tmp_path / "attention"
    argv = ["attention", "--model-dir", model_dir, "--sentence", "A man rides a bike.", "--output", str(output)]
    assert main(argv + ["--beam-size", "1", "--max-extra-length", "4", "--per-layer"]) == 0
    # The tiny run has one layer.
    expected = {f"{kind}.png" for kind in ATTENTION_KINDS} | {f"{kind}_layer_1.png" for kind in ATTENTION_KINDS}
    assert {p.name for p in output.iterdir()} == expected
    for path in output.iterdir():
        png_size(path)
    printed = capsys.readouterr().out
    assert "translation:" in printed and f"wrote {output / 'encoder_self_attention.png'}" in printed


def test_the_command_names_what_is_missing(tmp_path, capsys):
    assert main(["attention", "--model-dir", str(tmp_path), "--sentence", "x"]) == 1
    assert f"{tmp_path} is not a model directory" in capsys.readouterr().err


def test_an_empty_sentence_is_an_error_and_draws_nothing(model_dir, tmp_path, capsys):
    output = tmp_path / "attention"
    assert main(["attention", "--model-dir", model_dir, "--sentence", "  ", "--output", str(output)]) == 1
    assert "--sentence is empty ('  ')" in capsys.readouterr().err
    assert not output.exists()


def test_an_empty_target_and_an_output_that_is_a_file_are_errors_before_the_model_loads(model_dir, tmp_path, capsys):
    output = tmp_path / "attention"
    assert main(["attention", "--model-dir", model_dir, "--sentence", "A man.", "--target", "",
                 "--output", str(output)]) == 1
    assert "--target is empty ('')" in capsys.readouterr().err
    assert not output.exists()
    output.write_text("mine")
    # A model directory that does not exist: the output is checked first.
    assert main(["attention", "--model-dir", str(tmp_path / "nope"), "--sentence", "A man.",
                 "--output", str(output)]) == 1
    assert f"error: --output {output} is a file; name a directory for the PNGs" in capsys.readouterr().err
    assert output.read_text() == "mine"


def test_an_overlong_sentence_or_target_is_drawn_cut_with_a_warning(model_dir, tmp_path, capsys):
    long_text = " ".join(["dog"] * 80)  # past the test model's 48 positions
    output = str(tmp_path / "attention")
    assert main(["attention", "--model-dir", model_dir, "--sentence", long_text, "--target", long_text,
                 "--output", output]) == 0
    err = capsys.readouterr().err
    assert re.search(r"warning: --sentence has \d+ subwords; the model reads its first 47", err), err
    assert re.search(r"warning: --target has \d+ subwords; the pictures show its first 47", err), err
    assert main(["attention", "--model-dir", model_dir, "--sentence", "A dog.", "--output", output]) == 0
    assert "warning" not in capsys.readouterr().err


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


def test_importing_the_module_does_not_import_matplotlib():
    code = "import sys, app.pictures; assert 'matplotlib' not in sys.modules, 'imported'"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


# Training curves.


def write_lines(path, lines, end="\n"):
    path.write_text("\n".join(lines) + end, encoding="utf-8")
    return path


# A run evaluated at steps 2 and 4 that resumed from its step-2 checkpoint after logging step 3.
METRICS = [
    {"step": 1, "loss": 9.0, "learning_rate": 1e-4, "tokens_per_second": 100.0, "epoch": 0},
    {"step": 2, "loss": 8.0, "learning_rate": 2e-4, "tokens_per_second": 100.0, "epoch": 0},
    {"step": 2, "valid_loss": 8.5, "bleu": 1.0, "bleu_signature": "nrefs:1|case:mixed", "eval_sentences": 20},
    {"step": 3, "loss": 7.0, "learning_rate": 3e-4, "tokens_per_second": 100.0, "epoch": 0},
    {"step": 3, "loss": 6.5, "learning_rate": 3e-4, "tokens_per_second": 100.0, "epoch": 0},
    {"step": 4, "loss": 6.0, "learning_rate": 4e-4, "tokens_per_second": 100.0, "epoch": 1},
    {"step": 4, "valid_loss": 7.0, "bleu": 3.0, "bleu_signature": "nrefs:1|case:mixed", "eval_sentences": 20},
]


def test_each_curve_has_each_step_once_the_latest_record_winning(tmp_path):
    records = read_metrics(write_lines(tmp_path / "metrics.jsonl", [json.dumps(r) for r in METRICS]))
    series = {key: (steps.tolist(), values.tolist()) for key, (steps, values) in curve_series(records).items()}
    assert series == {
        "loss": ([1, 2, 3, 4], [9.0, 8.0, 6.5, 6.0]),
        "valid_loss": ([2, 4], [8.5, 7.0]),
        "bleu": ([2, 4], [1.0, 3.0]),
        "learning_rate": ([1, 2, 3, 4], [1e-4, 2e-4, 3e-4, 4e-4]),
    }


def test_curves_draw_a_panel_per_quantity_recorded(tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    write_lines(full / "metrics.jsonl", [json.dumps(r) for r in METRICS])
    no_bleu = tmp_path / "no_bleu"
    no_bleu.mkdir()
    write_lines(no_bleu / "metrics.jsonl", [json.dumps({k: v for k, v in r.items() if k != "bleu"}) for r in METRICS])
    assert main(["curves", "--model-dir", str(full), "--output", str(tmp_path / "out" / "full.png")]) == 0
    assert main(["curves", "--model-dir", str(no_bleu), "--output", str(tmp_path / "no_bleu.png")]) == 0
    (width, height), (width_2, height_2) = png_size(tmp_path / "out" / "full.png"), png_size(tmp_path / "no_bleu.png")
    assert width == width_2 and height > height_2  # 3 panels against 2


def test_curves_of_a_real_training_run(model_dir, tmp_path):
    records = read_metrics(str(Path(model_dir) / "metrics.jsonl"))
    # The tiny run logs every step and evaluates loss only, at its end.
    assert set(curve_series(records)) == {"loss", "valid_loss", "learning_rate"}
    assert main(["curves", "--model-dir", model_dir, "--output", str(tmp_path / "curves.png")]) == 0
    png_size(tmp_path / "curves.png")


def test_a_line_being_written_is_skipped_but_a_bad_line_is_an_error(tmp_path):
    lines = [json.dumps(r) for r in METRICS[:2]]
    unfinished = write_lines(tmp_path / "unfinished.jsonl", lines + ['{"step": 3, "lo'], end="")
    assert [r["step"] for r in read_metrics(unfinished)] == [1, 2]
    finished = write_lines(tmp_path / "finished.jsonl", lines + ['{"step": 3, "lo'])
    with pytest.raises(PicturesError, match=re.escape(f"{finished} line 3 is not JSON")):
        read_metrics(finished)
    middle = write_lines(tmp_path / "middle.jsonl", [lines[0], "not json", lines[1]])
    with pytest.raises(PicturesError, match=re.escape(f"{middle} line 2 is not JSON")):
        read_metrics(middle)
    no_step = write_lines(tmp_path / "no_step.jsonl", [lines[0], '{"loss": 1.0}'])
    with pytest.raises(PicturesError, match=re.escape(f'{no_step} line 2 is not a record with an integer "step"')):
        read_metrics(no_step)
    true_step = write_lines(tmp_path / "true_step.jsonl", [lines[0], '{"step": true, "loss": 1.0}'])
    with pytest.raises(PicturesError, match=re.escape(f'{true_step} line 2 is not a record with an integer "step"')):
        read_metrics(true_step)
    not_utf8 = tmp_path / "not_utf8.jsonl"
    not_utf8.write_bytes(lines[0].encode() + b'\n{"step": 2, "loss": "\xff"}\n')
    message = f"{not_utf8} line 2 is not UTF-8 (invalid start byte at byte 21)"
    with pytest.raises(PicturesError, match=re.escape(message)):
        read_metrics(not_utf8)


def test_curves_go_exactly_where_output_says_or_nowhere(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    write_lines(run / "metrics.jsonl", [json.dumps(r) for r in METRICS])
    no_suffix = tmp_path / "curves"
    assert main(["curves", "--model-dir", str(run), "--output", str(no_suffix)]) == 0
    assert capsys.readouterr().out == f"wrote {no_suffix}\n"
    png_size(no_suffix)  # written as named, a PNG, no ".png" appended
    assert main(["curves", "--model-dir", str(run), "--output", str(tmp_path)]) == 1
    assert f"error: --output {tmp_path} is a directory; name the PNG file to write" in capsys.readouterr().err
    under_a_file = no_suffix / "c.png"
    assert main(["curves", "--model-dir", str(run), "--output", str(under_a_file)]) == 1
    assert f"error: --output {under_a_file}: cannot create {no_suffix}" in capsys.readouterr().err


def test_missing_and_empty_metrics_name_the_file(tmp_path, capsys):
    with pytest.raises(PicturesError, match=re.escape(f"{tmp_path / 'metrics.jsonl'} not found")):
        read_metrics(str(tmp_path / "metrics.jsonl"))
    assert main(["curves", "--model-dir", str(tmp_path)]) == 1
    assert f"error: {tmp_path / 'metrics.jsonl'} not found" in capsys.readouterr().err
    for text in ("", "\n \n"):
        (tmp_path / "metrics.jsonl").write_text(text)
        with pytest.raises(PicturesError, match=re.escape(f"{tmp_path / 'metrics.jsonl'} is empty")):
            read_metrics(str(tmp_path / "metrics.jsonl"))
    capsys.readouterr()
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "epoch": 0}) + "\n")
    assert main(["curves", "--model-dir", str(tmp_path)]) == 1
    assert "no curves to draw: the records have none of loss, valid_loss" in capsys.readouterr().err
