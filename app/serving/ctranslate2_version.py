"""One CTranslate2 version (written by `python export.py --format ctranslate2`), served
behind the same REST API and signatures as a SavedModel version (`models.LoadedVersion`).

    python -m app.serve --model_base_path saved_models/translator/ctranslate2

    version = CTranslate2Version(1, "saved_models/translator/ctranslate2/1")
    version.run("serving_default", {"inputs": np.array([b"A man."], object)})
    # {"translations": object [B], "scores": float32 [B]}

Signatures as the SavedModel's (app/export/saved_model.py), batch B, beam K:

    serving_default         inputs string [B] -> translations string [B], scores float32 [B]
    nbest                   inputs string [B] -> translations string [B, K], scores float32 [B, K]
    greedy                  inputs string [B] -> translations string [B], scores float32 [B]
    translate_with_options  inputs string [B], alpha float32 [B], max_extra_length int32 [B]
                            -> translations string [B], scores float32 [B]
    constrained             inputs string [B], prefixes string [B], constraints string [B],
                            no_repeat_ngram_size int32 [B], alpha float32 [B],
                            max_extra_length int32 [B]
                            -> translations string [B], scores float32 [B], constraints_met bool [B]
    align                   inputs string [B] -> translations string [B], scores float32 [B],
                            alignments string [B]

(The SavedModel's `sample` and `score` have no CTranslate2 counterpart here.)

The text goes through the export's subwords.model with the `sentencepiece` package,
lowercased first where the run was trained lowercased (data/lowercase.py), truncated to
its first max_length - 1 pieces, then the end token, as the SavedModel does; an empty or
whitespace-only input translates from the end token alone. Each sentence may write at
most its source length + max_extra_length tokens, end token included, and never more
than the model's max_length.

Length penalty. CTranslate2 divides a finished hypothesis's log-probability by
length ** length_penalty (its length without the end token) and ranks candidates by plain
log-probability while searching; the SavedModel divides by GNMT's
((5 + length) / 6) ** alpha, length counting the end token. So CTranslate2 is asked for
its K finished hypotheses with the end token (`length_penalty=1`, from which the plain
log-probability is recovered) and they are ranked here by the SavedModel's formula, per
sentence with its own alpha. With alpha 0 both rank by log-probability: CTranslate2
then stops once its best beam has ended (`length_penalty=0`), as the SavedModel's
search does, and the best translations agree (tests/export/test_ctranslate2.py). With
alpha > 0 the SavedModel keeps searching while a live beam could still beat its worst
finished one, CTranslate2 stops at its first K finished: they may differ.

Calls: CTranslate2 takes one `max_decoding_length`, one length penalty and one
`no_repeat_ngram_size` per call. A batch is decoded in one call per no_repeat_ngram_size
and per kind of alpha (0 or not) among its sentences, so a sentence is decoded as it
would be alone, whatever its neighbours ask. A call is decoded with the largest limit of
its sentences; a sentence whose translation came out longer than its own limit is
decoded again alone (with the others of its limit). With alpha 0 that is the translation
a call at its own limit gives: the search up to that limit is the same, and the
hypotheses it forces to end there score below the best.

`constrained`: what CTranslate2 can steer, the SavedModel's way.
- A target prefix is segmented as a source is (lowercased where the run was), cut to its
  first max_length - 1 pieces so the end token still fits, and forced as translate_batch's
  `target_prefix`; a trailing partial word is forced as its pieces. The sentence's output
  limit grows by the prefix's pieces, still at most max_length. CTranslate2 scores a
  hypothesis from the first token after its prefix; the SavedModel adds the prefix's
  log-probability, undivided by the length penalty (`beam_search.normalized_scores`), so
  the prefix's (`score_batch`) is added to each hypothesis's score before it is ranked.
- `no_repeat_ngram_size` is translate_batch's: no n-gram of that size twice in the output,
  prefix included. CTranslate2 bans a token by its logit, before the softmax, so the
  tokens left share the banned one's probability; the SavedModel masks after it. Where a
  ban applies, the scores here are of that renormalized distribution (never below the
  model's log-probability), and the search may rarely choose otherwise.
- Where the searches differ (alpha 0; tests/export/test_ctranslate2.py pins that these
  are the only ways): right after a prefix, CTranslate2 lets a translation end only where
  the end token is the most likely next token (its guard against short outputs, its
  issue #277), where the SavedModel takes it as any of its 2K candidates; and at an output
  limit the SavedModel forces the end token, where CTranslate2 stops after one more token
  without it. The second holds for every signature; a forced prefix makes it likelier.
- `constraints`: CTranslate2 has no lexical constraints. A sentence with any phrase (tab-
  separated, blank ones ignored as the SavedModel ignores them) is refused with a 400
  that says to serve the SavedModel for them; `constraints_met` is true for every
  sentence, which asked for none.

`align`: `serving_default`'s translations and scores, the same search, and Pharaoh lines
linking each input's words to its translation's, as the SavedModel's `align` links them
(app/export/saved_model.py's `word_alignments`): the translation is segmented as the
export's tokenizer segments it (its canonical pieces, with their byte offsets, which may
differ from the pieces the search wrote), and one batched call forces those pieces as
`target_prefix` with `return_attention`: the attention of the head export_info.json's
`alignment_head` names, which the export made the one CTranslate2 returns
(app/export/ctranslate2.py). Each side is cut as the model reads it; then
data/words.py's `piece_words` and app/decoding/word_links.py, the Python twins of the
graph's rules. The search's own attention is not read: with a batch of several sentences,
CTranslate2 4.8.5's beam search returns another sentence's first-step attention as a
sentence's first row (tests/export/test_ctranslate2.py pins it). A version exported before
CTranslate2 returned that head (no `alignment_head` in export_info.json) has no `align`:
export it again.

Ensembles: a version whose export_info.json records one (`ensemble`) is refused when it
loads: CTranslate2 decodes one model (app/export/ctranslate2.py refuses to export one).

Imports no TensorFlow: CTranslate2's threads ran several times slower beside it.
"""

