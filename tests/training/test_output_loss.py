"""The fused projection and loss against the plain path: same loss, same gradients."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from app.model.config import ModelConfig
from app.training.losses import smoothed_cross_entropy
from app.model.transformer import build_transformer
from app.training.output_loss import SAFE_LABEL_PROBABILITY, _label_losses_and_log_normalizers, projected_loss_sum
from app.training.step import make_train_step

NUM_ROWS, WIDTH, VOCAB = 7, 6, 11


def random_inputs(scale=1.0, seed=0):
    rng = np.random.default_rng(seed)
    states = tf.constant(rng.normal(scale=scale, size=(NUM_ROWS, WIDTH)).astype("float32"))
    matrix = tf.constant(rng.normal(size=(VOCAB, WIDTH)).astype("float32"))
    labels = tf.constant(rng.integers(1, VOCAB, size=NUM_ROWS).astype("int32"))
    return states, matrix, labels


def plain_loss_and_grads(states, matrix, labels, label_smoothing):
    """The reference: whole logits, the project's loss, TensorFlow's autodiff."""
    with tf.GradientTape() as tape:
        tape.watch([states, matrix])
        logits = tf.matmul(states, matrix, transpose_b=True)[None]  # [1, N, V]
        loss = tf.reduce_sum(smoothed_cross_entropy(labels[None], logits, label_smoothing)[0])
    return loss, tape.gradient(loss, [states, matrix])


def fused_loss_and_grads(states, matrix, labels, label_smoothing, rows_per_slice, upstream=1.0):
    with tf.GradientTape() as tape:
        tape.watch([states, matrix])
        loss = projected_loss_sum(states, matrix, labels, label_smoothing, rows_per_slice)
        scaled = loss * upstream
    return loss, tape.gradient(scaled, [states, matrix])


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
@pytest.mark.parametrize("rows_per_slice", [1, 3, 7, 512])
def test_loss_and_gradients_match_the_plain_path_for_any_slice_size(label_smoothing, rows_per_slice):
    states, matrix, labels = random_inputs()
    want_loss, (want_states_grad, want_matrix_grad) = plain_loss_and_grads(states, matrix, labels, label_smoothing)
    loss, (states_grad, matrix_grad) = fused_loss_and_grads(states, matrix, labels, label_smoothing, rows_per_slice)
    np.testing.assert_allclose(float(loss), float(want_loss), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(states_grad), np.asarray(want_states_grad), atol=1e-6)
    np.testing.assert_allclose(np.asarray(matrix_grad), np.asarray(want_matrix_grad), atol=1e-6)


def test_the_upstream_gradient_scales_both_gradients():
    states, matrix, labels = random_inputs()
    _, (unit_states, unit_matrix) = fused_loss_and_grads(states, matrix, labels, 0.1, 3)
    _, (scaled_states, scaled_matrix) = fused_loss_and_grads(states, matrix, labels, 0.1, 3, upstream=0.25)
    np.testing.assert_allclose(np.asarray(scaled_states), 0.25 * np.asarray(unit_states), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(scaled_matrix), 0.25 * np.asarray(unit_matrix), rtol=1e-6)


def test_logits_hundreds_apart_give_the_exact_finite_loss():
    # The label's probability underflows to 0 in float32, so log(p_label) would be -inf.
    states, matrix, labels = random_inputs(scale=100.0)
    logits = np.asarray(tf.matmul(states, matrix, transpose_b=True), "float64")
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    off = 0.1 / (VOCAB - 1)
    targets = np.full_like(log_probs, off)
    targets[np.arange(NUM_ROWS), np.asarray(labels)] = 0.9
    want = -(targets * log_probs).sum()
    assert float(tf.exp(tf.reduce_min(tf.nn.log_softmax(logits)))) == 0.0  # the hard case
    loss = projected_loss_sum(states, matrix, labels, 0.1, rows_per_slice=3)
    assert np.isfinite(float(loss))
    np.testing.assert_allclose(float(loss), want, rtol=1e-5)


@pytest.mark.parametrize("scale", [1.0, 100.0], ids=["from_label_probabilities", "from_row_maxima"])
def test_label_losses_and_log_normalizers_match_float64_on_either_route(scale):
    states, matrix, labels = random_inputs(scale=scale)
    logits = tf.matmul(states, matrix, transpose_b=True)
    probs = tf.nn.softmax(logits)
    label_probs = tf.gather(probs, labels, batch_dims=1)
    # Scale 1 keeps every label's probability above the bound, scale 100 does not.
    assert bool(tf.reduce_all(label_probs >= SAFE_LABEL_PROBABILITY)) == (scale == 1.0)
    label_losses, log_normalizers = _label_losses_and_log_normalizers(logits, probs, labels, label_probs)
    logits64 = np.asarray(logits, "float64")
    top = logits64.max(-1)
    want_log_normalizers = top + np.log(np.exp(logits64 - top[:, None]).sum(-1))
    want_label_losses = want_log_normalizers - logits64[np.arange(NUM_ROWS), np.asarray(labels)]
    np.testing.assert_allclose(np.asarray(log_normalizers), want_log_normalizers, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(label_losses), want_label_losses, rtol=1e-5, atol=1e-5)


def test_row_maxima_route_counts_every_logit_tied_at_the_top():
    # Two ids tie at the top (each p = 1/2) and the label's p = e^-200 / 2 underflows, so
    # the slice takes the row-maxima route: log-normalizer 100 + log 2, not the top logit.
    logits = tf.constant([[100.0, 100.0, -100.0, 0.0]])
    labels = tf.constant([2])
    probs = tf.nn.softmax(logits)
    label_probs = tf.gather(probs, labels, batch_dims=1)
    label_losses, log_normalizers = _label_losses_and_log_normalizers(logits, probs, labels, label_probs)
    np.testing.assert_allclose(np.asarray(log_normalizers), [100.0 + math.log(2.0)], rtol=1e-7)
    np.testing.assert_allclose(np.asarray(label_losses), [200.0 + math.log(2.0)], rtol=1e-7)


def confident_rows(repeat_first_label=False):
    """States, matrix (float64) and labels whose rows predict their label with p near
    on = 0.9, where p - t at the label is small: `[512, 64]`, `[2000, 64]`, `[512]`."""
    rng = np.random.default_rng(0)
    num_rows, width, vocab = 512, 64, 2000
    matrix = rng.normal(size=(vocab, width)) * 0.1
    labels = rng.integers(1, vocab, size=num_rows)
    if repeat_first_label:
        labels[:40] = labels[0]  # a label repeated within a slice and across slices
    toward_label = matrix[labels] / (np.linalg.norm(matrix[labels], axis=1, keepdims=True) ** 2)
    states = rng.normal(size=(num_rows, width)) * 0.3 + 12.0 * toward_label
    return states, matrix, labels


def smoothed_targets(labels, vocab_size, label_smoothing=0.1):
    """t: 1 - epsilon at each row's label and epsilon / (V - 1) elsewhere, `[N, V]` float64."""
    targets = np.full((len(labels), vocab_size), label_smoothing / (vocab_size - 1))
    targets[np.arange(len(labels)), labels] = 1.0 - label_smoothing
    return targets


