"""One hypothesis per sentence, extended at each step by the one token a subclass picks:
`GreedySearch` picks the most likely, app/decoding/sampling.py's `SamplingSearch` draws one.

Both are `search.Strategy`s; the loop around them is app/decoding/search.py's. Their
score is the sum of the model's log-probabilities of the chosen tokens, end token
included, over the whole vocabulary (as beam search and forced decoding score them),
whatever the choice saw: how likely the model finds the output, not normalized by
length.

Dimension names: A sentences still searched, V vocabulary size, L the most output
tokens; token buffers hold L + 1 positions, the start token at 0.
"""

import tensorflow as tf

from app.decoding.search import first_hypothesis_mask
from layers.special_tokens import END_ID


class OneHypothesisSearch:
    """One hypothesis per sentence (`search.Strategy`), extended by the token `choose` picks.

    Args:
        end_id: the end token's id.
    """

    width = 1

    def __init__(self, end_id=END_ID):
        self.end_id = end_id

    def choose(self, logits, step, settings):
        """int32 `[A]`: the next token of each sentence, given its logits float32 `[A, V]`,
        -inf where it may not write a token, and its settings (the strategy's own part of
        `search.SentenceSettings`)."""
        raise NotImplementedError

    def start(self, batch_size, buffer_length, settings):
        return tf.zeros([batch_size], tf.float32)  # [B]: the sum of the log-probs so far

    def no_results(self, batch_size, buffer_length):
        return tf.zeros([batch_size, buffer_length], tf.int32), tf.zeros([batch_size], tf.float32)

    def extend(self, log_prob_sums, ids, logits, allowed, step, settings):
        logits = logits[:, 0]  # [A, V]
        allowed = first_hypothesis_mask(allowed)  # [A, V]
        tokens = self.choose(tf.where(allowed, logits, float("-inf")), step, settings.strategy)  # [A]
        log_probs = tf.gather(tf.nn.log_softmax(logits), tokens, batch_dims=1)  # [A]
        return log_prob_sums + log_probs, None, tokens[:, None]

    def done(self, log_prob_sums, ids, step, settings):
        return tf.equal(ids[:, 0, step], self.end_id)  # [A]: the newest token ends it

    def results(self, log_prob_sums, ids, step, settings):
        return ids[:, 0], log_prob_sums  # [A, L + 1], [A]


class GreedySearch(OneHypothesisSearch):
    """Greedy decoding: the most likely token at each step, the lowest id on a tie. Reads
    no settings."""

    def choose(self, logits, step, settings):
        return tf.argmax(logits, axis=-1, output_type=tf.int32)  # [A]