import json
import math
import os
import re
import typing

import numpy as np

from app.decoding.config import RULES
from app.decoding.truncation import subwords_kept, truncated_source
from app.decoding.word_links import pharaoh_line, word_links
from app.export.export_info import ENSEMBLE, EXPORT_INFO, read_export_info
from app.serving.rest_api import ServingError, TensorSpec, signature_def_json, signature_of_specs
from data.words import piece_words, words
from layers.special_tokens import END_ID, PAD_ID, START_ID

SUBWORDS = "subwords.model"

# As data/tokenizer.py's _NOT_ON_ONE_LINE (RE2 there, Python's re here; a test compares
# them): control characters, DEL and the line and paragraph separators, with the spaces
# beside them, become one space, so one translation stays one line.
_NOT_ON_ONE_LINE = re.compile(" *[\x00-\x1f\x7f-\x9f\u2028\u2029][ \x00-\x1f\x7f-\x9f\u2028\u2029]*")

# The score of a missing hypothesis: the SavedModel's for its empty slots (finite, so
# that a response stays JSON).
EMPTY_SCORE = -1e9

_STRING, _FLOAT, _INT, _BOOL = np.dtype(object), np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.bool_)

# export_info.json's record of the head CTranslate2's attention returns: `align` needs it.
ALIGNMENT_HEAD = "alignment_head"

# The settings a request carries besides its inputs, in the order the SavedModel's
# signatures check them: translate_with_options', and constrained's.
OPTIONS = ("alpha", "max_extra_length")
STEERED_OPTIONS = ("prefixes", "constraints", "no_repeat_ngram_size") + OPTIONS


def gnmt_penalty(length, alpha):
    """GNMT's length penalty ((5 + length) / 6) ** alpha, as the SavedModel's beam search
    divides by it (app/decoding/beam_search.py)."""
    return ((5.0 + length) / 6.0) ** alpha