def float64_gradients(states, matrix, labels):
    """The loss's exact `(states gradient, matrix gradient)`, label smoothing 0.1."""
    logits = states @ matrix.T
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    assert 0.93 < probs[np.arange(len(labels)), labels].mean() < 0.99
    targets = smoothed_targets(labels, matrix.shape[0])
    return (probs - targets) @ matrix, (probs - targets).T @ states


def test_bfloat16_gradients_stay_accurate_when_the_label_is_predicted_with_about_its_target_probability():
    # p_label near on = 0.9 makes p - t small at the label: made after a bfloat16 product
    # it would drown in the product's rounding. How well one bfloat16 product rounds
    # depends on the CPU (0.8% error with AVX512-BF16 or AMX, 1.6% on an AMD EPYC without
    # AVX-512), so the loss is held to the best one product can do on this machine: the
    # exact p - t, rounded to bfloat16 once, times the matrix.
    states, matrix, labels = confident_rows()
    states16, matrix16 = tf.constant(states, tf.bfloat16), tf.constant(matrix, tf.bfloat16)
    states64, matrix64 = (np.asarray(tf.cast(x, tf.float32), "float64") for x in (states16, matrix16))
    want_states_grad, _ = float64_gradients(states64, matrix64, labels)
    _, (states_grad, _) = fused_loss_and_grads(states16, matrix16, tf.constant(labels, tf.int32), 0.1, 128)

    def relative_error(grad):
        return np.linalg.norm(np.asarray(tf.cast(grad, tf.float32), "float64") - want_states_grad) / np.linalg.norm(
            want_states_grad
        )

    # The same softmax as the loss's: float32, of the bfloat16 product's logits.
    probs = np.asarray(tf.nn.softmax(tf.cast(tf.matmul(states16, matrix16, transpose_b=True), tf.float32)), "float64")
    targets = smoothed_targets(labels, matrix.shape[0])
    off = targets.min()  # epsilon / (V - 1), the target of every id but the label
    best_one_product = tf.matmul(tf.constant(probs - targets, tf.bfloat16), matrix16)
    # The label term taken off after the product, as the float32 route does: 5.9% on that
    # AMD EPYC, where the best is 1.6% and the loss 1.6%.
    label_term_after = (
        tf.cast(tf.matmul(tf.constant(probs, tf.bfloat16), matrix16), tf.float32)
        - (0.9 - off) * tf.gather(tf.cast(matrix16, tf.float32), labels)
        - off * tf.reduce_sum(tf.cast(matrix16, tf.float32), 0)
    )
    assert relative_error(states_grad) < 1.1 * relative_error(best_one_product)
    assert relative_error(states_grad) < 0.5 * relative_error(label_term_after)
    assert relative_error(states_grad) < 0.025


