"""Export a trained model as a TensorFlow Serving SavedModel that translates raw strings.

    python export.py --model-dir runs/tiny-multi30k-en-de       # -> saved_models/translator/1/
    python export.py --model-dir DIR --average-last 5           # average the newest 5 checkpoints
    python export.py --model-dir runs/a --ensemble runs/b       # one SavedModel, both models as an ensemble

The SavedModel holds the tokenizer, the model, beam search and the detokenizer; every
signature takes raw strings. Signatures (batch B, beam K):

    serving_default         inputs string [B] -> translations string [B], scores float32 [B]
    nbest                   inputs string [B] -> translations string [B, K], scores float32 [B, K]
    greedy                  inputs string [B] -> translations string [B], scores float32 [B]
    translate_with_options  inputs string [B], alpha float32 [B], max_extra_length int32 [B]
                            -> translations string [B], scores float32 [B]
    score                   inputs string [B], targets string [B] -> log_prob float32 [B],
                            token_log_probs float32 [B, T], target_lengths int32 [B],
                            truncated bool [B]  (forced decoding: app/decoding/forced.py)
    sample                  inputs string [B], seed int64 [B], top_k int32 [B], top_p float32 [B],
                            temperature float32 [B], max_extra_length int32 [B]
                            -> translations string [B], scores float32 [B]  (app/decoding/sampling.py)
    constrained             inputs string [B], prefixes string [B], constraints string [B],
                            no_repeat_ngram_size int32 [B], alpha float32 [B],
                            max_extra_length int32 [B] -> translations string [B],
                            scores float32 [B], constraints_met bool [B]
                            (app/decoding/steering.py, constrained_beam_search.py)
    align                   inputs string [B] -> translations string [B], scores float32 [B],
                            alignments string [B]  (app/decoding/alignment.py)

Every input is a vector `[B]`, checked when the graph runs (TF Serving does not check a
request's shapes): a scalar or a `[B, N]` tensor is refused, naming its shape.

`constrained` steers the search, per sentence: `prefixes` is forced first ("" for none),
`constraints` holds target phrases separated by tabs that the translation must contain
("" for none), and no n-gram of `no_repeat_ngram_size` tokens may occur twice (0: off).
With none of them it is `translate_with_options`, token for token.

An ensemble's SavedModel (`Translator`'s `ensemble`, app/export/ensemble.py) has the same
signatures: each decodes and scores with the mean of the members' distributions
(app/decoding/ensemble.py), sources cut to the smallest member's positions.

`align` translates as `serving_default` does, the same search, and links the words of
each input (runs of characters that are not White_Space, data/words.py) to those of its
translation: Pharaoh lines, `i-j` for source word i and target word j from 0, "" for a
blank input. One teacher-forced pass over the translation as the tokenizer spells it
reads one head of the decoder's cross-attention (`Translator.alignment_head`;
export.py's --alignment-head); the search itself carries no attention.

`translate_with_options` takes the decoding settings per instance, so TF Serving's row
format ({"instances": [{"inputs": ..., "alpha": ...}]}) can carry them, and requests with
different settings may share one batch (server-side batching merges them freely).

Input longer than the model's position table is truncated to fit (its first
`max_length - 1` subwords, then the end token); outputs stop at source length + the
extra length, within the table. TF Serving cannot warn a client per sentence, so the
SavedModel also holds `source_lengths` (not a signature), with which `app.evaluate`
names the sentences of a test set that were cut. Empty and whitespace-only strings
decode from the end token alone, like any other input. Scores are length-normalized
log-probabilities (see app/decoding/beam_search.py).

Atomic: the export is written to a hidden temporary directory beside the versions, its
ops are checked against those TensorFlow Serving registers, and only then is it renamed
to its version number. TF Serving ignores non-numeric directories, so it never sees a
half-written version; an existing version is never overwritten.

Warm: `assets.extra/tf_serving_warmup_requests` holds one request per signature
(app/export/warmup_requests.py), which TF Serving and the local server run as they load
the version (app/serving/warmup.py), so that no client waits seconds for a signature's
first call.
"""

import contextlib
import json
import os
import re
import shutil
import time
import typing

import tensorflow as tf

