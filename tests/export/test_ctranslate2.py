"""The CTranslate2 export (app/export/ctranslate2.py) and its serving
(app/serving/ctranslate2_version.py): the same translations as the SavedModel with the
length penalty off, and the same word alignments from the same attention head, behind the
same REST API; what it cannot express is refused by name."""

import gzip
import json
import os
import re
import shutil
import sys

import numpy as np
import pytest

from tests.conftest import SENTENCES
from tests.tiny_run import ROOT

# Each export is loaded once per test process (conftest.py), however many tests load it.
pytestmark = pytest.mark.usefixtures("load_each_export_once")

pytest.importorskip("ctranslate2")

VALIDATION_SENTENCES = 200


@pytest.fixture(scope="module")
def ct2_export(model_dir, tmp_path_factory):
    """`(path, translator)`: the fixture run exported for CTranslate2, decoding with alpha 0."""
    from app.decoding.config import DecodingConfig
    from app.export.ctranslate2 import export_ctranslate2
    from app.export.saved_model import export_metadata, load_translator

    decoding = DecodingConfig(beam_size=4, alpha=0.0, max_extra_length=50)
    translator, weights = load_translator(model_dir, decoding=decoding)
    base = str(tmp_path_factory.mktemp("ct2") / "translator" / "ctranslate2")
    path = export_ctranslate2(translator, base, metadata=export_metadata(model_dir, weights, decoding))
    return path, translator


@pytest.fixture(scope="module")
def saved_model(exported):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the SavedModel's tokenizer ops)

    return tf.saved_model.load(exported[2])


def saved_model_translations(saved_model, texts, alpha=0.0, max_extra_length=50):
    """translate_with_options of the SavedModel: `(texts [B] str, scores float32 [B])`."""
    import tensorflow as tf

    n = len(texts)
    outputs = saved_model.signatures["translate_with_options"](
        inputs=tf.constant(texts, tf.string), alpha=tf.fill([n], float(alpha)),
        max_extra_length=tf.fill([n], max_extra_length),
    )
    return [t.decode("utf-8") for t in outputs["translations"].numpy()], outputs["scores"].numpy()


def test_the_export_directory_holds_ctranslate2s_files_the_vocabulary_and_export_info(ct2_export, model_dir):
    path, _ = ct2_export
    assert os.path.basename(path) == "1"
    assert sorted(os.listdir(path)) == [
        "config.json", "export_info.json", "model.bin", "shared_vocabulary.json", "subwords.model",
    ]
    with open(os.path.join(model_dir, "subwords.model"), "rb") as f:
        assert open(os.path.join(path, "subwords.model"), "rb").read() == f.read()
    info = json.load(open(os.path.join(path, "export_info.json")))
    assert (info["engine"], info["alpha"], info["beam_size"], info["max_length"]) == ("ctranslate2", 0.0, 4, 48)
    config = json.load(open(os.path.join(path, "config.json")))
    assert (config["bos_token"], config["eos_token"], config["unk_token"]) == ("<s>", "</s>", "<unk>")
    assert config["decoder_start_token"] == "<s>" and not config["add_source_eos"]
    vocabulary = json.load(open(os.path.join(path, "shared_vocabulary.json")))
    assert vocabulary[:4] == ["<pad>", "<s>", "</s>", "<unk>"] and len(vocabulary) == 400


def test_the_sinusoid_table_is_what_the_layer_adds():
    from app.export.ctranslate2 import sinusoid_table
    from layers.sinusoidal_positional_encoding import SinusoidalPositionalEncoding

    added = SinusoidalPositionalEncoding(48)(np.zeros((1, 48, 32), np.float32))
    np.testing.assert_allclose(sinusoid_table(48, 32), np.asarray(added)[0], atol=2e-6)


# With alpha 0 the two searches agree by construction; with alpha > 0 CTranslate2 stops
# at its first K finished hypotheses, so fewer may agree, and those that do score alike
# only if its hypotheses are ranked by the SavedModel's GNMT formula.
@pytest.mark.slow
@pytest.mark.parametrize("alpha, agreeing", [(0.0, 0.99), (0.6, 0.95)])
def test_ctranslate2_translates_validation_as_the_saved_model_does(ct2_export, saved_model, alpha, agreeing):
    from app.serving.ctranslate2_version import Engine

    with gzip.open(os.path.join(ROOT, "data", "multi30k", "val.en.gz"), "rt", encoding="utf-8") as f:
        sources = [next(f).rstrip("\n") for _ in range(VALIDATION_SENTENCES)]
    # One thread: beside TensorFlow in this process, more only wait on each other.
    engine = Engine(ct2_export[0], intra_threads=1)
    texts, scores = engine.translate(sources, 4, [alpha] * len(sources), [50] * len(sources))
    want_texts, want_scores = saved_model_translations(saved_model, sources, alpha)
    same = [got[0] == want for got, want in zip(texts, want_texts)]
    differing = [(s, g[0], w) for s, g, w, e in zip(sources, texts, want_texts, same) if not e]
    assert sum(same) >= agreeing * len(sources), differing
    got_scores = np.array([s[0] for s, e in zip(scores, same) if e], np.float32)
    np.testing.assert_allclose(got_scores, want_scores[same], rtol=1e-3, atol=1e-3)


