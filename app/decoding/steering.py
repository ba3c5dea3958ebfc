"""Steering a search, per sentence, whatever the strategy: a target prefix forced first, and
no n-gram of a given size written twice (fairseq's and CTranslate2's `no_repeat_ngram_size`).

    steering = batch_steering(batch_size, prefix=prefix, prefix_lengths=lengths, no_repeat_ngram_size=3)
    ids, scores = search(strategy, symbols_to_logits_fn, ..., steering=steering)

Both act on the tokens a hypothesis may write next (the loop's `allowed` mask), after
the model's log-softmax, so a score stays the sum of the model's log-probs of the tokens
written: prefix tokens count with their own log-probs, as fairseq scores them.

- **Prefix** (`forced_prefix`): while `step` < its length, a sentence may write only its
  next prefix token. Beam search needs nothing more: it starts with beam 0 alone live, so
  each forced step keeps one real hypothesis, and the first free step starts afresh from
  the prefix. The caller grows the length limit by the prefix length (`model_search`).
- **No repeated n-gram** (`repeated_ngram_hits`): token x is banned where the last
  n - 1 tokens and x form an n-gram the hypothesis already holds. The n-grams run over the
  output tokens, prefix included, never the start token. Forced prefix tokens are exempt
  (forcing wins), and the end token is never banned, so a hypothesis can always end. The
  loop keeps `runs` (`advance_ngram_runs`), so a step's ban costs O(K L), not a recount of
  every n-gram, and never a one-hot of the buffer over the vocabulary ([A, K, L + 1, V]).

Every tensor has the sentences on axis 0, so the loop narrows them with the sentences
still searched. Dimension names: B batch, A sentences still searched, K hypotheses per
sentence, V vocabulary size, L the most output tokens (buffers of L + 1 positions, the
start token at 0), P the prefix width.
"""

import typing

import tensorflow as tf


class Steering(typing.NamedTuple):
    """How each sentence is steered (`search.SentenceSettings.steering`), one row per sentence."""

    # int32 [A, P], P >= 1: the prefix tokens of each sentence, padded with 0.
    prefix: tf.Tensor
    # int32 [A], 0 <= length <= P: how many of them are forced; 0 = no prefix.
    prefix_lengths: tf.Tensor
    # int32 [A], >= 0: no n-gram of this size is written twice; 0 = off.
    no_repeat_ngram_size: tf.Tensor


def batch_steering(batch_size, *, prefix=None, prefix_lengths=None, no_repeat_ngram_size=0):
    """A `Steering` of `batch_size` sentences: no prefix where `prefix` is None (then
    `prefix_lengths` must be too), and every scalar setting given to all.

    Args:
        batch_size: B, an int or int32 scalar.
        prefix: int32 `[B, P]`, P >= 1, 0-padded (`padded_prefixes`), or None.
        prefix_lengths: int32 `[B]` (or a scalar for all), or None for P each.
        no_repeat_ngram_size: int32 `[B]` or a scalar for all.
    """
    if prefix is None:
        if prefix_lengths is not None:
            raise ValueError("prefix_lengths without a prefix")
        prefix, prefix_lengths = tf.zeros([batch_size, 1], tf.int32), 0
    prefix = tf.convert_to_tensor(prefix, tf.int32)
    if prefix_lengths is None:
        prefix_lengths = tf.shape(prefix)[1]
    return broadcast_steering(Steering(prefix, prefix_lengths, no_repeat_ngram_size), batch_size)


def broadcast_steering(steering, batch_size):
    """`steering` with each scalar field given to every one of `batch_size` sentences:
    `[B]` fields (and the `[B, P]` prefix) stay as they are."""

    def each(value):
        value = tf.convert_to_tensor(value, tf.int32)
        return tf.broadcast_to(value, [batch_size]) if value.shape.rank == 0 else value

    return Steering(*(each(value) for value in steering))