from app.export.locate import DEFAULT_EXPORT_BASE
from app.decoding.alignment import alignment_weights, pharaoh, word_links
from app.decoding.beam_search import length_penalty
from app.decoding.config import DecodingConfig, chosen_alignment_head
from app.decoding.ensemble import ensemble_of
from app.decoding.forced import forced_log_probs, target_ids
from app.decoding.constrained_beam_search import MAX_PHRASES, padded_phrases
from app.decoding.model_search import (
    checked_alpha, checked_request, constrained_ids, greedy_ids, sample_ids, translate_ids,
)
from app.decoding.steering import Steering, padded_prefixes
from app.decoding.truncation import subwords_kept, truncated_sources
from app.model_dir import checkpoints
from app.export.export_info import EXPORT_INFO  # beside saved_model.pb: export_metadata()
from app.export.warmup_requests import warmup_requests
from app.model.config import ModelConfig
from app.model.transformer import Transformer, build_transformer
from app.model_dir.settings import load_settings
from app.serving.warmup import write_warmup_requests
from data.tokenizer import MODEL_FILENAME, SubwordTokenizer, piece_words, word_counts

# Ops that are registered in stock TensorFlow but call back into Python, which a
# TensorFlow Serving process does not have.
PYTHON_OPS = {"PyFunc", "PyFuncStateless", "EagerPyFunc"}
# XLA's ops (XlaDynamicUpdateSlice, ...) run outside a compiled cluster only through
# XLA's on-demand compiler, which TF Serving builds may lack ("Could not find compiler
# for platform", tensorflow/serving#2217): an export must not contain them.
XLA_OP_PREFIX = "Xla"


class ExportError(RuntimeError):
    pass


def one_per_sentence(tensor):
    """`tensor`, checked when the graph runs to be a vector `[B]`.

    TF Serving does not check a request's shapes against the signature
    (tensorflow/serving#1436): unchecked, a string `[B, N]` came back flattened to
    `[B * N]` translations, and a scalar alpha failed deep in the graph. Now either is
    refused: "Shape of tensor alpha [] is not compatible with expected shape [?]".
    """
    return tf.ensure_shape(tensor, [None])