class Engine:
    """A CTranslate2 translator with the export's tokenizer: strings in, strings out.

    Args:
        path: a CTranslate2 version directory (model.bin, subwords.model, export_info.json).
        compute_type: CTranslate2's ("default": as saved; "int8", "float32", ...).
        intra_threads: threads per translation (0: CTranslate2's default).
    """

    def __init__(self, path, compute_type="default", intra_threads=0):
        try:
            import ctranslate2
        except ImportError:
            raise RuntimeError("CTranslate2 is not installed: pip install -r requirements-ctranslate2.txt") from None
        import sentencepiece

        self.info = read_export_info(path)
        for key in ("max_length", "beam_size", "alpha", "max_extra_length"):
            if key not in self.info:
                raise RuntimeError(f"{os.path.join(path, EXPORT_INFO)} has no {key!r}: export it again")
        if self.info.get(ENSEMBLE):
            raise RuntimeError(
                f"{os.path.join(path, EXPORT_INFO)} records an ensemble ({ENSEMBLE!r}: "
                f"{json.dumps(self.info[ENSEMBLE])}): a CTranslate2 version decodes one model, and cannot "
                "average several models' distributions; serve the ensemble's SavedModel export instead"
            )
        self.max_length = int(self.info["max_length"])
        self.lowercase = bool(self.info.get("lowercase", False))
        self.processor = sentencepiece.SentencePieceProcessor(model_file=os.path.join(path, SUBWORDS))
        self.pieces = [self.processor.id_to_piece(i) for i in range(self.processor.get_piece_size())]
        self.translator = ctranslate2.Translator(
            path, device="cpu", compute_type=compute_type, inter_threads=1, intra_threads=intra_threads,
            files=_model_files(path, self.pieces[PAD_ID]),
        )

    def _model_texts(self, texts):
        """str list [B] -> str list [B]: the texts the vocabulary segments, lowercased where
        the run was trained lowercased (the graph's `SubwordTokenizer.model_text`)."""
        if self.lowercase:
            from data.lowercase import lowercase

            return [lowercase(text) for text in texts]
        return list(texts)

    def _segmented(self, texts):
        """str list [B] -> piece-id lists: each text as the export's tokenizer segments it,
        lowercased first where the run was trained lowercased."""
        return self.processor.encode(self._model_texts(texts), out_type=int)

    def _pieces_and_words(self, texts):
        """str list [B] -> `(pieces, their words, words)` each: the text's pieces as
        `_segmented` cuts it, each piece's word (data/words.py's `piece_words`: -1 for
        none), and how many words the text has."""
        texts = self._model_texts(texts)
        segmented = []
        for text, proto in zip(texts, self.processor.encode(texts, return_type="proto")):
            pieces = proto.pieces
            their_words = piece_words(text, [p.begin for p in pieces], [p.end for p in pieces])
            segmented.append(([self.pieces[p.id] for p in pieces], their_words, len(words(text))))
        return segmented

    def source_pieces(self, texts):
        """str list [B] -> piece lists: each text's pieces, truncated to max_length - 1, then the end piece."""
        rows = self._segmented(texts)
        return [[self.pieces[i] for i in truncated_source(row, self.max_length, END_ID)] for row in rows]

    def prefix_pieces(self, texts):
        """str list [B] -> piece lists: each target prefix's pieces as the SavedModel's
        tokenizer writes them ("" gives none), at most max_length - 1, so that the end
        token still fits after them. A trailing partial word is forced as its pieces."""
        return [[self.pieces[i] for i in row[: subwords_kept(self.max_length)]] for row in self._segmented(texts)]

    def output_limits(self, sources, max_extra_length, prefixes=None):
        """The most output tokens (end token included) of each source, as the SavedModel's
        `output_lengths`: its length + max_extra_length + its target prefix's length
        (`prefixes`, piece lists, or None for none), at most max_length."""
        extra = np.minimum(np.broadcast_to(np.asarray(max_extra_length, np.int64), (len(sources),)), self.max_length)
        added = [0] * len(sources) if prefixes is None else [len(prefix) for prefix in prefixes]
        return [int(min(len(source) + e + a, self.max_length)) for source, e, a in zip(sources, extra, added)]

    def detokenize(self, pieces):
        """One hypothesis's pieces -> its text: up to the end piece, without pad and start."""
        ids = []
        for piece in pieces:
            i = self.processor.piece_to_id(piece)
            if i == END_ID:
                break
            if i not in (PAD_ID, START_ID):
                ids.append(i)
        return _NOT_ON_ONE_LINE.sub(" ", self.processor.decode(ids))

    def forced_attention(self, sources, targets):
        """CTranslate2's attention over given targets, in one call that forces each as its
        `target_prefix`: the head export_info.json's `alignment_head` names.

        Args:
            sources: piece lists, as `source_pieces` gives them.
            targets: piece lists, each at most max_length pieces, without the end piece.

        Returns:
            float32 `[T, S]` per sentence, T its target's pieces and S its source's: row t,
            what the position predicting target piece t attends to.
        """
        if not sources:
            return []
        results = self.translator.translate_batch(
            sources,
            target_prefix=targets,
            beam_size=1,
            max_input_length=0,
            # The prefix counts in the length: decoding ends with the longest target, no
            # position past the model's.
            max_decoding_length=max(len(target) for target in targets),
            min_decoding_length=0,
            return_attention=True,
            end_token=self.pieces[END_ID],
        )
        return [np.asarray(result.attention[0], np.float32)[: len(target)] for result, target in zip(results, targets)]

    def word_alignments(self, texts, translations):
        """Pharaoh lines linking each text's words to its translation's, as the
        SavedModel's `Translator.word_alignments` links them: each side segmented as the
        tokenizer segments it and cut as the model reads it (the source to max_length - 1
        pieces and the end piece, the translation to max_length pieces), the attention of
        one forced call (`forced_attention`), then `word_links`.

        Args:
            texts, translations: str [B] each.

        Returns:
            str [B]: `i-j` pairs, i < the text's words, j < the translation's; "" for a
            blank text or translation.
        """
        kept = subwords_kept(self.max_length)
        sentences = []
        for (source, source_words, source_count), (target, target_words, target_count) in zip(
            self._pieces_and_words(texts), self._pieces_and_words(translations)
        ):
            sentences.append(_Aligned(
                source=truncated_source(source, self.max_length, self.pieces[END_ID]),
                source_words=source_words[:kept] + [-1],  # the end piece belongs to no word
                source_count=source_count,
                target=target[: self.max_length],
                target_words=target_words[: self.max_length],
                target_count=target_count,
            ))
        # Where either side has no word there is no link to find.
        aligned = [i for i, s in enumerate(sentences) if s.source_count and s.target_count]
        attention = self.forced_attention(
            [sentences[i].source for i in aligned], [sentences[i].target for i in aligned]
        )  # [T, S] each
        lines = [""] * len(sentences)
        for i, weights in zip(aligned, attention):
            s = sentences[i]
            lines[i] = pharaoh_line(word_links(weights, s.source_words, s.target_words, s.source_count, s.target_count))
        return lines

    def _decode(self, sentences, indices, limit, call):
        """CTranslate2's finished hypotheses of the sentences `indices` in one call, at most
        `limit` tokens each: lists of `(pieces, log-probability after the prefix)`, K of
        them, or only the best where the call is plain (alpha 0) and `call.nbest` is False."""
        prefixes = [sentences.prefixes[i] for i in indices]
        results = self.translator.translate_batch(
            [sentences.sources[i] for i in indices],
            # None where no sentence has one: nothing to force.
            target_prefix=prefixes if any(prefixes) else None,
            beam_size=call.beam_size,
            # Any alpha > 0 ranks CTranslate2's K hypotheses anew, so it must return them all.
            num_hypotheses=call.beam_size if call.nbest or not call.plain else 1,
            length_penalty=0.0 if call.plain else 1.0,
            no_repeat_ngram_size=call.no_repeat_ngram_size,
            max_input_length=0,
            max_decoding_length=limit,
            # CTranslate2's default 1 forbids the end token at the first step (renormalizing
            # the others' probabilities); the SavedModel allows an empty translation.
            min_decoding_length=0,
            return_scores=True,
            end_token=self.pieces[END_ID],
            return_end_token=True,
        )
        decoded = []
        for result in results:
            hypotheses = []
            for pieces, score in zip(result.hypotheses, result.scores):
                # With length_penalty 1 the score is log-probability / length (the
                # prefix's pieces counted in the length, not in the log-probability).
                hypotheses.append((pieces, score if call.plain else score * len(pieces)))
            decoded.append(hypotheses)
        return decoded

    def _search(self, sentences, call):
        """The hypotheses of the sentences of one call's settings (`call.indices`), each
        within its own output limit: `{index: _decode's list}`.

        The batch is decoded with the largest limit of its sentences; a sentence whose
        hypotheses came out longer than its own is decoded again at it, with the others of
        that limit (the module docstring says why that is the translation its own limit gives).
        """
        limits = sentences.limits
        largest = max(limits[i] for i in call.indices)
        hypotheses = dict(zip(call.indices, self._decode(sentences, call.indices, largest, call)))
        again = [i for i in call.indices if any(len(pieces) > limits[i] for pieces, _ in hypotheses[i])]
        for limit in sorted({limits[i] for i in again}):
            group = [i for i in again if limits[i] == limit]
            hypotheses.update(zip(group, self._decode(sentences, group, limit, call)))
        return hypotheses

    def _prefix_log_probabilities(self, sentences):
        """The model's log-probability of each sentence's target prefix (0 for none).
        CTranslate2 scores a hypothesis from the first token after its prefix; the
        SavedModel counts the prefix's tokens too, so this is added to every hypothesis."""
        steered = [i for i, prefix in enumerate(sentences.prefixes) if prefix]
        totals = [0.0] * len(sentences.prefixes)
        if steered:
            results = self.translator.score_batch(
                [sentences.sources[i] for i in steered], [sentences.prefixes[i] for i in steered], max_input_length=0
            )
            for i, result in zip(steered, results):
                # log_probs ends with that of the end token after the prefix: not written there.
                totals[i] = float(sum(result.log_probs[: len(sentences.prefixes[i])]))
        return totals

    def translate(self, texts, beam_size, alphas, max_extra_lengths, nbest=False, *, prefixes=None,
                  no_repeat_ngram_sizes=None):
        """`(texts [B][K], scores float64 [B][K])`, best first by the SavedModel's score:
        log-probability / gnmt_penalty(length, alpha), length counting the end token; with
        a prefix, its tokens count in the length, and their log-probability is added
        undivided (`beam_search.normalized_scores`).

        Args:
            texts: str [B].
            alphas, max_extra_lengths: one per text.
            nbest: all K are wanted; else the best, and the others may be missing
                (an empty text scored EMPTY_SCORE).
            prefixes: str [B], the text each translation starts with ("" for none), or
                None for none at all.
            no_repeat_ngram_sizes: int [B], the size of n-grams no translation holds twice
                (0: off), or None for 0 each.
        """
        if not len(texts):
            return [], []
        sources = self.source_pieces(texts)
        prefix_pieces = self.prefix_pieces(prefixes) if prefixes is not None else [[] for _ in texts]
        sentences = _Sentences(
            sources=sources,
            prefixes=prefix_pieces,
            limits=self.output_limits(sources, max_extra_lengths, prefix_pieces),
            alphas=[float(alpha) for alpha in alphas],
            no_repeat_ngram_sizes=[0] * len(texts) if no_repeat_ngram_sizes is None else list(no_repeat_ngram_sizes),
        )
        hypotheses = {}
        for call in _calls(sentences, beam_size, nbest):
            hypotheses.update(self._search(sentences, call))
        offsets = self._prefix_log_probabilities(sentences)
        all_texts, all_scores = [], []
        for i, alpha in enumerate(sentences.alphas):
            scored = sorted(
                ((offsets[i] + log_probability / gnmt_penalty(len(pieces), alpha), pieces)
                 for pieces, log_probability in hypotheses[i]),
                key=lambda pair: -pair[0],
            )[:beam_size]
            # CTranslate2 returns K hypotheses; fewer only if its search ended without them.
            scored += [(EMPTY_SCORE, [])] * (beam_size - len(scored))
            all_texts.append([self.detokenize(pieces) for _, pieces in scored])
            all_scores.append([score for score, _ in scored])
        return all_texts, all_scores


