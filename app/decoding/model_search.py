"""From the model to a search: translate a batch of source ids with the key/value cache.

    transformer = Transformer(model, config)
    ids, scores = translate_ids(transformer, source_ids, beam_size=4, alpha=0.6)  # [B, K, L], [B, K]
    ids, scores = greedy_ids(transformer, source_ids)                            # [B, L], [B]
    ids, scores = sample_ids(transformer, source_ids, seeds, top_k=10)            # [B, L], [B]
    steering = batch_steering(batch_size, prefix=prefix, prefix_lengths=lengths, no_repeat_ngram_size=3)
    ids, scores = translate_ids(transformer, source_ids, steering=steering)      # any of them, steered
    ids, scores, met = constrained_ids(transformer, source_ids, phrases, phrase_lengths)  # [B, K, L], [B, K], [B, K]

Each encodes the source once, projects the memory's cross-attention keys and values
once per sentence, and runs a strategy (app/decoding/beam_search.py,
constrained_beam_search.py, greedy.py, sampling.py) in the one loop of
app/decoding/search.py over the incremental decoder (incremental.py). `search_model`
does it for any strategy. They run eagerly or inside a `tf.function` (the export's
signatures). Settings such as `alpha` and `max_extra_length` may be tensors chosen per
request, even per sentence (`checked_request` checks a request's), and so may a
`steering.Steering` (a target prefix, no repeated n-grams) and a constrained search's
phrases; `beam_size` fixes the shapes of every loop tensor, so it is a Python int, one
traced function per beam size.

Each takes an ensemble where it takes a model (app/decoding/ensemble.py):

    ids, scores = translate_ids(ensemble_of([transformer_a, transformer_b]), source_ids)

Dimension names: B batch, S source length, K beam size, L the most output tokens.
"""

import numpy as np
import tensorflow as tf

from app.decoding.beam_search import BeamSearch, BeamSettings, largest_alpha
from app.decoding.config import RULES, DecodingConfig, check
from app.decoding.constrained_beam_search import ConstrainedBeamSearch, ConstrainedSettings, checked_phrases
from app.decoding.ensemble import Ensemble, EnsembleDecoder
from app.decoding.greedy import GreedySearch
from app.decoding.incremental import IncrementalDecoder
from app.decoding.sampling import SamplingSearch, SamplingSettings
from app.decoding.search import SentenceSettings, per_sentence_setting, search
from app.decoding.steering import broadcast_steering
from app.model.transformer import Transformer
from layers.special_tokens import PAD_ID, START_ID

# What a search decodes: one model, or an ensemble decoded as one (app/decoding/ensemble.py).
Model = Transformer | Ensemble


def make_symbols_to_logits(decoder: IncrementalDecoder):
    """The `symbols_to_logits_fn` of `search.search` for the model's incremental decoder.

    The search's cache is the self-attention cache, one per hypothesis: it holds every
    earlier position, so only the newest token `ids[:, step]` is fed to the decoder. The
    memory's keys and values are the search's `sentence_cache`, one per sentence: all
    hypotheses of a sentence read them alike, so they are never tiled over them nor
    reordered with them.
    """

    def symbols_to_logits(ids, step, self_cache, memory):
        return decoder.step(ids[:, step], step, self_cache, memory)  # [N, V], cache

    return symbols_to_logits


def encoded_decoder(model, source_ids, output_kernel=None):
    """The source encoded and the step-by-step decoder of `model`: the one place that tells
    a `Transformer` from an `Ensemble`.

    Args:
        model: a `Transformer`, or an `ensemble.Ensemble`.
        source_ids: int32 `[B, S]`, 0 = padding.
        output_kernel: a Transformer's `[D, V]` (`search_model`'s), an Ensemble's list of
            one per member, or None.

    Returns:
        `(decoder, memory, memory_mask)`: an `IncrementalDecoder` (`EnsembleDecoder`), and
        what its `memory` takes: the encoder's `[B, S, D]` and bool `[B, 1, S]` (lists of
        one per member).
    """
    memory, memory_mask = model.encode(source_ids, training=False)  # [B, S, D], [B, 1, S]
    if isinstance(model, Ensemble):
        return EnsembleDecoder(model, output_kernel), memory, memory_mask
    return IncrementalDecoder(model, output_kernel), memory, memory_mask