class Translator(tf.Module):
    """Raw strings to raw strings: tokenize, encode, beam search, detokenize.

    Args:
        model: a model built by `build_transformer`, with its trained weights.
        model_config: its `ModelConfig`.
        tokenizer: the run's `SubwordTokenizer`.
        decoding: the settings of `serving_default` and `nbest`.
        ensemble: more members, `(model, model_config)` pairs of the same vocabulary and
            tokenizer (app/export/ensemble.py checks them), decoded with `model` as one
            ensemble by every signature; () for the model alone, decoded as ever.
        alignment_head: the `AlignmentHead` of `model` that `align` reads (an ensemble's
            first member is read), or None: `chosen_alignment_head`'s default. A head
            `model` lacks raises a ValueError naming it.
    """

    def __init__(self, model, model_config, tokenizer, decoding=DecodingConfig(), ensemble=(), alignment_head=None):
        super().__init__(name="translator")
        self.tokenizer = tokenizer
        members = [(model, model_config), *ensemble]
        # The variables the traced functions read, tracked so the SavedModel stores them.
        # (The Keras models themselves are not attached: only their variables need saving.)
        self.model_variables = [weight.value for member, _ in members for weight in member.weights]
        transformers = [Transformer(member, config) for member, config in members]
        # One model, or the ensemble every signature decodes in its place.
        self._transformer = ensemble_of(transformers)
        # The pre-softmax projection laid out for decoding ([D, V]), kept rather than
        # transposed from the shared embedding at every call (a copy of V x D weights:
        # `Transformer.output_kernel` says why); an ensemble's, a list of one per member.
        kernels = [tf.Variable(t.output_kernel(), trainable=False, name="output_kernel") for t in transformers]
        self.output_kernel = kernels[0] if len(kernels) == 1 else kernels
        max_length = self._transformer.config.max_length  # an ensemble's: its members' smallest
        # Refused here rather than when `serve` is first traced, mid-export.
        checked_alpha(decoding.alpha, max_length)
        self._decoding = decoding
        self._max_source_length = max_length
        self._alignment_head = chosen_alignment_head(model_config, alignment_head)

    @property
    def transformer(self):
        """The model's decoding view (`app.model.transformer.Transformer`, or an ensemble's
        `app.decoding.ensemble.Ensemble`), for tools that need more than strings
        (`app.pictures` reads a model's attention weights)."""
        return self._transformer

    @property
    def decoding(self):
        """The `DecodingConfig` of `serving_default`, `nbest` and `greedy`, fixed when the
        translator is made (their graphs hold it as constants); `translate_with_options`
        takes only its beam size and parallel searches. export.py, which chooses alpha on
        validation with `translate_with_options`, exports a second `Translator` over the
        same `TrainedModel` that holds the alpha chosen."""
        return self._decoding

    @property
    def alignment_head(self):
        """The `AlignmentHead` `align` reads, resolved (its layer from 0), of the first model."""
        return self._alignment_head

    def source_ids(self, inputs):
        """string `[B]` -> int32 `[B, S]`: subwords, truncated to fit, then the end token."""
        return truncated_sources(self.tokenizer.tokenize(inputs), self._max_source_length, self.tokenizer.end_id)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def source_lengths(self, inputs):
        """string `[B]` -> `{"lengths": int32 [B], "limit": int32 []}`: each input's subwords
        with the end token, before truncation, and the most the model reads. An input
        whose length exceeds the limit is translated from its first `limit - 1` subwords."""
        lengths = tf.cast(self.tokenizer.tokenize(inputs).row_lengths(), tf.int32) + 1
        return {"lengths": lengths, "limit": tf.constant(self._max_source_length, tf.int32)}

    def translate(self, inputs, beam_size, alpha, max_extra_length, best_only=False):
        """`(translations string [B, K], scores float32 [B, K])`, best first; with
        `best_only`, the best of each sentence only, `[B]` each: the search stops as soon
        as that one is final (`beam_search`'s `final_results=1`), the same translation in
        fewer steps, and only it is detokenized."""
        inputs = one_per_sentence(inputs)
        ids, scores = translate_ids(
            self._transformer, self.source_ids(inputs), beam_size, alpha, max_extra_length, self.output_kernel,
            final_results=1 if best_only else beam_size, parallel_searches=self._decoding.parallel_searches,
        )  # [B, K, L], [B, K]
        if best_only:
            return self.tokenizer.detokenize(ids[:, 0]), scores[:, 0]  # [B], [B]
        batch_size = tf.shape(ids)[0]
        texts = self.tokenizer.detokenize(tf.reshape(ids, [batch_size * beam_size, -1]))  # [B * K]
        return tf.reshape(texts, [batch_size, beam_size]), scores

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def serve(self, inputs):
        d = self._decoding
        texts, scores = self.translate(inputs, d.beam_size, d.alpha, d.max_extra_length, best_only=True)
        return {"translations": texts, "scores": scores}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def serve_nbest(self, inputs):
        d = self._decoding
        texts, scores = self.translate(inputs, d.beam_size, d.alpha, d.max_extra_length)
        return {"translations": texts, "scores": scores}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def serve_greedy(self, inputs):
        """Greedy search, the path validation takes during training. Scored as beam
        search scores: the log-prob divided by the length penalty at the export's alpha."""
        inputs = one_per_sentence(inputs)
        ids, log_probs = greedy_ids(
            self._transformer, self.source_ids(inputs), self._decoding.max_extra_length, self.output_kernel,
            self._decoding.parallel_searches,
        )  # [B, L], [B]
        lengths = tf.reduce_sum(tf.cast(ids != 0, tf.int32), axis=1)  # [B]: tokens, end token included
        scores = log_probs / length_penalty(lengths, self._decoding.alpha)
        return {"translations": self.tokenizer.detokenize(ids), "scores": scores}

    @tf.function(
        input_signature=[
            tf.TensorSpec([None], tf.string, name="inputs"),
            tf.TensorSpec([None], tf.float32, name="alpha"),
            tf.TensorSpec([None], tf.int32, name="max_extra_length"),
        ]
    )
    def serve_with_options(self, inputs, alpha, max_extra_length):
        # Per sentence: a batch may mix settings, so TF Serving may batch any requests.
        alpha, extra = checked_request(
            tf.size(inputs), alpha=one_per_sentence(alpha), max_extra_length=one_per_sentence(max_extra_length)
        )
        texts, scores = self.translate(inputs, self._decoding.beam_size, alpha, extra, best_only=True)
        return {"translations": texts, "scores": scores}

    @tf.function(
        input_signature=[
            tf.TensorSpec([None], tf.string, name="inputs"),
            tf.TensorSpec([None], tf.string, name="targets"),
        ]
    )
    def serve_score(self, inputs, targets):
        """Forced decoding of each target given its input (app/decoding/forced.py): natural-log
        log-probs, no length penalty. `target_lengths`: the tokens scored, the end token
        included. `truncated`: the input was cut as for translation, or the target was scored
        on its first `max_length` tokens only (its end token unscored), to fit the positions."""
        inputs, targets = one_per_sentence(inputs), one_per_sentence(targets)
        check = tf.debugging.assert_equal(tf.size(targets), tf.size(inputs), message="one target per input")
        with tf.control_dependencies([check]):
            inputs = tf.identity(inputs)
        ids, target_cut = target_ids(self.tokenizer.tokenize(targets), self._max_source_length)  # [B, T], [B]
        token_log_probs, log_prob = forced_log_probs(self._transformer, self.source_ids(inputs), ids)
        source_cut = self.source_lengths(inputs)["lengths"] > self._max_source_length  # [B]
        return {
            "log_prob": log_prob,
            "token_log_probs": token_log_probs,
            "target_lengths": tf.reduce_sum(tf.cast(ids != 0, tf.int32), axis=1),
            "truncated": source_cut | target_cut,
        }

    @tf.function(
        input_signature=[
            tf.TensorSpec([None], tf.string, name="inputs"),
            tf.TensorSpec([None], tf.int64, name="seed"),
            tf.TensorSpec([None], tf.int32, name="top_k"),
            tf.TensorSpec([None], tf.float32, name="top_p"),
            tf.TensorSpec([None], tf.float32, name="temperature"),
            tf.TensorSpec([None], tf.int32, name="max_extra_length"),
        ]
    )
    def serve_sample(self, inputs, seed, top_k, top_p, temperature, max_extra_length):
        """One random translation per input (top-k / nucleus sampling), reproducible from its
        seed: app/decoding/sampling.py. Scores: the model's log-probability of the output,
        not normalized by length. Settings per instance, as `translate_with_options`'."""
        inputs = one_per_sentence(inputs)
        settings = checked_request(
            tf.size(inputs), seed=one_per_sentence(seed), top_k=one_per_sentence(top_k),
            top_p=one_per_sentence(top_p), temperature=one_per_sentence(temperature),
            max_extra_length=one_per_sentence(max_extra_length),
        )
        ids, scores = sample_ids(self._transformer, self.source_ids(inputs), *settings, self.output_kernel)
        return {"translations": self.tokenizer.detokenize(ids), "scores": scores}

    def word_alignments(self, inputs, targets):
        """Pharaoh lines linking the words of each input to those of its target
        (app/decoding/alignment.py), from one teacher-forced pass over the target.

        Each side is cut as the model reads it: the input as `source_ids` cuts it, the
        target to the model's positions (`app.decoding.forced.target_ids`); a target word
        cut off copies a neighbour's links. The target is read as the tokenizer spells it,
        which may cut a translation into other pieces than the search wrote (of the same
        text): words are the text's, so every link lies within the translation's words
        whatever pieces the search wrote.

        Args:
            inputs, targets: string `[B]` each.

        Returns:
            string `[B]`: `i-j` pairs, i < the input's words, j < the target's; every target
            word has a link where the input has a word; "" for a blank input or target.
        """
        source_ids, ids, source_words, target_words, source_counts, target_counts = self.alignment_inputs(
            inputs, targets
        )
        weights = alignment_weights(self._transformer, source_ids, ids, self._alignment_head)  # [B, T, S]
        links = word_links(weights, source_words, target_words, source_counts, target_counts)  # [B, J, I]
        return pharaoh(links)

    def alignment_inputs(self, inputs, targets):
        """What `word_alignments` reads of each input and target before the model runs, for
        it and for tools that read other heads of the same pass (benchmarks/bench_alignment.py).

        Args:
            inputs, targets: string `[B]` each.

        Returns:
            `(source_ids int32 [B, S], target_ids int32 [B, T], source_words int32 [B, S],
            target_words int32 [B, T], source_counts int32 [B], target_counts int32 [B])`:
            the pieces as the model reads them (`source_ids`; `app.decoding.forced.target_ids`),
            each piece's word (-1 for the end token and padding), and the words of each side,
            as `app.decoding.alignment.alignment_weights` and `word_links` take them.
        """
        tokenizer, max_length = self.tokenizer, self._max_source_length
        source_text, target_text = tokenizer.model_text(inputs), tokenizer.model_text(targets)  # [B], [B]
        source_tokens, begins, ends = tokenizer.tokenize_with_offsets(inputs)  # ragged [B, None] each
        source_ids = truncated_sources(source_tokens, max_length, tokenizer.end_id)  # [B, S]
        # Cut as the pieces are; the end token's column and padding belong to no word.
        source_words = piece_words(source_text, begins, ends)[:, : subwords_kept(max_length)].to_tensor(
            default_value=-1, shape=tf.shape(source_ids)
        )  # [B, S]
        target_tokens, begins, ends = tokenizer.tokenize_with_offsets(targets)  # ragged [B, None] each
        ids, _ = target_ids(target_tokens, max_length)  # [B, T]
        target_words = piece_words(target_text, begins, ends)[:, :max_length].to_tensor(
            default_value=-1, shape=tf.shape(ids)
        )  # [B, T]
        return source_ids, ids, source_words, target_words, word_counts(source_text), word_counts(target_text)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def serve_align(self, inputs):
        """`serving_default`'s translations and scores, the same search, and each input's
        word alignment with its translation (`word_alignments`)."""
        inputs = one_per_sentence(inputs)
        d = self._decoding
        texts, scores = self.translate(inputs, d.beam_size, d.alpha, d.max_extra_length, best_only=True)
        return {"translations": texts, "scores": scores, "alignments": self.word_alignments(inputs, texts)}

    @tf.function(
        input_signature=[
            tf.TensorSpec([None], tf.string, name="inputs"),
            tf.TensorSpec([None], tf.string, name="targets"),
        ]
    )
    def align_targets(self, inputs, targets):
        """Given translations aligned as `align` aligns its own: `{"alignments": string [B]}`
        (`word_alignments`), for alignment error rates against reference alignments. Saved
        in the SavedModel, not a signature."""
        inputs, targets = one_per_sentence(inputs), one_per_sentence(targets)
        check = tf.debugging.assert_equal(tf.size(targets), tf.size(inputs), message="one target per input")
        with tf.control_dependencies([check]):
            inputs = tf.identity(inputs)
        return {"alignments": self.word_alignments(inputs, targets)}

    def prefix_ids(self, prefixes):
        """string `[B]` -> `(prefix int32 [B, P], lengths int32 [B])`, P >= 1: each target
        prefix's subwords as the tokenizer spells the text (lowercased for a lowercased
        model), no end token, cut to `max_length - 1` so that the end token still fits."""
        tokens = self.tokenizer.tokenize(prefixes)  # ragged int32 [B, None]
        return padded_prefixes(tokens[:, : self._max_source_length - 1])

    def phrase_ids(self, constraints):
        """string `[B]` (phrases separated by tabs) -> `(phrases int32 [B, C, P], lengths
        int32 [B, C])`, C, P >= 1, as `constrained_ids` takes them.

        Each phrase is tokenized on its own, so it starts with the tokenizer's word marker:
        it matches whole words only, never the inside of one. An empty or blank phrase
        (a trailing tab, two tabs in a row) has no tokens and is no constraint. A phrase
        is cut to `max_length - 1` tokens, and a sentence may carry at most `MAX_PHRASES`
        (the search's work grows with the square of their number): more is refused.
        """
        phrases = tf.strings.split(constraints, sep="\t")  # ragged string [B, None]
        check = tf.debugging.assert_less_equal(
            tf.cast(phrases.row_lengths(), tf.int32), MAX_PHRASES,
            message=f"constraints: at most {MAX_PHRASES} phrases (tab-separated) per input",
        )
        with tf.control_dependencies([check]):
            flat = tf.strings.strip(phrases.flat_values)  # [phrases in the batch]
        tokens = self.tokenizer.tokenize(flat)[:, : self._max_source_length - 1]  # ragged [n, None]
        return padded_phrases(phrases.with_flat_values(tokens))  # [B, C, P], [B, C]

    @tf.function(
        input_signature=[
            tf.TensorSpec([None], tf.string, name="inputs"),
            tf.TensorSpec([None], tf.string, name="prefixes"),
            tf.TensorSpec([None], tf.string, name="constraints"),
            tf.TensorSpec([None], tf.int32, name="no_repeat_ngram_size"),
            tf.TensorSpec([None], tf.float32, name="alpha"),
            tf.TensorSpec([None], tf.int32, name="max_extra_length"),
        ]
    )
    def serve_constrained(self, inputs, prefixes, constraints, no_repeat_ngram_size, alpha, max_extra_length):
        """Beam search steered per sentence (a target prefix, phrases that must appear, no
        repeated n-grams), at the export's beam size. `constraints_met`: the translation
        holds every phrase (true without phrases); where no hypothesis could hold them all
        within the length limit, it is the best translation found, and false.

        A batch with no phrase at all runs `translate_with_options`' search with the
        prefixes and n-gram rule; one with any phrase runs the constrained search for every
        sentence, which gives a sentence without phrases the same translation.
        """
        inputs = one_per_sentence(inputs)
        prefixes, constraints, no_repeat_ngram_size, alpha, extra = checked_request(
            tf.size(inputs), prefixes=one_per_sentence(prefixes), constraints=one_per_sentence(constraints),
            no_repeat_ngram_size=one_per_sentence(no_repeat_ngram_size), alpha=one_per_sentence(alpha),
            max_extra_length=one_per_sentence(max_extra_length),
        )
        source_ids = self.source_ids(inputs)  # [B, S]
        steering = Steering(*self.prefix_ids(prefixes), no_repeat_ngram_size)
        phrases, phrase_lengths = self.phrase_ids(constraints)  # [B, C, P], [B, C]
        d = self._decoding

        def constrained():
            ids, scores, met = constrained_ids(
                self._transformer, source_ids, phrases, phrase_lengths, d.beam_size, alpha=alpha,
                max_extra_length=extra, steering=steering, output_kernel=self.output_kernel, final_results=1,
                parallel_searches=d.parallel_searches,
            )  # [B, K, L], [B, K], [B, K]
            return ids[:, 0], scores[:, 0], met[:, 0]

        def unconstrained():
            ids, scores = translate_ids(
                self._transformer, source_ids, d.beam_size, alpha, extra, self.output_kernel, final_results=1,
                parallel_searches=d.parallel_searches, steering=steering,
            )  # [B, K, L], [B, K]
            return ids[:, 0], scores[:, 0], tf.ones_like(scores[:, 0], tf.bool)

        # The constrained search's candidates cost more a step: only batches that need it pay.
        ids, scores, met = tf.cond(tf.reduce_any(phrase_lengths > 0), constrained, unconstrained)
        return {"translations": self.tokenizer.detokenize(ids), "scores": scores, "constraints_met": met}

    def signatures(self):
        """`{signature name: tf.function}`, each with its input signature, untraced.

        `tf.saved_model.save` traces them itself: a concrete function traced before the
        save is traced again inside it (the save's context is part of the trace's cache
        key), and each trace of the beam-search signatures costs seconds."""
        return {
            "serving_default": self.serve,
            "nbest": self.serve_nbest,
            "greedy": self.serve_greedy,
            "translate_with_options": self.serve_with_options,
            "score": self.serve_score,
            "sample": self.serve_sample,
            "constrained": self.serve_constrained,
            "align": self.serve_align,
        }

    def concrete_signatures(self):
        """`{signature name: concrete function}`, as the SavedModel holds them."""
        return {name: function.get_concrete_function() for name, function in self.signatures().items()}


