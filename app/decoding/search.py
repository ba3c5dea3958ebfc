"""The one decoding loop: the cached step, the `tf.while_loop` and the output bookkeeping,
written once for every way of choosing tokens.

    ids, scores = search(BeamSearch(beam_size=4), symbols_to_logits_fn, initial_ids,
                         initial_cache, vocab_size, max_lengths=max_lengths,
                         settings=BeamSettings(alpha=alpha))

A `Strategy` decides which tokens extend which hypotheses (beam search, greedy search,
sampling: app/decoding/beam_search.py, greedy.py, sampling.py); the loop does the rest,
the same for all of them:

- it feeds the model's step the hypotheses' tokens and cache, and masks the tokens no
  output may hold (padding, the start token, and every token but the end token at a
  sentence's maximum length), and, where the search is steered (`steering.Steering`),
  those a forced target prefix or a repeated n-gram rules out;
- it appends the chosen tokens and reorders the cache with the hypotheses they extend;
- a sentence whose result the strategy calls final leaves the loop at once: its result
  is written out, and its hypotheses, cache and settings are dropped, so later steps
  compute only the sentences still searched (as CTranslate2 does);
- it ends when no sentence is left, or after L steps.

Only core TensorFlow ops on tensors whose shapes change only on the sentence axis, so
it runs eagerly and inside a `tf.function` exported to a SavedModel.

Dimension names: B batch, A the sentences still searched (A <= B), K hypotheses per
sentence (the strategy's `width`), V vocabulary size, L the most output tokens (the
largest of `max_lengths`); token buffers hold L + 1 positions, the start token at 0.
"""

import typing

import tensorflow as tf

from app.decoding.steering import (
    advance_ngram_runs,
    broadcast_steering,
    checked_prefix_lengths,
    steered_tokens,
    uses_ngram_bans,
)
from layers.special_tokens import END_ID, PAD_ID, START_ID


class Strategy(typing.Protocol):
    """How a search chooses its tokens. Every tensor it keeps has the sentences (A) on
    axis 0, so that the loop can drop the sentences that are done."""

    # K, a Python int: the hypotheses each sentence keeps.
    width: int

    def start(self, batch_size, buffer_length, settings):
        """The strategy's own state at step 0: nested tensors `[B, ...]`, shaped by the
        `SentenceSettings` of the B sentences where it needs (phrases `[B, C, P]`)."""

    def extend(self, state, ids, logits, allowed, step, settings):
        """Chooses the next token of each hypothesis.

        Args:
            state: the strategy's state, `[A, ...]`.
            ids: int32 `[A, K, L + 1]`, the hypotheses' tokens up to position `step`.
            logits: float32 `[A, K, V]`, the model's scores of the token at `step + 1`.
            allowed: bool `[A, V]`, the tokens each sentence may write there, or
                `[A, K, V]`, each hypothesis (a steered search): `hypothesis_mask`
                and `first_hypothesis_mask` read either.
            step: int32 scalar, the position of the newest token.
            settings: the `SentenceSettings` of the A sentences.

        Returns:
            `(state, parents, tokens)`: the new state; int32 `[A, K]`, the hypothesis
            each new one extends, or None where each extends itself; int32 `[A, K]`,
            the tokens written at `step + 1`.
        """

    def done(self, state, ids, step, settings):
        """bool `[A]`: whether each sentence's result is final (`step` the newest position)."""

    def results(self, state, ids, step, settings):
        """`(ids int32 [A, ..., L + 1], scores float32 [A, ...], *more)`: each sentence's
        output tokens, start token first, their scores, then any other output of the
        strategy, `[A, ...]` each (a constrained search's `constraints_met`)."""

    def no_results(self, batch_size, buffer_length):
        """`results` of a batch before any is written, `[B, ...]`: zeros, and the
        scores of no hypothesis."""


