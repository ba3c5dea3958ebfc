"""Label-smoothed cross-entropy summed over non-padding tokens.

The loss is returned as a *sum* with the token count beside it, never as a mean: the
trainer divides by the number of non-padding target tokens in the whole global batch
(all replicas, all accumulated micro-batches), so that splitting a batch across replicas
or micro-batches changes nothing about the gradients.
"""

import keras
from keras import ops

from layers.special_tokens import PAD_ID


def smoothed_target(label_smoothing, vocab_size):
    """`(on - off, off)`, float32: the label-smoothed target is t = off + (on - off) * onehot(label),
    with on = 1 - epsilon on the label and off = epsilon / (V - 1) on each of the other V - 1
    ids (padding included, as in the paper's setup: every id is a class). The one
    definition that every loss here and the fused one (output_loss.py) use."""
    off_value = label_smoothing / ops.cast(vocab_size - 1, "float32")
    return 1.0 - label_smoothing - off_value, off_value


def smoothed_cross_entropy(labels, logits, label_smoothing, pad_id=PAD_ID):
    """Per-token label-smoothed cross-entropy, zero at padding.

    The smoothed target (`smoothed_target`) puts 1 - epsilon on the label and spreads
    epsilon uniformly over the other V - 1 ids.

    Args:
        labels: int `[B, T]`, 0 = padding.
        logits: float `[B, T, V]`.
        label_smoothing: epsilon in [0, 1).

    Returns:
        `(loss float32 [B, T] with zeros at padding, weights float32 [B, T] of 0/1)`.
    """
    logits = ops.cast(logits, "float32")
    if keras.backend.backend() != "tensorflow":
        # JAX compiles the whole step with XLA, which fuses autodiff's passes itself.
        return _smoothed_from_log_probs(labels, _log_probs(logits), label_smoothing, pad_id)
    loss = _smoothed_loss_with_direct_gradient(labels, logits, label_smoothing)
    weights = ops.cast(ops.not_equal(labels, pad_id), "float32")  # [B, T]
    return loss * weights, weights


def _smoothed_loss_with_direct_gradient(labels, logits, label_smoothing):
    """Per-token smoothed cross-entropy `[B, T]` whose gradient is written out.

    The loss is -sum_v t_v log p_v with the smoothed target t (sums to 1), so its
    gradient with respect to the logits is p - t. TensorFlow's autodiff of the forward
    ops instead walks back through a dense one-hot target, a product and a
    log-softmax, op by op, each a pass over a `[B, T, V]` tensor; written out, the
    gradient takes fewer passes (timed by `benchmarks/bench_step_parts.py`).
    tests/training/test_losses.py pins that both give the same gradient.
    """
    vocab_size = ops.shape(logits)[-1]
    on_minus_off, off_value = smoothed_target(label_smoothing, vocab_size)

    @ops.custom_gradient
    def loss_of(logits):
        log_probs = ops.log_softmax(logits, axis=-1)  # [B, T, V]
        label_log_probs = ops.take_along_axis(log_probs, ops.expand_dims(labels, -1), axis=-1)[..., 0]  # [B, T]
        loss = -on_minus_off * label_log_probs - off_value * ops.sum(log_probs, axis=-1)  # [B, T]

        def grad(*args, upstream=None):
            upstream = args[0] if upstream is None else upstream  # [B, T]
            targets = on_minus_off * ops.one_hot(labels, vocab_size) + off_value  # [B, T, V]
            return (ops.exp(log_probs) - targets) * ops.expand_dims(upstream, -1)

        return loss, grad

    return loss_of(logits)


def _log_probs(logits):
    return ops.log_softmax(ops.cast(logits, "float32"), axis=-1)  # [B, T, V]


def _smoothed_from_log_probs(labels, log_probs, label_smoothing, pad_id=PAD_ID):
    vocab_size = ops.shape(log_probs)[-1]
    on_minus_off, off_value = smoothed_target(label_smoothing, vocab_size)
    targets = ops.one_hot(labels, vocab_size) * on_minus_off + off_value  # [B, T, V]
    loss = -ops.sum(targets * log_probs, axis=-1)  # [B, T]
    weights = ops.cast(ops.not_equal(labels, pad_id), "float32")  # [B, T]
    return loss * weights, weights


def summed_loss(labels, logits, label_smoothing):
    """`(sum of per-token losses, number of non-padding tokens)`, both float32 scalars."""
    loss, weights = smoothed_cross_entropy(labels, logits, label_smoothing)
    return ops.sum(loss), ops.sum(weights)


def summed_loss_and_nll(labels, logits, label_smoothing):
    """`(smoothed loss sum, plain NLL sum, non-padding tokens)` from one log-softmax.

    The NLL (label smoothing 0) gives the perplexity, comparable across smoothing settings.
    """
    log_probs = _log_probs(logits)
    loss, weights = _smoothed_from_log_probs(labels, log_probs, label_smoothing)
    nll, _ = _smoothed_from_log_probs(labels, log_probs, 0.0)
    return ops.sum(loss), ops.sum(nll), ops.sum(weights)