def _checkpoint_path(model_dir, checkpoint, kept):
    """The checkpoint `--checkpoint` names: a path (the prefix before `.index`), or the bare
    name of one the run keeps, such as `ckpt-16000`, as the export's own log writes it."""
    if tf.io.gfile.exists(checkpoint + ".index"):
        return checkpoint
    by_name = {os.path.basename(path): path for path in kept}
    if checkpoint in by_name:
        return by_name[checkpoint]
    names = ", ".join(by_name) or "none"
    raise ExportError(
        f"no checkpoint {checkpoint!r}: give 'best', 'latest', a checkpoint path (without .index) "
        f"or the name of one {model_dir} keeps ({names})"
    )


class TrainedModel(typing.NamedTuple):
    """A run's model with the weights export reads, and its tokenizer (`load_trained`):
    loaded once, for as many `Translator`s as there are ways to decode."""

    # Built by `build_transformer`, holding the weights.
    model: typing.Any
    config: ModelConfig
    tokenizer: SubwordTokenizer
    # Which weights: a checkpoint's path, or "average of ckpt-3, ckpt-4".
    weights: str
    # More members, each a `TrainedModel` of the same subword model, decoded with this one
    # as one ensemble (app/export/ensemble.py `load_ensemble`); () for none.
    ensemble: tuple = ()
    # The head the run's word alignments read unless told another: the one a guided
    # alignment run was trained to align with (`chosen_alignment_head` of its settings.json),
    # None for an unguided run (the default head).
    alignment_head: typing.Any = None

    def translator(self, decoding=DecodingConfig(), alignment_head=None):
        """A `Translator` that reads these weights (and the ensemble's), decodes by `decoding`
        and aligns with `alignment_head` (None: this run's, `self.alignment_head`, or
        `chosen_alignment_head`'s default)."""
        members = [(member.model, member.config) for member in self.ensemble]
        head = alignment_head if alignment_head is not None else self.alignment_head
        return Translator(self.model, self.config, self.tokenizer, decoding, ensemble=members, alignment_head=head)