@pytest.mark.slow
def test_overlong_empty_and_short_limited_inputs_as_the_saved_model(ct2_export, saved_model):
    """Truncation, an empty and a blank input, and max_extra_length 2 (each sentence's own
    output limit, below the batch's longest: decoded again at its own)."""
    from app.serving.ctranslate2_version import Engine

    engine = Engine(ct2_export[0], intra_threads=1)
    for extra in (50, 2):
        texts, scores = engine.translate(SENTENCES, 4, [0.0] * len(SENTENCES), [extra] * len(SENTENCES))
        want_texts, want_scores = saved_model_translations(saved_model, SENTENCES, max_extra_length=extra)
        assert [t[0] for t in texts] == want_texts
        np.testing.assert_allclose([s[0] for s in scores], want_scores, rtol=1e-3, atol=1e-3)


def test_outputs_stay_one_line_as_the_tokenizers_detokenize_leaves_them():
    import tensorflow as tf

    from app.serving.ctranslate2_version import _NOT_ON_ONE_LINE
    from data.tokenizer import _NOT_ON_ONE_LINE as graph_pattern

    text = "a \n b\tc\r\n\x85d\u2028 e\x7f f  \x01\x02g h"
    graph = tf.strings.regex_replace(tf.constant(text), graph_pattern, " ").numpy().decode("utf-8")
    assert _NOT_ON_ONE_LINE.sub(" ", text) == graph == "a b c d e f g h"


# The `constrained` signature: what CTranslate2 can steer (a target prefix, no repeated
# n-grams), the SavedModel's way; lexical constraints refused.


@pytest.fixture(scope="module")
def ct2_version(ct2_export):
    from app.serving.ctranslate2_version import CTranslate2Version

    return CTranslate2Version(1, ct2_export[0], intra_threads=1)


def validation_sources(count=20):
    with gzip.open(os.path.join(ROOT, "data", "multi30k", "val.en.gz"), "rt", encoding="utf-8") as f:
        return [next(f).rstrip("\n") for _ in range(count)]


def strings(texts):
    return np.array([text.encode("utf-8") for text in texts], dtype=object)


def constrained(version, texts, prefixes=None, constraints=None, no_repeat_ngram_size=0, alpha=0.0,
                max_extra_length=50):
    """`constrained`'s outputs for `texts`; each setting one value for all or one per text."""
    n = len(texts)
    return version.run("constrained", {
        "inputs": strings(texts),
        "prefixes": strings(prefixes or [""] * n),
        "constraints": strings(constraints or [""] * n),
        "no_repeat_ngram_size": np.broadcast_to(np.asarray(no_repeat_ngram_size, np.int32), (n,)),
        "alpha": np.broadcast_to(np.asarray(alpha, np.float32), (n,)),
        "max_extra_length": np.broadcast_to(np.asarray(max_extra_length, np.int32), (n,)),
    })


class RecordingTranslator:
    """A `ctranslate2.Translator` that keeps the piece lists of the hypotheses
    translate_batch returns: the output tokens behind a translation's text."""

    def __init__(self, translator):
        self._translator = translator
        self.hypotheses = []

    def translate_batch(self, *args, **kwargs):
        results = self._translator.translate_batch(*args, **kwargs)
        self.hypotheses.extend(pieces for result in results for pieces in result.hypotheses)
        return results

    def __getattr__(self, name):
        return getattr(self._translator, name)


def output_pieces(engine, recorded, translation):
    """The pieces of the hypothesis CTranslate2 returned whose text is `translation`."""
    candidates = {tuple(pieces) for pieces in recorded.hypotheses if engine.detokenize(pieces) == translation}
    assert len(candidates) == 1, (translation, candidates)
    return list(candidates.pop())


def repeated_ngrams(pieces, n):
    """The n-grams of `pieces` (the end piece left out) that occur more than once."""
    tokens = [piece for piece in pieces if piece != "</s>"]
    grams = [tuple(tokens[i: i + n]) for i in range(len(tokens) - n + 1)]
    return {gram for gram in grams if grams.count(gram) > 1}