def output_lengths(transformer: Model, source_ids, max_extra_length, added_lengths=None):
    """The most output tokens of each sentence, end token included: int32 `[B]`.

    Its source length + `max_extra_length` (+ `added_lengths`), and never more than the
    model's `max_length` positions: decoding position t reads positional encoding t, and
    a learned table has no row past its end (on a GPU, reading one gives zeros rather
    than an error).

    Args:
        source_ids: int32 `[B, S]`, 0 = padding.
        max_extra_length: an int, or int32 of shape [] or `[B]`.
        added_lengths: int32 `[B]` or None: tokens each sentence is given beyond its
            extra length, such as its target prefix's (`steering.Steering`).
    """
    source_lengths = tf.reduce_sum(tf.cast(source_ids != PAD_ID, tf.int32), axis=1)  # [B]
    # The extra lengths are capped first, so that a huge one cannot overflow int32.
    model_max_length = transformer.config.max_length
    max_extra_length = tf.minimum(tf.cast(max_extra_length, tf.int32), model_max_length)
    if added_lengths is not None:
        max_extra_length += tf.minimum(tf.cast(added_lengths, tf.int32), model_max_length)
    return tf.minimum(source_lengths + max_extra_length, model_max_length)  # [B]


def checked_alpha(alpha, max_length):
    """`alpha`, refused if it is larger than `largest_alpha(max_length)`.

    Past that limit the length penalty of the longest outputs the model can write
    overflows float32 and beam search ranks them by their order. A value known when the
    graph is built (a Python or NumPy number, a constant) is refused at once with a
    ValueError; one fed at run time (a serving request's alpha) by an assertion when the
    graph runs (InvalidArgumentError), which both messages name.

    Args:
        alpha: a float, or float32 of shape [] or `[B]`.
        max_length: the model's positions, which bound every output's length.
    """
    limit = largest_alpha(max_length)
    message = (
        f"alpha must be at most {limit} for a model of {max_length} positions: beyond it the length penalty "
        f"((5 + length) / 6) ** alpha of its longest outputs overflows float32"
    )
    known = tf.get_static_value(alpha) if tf.is_tensor(alpha) else alpha
    if known is not None:
        largest = float(np.max(np.asarray(known, np.float64), initial=-np.inf))  # -inf: no sentence
        if largest > limit:
            raise ValueError(f"{message}; got {largest:g}")
        return alpha
    assertion = tf.debugging.assert_less_equal(tf.cast(alpha, tf.float32), limit, message=message)
    with tf.control_dependencies([assertion]):
        return tf.identity(alpha)


def checked_request(batch_size, **settings):
    """A request's decoding settings, each a vector `[B]` a signature received, checked when
    the graph runs: TF Serving passes a request's values on unchecked. One value per input,
    each within the rules of its setting (`config.RULES`); an assertion
    (InvalidArgumentError) names the setting and its values. (alpha's limit for the model
    is `checked_alpha`'s, where alpha meets the model.)

    Args:
        batch_size: int32 scalar, B.
        settings: name -> tensor `[B]`, such as `alpha=`, `max_extra_length=`, `seed=`.

    Returns:
        the settings, in the order given, once checked.
    """
    # One after the other, so that the first broken rule is the one named: a NaN alpha
    # breaks "must not be negative" too, but is named as not finite.
    checks = []
    for name, values in settings.items():
        with tf.control_dependencies(checks[-1:]):
            checks.append(tf.debugging.assert_equal(tf.size(values), batch_size, message=f"one {name} per input"))
    for name, values in settings.items():
        for rule in RULES.get(name, ()):
            with tf.control_dependencies(checks[-1:]):
                checks.append(_assertion(name, rule, values))
    with tf.control_dependencies(checks[-1:]):
        return tuple(tf.identity(values) for values in settings.values())