def load_translator(model_dir, checkpoint=None, average_last=None, decoding=DecodingConfig()):
    """A `Translator` for a model directory, and a description of the weights it holds
    (`load_trained`'s arguments)."""
    trained = load_trained(model_dir, checkpoint, average_last)
    return trained.translator(decoding), trained.weights


def load_trained(model_dir, checkpoint=None, average_last=None):
    """The `TrainedModel` of a model directory.

    Args:
        checkpoint: "best" (the best validation BLEU; the newest if none was kept),
            "latest", a checkpoint path, or the name of a kept checkpoint ("ckpt-16000").
        average_last: average the newest K kept checkpoints instead; 0: do not.
        With neither, the run's own choice (`TrainConfig.average_last` in its
        settings.json): the average of its newest K checkpoints, as many as were kept if
        fewer, or "best" where the run names no K.
    """
    if average_last is not None and average_last < 0:
        raise ExportError(f"--average-last must be a number of checkpoints, 0 for none; got {average_last}")
    if checkpoint is not None and average_last:
        raise ExportError(f"give --checkpoint ({checkpoint}) or --average-last ({average_last}), not both")
    model_config, data_config, train_settings = load_settings(model_dir)
    vocabulary = os.path.join(model_dir, MODEL_FILENAME)
    if not os.path.exists(vocabulary):
        raise ExportError(f"{model_dir} has no vocabulary file {MODEL_FILENAME}")
    tokenizer = SubwordTokenizer.load(vocabulary, lowercase=data_config.lowercase)
    model = build_transformer(model_config)
    kept = checkpoints.checkpoint_paths(model_dir)
    if checkpoint is None and average_last is None:
        # A run its time budget ended early may have kept fewer than the K it names.
        average_last = min(train_settings.get("average_last") or 0, len(kept))
    if average_last:
        if average_last > len(kept):
            raise ExportError(
                f"--average-last {average_last} asks for more checkpoints than {model_dir} keeps ({len(kept)})"
            )
        paths = kept[-average_last:]
        checkpoints.average_checkpoints(model, paths)
        # The average of one checkpoint is that checkpoint: named by its path, as below.
        weights = paths[0] if len(paths) == 1 else f"average of {', '.join(os.path.basename(p) for p in paths)}"
    else:
        if checkpoint in (None, "best"):
            path = checkpoints.best_checkpoint(model_dir) or (kept[-1] if kept else None)
        elif checkpoint == "latest":
            path = kept[-1] if kept else None
        else:
            path = _checkpoint_path(model_dir, checkpoint, kept)
        if not path:
            raise ExportError(f"{model_dir} has no checkpoint yet; train first")
        checkpoints.restore_weights(model, path)
        weights = path
    # A guided alignment run aligns with the head it was trained on.
    guided = train_settings.get("guided_alignment_head") is not None
    alignment_head = chosen_alignment_head(model_config, train_settings=train_settings) if guided else None
    return TrainedModel(model, model_config, tokenizer, weights, alignment_head=alignment_head)


