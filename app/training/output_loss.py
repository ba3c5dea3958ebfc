"""The pre-softmax projection fused with the label-smoothed loss, a slice of rows at a time.

Training needs the loss and its gradient, never the logits. Made the plain way, the
`[N, V]` logits (4,096 tokens x 8,000 ids = 131 MB at tiny's shapes) are written once,
then read and written again by the log-softmax, the loss, the one-hot target and each
step of the gradient, passes bound by memory bandwidth on a CPU (their cost against
the products: docs/lab-notebook/2026-11-22-output-projection-fused-with-the-loss.md). Here a slice of rows is
projected, turned into its softmax p and the gradient p - t, and multiplied back onto
the states and the matrix while the slice is still in cache; nothing of size N x V
outlives its slice. The gradients are therefore computed in the forward pass, and the
backward pass only scales them by the upstream gradient.

The trainer passes only the rows of real target tokens, so padding costs nothing here.
TensorFlow only, like the training loop: under JAX, XLA fuses the plain path itself.

    states = transformer.decoder_states(target_in, memory, memory_mask, training=True)
    real = labels != PAD_ID  # layers/special_tokens.py
    loss_sum = projected_loss_sum(
        tf.boolean_mask(states, real), transformer.output_matrix(), tf.boolean_mask(labels, real), 0.1
    )
"""

import tensorflow as tf

from app.training.losses import smoothed_target

# Rows projected at once: 512 x 8,000 float32 logits are 16 MB, small enough to stay in
# cache; chosen by timing whole tiny training steps with other slice sizes
# (docs/lab-notebook/2026-11-26-records-moved-from-code-comments.md).
ROWS_PER_SLICE = 512

# The smallest label probability from which log(p_label) is used for the log-normalizer.
# Softmax gives tiny probabilities to float32's full relative precision down to about
# 1e-38; below this bound a slice takes the exact route through the row maxima instead.
SAFE_LABEL_PROBABILITY = 1e-30


def projected_loss_sum(states, matrix, labels, label_smoothing, rows_per_slice=ROWS_PER_SLICE):
    """Sums the label-smoothed cross-entropy of the logits `states @ matrix^T` over rows.

    The same loss as `app.training.losses.smoothed_cross_entropy`, with the same smoothed
    target (`losses.smoothed_target`): t = off + (on - off) * onehot(label).

    Per slice, only the softmax p is made at full size, in float32. The matrix products
    take their inputs' dtype (bfloat16 under mixed precision, for its speed);
    p - (on - off) * onehot(label) is cast to it
    with the label's entry made in float32 first, since p_label and on - off can be
    close, and their difference would drown in a bfloat16 product's rounding. The
    uniform part of the target comes off after the loop, on `[N, D]` and `[V, D]`
    tensors:
        (p - t) @ M   = (p - (on - off) onehot) @ M - off * sum_v M[v]
        (p - t)^T @ S = (p - (on - off) onehot)^T @ S - off * sum_n S[n]
    and the loss needs each row's -log p_label, log-normalizer and the sum of its
    logits, S[n] . sum_v M[v].

    In float32 the one-hot part comes off after the products too, so p itself is the
    products' input and no `[R, V]` tensor is written but the softmax:
        p @ M - (on - off) M[label]       (a gather of R rows per slice)
        p^T @ S - (on - off) sum_{n: label_n = v} S[n]   (one segment sum after the loop)
    Updating p's label entries would copy p (TensorFlow did not update the softmax's
    output in place), a pass over `[R, V]` per slice:
    docs/lab-notebook/2026-11-22-fewer-passes-in-attention-and-the-loss.md.

    Args:
        states: `[N, D]` decoder states of real (non-padding) target positions.
        matrix: `[V, D]` the pre-softmax projection (`Transformer.output_matrix()`), in
            the same dtype.
        labels: int32 `[N]`, the token each row predicts.
        label_smoothing: epsilon in [0, 1).
        rows_per_slice: rows projected at once.

    Returns:
        The float32 scalar sum over the N rows, differentiable with respect to `states`
        and `matrix` (gradients in their dtype).
    """
    labels = tf.convert_to_tensor(labels, tf.int32)

    @tf.custom_gradient
    def loss_sum_of(states, matrix):
        compute_dtype = states.dtype
        # See the docstring: float32 takes the label term off after the products.
        label_term_after_products = compute_dtype == tf.float32
        vocab_size = tf.shape(matrix)[0]
        on_minus_off, off_value = smoothed_target(label_smoothing, vocab_size)
        label_loss_sum, log_normalizer_sum, states_grad, matrix_grad = _sliced_products(
            states, matrix, labels, on_minus_off, rows_per_slice, label_term_after_products
        )
        states32, matrix32 = tf.cast(states, tf.float32), tf.cast(matrix, tf.float32)
        matrix_row_sum = tf.reduce_sum(matrix32, 0)  # [D]
        # -sum_v t_v log p_v = (on - off) * -log p_label + off * sum_v -log p_v, where
        # sum_v -log p_v = V * log_normalizer - sum_v logit_v.
        logit_sum = tf.reduce_sum(tf.linalg.matvec(states32, matrix_row_sum))
        vocab = tf.cast(vocab_size, tf.float32)
        loss_sum = on_minus_off * label_loss_sum + off_value * (vocab * log_normalizer_sum - logit_sum)
        # The uniform part of the target, off the gradients of the products.
        states_grad = states_grad - off_value * matrix_row_sum  # [N, D]
        matrix_grad = matrix_grad - off_value * tf.reduce_sum(states32, 0)  # [V, D]
        if label_term_after_products:
            matrix_grad -= on_minus_off * tf.math.unsorted_segment_sum(states32, labels, vocab_size)

        def grad(upstream):
            return tf.cast(states_grad * upstream, compute_dtype), tf.cast(matrix_grad * upstream, compute_dtype)

        return loss_sum, grad

    return loss_sum_of(states, matrix)