class SentenceSettings(typing.NamedTuple):
    """What each sentence is searched with, one value per sentence: narrowed with the
    sentences still searched."""

    # int32 [A]: the most output tokens of each sentence, end token included.
    max_lengths: tf.Tensor
    # The strategy's own settings, a NamedTuple of [A, ...] tensors (`beam_search.BeamSettings`,
    # `sampling.SamplingSettings`, the phrases of `constrained_beam_search.ConstrainedSettings`),
    # or () where it reads none.
    strategy: typing.Any = ()
    # steering.Steering, [A] and [A, P], or () for an unsteered search (today's graph).
    steering: typing.Any = ()


class SearchState(typing.NamedTuple):
    """The `tf.while_loop` state: the A sentences still searched, and the results of
    those done."""

    # int32 []: buffer position of the newest token (0 = start token).
    step: tf.Tensor
    # int32 [A, K, L + 1]: the hypotheses: start token, `step` tokens, then 0.
    ids: tf.Tensor
    # Nested tensors [A * K, ...]: the model's cache for the hypotheses.
    cache: typing.Any
    # Nested tensors [A, ...]: what every hypothesis of a sentence reads alike.
    sentence_cache: typing.Any
    # int32 [A]: each sentence's row in the batch.
    rows: tf.Tensor
    # SentenceSettings, [A] each.
    settings: SentenceSettings
    # Nested tensors [A, ...]: the strategy's state.
    strategy: typing.Any
    # Nested tensors [B, ...]: the results of the sentences done so far.
    results: typing.Any
    # int32 [A, K, L + 1] where steered, else (): `steering.advance_ngram_runs`'s runs.
    ngram_runs: typing.Any = ()


def shape_list(x):
    """The shape of `x` as a list: Python ints where static, scalar tensors elsewhere."""
    static = x.shape.as_list()
    dynamic = tf.shape(x)
    return [dim if dim is not None else dynamic[i] for i, dim in enumerate(static)]


def loose_shape(x):
    """A `tf.while_loop` shape invariant that lets every axis but the last change."""
    return tf.TensorShape([None] * (x.shape.rank - 1) + x.shape[-1:].as_list())


def per_sentence_shape(x):
    """A `tf.while_loop` shape invariant that lets the sentence axis (0) change."""
    return tf.TensorShape([None] + x.shape[1:].as_list())


def per_sentence_setting(value, shape):
    """A setting of every sentence: a scalar (one value for all) broadcast to `shape`, the
    sentences' `[B]`; a `[B]` value through the same (identity) broadcast, so that the
    graphs traced before settings of higher rank existed stay the same; a `[B, ...]`
    value (a constrained search's phrases `[B, C, P]`) as it is."""
    value = tf.convert_to_tensor(value)
    return value if (value.shape.rank or 0) >= 2 else tf.broadcast_to(value, shape)


def longest_output(max_lengths):
    """L, the largest of `max_lengths` (int32 `[B]`), as long as the decoding cache must be.
    An empty batch (B = 0), whose reduce_max would be int32's minimum, gets 1."""
    return tf.reduce_max(tf.concat([max_lengths, [1]], axis=0))


def expand_to_beam_size(x, beam_size):
    """`[B, ...]` -> `[B, K, ...]`, each sentence's entry repeated K times."""
    multiples = [1, beam_size] + [1] * (x.shape.rank - 1)
    return tf.tile(tf.expand_dims(x, 1), multiples)  # [B, K, ...]


def flatten_beam_dim(x):
    """`[B, K, ...]` -> `[B * K, ...]`, the layout the model sees (sentence-major)."""
    shape = shape_list(x)
    return tf.reshape(x, [shape[0] * shape[1]] + shape[2:])  # [B * K, ...]


def hypothesis_mask(allowed):
    """The tokens each hypothesis may write, bool `[A, 1, V]` (one row for every
    hypothesis) or `[A, K, V]`, from `Strategy.extend`'s `allowed` of either rank."""
    return allowed if allowed.shape.rank == 3 else allowed[:, None, :]