class _Sentences(typing.NamedTuple):
    """A batch's sentences as CTranslate2 takes them, one entry each."""

    sources: list  # piece lists, truncated, with the end piece
    prefixes: list  # piece lists of the target prefixes, [] for none
    limits: list  # the most output tokens of each, end token included
    alphas: list  # floats
    no_repeat_ngram_sizes: list  # ints, 0 for none


class _Aligned(typing.NamedTuple):
    """One sentence as `Engine.word_alignments` reads it, each side cut as the model reads it."""

    source: list  # pieces, truncated, with the end piece
    source_words: list  # each piece's word, -1 for none (the end piece)
    source_count: int  # the source's words
    target: list  # pieces, at most max_length, without the end piece
    target_words: list  # each piece's word, -1 for none
    target_count: int  # the target's words


class _Call(typing.NamedTuple):
    """The settings CTranslate2 takes once per translate_batch call, and the sentences that share them."""

    indices: list  # the sentences of `_Sentences`, in batch order
    beam_size: int
    nbest: bool  # all K hypotheses are wanted
    plain: bool  # alpha is 0: no length penalty
    no_repeat_ngram_size: int


def _calls(sentences, beam_size, nbest):
    """The `_Call`s that decode a batch: one per no_repeat_ngram_size and length penalty
    (plain or not) among its sentences, which translate_batch takes once per call. A
    sentence so decodes as it would alone, whatever its neighbours ask."""
    groups = {}
    for i, (size, alpha) in enumerate(zip(sentences.no_repeat_ngram_sizes, sentences.alphas)):
        groups.setdefault((int(size), alpha == 0), []).append(i)
    return [_Call(indices, beam_size, nbest, plain, size) for (size, plain), indices in groups.items()]