def _assertion(name, rule, values):
    """The graph's check that `values` meet `rule`, in the words exports have always used."""
    if rule.graph_assertion:
        return getattr(tf.debugging, rule.graph_assertion)(values, message=f"{name} {rule.phrase}")
    return tf.debugging.Assert(tf.reduce_all(rule.holds(values)), [f"{name} {rule.phrase}, got", values])


def search_model(
    transformer: Model, source_ids, strategy, settings, max_extra_length, *, output_kernel=None,
    parallel_searches=1, steering=None, added_lengths=None,
):
    """Runs `strategy` over the model for a batch of sources: `search.search`'s results,
    `(ids int32 [B, ..., L], scores float32 [B, ...], *more)`.

    With `parallel_searches` > 1 the sentences are split into that many searches, each
    its own `tf.while_loop` over a slice of the batch. In a graph (a `tf.function`, an
    export) TensorFlow's executor runs them side by side on its inter-op threads, so one
    call uses several cores where the step's small ops gain little from intra-op
    threads; eagerly they run one after the other. Every sentence is searched alone
    either way: the outputs are the same, and the scores agree to float32 rounding (the
    products run over fewer rows).

    Args:
        transformer: the model's decoding view: a `Transformer`, or an `Ensemble` of
            several decoded as one (`encoded_decoder`).
        source_ids: int32 `[B, S]`, 0 = padding.
        strategy: a `search.Strategy`.
        settings: the strategy's settings (`search.SentenceSettings.strategy`), each a
            scalar or `[B, ...]`; () for none.
        max_extra_length: a sentence may have at most (source length + this) output
            tokens, end token included, and never more than the model's `max_length`
            positions: an int, or int32 of shape [] or `[B]`.
        output_kernel: `transformer.output_kernel()`, if the caller keeps it (an export
            holds it as a variable; for an `Ensemble`, a list of one per member); made
            here otherwise.
        parallel_searches: P, how many searches share the batch, a Python int >= 1; the
            first `B % P` take `B // P + 1` sentences, the others `B // P` (none, where
            B < P).
        steering: a `steering.Steering` of the B sentences (scalars for all), or None.
            Each sentence's length limit grows by its prefix length (still capped at
            the model's `max_length`), so a prefix takes none of its extra length;
            each prefix must hold at most `max_length - 1` tokens, so that the end
            token fits.
        added_lengths: int32 `[B]` or None: more tokens each sentence's length limit
            grows by (a constrained search's phrases), capped the same way.
    """
    check("parallel_searches", parallel_searches)
    source_ids = tf.convert_to_tensor(source_ids, tf.int32)  # [B, S]
    batch_size = tf.shape(source_ids)[0]
    decoder, memory, memory_mask = encoded_decoder(transformer, source_ids, output_kernel)
    steered = steering is not None
    if steered:
        steering = broadcast_steering(steering, batch_size)  # [B, P] and [B]: split with the sentences
        added_lengths = steering.prefix_lengths if added_lengths is None else steering.prefix_lengths + added_lengths
    per_sentence = (
        SentenceSettings(
            max_lengths=output_lengths(transformer, source_ids, max_extra_length, added_lengths),  # [B]
            strategy=tf.nest.map_structure(lambda value: per_sentence_setting(value, [batch_size]), settings),
            steering=steering if steered else (),
        ),
        decoder.memory(memory, memory_mask),  # [B, ...] each
    )

    def search_slice(sentences, size):
        sentence_settings, memory = sentences
        return search(
            strategy, make_symbols_to_logits(decoder), tf.fill([size], START_ID), decoder.empty_cache(size),
            transformer.config.vocab_size, max_lengths=sentence_settings.max_lengths,
            settings=sentence_settings.strategy, sentence_cache=memory,
            steering=sentence_settings.steering if steered else None,
        )  # [size, ..., L of this search], [size, ...]

    if parallel_searches == 1:
        return search_slice(per_sentence, batch_size)
    sizes = search_sizes(batch_size, parallel_searches)  # [parallel_searches]
    leaves = [tf.split(leaf, sizes, num=parallel_searches) for leaf in tf.nest.flatten(per_sentence)]
    results = [
        search_slice(tf.nest.pack_sequence_as(per_sentence, [parts[i] for parts in leaves]), sizes[i])
        for i in range(parallel_searches)
    ]
    # Each search pads its outputs to its own longest; the batch's is the longest of all.
    length = tf.reduce_max(tf.stack([tf.shape(ids)[-1] for ids, *_ in results]))

    def padded(ids):
        return tf.pad(ids, [[0, 0]] * (ids.shape.rank - 1) + [[0, length - tf.shape(ids)[-1]]])

    ids = tf.concat([padded(ids) for ids, *_ in results], axis=0)  # [B, ..., L]
    outputs = [tf.concat(parts, axis=0) for parts in zip(*(outputs for _, *outputs in results))]  # [B, ...] each
    return (ids, *outputs)