def padded_prefixes(tokens):
    """Tokenized prefixes, ragged int `[B, None]`, as `Steering` holds them: `(prefix
    int32 [B, P], lengths int32 [B])`, padded with 0 to P >= 1 columns, so that reading a
    prefix's token never reads an empty axis (all prefixes empty, or B = 0)."""
    lengths = tf.cast(tokens.row_lengths(), tf.int32)  # [B]
    prefix = tf.cast(tokens.to_tensor(default_value=0), tf.int32)  # [B, P']
    missing = tf.maximum(1 - tf.shape(prefix)[1], 0)
    return tf.pad(prefix, [[0, 0], [0, missing]]), lengths  # [B, max(P', 1)], [B]


def checked_prefix_lengths(steering, max_lengths):
    """`steering`, checked when it is used: each prefix length within its prefix's width,
    and below the sentence's most output tokens `max_lengths` (int32 `[A]`), so that the
    end token still fits after the prefix (a step that must end is never forced)."""
    lengths = steering.prefix_lengths
    checks = [
        tf.debugging.assert_less_equal(
            lengths, tf.shape(steering.prefix)[1], message="prefix_lengths must be at most the prefix's width"
        ),
        tf.debugging.assert_less(
            lengths, max_lengths, message="prefix_lengths must be below max_lengths: the end token must fit"
        ),
    ]
    with tf.control_dependencies(checks):
        return steering._replace(prefix_lengths=tf.identity(lengths))


def forced_prefix(allowed, steering, step):
    """The tokens each sentence may write at position `step + 1` once its prefix is forced.

    Args:
        allowed: bool `[A, V]`, the tokens each sentence may write there unsteered.
        steering: the A sentences' `Steering`.
        step: int32 scalar, the position of the newest token (0 = the start token).

    Returns:
        `(allowed bool [A, V], forcing bool [A])`: a sentence still in its prefix may
        write only its prefix token `step`, whatever `allowed` said; `forcing` marks them.
    """
    forcing = step < steering.prefix_lengths  # [A]
    # Clamped: a sentence past its prefix (or without one) reads a column it ignores.
    column = tf.minimum(step, tf.shape(steering.prefix)[1] - 1)
    tokens = tf.gather(steering.prefix, column, axis=1)  # [A]
    vocabulary = tf.range(tf.shape(allowed)[1])  # [V]
    return tf.where(forcing[:, None], vocabulary[None, :] == tokens[:, None], allowed), forcing  # [A, V], [A]


def advance_ngram_runs(runs, ids, tokens):
    """The runs once `tokens` are written at `step + 1`: int32 `[A, K, L + 1]`.

    `runs[a, k, p]` is the length of the common suffix of hypothesis (a, k)'s tokens up to
    position p - 1 and up to its newest position `step`. Writing x, that suffix grows by
    one where the token before p is x (the new run at p is the old run at p - 1, plus one),
    and is 0 elsewhere: a shift, a comparison and a `where`.

    The values are exact at every p <= the newest position, the only ones read
    (`repeated_ngram_tokens`), given zeros at step 0; the start token at position 0 equals
    no output token, so no run reaches past it.

    Args:
        runs: int32 `[A, K, L + 1]`, the runs before the write (gathered with the parents).
        ids: int32 `[A, K, L + 1]`, the hypotheses' tokens after the write.
        tokens: int32 `[A, K]`, the tokens written.
    """
    shifted = [[0, 0], [0, 0], [1, 0]]
    before_ids = tf.pad(ids[:, :, :-1], shifted, constant_values=-1)  # [A, K, L + 1]: the token before p
    before_runs = tf.pad(runs[:, :, :-1], shifted)  # [A, K, L + 1]: the run at p - 1
    return tf.where(tf.equal(before_ids, tokens[:, :, None]), before_runs + 1, 0)


