"""Random tokens for back-translation: top-k and nucleus (top-p) sampling, reproducible
from a seed per sentence. `SamplingSearch` is the strategy; `model_search.sample_ids`
runs it over the model.

At each step the next token is drawn from the model's distribution at `temperature`,
cut to its `top_k` most likely tokens (0: all of them) and to the smallest set of most
likely tokens whose probability reaches `top_p` (1: all), then renormalized. `top_k` 1
is greedy decoding. Every setting may differ per sentence (`[B]`), so a serving batch
may mix requests.

The randomness is a function of the sentence's seed and the step only, not of any
state: step t of a sentence with seed s draws its uniform number from an integer hash
of (s, t) (`uniform_per_sentence`), the same on every machine and device. TensorFlow's
stateless random ops take one seed per op, not one per row; a hash gives each sentence
its own stream in one op, so a sentence's sample depends on its seed and its text, not
on the batch it is decoded in. The hash is integer arithmetic, which has GPU kernels: a
hash of strings would send every step of the loop back to the host.

Dimension names: B batch, V vocabulary, C the candidates a step sorts (the largest
top_k of the batch, or V).
"""

import typing

import tensorflow as tf

from app.decoding.greedy import OneHypothesisSearch


# The uniform numbers' resolution: the top 24 bits of a 32-bit hash, exact in float32.
_BITS = 24
_LOW_32 = 0xFFFFFFFF


def _mix32(x):
    """A 32-bit integer hash (the xor-shift-multiply finalizer of "lowbias32"), on int64
    holding values in [0, 2**32). Its multipliers are below 2**31, so no product
    overflows int64."""
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 16))
    x = tf.bitwise.bitwise_and(x * 0x7FEB352D, _LOW_32)
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 15))
    x = tf.bitwise.bitwise_and(x * 0x5BD1E995, _LOW_32)
    return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 16))


def uniform_per_sentence(seeds, step):
    """float32 `[B]` in [0, 1): one number per sentence, a function of its seed (int64
    `[B]`) and `step` (int32 scalar) only."""
    seeds = tf.convert_to_tensor(seeds, tf.int64)
    low = tf.bitwise.bitwise_and(seeds, _LOW_32)  # [B]
    high = tf.bitwise.bitwise_and(tf.bitwise.right_shift(seeds, 32), _LOW_32)  # [B]
    # The golden ratio's bits keep step 0 of seed 0 away from the hash's fixed point 0.
    mixed = _mix32(tf.bitwise.bitwise_xor(tf.cast(step, tf.int64), 0x9E3779B9) + tf.zeros_like(seeds))
    mixed = _mix32(tf.bitwise.bitwise_xor(mixed, high))
    mixed = _mix32(tf.bitwise.bitwise_xor(mixed, low))  # [B], in [0, 2**32)
    return tf.cast(tf.bitwise.right_shift(mixed, 32 - _BITS), tf.float32) / 2**_BITS


def choose_tokens(logits, uniform, top_k, top_p, temperature):
    """One token per row, drawn by inverting the cumulative distribution at `uniform`.

    Args:
        logits: float32 `[B, V]`; banned tokens are -inf.
        uniform: float32 `[B]` in [0, 1).
        top_k: int32 `[B]`, 0 = the whole vocabulary.
        top_p: float32 `[B]` in (0, 1].
        temperature: float32 `[B]`, > 0.

    Returns:
        int32 `[B]`, the tokens.
    """
    vocab_size = tf.shape(logits)[1]
    top_k = tf.where(top_k > 0, tf.minimum(top_k, vocab_size), vocab_size)  # [B]
    # Shifted to a maximum of 0 first, so that a small temperature gives -inf, never NaN.
    shifted = logits - tf.reduce_max(logits, axis=1, keepdims=True)
    log_probs = tf.nn.log_softmax(shifted / temperature[:, None])  # [B, V]
    # Only the candidates some sentence may draw are sorted: top_k 1 sorts nothing.
    candidates = tf.where(top_p < 1, vocab_size, top_k)  # [B]
    values, indices = tf.math.top_k(log_probs, k=tf.reduce_max(candidates))  # [B, C], best first
    probs = tf.exp(values)
    ranks = tf.range(tf.shape(values)[1])[None, :]  # [1, C]
    # A prefix of the sorted tokens: the top k, those before the mass reaches top_p (the
    # first always), and never one of probability 0 (a banned token).
    keep = (ranks < top_k[:, None]) & (tf.cumsum(probs, axis=1, exclusive=True) < top_p[:, None]) & (probs > 0)
    kept = tf.where(keep, probs, 0.0)
    cumulative = tf.cumsum(kept, axis=1)  # [B, C]
    threshold = uniform * cumulative[:, -1]  # [B]
    choice = tf.reduce_sum(tf.cast(cumulative <= threshold[:, None], tf.int32), axis=1)
    # Rounding may put the threshold on the total: the last kept token then.
    choice = tf.minimum(choice, tf.reduce_sum(tf.cast(keep, tf.int32), axis=1) - 1)  # [B]
    return tf.gather(indices, choice, batch_dims=1)


class SamplingSettings(typing.NamedTuple):
    """Sampling's own settings of each sentence (`search.SentenceSettings.strategy`)."""

    # int64 [A]: the sentence's random stream (`uniform_per_sentence`).
    seed: tf.Tensor
    # int32 [A]: draw among the top_k most likely tokens; 0 = all of them.
    top_k: tf.Tensor
    # float32 [A], in (0, 1]: among the fewest most likely tokens whose probability reaches it.
    top_p: tf.Tensor
    # float32 [A], > 0: the logits are divided by it.
    temperature: tf.Tensor


class SamplingSearch(OneHypothesisSearch):
    """Top-k / nucleus sampling (`search.Strategy`): one hypothesis per sentence, extended
    by a token drawn with the sentence's `SamplingSettings`."""

    def choose(self, logits, step, settings):
        uniform = uniform_per_sentence(settings.seed, step)  # [A]
        return choose_tokens(logits, uniform, settings.top_k, settings.top_p, settings.temperature)