def first_hypothesis_mask(allowed):
    """bool `[A, V]`: the tokens the first hypothesis of each sentence may write, from
    `Strategy.extend`'s `allowed` of either rank (a strategy of width 1 reads this)."""
    return allowed[:, 0] if allowed.shape.rank == 3 else allowed


def gather_beams(nested, beam_indices):
    """Picks beams: every tensor `[B, N, ...]` in `nested` -> `[B, M, ...]`.

    Args:
        nested: a nested structure of tensors with the batch on axis 0, beams on axis 1.
        beam_indices: int32 `[B, M]`, values in `[0, N)`.
    """
    return tf.nest.map_structure(lambda x: tf.gather(x, beam_indices, batch_dims=1), nested)


class _Loop:
    """The body of the `tf.while_loop` and the bookkeeping around it, for one strategy."""

    def __init__(self, strategy, symbols_to_logits_fn, vocab_size, max_output_length, *, with_sentence_cache,
                 end_id, pad_id, start_id, steered=False):
        self.strategy = strategy
        self.steered = steered  # whether the sentences carry a `Steering` and the state `ngram_runs`
        self.end_id = end_id
        self.symbols_to_logits_fn = symbols_to_logits_fn
        self.vocab_size = vocab_size
        self.max_output_length = max_output_length  # L
        self.with_sentence_cache = with_sentence_cache
        # Padding and the start token are never outputs; at its maximum length, only the end.
        vocabulary = tf.range(vocab_size)  # [V]
        self.output_tokens = (vocabulary != pad_id) & (vocabulary != start_id)  # [V]
        self.is_end_token = tf.equal(vocabulary, end_id)  # [V]

    def keep_going(self, state):
        return (state.step < self.max_output_length) & (tf.size(state.rows) > 0)

    def logits(self, state):
        """The model's step: `(logits float32 [A, K, V], cache [A * K, ...])`."""
        flat_ids = flatten_beam_dim(state.ids)  # [A * K, L + 1]
        if self.with_sentence_cache:
            logits, cache = self.symbols_to_logits_fn(flat_ids, state.step, state.cache, state.sentence_cache)
        else:
            logits, cache = self.symbols_to_logits_fn(flat_ids, state.step, state.cache)
        return tf.reshape(tf.cast(logits, tf.float32), [-1, self.strategy.width, self.vocab_size]), cache

    def body(self, state):
        k, step = self.strategy.width, state.step
        logits, cache = self.logits(state)  # [A, K, V]
        must_end = step + 1 >= state.settings.max_lengths  # [A]: the next token is the last allowed
        allowed = self.output_tokens & (self.is_end_token | ~must_end[:, None])  # [A, V]
        if self.steered:
            allowed = steered_tokens(
                allowed, state.settings.steering, state.ngram_runs, state.ids, step, end_id=self.end_id
            )  # [A, K, V]
        strategy_state, parents, tokens = self.strategy.extend(
            state.strategy, state.ids, logits, allowed, step, state.settings
        )
        # The cache is [A * K, ...], sentence-major: hypothesis j of sentence a is row
        # a K + j. It is gathered once, below, with the sentences that stay. The runs
        # (() unsteered) follow the hypotheses as their tokens do.
        own_rows = k * tf.range(tf.shape(state.rows)[0])[:, None]  # [A, 1]
        if parents is None:
            (ids, runs), cache_rows = (state.ids, state.ngram_runs), own_rows + tf.range(k)[None, :]  # [A, K]
        else:
            (ids, runs), cache_rows = gather_beams((state.ids, state.ngram_runs), parents), own_rows + parents
        # Positions after `step` are 0, so adding writes the new token at step + 1.
        new_position = tf.one_hot(step + 1, self.max_output_length + 1, dtype=tf.int32)  # [L + 1]
        next_step = step + 1
        ids = ids + tokens[:, :, None] * new_position  # [A, K, L + 1]
        if self.steered:
            runs = tf.cond(
                uses_ngram_bans(state.settings.steering), lambda: advance_ngram_runs(runs, ids, tokens), lambda: runs
            )  # [A, K, L + 1]
        state = state._replace(step=next_step, ids=ids, cache=cache, strategy=strategy_state, ngram_runs=runs)

        def stay():
            if parents is None:  # each hypothesis keeps its rows
                return state
            return state._replace(
                cache=tf.nest.map_structure(lambda x: tf.gather(x, tf.reshape(cache_rows, [-1])), cache)
            )

        # The sentences now done leave the search with their results.
        finished = self.strategy.done(state.strategy, state.ids, state.step, state.settings)  # [A]

        def leave():
            return self.narrow(self.write_results(state, finished), ~finished, cache_rows)

        return (tf.cond(tf.reduce_any(finished), leave, stay),)

    def write_results(self, state, which):
        """The state with the results of the sentences `which` (bool [A]) written out."""
        found = self.strategy.results(state.strategy, state.ids, state.step, state.settings)
        rows = tf.boolean_mask(state.rows, which)[:, None]  # [D, 1]

        def scattered(results, new):
            new = tf.boolean_mask(new, which)
            if results.dtype != tf.bool:
                return tf.tensor_scatter_nd_update(results, rows, new)
            # TensorScatterUpdate has no GPU kernel for bool: on a GPU the loop would copy
            # the results to the host and back at every step that a sentence leaves.
            as_ints = tf.tensor_scatter_nd_update(tf.cast(results, tf.int32), rows, tf.cast(new, tf.int32))
            return tf.cast(as_ints, tf.bool)

        return state._replace(results=tf.nest.map_structure(scattered, state.results, found))

    def narrow(self, state, keep, cache_rows):
        """The state of the sentences `keep` (bool [A]) only, its cache `cache_rows`
        (int32 `[A, K]`) of `state.cache`: the rows the kept sentences' hypotheses read."""
        kept = tf.where(keep)[:, 0]  # [A']

        def per_sentence(x):
            return tf.gather(x, kept)

        rows = tf.reshape(per_sentence(cache_rows), [-1])  # [A' * K]
        return state._replace(
            ids=per_sentence(state.ids),
            cache=tf.nest.map_structure(lambda x: tf.gather(x, rows), state.cache),
            rows=per_sentence(state.rows),
            **{
                name: tf.nest.map_structure(per_sentence, getattr(state, name))
                for name in ("sentence_cache", "settings", "strategy", "ngram_runs")
            },
        )