def export_metadata(model_dir, weights, decoding):
    """What `export_info.json` records beside a SavedModel: where its weights came from,
    how it decodes, and the data it was trained on, so `python -m app.evaluate
    --saved-model DIR --split NAME` knows the dataset and the language pair."""
    _, data_config, _ = load_settings(model_dir)
    return {
        "model_dir": os.path.abspath(model_dir),
        "weights": weights,
        "beam_size": decoding.beam_size,
        "alpha": decoding.alpha,
        "max_extra_length": decoding.max_extra_length,
        "parallel_searches": decoding.parallel_searches,
        "dataset": data_config.dataset,
        "source_lang": data_config.source_lang,
        "target_lang": data_config.target_lang,
        # Whether the model reads and writes lowercased text (trained with --lowercase).
        "lowercase": data_config.lowercase,
    }


def next_version(base):
    """One more than the largest integer version under `base` (1 if there is none)."""
    if not os.path.isdir(base):
        return 1
    versions = [int(name) for name in os.listdir(base) if re.fullmatch(r"\d+", name)]
    return max(versions, default=0) + 1


def check_export_base(base):
    """ExportError unless `base` is a directory of versions or can become one."""
    if os.path.exists(base) and not os.path.isdir(base):
        raise ExportError(f"{base} is a file, not a directory of versions; give another --output")