def translate_ids(
    transformer: Model,
    source_ids,
    beam_size=DecodingConfig.beam_size,
    alpha=DecodingConfig.alpha,
    max_extra_length=DecodingConfig.max_extra_length,
    output_kernel=None,
    final_results=None,
    parallel_searches=1,
    steering=None,
):
    """Translates a batch of token ids with beam search (`BeamSearch`).

    Args:
        transformer, source_ids, max_extra_length, output_kernel, parallel_searches,
            steering: as `search_model` takes them.
        beam_size: K, a Python int.
        alpha: length-penalty exponent: a float, or float32 of shape [] or `[B]` (one
            per sentence).
        final_results: how many of the K results must be final (`BeamSearch`): K by
            default; 1 where only the best is wanted, which then comes in fewer steps.

    Returns:
        `(ids int32 [B, K, L], scores float32 [B, K])`: n-best, best first, each row
        its tokens, the end token, then 0. The score is the sum of log-probs /
        ((5 + length) / 6) ** alpha, length counting the end token.
    """
    # Every setting given as a Python value is refused before anything reads the model.
    strategy = BeamSearch(beam_size, final_results)
    check("parallel_searches", parallel_searches)
    alpha = tf.cast(checked_alpha(alpha, transformer.config.max_length), tf.float32)
    return search_model(
        transformer, source_ids, strategy, BeamSettings(alpha), max_extra_length, output_kernel=output_kernel,
        parallel_searches=parallel_searches, steering=steering,
    )


def constrained_ids(
    transformer: Model,
    source_ids,
    phrases,
    phrase_lengths,
    beam_size=DecodingConfig.beam_size,
    alpha=DecodingConfig.alpha,
    max_extra_length=DecodingConfig.max_extra_length,
    *,
    steering=None,
    output_kernel=None,
    final_results=None,
    parallel_searches=1,
):
    """Translates a batch with lexically constrained beam search (`ConstrainedBeamSearch`):
    each translation holds every one of its sentence's target phrases where it can.

    Each sentence's length limit grows by its phrases' tokens (and its prefix's, steered),
    still capped at the model's `max_length`: a short source with long phrases could not
    hold them otherwise, and a sentence without phrases keeps `translate_ids`'s limit.

    Args:
        transformer, source_ids, max_extra_length, output_kernel, parallel_searches,
            steering: as `search_model` takes them.
        phrases: int32 `[B, C, P]`, C, P >= 1: each sentence's phrases, 0-padded
            (`constrained_beam_search.padded_phrases`); split with the sentences.
        phrase_lengths: int32 `[B, C]`: their tokens; 0 = no phrase in the slot.
        beam_size, alpha, final_results: as `translate_ids` takes them.

    Returns:
        `(ids int32 [B, K, L], scores float32 [B, K], constraints_met bool [B, K])`:
        `translate_ids`'s n-best, those that hold every phrase first, and whether each
        does (`[:, 0]`: the translation's). A sentence without phrases gets
        `translate_ids`'s ids and scores exactly.
    """
    strategy = ConstrainedBeamSearch(beam_size, final_results)
    check("parallel_searches", parallel_searches)
    alpha = tf.cast(checked_alpha(alpha, transformer.config.max_length), tf.float32)
    phrases, phrase_lengths = checked_phrases(phrases, phrase_lengths)  # [B, C, P], [B, C]
    return search_model(
        transformer, source_ids, strategy, ConstrainedSettings(alpha, phrases, phrase_lengths), max_extra_length,
        output_kernel=output_kernel, parallel_searches=parallel_searches, steering=steering,
        added_lengths=tf.reduce_sum(phrase_lengths, axis=1),  # [B]
    )


