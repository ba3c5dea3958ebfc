"""Model ensembles: several Transformers decoded as one, by the mean of their output
distributions.

    model = ensemble_of([Transformer(a, config_a), Transformer(b, config_b)])
    ids, scores = translate_ids(model, source_ids)                 # any search of model_search.py
    token_log_probs, log_probs = forced_log_probs(model, source_ids, target_ids)

Each member reads the source with its own encoder and decodes with its own incremental
decoder and self-attention cache (app/decoding/incremental.py); a step's output is

    log p(token) = log( (1 / M) sum_m softmax(logits_m) )
                 = logsumexp_m( log_softmax(logits_m) ) - log M

computed from log-probabilities, never from probabilities, so that a token one member
finds nearly impossible neither underflows to log 0 nor costs precision. Those are
normalized log-probabilities already, so the search's own log_softmax leaves them as
they are (to float32 rounding): every strategy, the length penalty, steering and
forced decoding read an ensemble exactly as they read one model.

An `Ensemble` stands where a `Transformer` stands for decoding: it has the `config`
(`vocab_size`, `max_length`), `encode` and `decode` that search and forced decoding
read, and `model_search.encoded_decoder` makes its step-by-step decoder. An ensemble of
one model is that model (`ensemble_of`), so one member decodes op for op as it always
did.

Dimension names: M members, B batch, S source length, T target length, N hypotheses,
V vocabulary size, D model width.
"""

import dataclasses
import math

import tensorflow as tf

from app.decoding.incremental import IncrementalDecoder


@dataclasses.dataclass(frozen=True)
class EnsembleConfig:
    """What decoding reads of an ensemble's configuration: the members' shared
    vocabulary, and the positions every member has."""

    # V, the members' one vocabulary size.
    vocab_size: int
    # The smallest of the members' `max_length`: no member may read or write past its own
    # position table, so the ensemble reads sources and writes outputs within all of them.
    max_length: int


class Ensemble:
    """Several models' decoding views, decoded by the mean of their distributions.

    Args:
        members: two or more `app.model.transformer.Transformer`s, each with its
            `ModelConfig`, all with the same `vocab_size` (the same subword model: the
            loader checks the files, app/export/ensemble.py). `ensemble_of` takes one too.
    """

    def __init__(self, members):
        members = tuple(members)
        if len(members) < 2:
            raise ValueError(f"an Ensemble has two or more members, got {len(members)}; ensemble_of takes one")
        if any(member.config is None for member in members):
            raise ValueError("every member of an Ensemble needs its ModelConfig (its vocabulary and positions)")
        sizes = [member.config.vocab_size for member in members]
        if len(set(sizes)) > 1:
            raise ValueError(f"the members of an ensemble must share one vocabulary; their vocab_size are {sizes}")
        self.members = members
        self.config = EnsembleConfig(sizes[0], min(member.config.max_length for member in members))

    def encode(self, source_ids, training=None):
        """Each member's encoder on the same source.

        Args:
            source_ids: int32 `[B, S]`, 0 = padding, S at most `config.max_length`.

        Returns:
            `(memories, memory_masks)`: lists of M `[B, S, D_m]` and M bool `[B, 1, S]`,
            what `decode` and `EnsembleDecoder.memory` take.
        """
        encoded = [member.encode(source_ids, training=training) for member in self.members]
        return [memory for memory, _ in encoded], [mask for _, mask in encoded]

    def decode(self, target_ids, memories, memory_masks, training=None):
        """The decoder over a whole target prefix, as `Transformer.decode`, for forced
        decoding: the log of the mean of the members' probabilities.

        Args:
            target_ids: int32 `[B, T]`, the decoder input (start token first), 0 = padding.
            memories, memory_masks: from `encode`.

        Returns:
            float32 `[B, T, V]`: log-probabilities, already normalized (a softmax of them
            is the ensemble's distribution, as a model's logits' is the model's).
        """
        logits = [
            member.decode(target_ids, memory, mask, training=training)
            for member, memory, mask in zip(self.members, memories, memory_masks)
        ]  # M x [B, T, V]
        return mean_of_distributions(logits)


def ensemble_of(members):
    """The decoding view of `members` (`Transformer`s): the one member itself, so that an
    ensemble of one model is that model exactly (its graph, its speed, its outputs), or
    an `Ensemble` of them."""
    members = tuple(members)
    if len(members) == 1:
        return members[0]
    return Ensemble(members)


def mean_of_distributions(logits):
    """`log(mean_m softmax(logits_m))`, stably: logsumexp over the members of their
    log_softmax, minus log M.

    Args:
        logits: a list of M float tensors of one shape `[..., V]`.

    Returns:
        float32 `[..., V]`, log-probabilities whose exponentials sum to 1 over V.
    """
    log_probs = tf.stack([tf.nn.log_softmax(tf.cast(x, tf.float32)) for x in logits])  # [M, ..., V]
    return tf.reduce_logsumexp(log_probs, axis=0) - math.log(len(logits))


class EnsembleDecoder:
    """`IncrementalDecoder`'s interface over an ensemble: each member its own decoder,
    memory and self-attention cache; a step's output is `mean_of_distributions` of theirs.

    Build it inside the `tf.function` that decodes, before the loop, as the members'
    decoders read their weights there.

    Args:
        ensemble: an `Ensemble`.
        output_kernels: M pre-softmax projections `[D_m, V]`, one per member (an export's
            variables), or None to make each member's here.
    """

    def __init__(self, ensemble, output_kernels=None):
        if output_kernels is None:
            output_kernels = [None] * len(ensemble.members)
        if len(output_kernels) != len(ensemble.members):
            raise ValueError(
                f"one output kernel per member: {len(ensemble.members)} members, {len(output_kernels)} kernels"
            )
        self._decoders = [
            IncrementalDecoder(member, kernel) for member, kernel in zip(ensemble.members, output_kernels)
        ]

    def memory(self, memories, memory_masks):
        """Each member's `IncrementalDecoder.memory`: a list of M, `[A, ...]` each (the
        search's `sentence_cache`, split and narrowed with the sentences)."""
        return [
            decoder.memory(memory, mask) for decoder, memory, mask in zip(self._decoders, memories, memory_masks)
        ]

    def empty_cache(self, hypotheses):
        """Each member's `IncrementalDecoder.empty_cache(hypotheses)`: a list of M, `[N, ...]` each."""
        return [decoder.empty_cache(hypotheses) for decoder in self._decoders]

    def step(self, token_ids, step, cache, memory):
        """Decodes position `step` with every member.

        Args:
            token_ids: int32 `[N]`, the tokens at position `step`.
            step: int32 scalar.
            cache: `empty_cache(N)` or the previous step's.
            memory: `memory(...)` of the A sentences.

        Returns:
            `(log-probabilities float32 [N, V] for position step + 1, cache of step + 1
            positions)`: `mean_of_distributions` of the members' logits.
        """
        logits, new_cache = [], []
        for decoder, member_cache, member_memory in zip(self._decoders, cache, memory):
            member_logits, member_cache = decoder.step(token_ids, step, member_cache, member_memory)  # [N, V]
            logits.append(member_logits)
            new_cache.append(member_cache)
        return mean_of_distributions(logits), new_cache