def _model_files(path, stand_in_end_token):
    """CTranslate2's files of the model in `path`, read into memory for
    `ctranslate2.Translator(files=...)`, with `stand_in_end_token` as config.json's end token.

    CTranslate2 answers a source that is its start or end token alone with an empty
    translation, without decoding it, where the SavedModel decodes an empty input from
    the end token alone. Under another name that source is decoded; decoding still ends
    at the real end token, which every call passes as `end_token`.
    """
    files = {}
    for name in os.listdir(path):
        if name == "model.bin" or name.endswith("vocabulary.json") or name.endswith("vocabulary.txt"):
            with open(os.path.join(path, name), "rb") as f:
                files[name] = f.read()
    with open(os.path.join(path, "config.json")) as f:
        config = json.load(f)
    config["eos_token"] = stand_in_end_token
    files["config.json"] = json.dumps(config).encode("utf-8")
    return files


class CTranslate2Version:
    """One CTranslate2 version, with `LoadedVersion`'s interface: its signatures, their
    specs and their metadata JSON, and `run` / `warm_up`."""

    def __init__(self, version, path, intra_threads=0):
        self.version = version
        self.path = path
        self.engine = Engine(path, intra_threads=intra_threads)
        info = self.engine.info
        self.beam_size = int(info["beam_size"])
        self.alpha = float(info["alpha"])
        self.max_extra_length = int(info["max_extra_length"])
        # The SavedModel refuses an alpha whose penalty overflows float32 (checked_alpha).
        self.max_alpha = float(info.get("max_alpha", math.inf))
        vector = (None,)
        one_each = {"translations": TensorSpec(_STRING, vector), "scores": TensorSpec(_FLOAT, vector)}
        options = {"alpha": TensorSpec(_FLOAT, vector), "max_extra_length": TensorSpec(_INT, vector)}
        self.inputs = {
            "serving_default": {"inputs": TensorSpec(_STRING, vector)},
            "nbest": {"inputs": TensorSpec(_STRING, vector)},
            "greedy": {"inputs": TensorSpec(_STRING, vector)},
            "translate_with_options": {"inputs": TensorSpec(_STRING, vector), **options},
            "constrained": {
                "inputs": TensorSpec(_STRING, vector),
                "prefixes": TensorSpec(_STRING, vector),
                "constraints": TensorSpec(_STRING, vector),
                "no_repeat_ngram_size": TensorSpec(_INT, vector),
                **options,
            },
        }
        beams = (None, self.beam_size)
        k_each = {"translations": TensorSpec(_STRING, beams), "scores": TensorSpec(_FLOAT, beams)}
        self.outputs = {
            "serving_default": one_each, "nbest": k_each, "greedy": one_each, "translate_with_options": one_each,
            "constrained": {**one_each, "constraints_met": TensorSpec(_BOOL, vector)},
        }
        # An export that records its alignment head returns that head's attention.
        if ALIGNMENT_HEAD in info:
            self.inputs["align"] = {"inputs": TensorSpec(_STRING, vector)}
            self.outputs["align"] = {**one_each, "alignments": TensorSpec(_STRING, vector)}
        self.signatures = dict(self.inputs)
        self.signature_def = signature_def_json(
            {name: signature_of_specs(name, self.inputs[name], self.outputs[name]) for name in self.inputs}
        )

    def input_specs(self, signature_name):
        if signature_name not in self.inputs:
            raise ServingError(f'Serving signature name: "{signature_name}" not found in signature def')
        return self.inputs[signature_name]

    def run(self, signature_name, inputs):
        """Calls a signature on arrays; returns name -> np.ndarray. Blocks (call from a thread)."""
        texts = [_text(value) for value in np.asarray(inputs["inputs"]).ravel()]
        n = len(texts)
        beam_size, alphas, extras, steering = self.beam_size, [self.alpha] * n, [self.max_extra_length] * n, {}
        if signature_name == "greedy":
            beam_size = 1
        elif signature_name == "translate_with_options":
            alphas, extras = self._options(inputs, n)
        elif signature_name == "constrained":
            alphas, extras = self._options(inputs, n, STEERED_OPTIONS)
            steering = self._steering(inputs)
        translations, scores = self.engine.translate(
            texts, beam_size, alphas, extras, signature_name == "nbest", **steering
        )
        alignments = None
        if signature_name == "align":
            alignments = _strings(self.engine.word_alignments(texts, [row[0] for row in translations]))
        translations = np.array(
            [[t.encode("utf-8") for t in row] for row in translations] or np.zeros((0, beam_size)), dtype=object
        ).reshape(n, beam_size)
        scores = np.array(scores, dtype=np.float32).reshape(n, beam_size)
        if signature_name == "nbest":
            return {"translations": translations, "scores": scores}
        outputs = {"translations": translations[:, 0], "scores": scores[:, 0]}
        if alignments is not None:
            outputs["alignments"] = alignments
        if signature_name == "constrained":
            # No phrase was asked for (`_steering` refuses any): every sentence met its none.
            outputs["constraints_met"] = np.ones(n, dtype=bool)
        return outputs

    def _options(self, inputs, n, names=OPTIONS):
        """The request's alpha and max_extra_length, with the other settings `names` (in the
        SavedModel's order: `OPTIONS`, or `STEERED_OPTIONS` for `constrained`) checked as its
        `checked_request` checks them: one value per input each, then each setting's rules
        (`RULES`), then alpha's limit for the model (`checked_alpha`)."""
        for name in names:
            size = np.asarray(inputs[name]).size
            if size != n:
                raise ServingError(f"assertion failed: one {name} per input: {size} for {n} inputs")
        for name in names:
            if name in RULES:
                _check_request(name, np.asarray(inputs[name]).ravel())  # as the signature's spec typed it
        alpha = np.asarray(inputs["alpha"], np.float32).ravel()
        if np.any(alpha > self.max_alpha):
            raise ServingError(
                f"assertion failed: alpha must be at most {self.max_alpha} for a model of "
                f"{self.engine.max_length} positions, got {alpha.tolist()}"
            )
        return [float(a) for a in alpha], [int(e) for e in np.asarray(inputs["max_extra_length"], np.int64).ravel()]

    def _steering(self, inputs):
        """`constrained`'s prefixes and no_repeat_ngram_size as `Engine.translate` takes them
        (counted and checked by `_options`); a ServingError (400) where a sentence has
        phrases: CTranslate2 has no lexical constraints."""
        for i, value in enumerate(np.asarray(inputs["constraints"]).ravel()):
            # Tab-separated phrases, blank ones ignored as the SavedModel ignores them.
            phrases = [phrase.strip() for phrase in _text(value).split("\t") if phrase.strip()]
            if phrases:
                raise ServingError(
                    f"CTranslate2 versions do not support lexical constraints, got {phrases} for input {i}: "
                    "serve the SavedModel export for them (constraints \"\" translates without)"
                )
        return {
            "prefixes": [_text(value) for value in np.asarray(inputs["prefixes"]).ravel()],
            "no_repeat_ngram_sizes": [int(size) for size in np.asarray(inputs["no_repeat_ngram_size"]).ravel()],
        }

    def warm_up(self, iterations=1):
        """`serving_default` called `iterations` times on one empty input, so that the first
        request is not the one that sets up the translator (a CTranslate2 model carries no
        warm-up file)."""
        for _ in range(iterations):
            self.run("serving_default", {"inputs": np.array([b""], dtype=object)})


def _check_request(name, values):
    """ServingError naming the first rule of the setting `name` (app/decoding/config.py's
    `RULES`) that the request's `values` (an array) break, as the SavedModel's assertion does."""
    for rule in RULES[name]:
        if not np.all(rule.holds(values)):
            raise ServingError(f"assertion failed: {name} {rule.phrase}, got {values.tolist()}")


def _strings(texts):
    """str list [B] -> object `[B]` of UTF-8 bytes, as a string tensor's numpy."""
    return np.array([text.encode("utf-8") for text in texts], dtype=object).reshape(len(texts))


def _text(value):
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)