def test_float32_gradients_match_float64_when_the_label_is_predicted_with_about_its_target_probability():
    # In float32 p - t is not formed: the label's (on - off) comes off after the
    # products (p @ M - (on - off) M[label], and a segment sum for the matrix). Where
    # p_label is near on, that difference of two products must still be accurate.
    states, matrix, labels = (
        x.astype(dtype) for x, dtype in zip(confident_rows(True), ("float32", "float32", "int32"))
    )
    wants = float64_gradients(states.astype("float64"), matrix.astype("float64"), labels)
    _, gots = fused_loss_and_grads(tf.constant(states), tf.constant(matrix), tf.constant(labels), 0.1, 128)
    for got, want in zip(gots, wants):
        assert np.linalg.norm(np.asarray(got) - want) / np.linalg.norm(want) < 1e-5


def test_no_rows_give_zero_loss_and_zero_gradients():
    states, matrix, labels = random_inputs()
    loss, (states_grad, matrix_grad) = fused_loss_and_grads(states[:0], matrix, labels[:0], 0.1, 3)
    assert float(loss) == 0.0
    assert tuple(states_grad.shape) == (0, WIDTH)
    np.testing.assert_array_equal(np.asarray(matrix_grad), np.zeros((VOCAB, WIDTH), "float32"))


def test_bfloat16_inputs_get_bfloat16_gradients_close_to_float32():
    states, matrix, labels = random_inputs()
    _, (want_states, want_matrix) = plain_loss_and_grads(states, matrix, labels, 0.1)
    loss, (states_grad, matrix_grad) = fused_loss_and_grads(
        tf.cast(states, tf.bfloat16), tf.cast(matrix, tf.bfloat16), labels, 0.1, 3
    )
    assert loss.dtype == tf.float32
    assert states_grad.dtype == tf.bfloat16 and matrix_grad.dtype == tf.bfloat16
    np.testing.assert_allclose(np.asarray(tf.cast(states_grad, tf.float32)), np.asarray(want_states), atol=0.05)
    np.testing.assert_allclose(np.asarray(tf.cast(matrix_grad, tf.float32)), np.asarray(want_matrix), atol=0.05)


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides",
    [dict(), dict(share_embeddings="target"), dict(share_embeddings="none"), dict(norm_first=False)],
    ids=["shared", "target_shared", "unshared", "post_norm"],
)
def test_a_train_step_with_the_fused_loss_makes_the_plain_steps_update(overrides):
    config = ModelConfig.from_size(
        "tiny", vocab_size=30, num_layers=1, d_model=16, d_ff=32, num_heads=2, dropout=0.0, **overrides
    )
    rng = np.random.default_rng(3)
    source = rng.integers(3, 30, (3, 5)).astype("int32")
    target = rng.integers(3, 30, (3, 6)).astype("int32")
    target[1, 3:] = 0  # padding rows are left out of the fused loss
    source[2, 4:] = 0

    results = []
    for fused in (False, True):
        keras.utils.set_random_seed(0)
        model = build_transformer(config)
        optimizer = keras.optimizers.SGD(learning_rate=1.0)
        step = make_train_step(model, optimizer, tf.distribute.get_strategy(), 0.1, fused_loss=fused)
        loss_sum, tokens = step(((source, target),))
        results.append((float(loss_sum), float(tokens), [np.asarray(v) for v in model.trainable_variables]))
    (plain_loss, plain_tokens, plain_weights), (fused_loss, fused_tokens, fused_weights) = results
    assert fused_tokens == plain_tokens == 3 * 5 - 3
    assert fused_loss == pytest.approx(plain_loss, rel=1e-6)
    for plain, fused in zip(plain_weights, fused_weights):
        np.testing.assert_allclose(fused, plain, atol=1e-6)


@pytest.mark.slow
def test_one_graph_with_unknown_row_counts_serves_full_and_empty_batches():
    states, matrix, labels = random_inputs()
    traced = tf.function(
        lambda s, m, y: fused_loss_and_grads(s, m, y, 0.1, 3),
        input_signature=[
            tf.TensorSpec([None, WIDTH], tf.float32),
            tf.TensorSpec([VOCAB, WIDTH], tf.float32),
            tf.TensorSpec([None], tf.int32),
        ],
    )
    want_loss, (want_states_grad, _) = plain_loss_and_grads(states, matrix, labels, 0.1)
    loss, (states_grad, _) = traced(states, matrix, labels)
    np.testing.assert_allclose(float(loss), float(want_loss), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(states_grad), np.asarray(want_states_grad), atol=1e-6)
    empty_loss, (empty_states_grad, empty_matrix_grad) = traced(states[:0], matrix, labels[:0])
    assert float(empty_loss) == 0.0 and tuple(empty_states_grad.shape) == (0, WIDTH)
    assert not np.any(np.asarray(empty_matrix_grad))
