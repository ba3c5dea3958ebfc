"""Model FLOPs of the Transformer: what a step computes, for model FLOPs utilization
(`python -m app.preflight`) and the speed comparisons in benchmarks/.

Dimension names: N layers, D d_model, F d_ff, H heads, V vocabulary, s / t the
non-padding source / decoder positions of one sentence.
"""

import numpy as np


def forward_flops(config, source_lengths, target_lengths):
    """Forward-pass FLOPs of one encoder-decoder pass, counting non-padding tokens only.

    With A = H * d_k and Bv = H * d_v, a sentence of s source tokens and t decoder
    positions (= its t label tokens) costs, for every matrix product (2 FLOPs per
    multiply-add; 2 x the weight-matmul parameters per token that meets them):

        encoder, per layer:
            s * 2 * (D*A + D*A + D*Bv + Bv*D + 2*D*F)       Q, K, V, output, feed-forward
          + s * s * 2 * (A + Bv)                            scores Q K^T and weights x V
        decoder, per layer:
            t * 2 * (2*D*A + 2*D*Bv + D*A + Bv*D + 2*D*F)   self Q K V O, cross Q O, FFN
          + s * 2 * (D*A + D*Bv)                            cross K, V of the memory
          + t * t * 2 * (A + Bv)                            self-attention (all t x t;
                                                            the causal half is counted)
          + t * s * 2 * (A + Bv)                            cross-attention
        output projection:
            t * 2 * D * V

    summed over N layers and over sentences. Embedding lookups, softmax, layer norm,
    biases and the loss are not counted. Padding positions are not counted, even where a
    model computes on them. Training FLOPs = 3 x forward (`training_flops`).

    Args:
        config: a `ModelConfig` (vocab_size, num_layers, d_model, d_ff, num_heads,
            key_dim, value_dim).
        source_lengths, target_lengths: ints or int arrays `[B]`, one per sentence.

    Returns:
        float, FLOPs summed over the sentences.
    """
    s = np.asarray(source_lengths, np.float64)
    t = np.asarray(target_lengths, np.float64)
    d, f, v = config.d_model, config.d_ff, config.vocab_size
    a = config.num_heads * config.key_dim
    bv = config.num_heads * config.value_dim
    encoder_layer = s * 2 * (2 * d * a + 2 * d * bv + 2 * d * f) + s * s * 2 * (a + bv)
    decoder_layer = (
        t * 2 * (3 * d * a + 3 * d * bv + 2 * d * f)
        + s * 2 * (d * a + d * bv)
        + t * t * 2 * (a + bv)
        + t * s * 2 * (a + bv)
    )
    output = t * 2 * d * v
    return float(np.sum(config.num_layers * (encoder_layer + decoder_layer) + output))


def training_flops(config, source_lengths, target_lengths):
    """Forward + backward (2 x forward): 3 x `forward_flops`."""
    return 3.0 * forward_flops(config, source_lengths, target_lengths)