def _sliced_products(states, matrix, labels, on_minus_off, rows_per_slice, label_term_after_products):
    """The projection, softmax and gradient products, a slice of `rows_per_slice` rows at a
    time in a `tf.while_loop`.

    Args:
        states: `[N, D]`; matrix: `[V, D]`, in the compute dtype; labels: int32 `[N]`.
        on_minus_off: the smoothed target's on - off value (`losses.smoothed_target`).
        label_term_after_products: float32: the products take p itself, and the label
            term comes off the states' gradient here, the matrix's by the caller.

    Returns:
        `(sum of -log p_label, sum of log-normalizers)`, float32 scalars, and the float32
        gradients `[N, D]` and `[V, D]` of the products, before the target's uniform part
        comes off: (p - (on - off) onehot) @ M and its transpose's product with S (in
        float32, without the label term of the matrix's).
    """
    compute_dtype = states.dtype
    num_rows = tf.shape(states)[0]
    vocab_size = tf.shape(matrix)[0]
    # At least one (empty) slice when there are no rows: a TensorArray of none cannot concat.
    num_slices = tf.maximum((num_rows + rows_per_slice - 1) // rows_per_slice, 1)

    def one_slice(index, label_loss_sum, log_normalizer_sum, states_grad_slices, matrix_grad_sum):
        start = index * rows_per_slice
        slice_states = states[start : start + rows_per_slice]  # [R, D]
        slice_labels = labels[start : start + rows_per_slice]  # [R]
        logits = tf.cast(tf.matmul(slice_states, matrix, transpose_b=True), tf.float32)  # [R, V]
        probs = tf.nn.softmax(logits)  # [R, V]
        label_probs = tf.gather(probs, slice_labels, batch_dims=1)  # [R]
        label_losses, log_normalizers = _label_losses_and_log_normalizers(logits, probs, slice_labels, label_probs)
        if label_term_after_products:
            logits_grad = probs  # [R, V]
        else:
            # A select, not a scatter: TensorFlow has no GPU kernel of
            # tensor_scatter_nd_update for bfloat16 or float16
            # (tests/training/test_gpu_kernels.py), and both give the same numbers.
            is_label = tf.one_hot(slice_labels, vocab_size, on_value=True, off_value=False)  # bool [R, V]
            logits_grad = tf.where(
                is_label, tf.cast(label_probs - on_minus_off, compute_dtype)[:, None], tf.cast(probs, compute_dtype)
            )  # [R, V]: p - (on - off) * onehot(label)
        # The states' gradient is one [R, D] slice per slice of rows; the matrix's
        # sums the [V, D] contribution of every slice.
        slice_states_grad = tf.cast(tf.matmul(logits_grad, matrix), tf.float32)  # [R, D]
        if label_term_after_products:
            slice_states_grad -= on_minus_off * tf.gather(matrix, slice_labels)
        states_grad_slices = states_grad_slices.write(index, slice_states_grad)
        matrix_grad_sum += tf.cast(tf.matmul(logits_grad, slice_states, transpose_a=True), tf.float32)
        return (
            index + 1,
            label_loss_sum + tf.reduce_sum(label_losses),
            log_normalizer_sum + tf.reduce_sum(log_normalizers),
            states_grad_slices,
            matrix_grad_sum,
        )

    _, label_loss_sum, log_normalizer_sum, states_grad_slices, matrix_grad_sum = tf.while_loop(
        lambda index, *_: index < num_slices,
        one_slice,
        (
            tf.constant(0),
            tf.constant(0.0),
            tf.constant(0.0),
            tf.TensorArray(tf.float32, size=num_slices, infer_shape=False, element_shape=[None, states.shape[-1]]),
            tf.zeros(tf.shape(matrix), tf.float32),
        ),
    )
    return label_loss_sum, log_normalizer_sum, states_grad_slices.concat(), matrix_grad_sum


def _label_losses_and_log_normalizers(logits, probs, labels, label_probs):
    """-log p_label and the log-normalizer log sum_v exp(logits[r, v]), both `[R]`.

    Both come from the label's probability and logit, two gathers, when every label's
    probability is large enough for its log to be exact. Otherwise (logits hundreds
    apart underflow it to 0) the slice uses the row maxima: the largest probability is
    at least 1 / V, so its log is always finite. That costs two more passes over
    `[R, V]`, and so is kept for the slices that need it.
    """
    label_logits = tf.gather(logits, labels, batch_dims=1)  # [R]

    def from_label_probabilities():
        label_losses = -tf.math.log(label_probs)
        return label_losses, label_logits + label_losses

    def from_row_maxima():
        log_normalizers = tf.reduce_max(logits, -1) - tf.math.log(tf.reduce_max(probs, -1))
        return log_normalizers - label_logits, log_normalizers

    return tf.cond(tf.reduce_all(label_probs >= SAFE_LABEL_PROBABILITY), from_label_probabilities, from_row_maxima)