@contextlib.contextmanager
def new_version(base, version=None):
    """Writes a version atomically: yields `(temporary directory, final path)`, and renames
    the first (not yet created) to the second if the block succeeds; removes it otherwise.

    The version defaults to the next free one; an existing version is never overwritten.
    TF Serving ignores the hidden temporary name, so it never sees a half-written version.
    """
    version = next_version(base) if version is None else version
    if not isinstance(version, int) or version < 1:
        raise ExportError(f"a version must be a positive integer, got {version!r}")
    final = os.path.join(base, str(version))
    check_export_base(base)
    if os.path.exists(final):
        raise ExportError(f"{final} exists; versions are never overwritten (choose another --version)")
    os.makedirs(base, exist_ok=True)
    temporary = os.path.join(base, f".tmp-{version}-{os.getpid()}")
    try:
        yield temporary, final
        os.rename(temporary, final)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


def export(translator, base=DEFAULT_EXPORT_BASE, version=None, metadata=None, log=None, warmup_signatures=None):
    """Writes `translator` to `base/<version>/` atomically; returns that path.

    `log`: called with a line as each slow part starts (tracing and writing the
    signatures, then checking their ops), or None. `warmup_signatures`: the signatures the
    version's warm-up requests call as a server loads it (app/export/warmup_requests.py;
    None: every one, (): no warm-up file).
    """
    log = log or (lambda line: None)
    signatures = translator.signatures()
    try:  # before the slow part: a name that is no signature
        requests = warmup_requests(signatures, warmup_signatures)
    except ValueError as error:
        raise ExportError(str(error)) from None
    with new_version(base, version) as (temporary, final):
        log(f"writing the SavedModel to {final}: tracing its signatures, then saving")
        started = time.monotonic()
        # Without the layers' custom gradients (fused layer norm, dense): serving never
        # differentiates, and tracing each one's gradient function took a third of the save.
        options = tf.saved_model.SaveOptions(experimental_custom_gradients=False)
        tf.saved_model.save(translator, temporary, signatures=signatures, options=options)
        with open(os.path.join(temporary, EXPORT_INFO), "w") as f:
            json.dump(metadata or {}, f, indent=2)
        if requests:
            write_warmup_requests(temporary, requests)
        seconds = time.monotonic() - started
        log(f"checking that TensorFlow Serving registers every op of the graph (written in {seconds:.1f} s)")
        unsupported = unsupported_serving_ops(temporary)
        if unsupported:
            raise ExportError(
                "the exported graph uses ops that TensorFlow Serving does not register: "
                + ", ".join(sorted(unsupported))
            )
    return final