def test_constrained_unsteered_is_translate_with_options(ct2_version):
    texts = SENTENCES + validation_sources()
    n = len(texts)
    # The export's alpha and max_extra_length (0 and 50), and a length penalty besides.
    for alpha in (ct2_version.alpha, 0.6):
        options = {"inputs": strings(texts), "alpha": np.full(n, alpha, np.float32),
                   "max_extra_length": np.full(n, ct2_version.max_extra_length, np.int32)}
        want = ct2_version.run("translate_with_options", options)
        got = constrained(ct2_version, texts, alpha=alpha, max_extra_length=ct2_version.max_extra_length)
        assert got["translations"].tolist() == want["translations"].tolist()
        np.testing.assert_array_equal(got["scores"], want["scores"])
        assert got["constraints_met"].dtype == np.bool_ and got["constraints_met"].all()
    # A constraints entry of tabs and spaces holds no phrase: the same translations.
    blank = constrained(ct2_version, texts, constraints=["\t", " \t  "] * (n // 2) + [""] * (n % 2))
    assert blank["translations"].tolist() == constrained(ct2_version, texts)["translations"].tolist()


def test_the_prefix_starts_the_translation_and_counts_in_its_score(ct2_version, monkeypatch):
    from app.serving.ctranslate2_version import gnmt_penalty

    engine = ct2_version.engine
    recorded = RecordingTranslator(engine.translator)
    monkeypatch.setattr(engine, "translator", recorded)
    texts = ["A man rides a bike.", "", "Two dogs play in the snow.", " ".join(["dog"] * 80), "A girl."]
    # Words, a trailing partial word, spaces the tokenizer collapses, and one longer than
    # the model's positions (cut to max_length - 1 pieces: the end token still fits).
    prefixes = ["Ein Mann", "Zwei Hunde spielen", "Ein Mann fä", "Hund  Hund", " ".join(["Hund"] * 40)]
    outputs = constrained(ct2_version, texts, prefixes)
    normalized = [engine.detokenize(pieces) for pieces in engine.prefix_pieces(prefixes)]
    assert normalized[:3] == prefixes[:3] and normalized[3] == "Hund Hund"
    assert len(engine.prefix_pieces(prefixes[4:])[0]) == engine.max_length - 1
    translations = [t.decode("utf-8") for t in outputs["translations"]]
    assert all(t.startswith(prefix) for t, prefix in zip(translations, normalized)), translations
    # The score is the whole translation's log-probability (alpha 0), prefix included,
    # as the SavedModel counts it: CTranslate2's own leaves the prefix out.
    sources = engine.source_pieces(texts[:3])
    pieces = [output_pieces(engine, recorded, t) for t in translations[:3]]
    scored = recorded.score_batch(sources, pieces, max_input_length=0)
    want = [sum(result.log_probs[: len(p)]) for result, p in zip(scored, pieces)]
    np.testing.assert_allclose(outputs["scores"][:3], want, rtol=1e-5)
    # At alpha > 0 the prefix's log-probability counts undivided, the rest over the
    # penalty of the whole length (beam_search.normalized_scores).
    at_alpha = constrained(ct2_version, texts[:3], prefixes[:3], alpha=0.6)
    pieces = [output_pieces(engine, recorded, t.decode("utf-8")) for t in at_alpha["translations"]]
    scored = recorded.score_batch(sources, pieces, max_input_length=0)
    forced = [len(p) for p in engine.prefix_pieces(prefixes[:3])]
    want = [
        sum(result.log_probs[:n]) + sum(result.log_probs[n : len(p)]) / gnmt_penalty(len(p), 0.6)
        for result, p, n in zip(scored, pieces, forced)
    ]
    np.testing.assert_allclose(at_alpha["scores"], want, rtol=1e-5)
    # The output limit grows by the prefix: max_extra_length 1 still leaves room to end.
    short = constrained(ct2_version, texts[:1], prefixes[:1], max_extra_length=1)
    assert short["translations"][0].decode("utf-8").startswith(prefixes[0])


def test_a_prefix_is_lowercased_where_the_run_is(ct2_version, monkeypatch):
    monkeypatch.setattr(ct2_version.engine, "lowercase", True)
    outputs = constrained(ct2_version, ["A man rides a bike."], ["Ein Mann ÄRGERT"])
    assert outputs["translations"][0].decode("utf-8").startswith("ein mann ärgert")


def test_no_ngram_of_the_size_asked_repeats(ct2_version, monkeypatch):
    engine = ct2_version.engine
    recorded = RecordingTranslator(engine.translator)
    monkeypatch.setattr(engine, "translator", recorded)
    texts = validation_sources(8)
    # A large alpha ranks long hypotheses first: the tiny model's loop on one piece.
    loops = constrained(ct2_version, texts, alpha=3.0)
    assert all(repeated_ngrams(output_pieces(engine, recorded, t.decode("utf-8")), 3) for t in loops["translations"])
    for size in (3, 2):
        outputs = constrained(ct2_version, texts, no_repeat_ngram_size=size, alpha=3.0)
        for translation in outputs["translations"]:
            assert not repeated_ngrams(output_pieces(engine, recorded, translation.decode("utf-8")), size)


def test_a_batch_of_mixed_settings_translates_each_sentence_as_alone(ct2_version):
    texts = validation_sources(6)
    sizes, alphas = [0, 3, 2, 1, 3, 0], [3.0, 3.0, 0.0, 3.0, 0.0, 0.6]
    prefixes = ["", "Ein Mann", "", "Zwei", "Ein", ""]
    batch = constrained(ct2_version, texts, prefixes, no_repeat_ngram_size=sizes, alpha=alphas)
    for i in range(len(texts)):
        alone = constrained(ct2_version, texts[i: i + 1], prefixes[i: i + 1], no_repeat_ngram_size=sizes[i],
                            alpha=alphas[i])
        assert batch["translations"][i] == alone["translations"][0], i
        np.testing.assert_allclose(batch["scores"][i], alone["scores"][0], rtol=1e-5)


def saved_model_constrained(saved_model, texts, prefixes, no_repeat_ngram_size, max_extra_length=50):
    """The SavedModel's `constrained` at alpha 0 without phrases: `(texts [B] str, scores float32 [B])`."""
    import tensorflow as tf

    n = len(texts)
    outputs = saved_model.signatures["constrained"](
        inputs=tf.constant(texts), prefixes=tf.constant(prefixes), constraints=tf.fill([n], ""),
        no_repeat_ngram_size=tf.fill([n], no_repeat_ngram_size), alpha=tf.fill([n], 0.0),
        max_extra_length=tf.fill([n], max_extra_length),
    )
    return [t.decode("utf-8") for t in outputs["translations"].numpy()], outputs["scores"].numpy()


@pytest.mark.slow
def test_constrained_translates_as_the_saved_model_but_where_ctranslate2_searches_otherwise(
        ct2_version, saved_model, monkeypatch):
    """At alpha 0. Without a prefix, the SavedModel's translations and scores, n-gram rule
    or not. With one (the references' first one or two words), each translation that
    differs is one of the two the module docstring names: the SavedModel's ends right
    after the prefix, or CTranslate2's reached its limit without the end token."""
    engine = ct2_version.engine
    recorded = RecordingTranslator(engine.translator)
    monkeypatch.setattr(engine, "translator", recorded)
    sources = validation_sources(100)
    for size in (0, 3):
        want, want_scores = saved_model_constrained(saved_model, sources, [""] * len(sources), size)
        got = constrained(ct2_version, sources, no_repeat_ngram_size=size)
        same = [g.decode("utf-8") == w for g, w in zip(got["translations"], want)]
        assert sum(same) >= 0.99 * len(sources)
        np.testing.assert_allclose(got["scores"][same], want_scores[same], rtol=1e-3, atol=1e-3)
    with gzip.open(os.path.join(ROOT, "data", "multi30k", "val.de.gz"), "rt", encoding="utf-8") as f:
        references = [next(f).split() for _ in sources]
    for words, extra in ((1, 50), (2, 50), (1, 3)):
        prefixes = [" ".join(reference[:words]) for reference in references]
        recorded.hypotheses.clear()
        want, _ = saved_model_constrained(saved_model, sources, prefixes, 0, extra)
        outputs = constrained(ct2_version, sources, prefixes, max_extra_length=extra)
        got = [t.decode("utf-8") for t in outputs["translations"]]
        limits = engine.output_limits(engine.source_pieces(sources), extra, engine.prefix_pieces(prefixes))
        normalized = [engine.detokenize(pieces) for pieces in engine.prefix_pieces(prefixes)]
        for i in (i for i, (g, w) in enumerate(zip(got, want)) if g != w):
            at_limit = any(len(pieces) == limits[i] and pieces[-1] != "</s>"
                           for pieces in recorded.hypotheses if engine.detokenize(pieces) == got[i])
            assert want[i] == normalized[i] or at_limit, (prefixes[i], got[i], want[i])


def test_constrained_refuses_phrases_and_bad_settings_by_name(ct2_version):
    from app.serving.rest_api import ServingError

    texts = ["A man.", "A dog."]
    with pytest.raises(ServingError) as raised:
        constrained(ct2_version, texts, constraints=["", "Hund\t Fahrrad \t"])
    assert raised.value.status == 400 and raised.value.code == "INVALID_ARGUMENT"
    assert raised.value.message == (
        "CTranslate2 versions do not support lexical constraints, got ['Hund', 'Fahrrad'] for input 1: "
        'serve the SavedModel export for them (constraints "" translates without)'
    )
    with pytest.raises(ServingError, match=re.escape(
            "assertion failed: no_repeat_ngram_size must be >= 0 (0: off), got [0, -2]")):
        constrained(ct2_version, texts, no_repeat_ngram_size=[0, -2])
    with pytest.raises(ServingError, match=re.escape("assertion failed: one prefixes per input: 1 for 2 inputs")):
        ct2_version.run("constrained", {**{name: strings(texts) for name in ("inputs", "constraints")},
                                        "prefixes": strings([""]), "no_repeat_ngram_size": np.zeros(2, np.int32),
                                        "alpha": np.zeros(2, np.float32), "max_extra_length": np.ones(2, np.int32)})


def test_the_constrained_signature_def_has_a_bool_output(ct2_version):
    signature = ct2_version.signature_def["signature_def"]["constrained"]
    assert {name: spec["dtype"] for name, spec in signature["inputs"].items()} == {
        "inputs": "DT_STRING", "prefixes": "DT_STRING", "constraints": "DT_STRING",
        "no_repeat_ngram_size": "DT_INT32", "alpha": "DT_FLOAT", "max_extra_length": "DT_INT32",
    }
    assert {name: spec["dtype"] for name, spec in signature["outputs"].items()} == {
        "constraints_met": "DT_BOOL", "scores": "DT_FLOAT", "translations": "DT_STRING",
    }


# Word alignments: CTranslate2's attention is the head the SavedModel's `align` reads, and
# the version's `align` links words as the SavedModel's does. The tiny run's translations at
# alpha 0 are all one word ("er"), so that each translation's line is one link: the
# references, given as translations, exercise alignments of many words.

# Where the two engines' weights of a row lie closer than this, its argmax may fall either way.
NEAR_TIE = 1e-3


def test_head_first_puts_the_heads_units_first_and_the_others_in_order():
    from app.decoding.config import AlignmentHead
    from app.export.ctranslate2 import alignment_settings, head_first

    assert head_first(1, 2, 3).tolist() == [3, 4, 5, 0, 1, 2]
    assert head_first(2, 4, 1).tolist() == [2, 0, 1, 3]
    assert head_first(0, 2, 2).tolist() == [0, 1, 2, 3]
    assert alignment_settings(AlignmentHead(3, None)) == (3, 0)  # 0: the mean of all heads
    assert alignment_settings(AlignmentHead(0, 1)) == (0, 1)  # the first head, which head 1 becomes


def test_only_the_alignment_layers_cross_attention_heads_are_reordered():
    """A two-layer model: with head 1:1, layer 1's cross-attention holds head 1's weights
    first and head 0's after, and nothing else differs from the spec with head 1:0."""
    import keras

    from app.decoding.config import AlignmentHead
    from app.export.ctranslate2 import transformer_spec
    from app.model.config import ModelConfig
    from app.model.transformer import Transformer, build_transformer

    keras.utils.set_random_seed(91)
    config = ModelConfig.from_size("tiny", vocab_size=40, num_layers=2, d_model=16, d_ff=32, num_heads=2,
                                   max_length=16)
    transformer = Transformer(build_transformer(config), config)
    pieces = ["<pad>", "<s>", "</s>", "<unk>"] + [f"p{i}" for i in range(36)]
    first, second = (transformer_spec(transformer, pieces, AlignmentHead(1, head)) for head in (0, 1))
    for spec in (first, second):
        assert (spec.decoder.alignment_layer, spec.decoder.alignment_heads) == (1, 1)
    swapped = np.r_[8:16, 0:8]  # [H * K]: head 1's units, then head 0's

    def kernel(dense):
        return np.asarray(dense.kernel)  # [in, out]

    cross = transformer.decoder_layers[1].cross_attention
    attention = second.decoder.layer[1].attention
    np.testing.assert_array_equal(attention.linear[0].weight, kernel(cross.query_dense)[:, swapped].T)
    np.testing.assert_array_equal(attention.linear[0].bias, np.asarray(cross.query_dense.bias)[swapped])
    np.testing.assert_array_equal(
        attention.linear[1].weight, np.concatenate([kernel(cross.key_dense)[:, swapped].T,
                                                    kernel(cross.value_dense)[:, swapped].T]))
    np.testing.assert_array_equal(attention.linear[2].weight, kernel(cross.output_dense)[swapped].T)
    np.testing.assert_array_equal(attention.linear[2].bias, np.asarray(cross.output_dense.bias))
    # Everything else as without the reordering: every other variable of the two specs is equal.
    reordered = {f"decoder/layer_1/attention/linear_{i}/{name}" for i in range(3) for name in ("weight", "bias")}
    reordered -= {"decoder/layer_1/attention/linear_2/bias"}
    variables, others = first.variables(), second.variables()
    assert variables.keys() == others.keys() and reordered <= variables.keys()
    for name in variables.keys() - reordered:
        np.testing.assert_array_equal(np.asarray(variables[name]), np.asarray(others[name]), err_msg=name)


@pytest.fixture(scope="module")
def ct2_heads(model_dir, ct2_export, tmp_path_factory):
    """`{head: (path, translator)}`: the fixture run exported for CTranslate2 at alpha 0 with
    each alignment head of its one decoder layer: "0:0", "0:1" (its heads reordered) and
    "0:mean" (`ct2_export`, the default)."""
    from app.decoding.config import AlignmentHead, DecodingConfig
    from app.export.ctranslate2 import export_ctranslate2
    from app.export.saved_model import load_trained

    trained = load_trained(model_dir)
    base = str(tmp_path_factory.mktemp("ct2-heads") / "ctranslate2")
    exports = {"0:mean": ct2_export}
    for head in (0, 1):
        translator = trained.translator(DecodingConfig(beam_size=4, alpha=0.0, max_extra_length=50),
                                        AlignmentHead(0, head))
        exports[f"0:{head}"] = export_ctranslate2(translator, base), translator
    return exports


def test_export_info_records_the_head_ctranslate2s_attention_returns(ct2_heads):
    for head, (path, translator) in ct2_heads.items():
        assert json.load(open(os.path.join(path, "export_info.json")))["alignment_head"] == head
        assert str(translator.alignment_head) == head


@pytest.mark.slow
def test_a_head_1_export_translates_exactly_as_a_head_0_one(ct2_heads):
    from app.serving.ctranslate2_version import Engine

    sources = SENTENCES + validation_sources(100)
    n = len(sources)
    (texts, scores), (want_texts, want_scores) = (
        Engine(ct2_heads[head][0], intra_threads=1).translate(sources, 4, [0.0] * n, [50] * n, nbest=True)
        for head in ("0:1", "0:0")
    )
    assert texts == want_texts  # all K hypotheses of each sentence, in order
    # The reordered heads sum in another order: the last bits of a score may differ.
    np.testing.assert_allclose(scores, want_scores, rtol=0, atol=1e-5)


def validation_pairs(count):
    """The first `count` Multi30k validation pairs, `(English, German)`."""
    with gzip.open(os.path.join(ROOT, "data", "multi30k", "val.de.gz"), "rt", encoding="utf-8") as f:
        references = [next(f).rstrip("\n") for _ in range(count)]
    return validation_sources(count), references


# Pairs whose sides the model cuts (over 48 pieces), with byte-fallback pieces, white space
# a word does not hold, and a blank side.
EDGE_PAIRS = (
    ["A man 🚴 rides\xa0a  bike. ", " ".join(["dog"] * 80), "Two dogs.", "   ", "A girl."],
    ["Ein Mann 🚴 fährt  Rad. ", "Zwei Hunde.", " ".join(["Hund"] * 80), "Ein Mann.", "  "],
)


def saved_model_weights(translator, sources, targets):
    """The SavedModel's `alignment_weights` of `translator`'s head over given targets, each
    side segmented and cut as its `word_alignments` reads them: float32 `[B, T, S]`, with
    each sentence's source pieces (S_b, the end token included) and target pieces (T_b,
    without the end token)."""
    import tensorflow as tf

    from app.decoding.alignment import alignment_weights
    from app.decoding.forced import target_ids
    from app.decoding.truncation import truncated_sources
    from layers.special_tokens import END_ID

    tokenizer, max_length = translator.tokenizer, translator.transformer.config.max_length
    source_ids = truncated_sources(tokenizer.tokenize(tf.constant(sources)), max_length, END_ID)  # [B, S]
    tokens = tokenizer.tokenize(tf.constant(targets))  # ragged [B, None]
    ids, _ = target_ids(tokens, max_length)  # [B, T]
    weights = alignment_weights(translator.transformer, source_ids, ids, translator.alignment_head)
    source_lengths = np.count_nonzero(source_ids.numpy(), axis=1)
    target_lengths = np.minimum(tokens.row_lengths().numpy(), max_length)
    return weights.numpy(), source_lengths, target_lengths


@pytest.mark.slow
@pytest.mark.parametrize("head", ["0:0", "0:1", "0:mean"])
def test_the_forced_attention_is_the_saved_models_alignment_weights(ct2_heads, head):
    from app.serving.ctranslate2_version import Engine

    path, translator = ct2_heads[head]
    engine = Engine(path, intra_threads=1)
    sources, targets = (a + b for a, b in zip(validation_pairs(40), EDGE_PAIRS))
    want, source_lengths, target_lengths = saved_model_weights(translator, sources, targets)
    # The targets as the tokenizer segments them, cut to the model's positions.
    pieces = [row[: engine.max_length] for row in engine.processor.encode(targets, out_type=str)]
    got = engine.forced_attention(engine.source_pieces(sources), pieces)
    for b, weights in enumerate(got):
        assert weights.shape == (target_lengths[b], source_lengths[b]), b
        np.testing.assert_allclose(weights, want[b, : target_lengths[b], : source_lengths[b]], rtol=0, atol=1e-4)
    assert max(target_lengths) == engine.max_length  # a target cut to the model's positions


def near_ties(translator, sources, targets):
    """How many target pieces of each sentence have a near tie in the SavedModel's weights:
    their two most attended source pieces of a word within NEAR_TIE of each other, so that
    another engine's argmax may take the other."""
    import sentencepiece

    from data.words import piece_words

    weights, _, _ = saved_model_weights(translator, sources, targets)
    processor = sentencepiece.SentencePieceProcessor(model_proto=translator.tokenizer.model_proto)
    max_length = translator.transformer.config.max_length

    def words_of(text, cut):
        pieces = processor.encode(text, return_type="proto").pieces[:cut]
        return piece_words(text, [p.begin for p in pieces], [p.end for p in pieces])

    counts = []
    for b, (source, target) in enumerate(zip(sources, targets)):
        columns = [s for s, word in enumerate(words_of(source, max_length - 1)) if word >= 0]
        rows = [t for t, word in enumerate(words_of(target, max_length)) if word >= 0]
        top = np.sort(weights[b][np.ix_(rows, columns)], axis=1)  # [rows, columns]
        counts.append(int(np.sum(top[:, -1] - top[:, -2] < NEAR_TIE)) if len(columns) > 1 else 0)
    return counts


def assert_lines_agree_but_at_near_ties(got, want, ties):
    """Each line of `got` equals `want`'s, but where its sentence has a near tie (`ties`,
    from `near_ties`); and at least a third of the sentences have none, so that the
    comparison stays mostly strict. The tiny run's attention is nearly uniform: a near tie
    is common, though the two engines' weights agree far closer than NEAR_TIE."""
    differing = [b for b, (g, w) in enumerate(zip(got, want)) if g != w]
    assert all(ties[b] for b in differing), [(b, got[b], want[b]) for b in differing if not ties[b]]
    assert sum(1 for count in ties if not count) >= len(ties) / 3, ties


@pytest.mark.slow
def test_align_is_the_saved_models_at_alpha_0_but_where_an_argmax_nearly_ties(ct2_export, ct2_version):
    import tensorflow as tf

    translator = ct2_export[1]  # the export's weights, head and alpha 0
    sources = SENTENCES + validation_sources(100)
    got = ct2_version.run("align", {"inputs": strings(sources)})
    # The in-memory translator's align, which test_align_signature.py holds equal to the loaded SavedModel's.
    want = {k: v.numpy() for k, v in translator.serve_align(tf.constant(sources)).items()}
    assert got["translations"].tolist() == want["translations"].tolist()
    np.testing.assert_allclose(got["scores"], want["scores"], rtol=1e-3, atol=1e-3)
    translations = [t.decode("utf-8") for t in got["translations"]]
    ties = near_ties(translator, sources, translations)
    assert_lines_agree_but_at_near_ties(got["alignments"].tolist(), want["alignments"].tolist(), ties)
    assert got["alignments"].tolist()[1:3] == [b"", b""]  # the blank inputs

    # Translations of many words: the references, given, as the SavedModel's align_targets aligns them.
    sources, references = (a + b for a, b in zip(validation_pairs(200), EDGE_PAIRS))
    lines = ct2_version.engine.word_alignments(sources, references)
    want = [line.decode("utf-8") for line in
            translator.align_targets(tf.constant(sources), tf.constant(references))["alignments"].numpy()]
    assert_lines_agree_but_at_near_ties(lines, want, near_ties(translator, sources, references))
    assert lines[-2:] == ["", ""] and all(lines[:-2])


def test_the_search_attention_is_not_read_ctranslate2_mixes_up_its_first_rows(ct2_version):
    """Why `align` forces its translations rather than read the search's attention: with a
    batch of several sentences, CTranslate2 4.8.5's beam search returns as a sentence's first
    row another sentence's first row (cut to its source's length), while its later rows are
    the forced pass's. When this fails, CTranslate2 returns the search's attention rightly,
    and `align` may read it instead."""
    engine = ct2_version.engine
    sources = engine.source_pieces(validation_sources(6))
    searched = engine.translator.translate_batch(
        sources, beam_size=4, max_input_length=0, min_decoding_length=4, max_decoding_length=4,
        return_attention=True, end_token=engine.pieces[2],
    )
    forced = engine.forced_attention(sources, [result.hypotheses[0] for result in searched])
    rows = [np.asarray(result.attention[0], np.float32) for result in searched]  # [4, S] each
    for row, want in zip(rows, forced):
        np.testing.assert_allclose(row[1:], want[1:], rtol=0, atol=1e-5)
    own = [np.allclose(row[0], want[0], rtol=0, atol=1e-5) for row, want in zip(rows, forced)]
    assert not all(own), own
    for row in rows:
        assert any(len(want[0]) >= len(row[0]) and np.allclose(row[0], want[0][: len(row[0])], rtol=0, atol=1e-5)
                   for want in forced)


def test_a_version_exported_without_its_alignment_head_has_no_align(ct2_export, tmp_path):
    from app.serving.ctranslate2_version import CTranslate2Version

    path = tmp_path / "1"
    shutil.copytree(ct2_export[0], path)
    info = json.loads((path / "export_info.json").read_text())
    del info["alignment_head"]
    (path / "export_info.json").write_text(json.dumps(info))
    version = CTranslate2Version(1, str(path))
    assert "align" not in version.signatures and "align" not in version.signature_def["signature_def"]


# Refusals.


def test_scale_norm_is_refused_by_name_and_nothing_is_written(model_dir, tmp_path, capsys):
    import export
    from app.export.ctranslate2 import export_ctranslate2
    from app.export.saved_model import ExportError, Translator
    from app.model.config import ModelConfig
    from app.model.transformer import build_transformer
    from data.tokenizer import SubwordTokenizer

    message = "normalization: 'scale' (ScaleNorm) has no CTranslate2 equivalent"
    config = ModelConfig.from_size("tiny", vocab_size=400, num_layers=1, d_model=32, d_ff=64, num_heads=2,
                                   max_length=48, normalization="scale")
    tokenizer = SubwordTokenizer.load(os.path.join(model_dir, "subwords.model"))
    translator = Translator(build_transformer(config), config, tokenizer)
    with pytest.raises(ExportError, match=re.escape(message)):
        export_ctranslate2(translator, str(tmp_path / "ct2"))
    assert not os.path.exists(tmp_path / "ct2" / "1")

    # The command refuses a model directory with it before loading anything.
    scale_dir = tmp_path / "scale-run"
    scale_dir.mkdir()
    settings = json.load(open(os.path.join(model_dir, "settings.json")))
    settings["model"]["normalization"] = "scale"
    (scale_dir / "settings.json").write_text(json.dumps(settings))
    argv = ["--model-dir", str(scale_dir), "--format", "ctranslate2", "--output", str(tmp_path / "out"), "--alpha", "0"]
    assert export.main(argv) == 1
    assert message in capsys.readouterr().err


def test_an_ensemble_is_refused_by_name_and_nothing_is_written(ct2_export, tmp_path):
    from app.export.ctranslate2 import export_ctranslate2
    from app.export.saved_model import ExportError

    # What export.py records of `--ensemble runs/b` (export_info.json's "ensemble").
    metadata = {"ensemble": ["runs/a", "runs/b"]}
    message = "--ensemble: CTranslate2 decodes one model, not an ensemble (runs/a, runs/b)"
    with pytest.raises(ExportError, match=re.escape(message)):
        export_ctranslate2(ct2_export[1], str(tmp_path / "ct2"), metadata=metadata)
    assert not os.path.exists(tmp_path / "ct2")


def test_a_version_that_records_an_ensemble_is_refused_when_it_loads(ct2_export, tmp_path):
    from app.serving.ctranslate2_version import CTranslate2Version

    path = tmp_path / "1"
    shutil.copytree(ct2_export[0], path)
    info = json.loads((path / "export_info.json").read_text())
    (path / "export_info.json").write_text(json.dumps({**info, "ensemble": ["runs/a", "runs/b"]}))
    with pytest.raises(RuntimeError, match=re.escape(
            '(\'ensemble\': ["runs/a", "runs/b"]): a CTranslate2 version decodes one model')):
        CTranslate2Version(1, str(path))


def test_missing_ctranslate2_gives_the_install_hint(monkeypatch, model_dir, tmp_path, capsys):
    import export
    from app.export.ctranslate2 import import_ctranslate2
    from app.export.saved_model import ExportError

    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # import ctranslate2 -> ImportError
    with pytest.raises(ExportError, match="pip install -r requirements-ctranslate2.txt"):
        import_ctranslate2()
    argv = ["--model-dir", model_dir, "--format", "ctranslate2", "--output", str(tmp_path / "ct2"), "--alpha", "0"]
    assert export.main(argv) == 1
    assert "CTranslate2 is not installed: pip install -r requirements-ctranslate2.txt" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "ct2")


def test_export_command_writes_the_next_version(model_dir, tmp_path, capsys):
    import export

    base = tmp_path / "ct2"
    argv = ["--model-dir", model_dir, "--format", "ctranslate2", "--output", str(base), "--alpha", "0.6"]
    assert export.main(argv) == 0 and export.main([*argv, "--alignment-head=-1:1"]) == 0
    assert sorted(os.listdir(base)) == ["1", "2"]
    assert f"serve it: python -m app.serve --model_base_path {base}" in capsys.readouterr().out
    info = json.load(open(base / "2" / "export_info.json"))
    assert (info["engine"], info["alpha"]) == ("ctranslate2", 0.6)
    assert "parallel_searches" not in info  # the SavedModel's graph only
    # The head, resolved; by default the one-layer model's mean.
    assert info["alignment_head"] == "0:1"
    assert json.load(open(base / "1" / "export_info.json"))["alignment_head"] == "0:mean"


def test_a_head_the_model_lacks_is_refused_before_any_ctranslate2_export(model_dir, tmp_path, capsys):
    import export

    argv = ["--model-dir", model_dir, "--format", "ctranslate2", "--output", str(tmp_path / "ct2"), "--alpha", "0",
            "--alignment-head", "0:2"]
    assert export.main(argv) == 1
    assert "error: alignment head 0:2: the model's layers have 2 heads, 0 to 1" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "ct2")


