"""The export's `constrained` signature: target prefixes, phrases that must appear and no
repeated n-grams, per sentence, in the SavedModel that TF Serving runs.

The shared tiny run (conftest.py's `model_dir` and `exported`) is trained for four steps:
unforced, it writes "er" again and again, so every phrase below is one it would not write.
"""

import re

import numpy as np
import pytest
import tensorflow as tf

from app.decoding.constrained_beam_search import MAX_PHRASES
from app.decoding.model_search import constrained_ids
from app.decoding.steering import Steering
from tests.conftest import SENTENCES

pytestmark = pytest.mark.usefixtures("load_each_export_once")


def signatures_of(exported):
    import tensorflow_text  # noqa: F401  (the SavedModel's tokenizer ops)

    return tf.saved_model.load(exported[2]).signatures


def constrained_request(translator, inputs, prefixes=None, constraints=None, no_repeat=None, alpha=None, extra=None):
    """The `constrained` signature's inputs for `inputs`: "", "", 0 and the export's own
    alpha and extra length where a setting is not given (lists, one per input)."""
    n = len(inputs)
    decoding = translator.decoding
    return {
        "inputs": tf.constant(inputs, tf.string),
        "prefixes": tf.constant(prefixes or [""] * n, tf.string),
        "constraints": tf.constant(constraints or [""] * n, tf.string),
        "no_repeat_ngram_size": tf.constant(no_repeat or [0] * n, tf.int32),
        "alpha": tf.constant(alpha or [decoding.alpha] * n, tf.float32),
        "max_extra_length": tf.constant(extra or [decoding.max_extra_length] * n, tf.int32),
    }


def normalized(translator, text):
    """`text` as the tokenizer spells it: what a forced phrase or prefix detokenizes to."""
    tokenizer = translator.tokenizer
    return tokenizer.detokenize(tokenizer.tokenize(tf.constant([text])).to_tensor()).numpy()[0].decode()


@pytest.mark.slow
def test_without_prefix_phrases_or_n_gram_rule_it_is_serving_default_exactly(exported):
    translator, _, _, expected = exported
    outputs = signatures_of(exported)["constrained"](**constrained_request(translator, SENTENCES))
    np.testing.assert_array_equal(outputs["translations"].numpy(), expected["translations"])
    np.testing.assert_array_equal(outputs["scores"].numpy(), expected["scores"])
    assert outputs["constraints_met"].numpy().tolist() == [True] * len(SENTENCES)


@pytest.mark.slow
def test_every_phrase_appears_even_one_the_model_never_writes(exported):
    translator, _, _, expected = exported
    # "Fahrrad" is five subwords here; the model, unforced, writes "er er er ...".
    assert translator.tokenizer.tokenize(tf.constant(["Fahrrad"])).row_lengths().numpy()[0] >= 2
    constraints = ["Fahrrad", "", "Hund\tSchnee", "\t\t", "ein Mann\tFahrrad\tHund", ""]
    request = constrained_request(translator, SENTENCES, constraints=constraints)
    outputs = signatures_of(exported)["constrained"](**request)
    translations = [text.decode() for text in outputs["translations"].numpy()]
    for translation, phrases, unconstrained in zip(translations, constraints, expected["translations"]):
        for phrase in filter(None, (p.strip() for p in phrases.split("\t"))):
            assert normalized(translator, phrase) in translation
            assert normalized(translator, phrase) not in unconstrained.decode()
        if not phrases.strip():
            # In a batch that runs the constrained search, a sentence without phrases
            # still gets beam search's translation.
            assert translation == unconstrained.decode()
    assert outputs["constraints_met"].numpy().all()


@pytest.mark.slow
def test_the_translation_starts_with_its_prefix_as_the_tokenizer_spells_it(exported):
    translator, _, _, _ = exported
    inputs = SENTENCES[:4]
    prefixes = ["Ein Mann fährt", "", "Hunde", "Zwei  Hunde spiel"]  # a double space, a part of a word
    request = constrained_request(translator, inputs, prefixes=prefixes, constraints=["", "", "Schnee", ""])
    outputs = signatures_of(exported)["constrained"](**request)
    for translation, prefix in zip(outputs["translations"].numpy(), prefixes):
        assert translation.decode().startswith(normalized(translator, prefix))
    assert normalized(translator, "Zwei  Hunde spiel") == "Zwei Hunde spiel"
    assert "Schnee" in outputs["translations"].numpy()[2].decode()