def _read_saved_model(export_dir):
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel()
    with open(os.path.join(export_dir, "saved_model.pb"), "rb") as f:
        saved_model.ParseFromString(f.read())
    return saved_model


def graph_ops(export_dir):
    """`(op types, library function names)` over a SavedModel's graphs and functions."""
    ops, functions = set(), set()
    for meta_graph in _read_saved_model(export_dir).meta_graphs:
        ops.update(node.op for node in meta_graph.graph_def.node)
        for function in meta_graph.graph_def.library.function:
            functions.add(function.signature.name)
            ops.update(node.op for node in function.node_def)
    return ops, functions


def unsupported_serving_ops(export_dir):
    """Ops of the export that stock TF Serving (TensorFlow core + TF-Text) lacks.

    This process has imported TensorFlow and TF-Text and nothing else that registers ops,
    so "registered here" is what TF Serving of the same version registers, less the ops
    that call into Python and XLA's ops. Calls of the library's own functions are not ops.
    """
    import tensorflow_text  # noqa: F401  (registers TF-Text's ops, as TF Serving does)
    from tensorflow.python.framework import op_def_registry

    ops, functions = graph_ops(export_dir)
    return {
        op
        for op in ops - functions
        if op in PYTHON_OPS or op.startswith(XLA_OP_PREFIX) or op_def_registry.get(op) is None
    }