# Serving: the local server over a CTranslate2 version answers as over the SavedModel.


@pytest.fixture(scope="module")
def ct2_server(ct2_export, tmp_path_factory):
    from tests.serving.server_process import Server

    base = tmp_path_factory.mktemp("ct2-serving") / "translator"
    shutil.copytree(ct2_export[0], base / "1")
    with pytest.MonkeyPatch.context() as patch:
        # CTranslate2's threads spin while they wait: on a shared CPU one is fastest.
        patch.setenv("OMP_NUM_THREADS", "1")
        server = Server(str(base), log_path=tmp_path_factory.mktemp("ct2-logs") / "serve.log")
    yield server
    server.stop()


@pytest.mark.slow
def test_the_server_answers_row_and_columnar_requests_as_over_the_saved_model(ct2_server, saved_model):
    want_texts, want_scores = saved_model_translations(saved_model, SENTENCES)
    status, rows = ct2_server.predict({"instances": SENTENCES})
    assert status == 200, rows
    assert [p["translations"] for p in rows["predictions"]] == want_texts
    np.testing.assert_allclose([p["scores"] for p in rows["predictions"]], want_scores, rtol=1e-3, atol=1e-3)
    status, columns = ct2_server.predict({"inputs": SENTENCES})
    assert status == 200 and set(columns) == {"outputs"}
    assert columns["outputs"]["translations"] == want_texts

    n = len(SENTENCES)
    want_short, _ = saved_model_translations(saved_model, SENTENCES, max_extra_length=3)
    instances = [{"inputs": s, "alpha": 0.0, "max_extra_length": 3} for s in SENTENCES]
    status, body = ct2_server.predict({"signature_name": "translate_with_options", "instances": instances})
    assert status == 200 and [p["translations"] for p in body["predictions"]] == want_short
    options = {"inputs": SENTENCES, "alpha": [0] * n, "max_extra_length": [3] * n}
    status, body = ct2_server.predict({"signature_name": "translate_with_options", "inputs": options})
    assert status == 200 and body["outputs"]["translations"] == want_short

    status, nbest = ct2_server.predict({"signature_name": "nbest", "inputs": SENTENCES})
    assert status == 200
    assert np.array(nbest["outputs"]["scores"]).shape == (n, 4)
    assert [row[0] for row in nbest["outputs"]["translations"]] == want_texts
    assert all(row == sorted(row, reverse=True) for row in nbest["outputs"]["scores"])
    status, greedy = ct2_server.predict({"signature_name": "greedy", "instances": SENTENCES})
    assert status == 200 and len(greedy["predictions"]) == n
    assert ct2_server.predict({"signature_name": "nbest", "inputs": []}) == (
        200, {"outputs": {"scores": [], "translations": []}}
    )


