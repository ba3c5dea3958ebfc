"""Label-smoothed cross-entropy summed over non-padding tokens.

The loss is returned as a *sum* with the token count beside it, never as a mean: the
trainer divides by the number of non-padding target tokens in the whole global batch
(all replicas, all accumulated micro-batches), so that splitting a batch across replicas
or micro-batches changes nothing about the gradients.
"""

from keras import ops

PAD_ID = 0


def smoothed_cross_entropy(labels, logits, label_smoothing, pad_id=PAD_ID):
    """Per-token label-smoothed cross-entropy, zero at padding.

    The smoothed target puts 1 - epsilon on the label and spreads epsilon uniformly over
    the other V - 1 ids (padding included, as in the paper's setup: every id is a class).

    Args:
        labels: int `[B, T]`, 0 = padding.
        logits: float `[B, T, V]`.
        label_smoothing: epsilon in [0, 1).

    Returns:
        `(loss float32 [B, T] with zeros at padding, weights float32 [B, T] of 0/1)`.
    """
    return _smoothed_from_log_probs(labels, _log_probs(logits), label_smoothing, pad_id)


def _log_probs(logits):
    return ops.log_softmax(ops.cast(logits, "float32"), axis=-1)  # [B, T, V]


def _smoothed_from_log_probs(labels, log_probs, label_smoothing, pad_id=PAD_ID):
    vocab_size = ops.shape(log_probs)[-1]
    on_value = 1.0 - label_smoothing
    off_value = label_smoothing / ops.cast(vocab_size - 1, "float32")
    targets = ops.one_hot(labels, vocab_size) * (on_value - off_value) + off_value  # [B, T, V]
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