def search(
    strategy: Strategy,
    symbols_to_logits_fn,
    initial_ids,
    initial_cache,
    vocab_size,
    *,
    max_lengths,
    settings=(),
    sentence_cache=None,
    end_id=END_ID,
    pad_id=PAD_ID,
    start_id=START_ID,
    steering=None,
):
    """Runs `strategy` over a batch: `(ids int32 [B, ..., L], scores float32 [B, ...],
    *more)`, the strategy's results without the start token (`more`: any other output
    it gives, such as a constrained search's `constraints_met`).

    Args:
        strategy: the `Strategy`.
        symbols_to_logits_fn: `(ids, step, cache) -> (logits, new_cache)`, or with
            `sentence_cache` `(ids, step, cache, sentence_cache) -> (logits, new_cache)`.
            `ids` is int32 `[N, L + 1]`, N = A x K hypotheses (sentence-major), the
            whole buffer of tokens so far (position 0 = start token, positions <= `step`
            filled, the rest 0); `step` the int32 scalar position of the newest token;
            `logits` `[N, V]` (any float dtype) are for position `step + 1`. `cache` has
            N on axis 0 of every tensor, and `sentence_cache` A.
        initial_ids: int32 `[B]`, the start token of each sentence.
        initial_cache: nested tensors with the batch `B` on axis 0; tiled K times here,
            and reordered with the hypotheses at every step.
        vocab_size: V, a Python int >= 2.
        max_lengths: int32 `[B]` (or a scalar for all): the most output tokens of each
            sentence, end token included, >= 1. A hypothesis of that length ends there.
        settings: the strategy's settings (`SentenceSettings.strategy`), a NamedTuple of
            `[B, ...]` tensors (or scalars for all) such as `BeamSettings(alpha)`, or ().
        sentence_cache: nested tensors with the batch `B` on axis 0 that all hypotheses
            of a sentence read alike (such as the encoder output's keys and values):
            never tiled nor reordered, only narrowed to the sentences still searched.
        end_id, pad_id, start_id: the special token ids.
        steering: a `steering.Steering` of the B sentences (`steering.batch_steering`;
            scalars for all), or None: unsteered, the graph of a search without it.
            Each prefix length must be below the sentence's `max_lengths`, which the
            caller grows by it (checked when the graph runs).
    """
    if not isinstance(vocab_size, int) or vocab_size < 2:
        raise ValueError(f"vocab_size must be a Python int >= 2, got {vocab_size!r}")
    k = strategy.width
    initial_ids = tf.convert_to_tensor(initial_ids, tf.int32)  # [B]
    batch_size = shape_list(initial_ids)[0]
    sentences = tf.shape(initial_ids)
    settings = SentenceSettings(
        max_lengths=tf.broadcast_to(tf.convert_to_tensor(max_lengths, tf.int32), sentences),  # [B]
        strategy=tf.nest.map_structure(lambda value: per_sentence_setting(value, sentences), settings),
    )
    steered = steering is not None
    if steered:
        settings = settings._replace(
            steering=checked_prefix_lengths(broadcast_steering(steering, batch_size), settings.max_lengths)
        )  # [B, P] and [B]
    max_output_length = longest_output(settings.max_lengths)  # L
    sentence_cache = {} if sentence_cache is None else sentence_cache
    loop = _Loop(
        strategy, symbols_to_logits_fn, vocab_size, max_output_length,
        with_sentence_cache=bool(tf.nest.flatten(sentence_cache)), end_id=end_id, pad_id=pad_id, start_id=start_id,
        steered=steered,
    )

    buffer_length = max_output_length + 1
    initial_state = SearchState(
        step=tf.constant(0, tf.int32),
        ids=tf.where(tf.range(buffer_length) == 0, expand_to_beam_size(initial_ids, k)[:, :, None], 0),  # [B, K, L+1]
        cache=tf.nest.map_structure(lambda x: flatten_beam_dim(expand_to_beam_size(x, k)), initial_cache),  # [B*K, ...]
        sentence_cache=sentence_cache,
        rows=tf.range(batch_size),  # [B]
        settings=settings,
        strategy=strategy.start(batch_size, buffer_length, settings),
        results=strategy.no_results(batch_size, buffer_length),
        ngram_runs=tf.zeros([batch_size, k, buffer_length], tf.int32) if steered else (),  # [B, K, L + 1]
    )
    invariants = SearchState(
        step=tf.TensorShape([]),
        ids=tf.TensorShape([None, k, None]),
        cache=tf.nest.map_structure(loose_shape, initial_state.cache),
        sentence_cache=tf.nest.map_structure(loose_shape, sentence_cache),
        rows=tf.TensorShape([None]),
        settings=tf.nest.map_structure(per_sentence_shape, settings),
        strategy=tf.nest.map_structure(per_sentence_shape, initial_state.strategy),
        results=tf.nest.map_structure(per_sentence_shape, initial_state.results),
        ngram_runs=tf.TensorShape([None, k, None]) if steered else (),
    )
    (state,) = tf.while_loop(
        loop.keep_going, loop.body, (initial_state,), shape_invariants=(invariants,), parallel_iterations=1
    )
    # The sentences still searched when the longest output was reached.
    ids, *outputs = loop.write_results(state, tf.ones_like(state.rows, tf.bool)).results
    return (ids[..., 1:], *outputs)