def test_the_servers_metadata_and_errors_are_the_saved_models(ct2_server, exported):
    from app.serving.models import saved_model_signatures
    from app.serving.rest_api import signature_def_json

    status, body = ct2_server.request("GET", "/v1/models/translator/metadata")
    assert status == 200 and body["model_spec"] == {"name": "translator", "signature_name": "", "version": "1"}

    def shapes(signature_def):
        # Tensor names differ (a graph's, which CTranslate2 has not), and a SavedModel has
        # its initializer too, which is no signature a client can call.
        return {
            (name, side): {k: (v["dtype"], v["tensor_shape"]) for k, v in s[side].items()}
            for name, s in signature_def["signature_def"].items()
            if not name.startswith("__")
            for side in ("inputs", "outputs")
        }

    saved = shapes(signature_def_json(saved_model_signatures(exported[2])))
    served = shapes(body["metadata"]["signature_def"])
    # Those that decode by beam search, and `align`, exactly as the SavedModel's; sampling and
    # forced decoding (`sample`, `score`) are the SavedModel's only (docs/serving.md).
    # `constrained` and `align` are served whether or not the SavedModel export at hand has
    # them yet; where it has, alike.
    saved_names, served_names = {name for name, _ in saved}, {name for name, _ in served}
    assert served_names == (saved_names - {"sample", "score"}) | {"constrained", "align"}
    assert {key: value for key, value in served.items() if key[0] in saved_names} == {
        key: value for key, value in saved.items() if key[0] in served_names
    }
    instance = {"inputs": "A man.", "alpha": -1.0, "max_extra_length": 5}
    status, error = ct2_server.predict({"signature_name": "translate_with_options", "instances": [instance]})
    assert status == 400 and "alpha must not be negative" in error["error"]
    status, error = ct2_server.predict({"signature_name": "nope", "inputs": ["A man."]})
    assert status == 400 and 'Serving signature name: "nope" not found' in error["error"]
    # `constrained` over REST: its bool output as JSON true, and phrases refused.
    instance = {"inputs": "A man.", "prefixes": "Ein", "constraints": "", "no_repeat_ngram_size": 2, "alpha": 0.0,
                "max_extra_length": 5}
    status, body = ct2_server.predict({"signature_name": "constrained", "instances": [instance]})
    assert status == 200 and body["predictions"][0]["constraints_met"] is True
    assert body["predictions"][0]["translations"].startswith("Ein")
    status, error = ct2_server.predict({"signature_name": "constrained", "instances": [
        {**instance, "constraints": "Fahrrad"}]})
    assert status == 400 and "CTranslate2 versions do not support lexical constraints" in error["error"]
    # `align` over REST: each translation with its Pharaoh line, "" for a blank input.
    status, body = ct2_server.predict({"signature_name": "align", "instances": ["A man rides a bike.", " "]})
    assert status == 200 and [set(p) for p in body["predictions"]] == [{"translations", "scores", "alignments"}] * 2
    assert re.fullmatch(r"\d+-\d+( \d+-\d+)*", body["predictions"][0]["alignments"])
    assert body["predictions"][1]["alignments"] == ""
    assert ct2_server.predict({"signature_name": "align", "inputs": []}) == (
        200, {"outputs": {"alignments": [], "scores": [], "translations": []}}
    )