@pytest.mark.parametrize("size", [1, 2, 3])
def test_no_n_gram_of_the_size_occurs_twice_in_the_tokens(exported, size):
    translator, _, _, _ = exported
    inputs = tf.constant(SENTENCES)
    n = len(SENTENCES)
    steering = Steering(tf.zeros([n, 1], tf.int32), tf.zeros([n], tf.int32), tf.fill([n], size))
    phrases, lengths = translator.phrase_ids(tf.constant(["", "Hund", "", "", "", ""]))
    ids, _, met = constrained_ids(
        translator.transformer, translator.source_ids(inputs), phrases, lengths, beam_size=4,
        steering=steering, final_results=1,
    )  # [B, K, L]
    for row in ids[:, 0].numpy():
        tokens = [int(token) for token in row if token != 0]
        grams = [tuple(tokens[i : i + size]) for i in range(len(tokens) - size + 1)]
        assert len(grams) == len(set(grams)), tokens
    assert met[:, 0].numpy().all()


@pytest.mark.slow
def test_the_saved_model_steers_as_the_in_memory_search_does(exported):
    translator, _, _, _ = exported
    request = constrained_request(
        translator, SENTENCES, prefixes=["Ein", "", "", "Zwei Hunde", "", "dog"],
        constraints=["Fahrrad", "Hund", "", "Schnee\tHund", "", ""], no_repeat=[2, 0, 3, 0, 1, 2],
        alpha=[0.6, 0.0, 1.0, 0.6, 0.6, 0.2], extra=[10, 50, 5, 20, 50, 3],
    )
    loaded = signatures_of(exported)["constrained"](**request)
    in_memory = translator.serve_constrained(**request)
    for name in ("translations", "constraints_met"):
        np.testing.assert_array_equal(loaded[name].numpy(), in_memory[name].numpy())
    np.testing.assert_allclose(loaded["scores"].numpy(), in_memory["scores"].numpy(), rtol=1e-6)
    # Each sentence as it is alone: its settings are its own.
    for i in range(len(SENTENCES)):
        alone = translator.serve_constrained(**{key: value[i : i + 1] for key, value in request.items()})
        assert alone["translations"].numpy()[0] == in_memory["translations"].numpy()[i]


@pytest.mark.slow
def test_a_phrase_that_cannot_fit_is_reported_unmet(exported):
    translator, _, _, _ = exported
    # The model has 48 positions: three 20-word phrases cannot all fit.
    long_phrase = " ".join(["Hund"] * 20)
    constraints = ["\t".join([long_phrase, "Fahrrad " + long_phrase, "Schnee " + long_phrase])]
    request = constrained_request(translator, ["A dog."], constraints=constraints)
    outputs = signatures_of(exported)["constrained"](**request)
    assert outputs["constraints_met"].numpy().tolist() == [False]
    assert outputs["translations"].numpy()[0]  # the best translation found, whatever it holds


@pytest.mark.slow
def test_bad_requests_are_refused_naming_the_setting(exported):
    translator, _, _, _ = exported
    constrained = signatures_of(exported)["constrained"]
    with pytest.raises(tf.errors.InvalidArgumentError, match="no_repeat_ngram_size must be >= 0"):
        constrained(**constrained_request(translator, ["A dog."], no_repeat=[-1]))
    request = constrained_request(translator, ["A dog.", "A cat."])
    with pytest.raises(tf.errors.InvalidArgumentError, match="one constraints per input"):
        constrained(**{**request, "constraints": tf.constant(["Hund"])})
    shape = re.escape("Shape of tensor prefixes [1,2] is not compatible with expected shape [?]")
    with pytest.raises(tf.errors.InvalidArgumentError, match=shape):
        constrained(**{**request, "prefixes": tf.constant([["Ein", "Zwei"]])})
    too_many = "\t".join(["Hund"] * (MAX_PHRASES + 1))
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"at most {MAX_PHRASES} phrases"):
        constrained(**constrained_request(translator, ["A dog."], constraints=[too_many]))