def repeated_ngram_hits(runs, ids, step, sizes):
    """int32 `[N, 3]`: `(a, k, x)` for each earlier n-gram of hypothesis (a, k) that token
    x would repeat at `step + 1`, n = `sizes[a]` (a token may be named more than once).

    Token `ids[p]` is banned where the n-gram ending at p has the last n - 1 tokens as its
    first n - 1, that is where `runs[p] >= n - 1`, for the n-grams ending at 1 <= p <=
    `step`: n = 1 bans every token written, an n longer than the hypothesis bans none, n
    = 0 nothing. A few hits a step: they are applied where they fall (`steered_tokens`),
    as fairseq's n-gram blocking writes -inf into the banned slots only, rather than
    counted into a dense `[A, K, V]` tensor.

    Args:
        runs: int32 `[A, K, L + 1]` (`advance_ngram_runs`).
        ids: int32 `[A, K, L + 1]`, the tokens up to position `step`, then 0.
        step: int32 scalar, the newest position.
        sizes: int32 `[A]`, each sentence's n; 0 = no ban.
    """
    positions = tf.range(tf.shape(ids)[2])  # [L + 1]
    sizes = sizes[:, None, None]  # [A, 1, 1]
    in_output = (positions >= 1) & (positions <= step)  # [L + 1]: earlier n-grams end here
    where = tf.cast(tf.where((sizes > 0) & in_output & (runs >= sizes - 1)), tf.int32)  # [N, 3]: a, k, p
    return tf.concat([where[:, :2], tf.gather_nd(ids, where)[:, None]], axis=1)  # [N, 3]: a, k, x


def repeated_ngram_tokens(runs, ids, step, sizes, vocab_size):
    """bool `[A, K, V]`: the tokens that would repeat an n-gram of size n = `sizes[a]` if
    hypothesis (a, k) wrote them at `step + 1` (`repeated_ngram_hits`, as a mask).
    `vocab_size` is V, a Python int."""
    hits = repeated_ngram_hits(runs, ids, step, sizes)  # [N, 3]
    return hit_mask(hits, tf.concat([tf.shape(ids)[:2], [vocab_size]], axis=0))


def hit_mask(hits, shape):
    """bool `[A, K, V]` of `shape`, true at the `hits` (int32 `[N, 3]`) only."""
    # uint8, not bool: ScatterNd has no GPU kernel for bool, and its int32 kernel keeps
    # the tensors in host memory. A byte per slot, as the bool mask.
    return tf.scatter_nd(hits, tf.ones_like(hits[:, 0], tf.uint8), shape) > 0


def steered_tokens(allowed, steering, runs, ids, step, *, end_id):
    """bool `[A, K, V]`: the tokens each hypothesis may write at `step + 1` under its
    sentence's `steering`: `allowed` (bool `[A, V]`) with the prefix forced
    (`forced_prefix`) and the repeated n-grams banned (`repeated_ngram_hits`, from
    `runs` and `ids`, int32 `[A, K, L + 1]`). A forced token and the end token are never
    banned: forcing wins, and a hypothesis can always end (the end token is in no live
    hypothesis anyway, so no ban could name it). Where no sentence left bans n-grams
    (`uses_ngram_bans`), the bans are not looked for at all."""
    allowed, forcing = forced_prefix(allowed, steering, step)  # [A, V], [A]
    shape = tf.concat([tf.shape(ids)[:2], [allowed.shape[1]]], axis=0)  # [3]: A, K, V

    def with_bans():
        hits = repeated_ngram_hits(runs, ids, step, steering.no_repeat_ngram_size)  # [N, 3]
        hits = tf.boolean_mask(hits, ~tf.gather(forcing, hits[:, 0]) & (hits[:, 2] != end_id))
        return allowed[:, None, :] & ~hit_mask(hits, shape)  # [A, K, V]

    # The broadcast in its own branch: outside the cond it would run even where bans apply.
    return tf.cond(
        uses_ngram_bans(steering), with_bans, lambda: tf.broadcast_to(allowed[:, None, :], shape)
    )  # [A, K, V]


def uses_ngram_bans(steering):
    """bool scalar: whether any sentence bans repeated n-grams. Sentences only leave a
    search, so once false it stays false, and the runs need no more updates."""
    return tf.reduce_any(steering.no_repeat_ngram_size > 0)
