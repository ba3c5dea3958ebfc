"""The residual connection around every sub-layer, post-norm (the paper's) or pre-norm."""


def residual_block(inputs, sublayer, norm, dropout, norm_first, training=None):
    """Wraps `sublayer` in a residual connection with layer normalization and dropout.

    post-norm (the paper): LayerNorm(x + Dropout(sublayer(x)))
    pre-norm:              x + Dropout(sublayer(LayerNorm(x)))

    Pre-norm keeps an identity path from input to output, which lets deep stacks train
    without careful warmup; the model then needs one final LayerNorm after the stack.

    Args:
        inputs: `[B, T, D]`.
        sublayer: callable `[B, T, D] -> [B, T, D]`, or `-> (outputs, *extras)`; extras
            (attention weights, a cache) are passed through.
        norm: a LayerNormalization layer.
        dropout: a Dropout layer.
        norm_first: pre-norm if True, post-norm otherwise.

    Returns:
        `outputs [B, T, D]`, or `(outputs, *extras)` if the sublayer returned extras.
    """
    result = sublayer(norm(inputs) if norm_first else inputs)
    outputs, extras = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
    outputs = inputs + dropout(outputs, training=training)
    if not norm_first:
        outputs = norm(outputs)
    return (outputs, *extras) if extras else outputs
