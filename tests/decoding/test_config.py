"""app/decoding/config.py's RULES: one test per rule that answers alike for a Python number,
a NumPy array and a tensor, so that the config, a request's tensors and a CTranslate2
version's arrays are checked by the same rule. And `AlignmentHead`, with the one rule of
the head word alignments read."""

import math
import re
import types

import numpy as np
import pytest
import tensorflow as tf

from app.decoding.config import (
    DEFAULT_UNGUIDED, RULES, AlignmentHead, broken_rule, check, chosen_alignment_head,
)
from app.decoding.model_search import checked_request

# Per request setting: values that keep every rule, and values that break one, named.
CASES = {
    "alpha": ([0.0, 0.6, 40.0], [(math.nan, "must be finite"), (math.inf, "must be finite"),
                                 (-1.0, "must not be negative")]),
    "max_extra_length": ([1, 50], [(0, "must be positive"), (-3, "must be positive")]),
    "top_k": ([0, 10], [(-1, "must be >= 0 (0: the whole vocabulary)")]),
    "top_p": ([1.0, 0.5], [(0.0, "must be in (0, 1]"), (1.5, "must be in (0, 1]"), (math.nan, "must be in (0, 1]")]),
    "temperature": ([1.0, 1e-3], [(0.0, "must be a finite number > 0"), (math.inf, "must be a finite number > 0"),
                                  (math.nan, "must be a finite number > 0")]),
    "no_repeat_ngram_size": ([0, 3], [(-1, "must be >= 0 (0: off)")]),
}
DTYPES = {"alpha": tf.float32, "max_extra_length": tf.int32, "top_k": tf.int32, "top_p": tf.float32,
          "temperature": tf.float32, "no_repeat_ngram_size": tf.int32}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_rule_answers_alike_for_a_number_an_array_and_a_tensor(name):
    good, bad = CASES[name]
    values = good + [value for value, _ in bad]
    expected = [value in good for value in values]
    assert [broken_rule(name, value) is None for value in values] == expected
    array = np.array(values, DTYPES[name].as_numpy_dtype)
    tensor = tf.constant(array)
    for values_of in (array, tensor):
        holds = np.all([np.asarray(rule.holds(values_of)) for rule in RULES[name]], axis=0)
        assert holds.tolist() == expected
    for value, phrase in bad:
        assert broken_rule(name, value).phrase == phrase
        with pytest.raises(ValueError, match=f"^{name} {re.escape(phrase)}, got {value!r}$"):
            check(name, value)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_request_breaking_a_rule_is_named_by_it_when_the_graph_runs(name):
    good, bad = CASES[name]
    checked = tf.function(lambda values: checked_request(tf.size(values), **{name: values}))
    assert checked(tf.constant(good, DTYPES[name]))[0].numpy().tolist() == pytest.approx(good)
    for value, phrase in bad:
        # tf.debugging's own assertions (the words exports have always given) or an Assert.
        graph_assertion = broken_rule(name, value).graph_assertion
        words = f"[{name} {phrase}.  ] [Condition x " if graph_assertion else f"[{name} {phrase}, got]"
        with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(words)):
            checked(tf.constant([good[0], value], DTYPES[name]))


def test_the_structural_settings_are_python_ints():
    for name in ("beam_size", "parallel_searches"):
        check(name, 1)
        for value in (0, 2.0, np.int32(2)):
            with pytest.raises(ValueError, match=f"^{name} must be a positive int, got {re.escape(repr(value))}$"):
                check(name, value)


def test_an_alignment_head_is_parsed_written_and_resolved_from_the_end():
    assert AlignmentHead.parse("4:mean") == AlignmentHead(4, None)
    assert AlignmentHead.parse("-1:0") == AlignmentHead(-1, 0)
    assert [str(AlignmentHead.parse(text)) for text in ("4:mean", "-1:0", " 2:3 ")] == ["4:mean", "-1:0", "2:3"]
    assert AlignmentHead(-1, 0).resolved(num_layers=6, num_heads=8) == AlignmentHead(5, 0)
    assert AlignmentHead(-6, None).resolved(6, 8) == AlignmentHead(0, None)
    assert AlignmentHead(5, 7).resolved(6, 8) == AlignmentHead(5, 7)


@pytest.mark.parametrize("text", ["4", "4:", ":0", "a:0", "4:-1", "4:avg", "4:0:1", "1.5:0", "4:٣", "--1:0"])
def test_an_alignment_head_that_does_not_parse_is_named(text):
    with pytest.raises(ValueError, match=f"^alignment head {re.escape(repr(text))}: not LAYER:HEAD or LAYER:mean"):
        AlignmentHead.parse(text)


@pytest.mark.parametrize(
    "head, message",
    [
        ("6:0", "alignment head 6:0: the model has 6 decoder layers, 0 to 5 (or -1 to -6 from the end)"),
        ("-7:mean", "alignment head -7:mean: the model has 6 decoder layers, 0 to 5 (or -1 to -6 from the end)"),
        ("0:8", "alignment head 0:8: the model's layers have 8 heads, 0 to 7"),
    ],
)
def test_a_head_the_model_lacks_is_named_with_what_it_has(head, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        AlignmentHead.parse(head).resolved(num_layers=6, num_heads=8)


def test_the_chosen_head_is_the_override_else_the_second_to_last_layers_mean():
    six, one = types.SimpleNamespace(num_layers=6, num_heads=8), types.SimpleNamespace(num_layers=1, num_heads=2)
    assert DEFAULT_UNGUIDED == AlignmentHead(-2, None)
    assert chosen_alignment_head(six) == AlignmentHead(4, None)
    assert chosen_alignment_head(one) == AlignmentHead(0, None)  # a one-layer model has no second-to-last
    assert chosen_alignment_head(six, AlignmentHead(-1, 3)) == AlignmentHead(5, 3)
    with pytest.raises(ValueError, match="^alignment head 1:0: the model has 1 decoder layer, 0 to 0"):
        chosen_alignment_head(one, AlignmentHead(1, 0))
