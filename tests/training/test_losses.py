"""The label-smoothed loss (`app.training.losses`), against hand computations and autodiff."""

import math

import numpy as np
import pytest
import tensorflow as tf

from app.training.losses import smoothed_cross_entropy, summed_loss, summed_loss_and_nll


def test_label_smoothed_loss_equals_a_hand_computation_and_ignores_padding():
    logits = np.array([[[2.0, 0.0, 1.0, 0.0], [0.0, 3.0, 0.0, 1.0], [5.0, 5.0, 5.0, 5.0]]], "float32")
    labels = np.array([[2, 1, 0]], "int32")  # the last position is padding
    epsilon = 0.1
    loss, weights = smoothed_cross_entropy(labels, logits, epsilon)

    def by_hand(row, label):
        log_probs = row - math.log(sum(math.exp(x) for x in row))
        target = [epsilon / 3] * 4
        target[label] = 1 - epsilon
        return -sum(t * lp for t, lp in zip(target, log_probs))

    expected = [by_hand(logits[0, 0], 2), by_hand(logits[0, 1], 1), 0.0]
    np.testing.assert_allclose(np.asarray(loss)[0], expected, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(weights), [[1.0, 1.0, 0.0]])
    total, tokens = summed_loss(labels, logits, epsilon)
    assert float(total) == pytest.approx(sum(expected), rel=1e-6)
    assert float(tokens) == 2.0


def test_validation_loss_and_nll_equal_the_training_loss_at_their_smoothing():
    # summed_loss_and_nll (validation, and the loss off TensorFlow) has its own path; the
    # training loss above is pinned to a hand computation.
    rng = np.random.default_rng(1)
    logits = rng.normal(scale=3.0, size=(2, 4, 7)).astype("float32")
    labels = np.array([[3, 0, 6, 1], [2, 5, 0, 0]], "int32")  # zeros are padding
    smoothed, nll, tokens = summed_loss_and_nll(labels, logits, 0.1)
    assert float(smoothed) == pytest.approx(float(summed_loss(labels, logits, 0.1)[0]), rel=1e-6)
    assert float(nll) == pytest.approx(float(summed_loss(labels, logits, 0.0)[0]), rel=1e-6)
    assert float(tokens) == 5.0
    assert float(smoothed) != pytest.approx(float(nll), rel=1e-3)


def test_the_written_out_loss_gradient_equals_autodiff_of_the_loss():
    """`smoothed_cross_entropy` differentiates by hand (p - t); autodiff must agree."""
    rng = np.random.default_rng(0)
    logits = tf.constant(rng.normal(scale=3.0, size=(2, 4, 7)).astype("float32"))  # [B, T, V]
    labels = tf.constant([[3, 0, 6, 1], [2, 5, 0, 0]], tf.int32)  # zeros are padding
    upstream = tf.constant(rng.uniform(0.5, 2.0, size=(2, 4)).astype("float32"))  # [B, T]
    epsilon = 0.1
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(logits)
        loss, _ = smoothed_cross_entropy(labels, logits, epsilon)
        targets = tf.one_hot(labels, 7) * (1 - epsilon - epsilon / 6) + epsilon / 6
        mask = tf.cast(labels != 0, tf.float32)
        reference = -tf.reduce_sum(targets * tf.nn.log_softmax(logits), axis=-1) * mask
        weighted, weighted_reference = tf.reduce_sum(loss * upstream), tf.reduce_sum(reference * upstream)
    np.testing.assert_allclose(loss.numpy(), reference.numpy(), rtol=1e-6, atol=1e-6)
    gradient, reference_gradient = tape.gradient(weighted, logits), tape.gradient(weighted_reference, logits)
    np.testing.assert_allclose(gradient.numpy(), reference_gradient.numpy(), atol=1e-6)
    assert np.all(gradient.numpy()[labels.numpy() == 0] == 0.0)  # nothing flows from padding


def test_the_smoothed_target_is_one_definition_for_every_loss():
    from app.training.losses import smoothed_target

    on_minus_off, off = smoothed_target(0.1, 5)
    np.testing.assert_allclose([float(on_minus_off), float(off)], [0.875, 0.025], rtol=1e-7)
    target = off + on_minus_off * np.eye(5, dtype=np.float32)[2]
    np.testing.assert_allclose(target, [0.025, 0.025, 0.9, 0.025, 0.025], rtol=1e-6)
    assert abs(float(np.sum(target)) - 1.0) < 1e-6
    on_minus_off, off = smoothed_target(0.0, 8000)
    assert (float(on_minus_off), float(off)) == (1.0, 0.0)