def greedy_ids(transformer: Model, source_ids, max_extra_length=DecodingConfig.max_extra_length,
               output_kernel=None, parallel_searches=1, steering=None):
    """Translates a batch greedily: the most likely token at each step (`GreedySearch`).
    The arguments are `search_model`'s.

    Returns:
        `(ids int32 [B, L], scores float32 [B])`: each row its tokens, the end token,
        then 0; the sum of the tokens' log-probs, end token included.
    """
    return search_model(
        transformer, source_ids, GreedySearch(), (), max_extra_length, output_kernel=output_kernel,
        parallel_searches=parallel_searches, steering=steering,
    )


def sample_ids(
    transformer: Model,
    source_ids,
    seeds,
    top_k=0,
    top_p=1.0,
    temperature=1.0,
    max_extra_length=DecodingConfig.max_extra_length,
    output_kernel=None,
    steering=None,
):
    """Translates a batch by sampling, one translation per sentence (`SamplingSearch`).

    Args:
        transformer, source_ids, max_extra_length, output_kernel, steering: as
            `search_model` takes them.
        seeds: int64 `[B]` (or a scalar for all): each sentence's random stream.
        top_k: int32, scalar or `[B]`: draw among the k most likely tokens; 0 = all.
        top_p: float32, scalar or `[B]`, in (0, 1]: among the fewest most likely tokens
            whose probability reaches p; 1 = all.
        temperature: float32, scalar or `[B]`, > 0: the logits are divided by it.

    Settings given as Python numbers are checked at once (ValueError); tensors are the
    caller's to check (the `sample` signature checks them).

    Returns:
        `(ids int32 [B, L], scores float32 [B])`: the tokens, each row ending with the
        end token and padded with 0; the score is the sum of the model's log-probs of
        the drawn tokens, end token included, at temperature 1 and before top-k / top-p:
        how likely the model finds the translation, not normalized by length.
    """
    given = dict(top_k=top_k, top_p=top_p, temperature=temperature, max_extra_length=max_extra_length)
    for name, value in given.items():
        if isinstance(value, (int, float)):  # a tensor is the caller's to check (`checked_request`)
            check(name, value)
    settings = SamplingSettings(
        seed=tf.cast(seeds, tf.int64), top_k=tf.cast(top_k, tf.int32), top_p=tf.cast(top_p, tf.float32),
        temperature=tf.cast(temperature, tf.float32),
    )
    return search_model(
        transformer, source_ids, SamplingSearch(), settings, max_extra_length, output_kernel=output_kernel,
        steering=steering,
    )


def search_sizes(batch_size, searches):
    """int32 `[searches]`: `batch_size` sentences dealt out as evenly as can be, the
    larger shares first, e.g. 5 into 2 -> [3, 2], 1 into 2 -> [1, 0]."""
    base, extra = batch_size // searches, batch_size % searches
    return base + tf.cast(tf.range(searches) < extra, tf.int32)
