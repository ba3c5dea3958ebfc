"""app/decoding/config.py's RULES: one test per rule that answers alike for a Python number,
a NumPy array and a tensor, so that the config, a request's tensors and a CTranslate2
version's arrays are checked by the same rule."""

import math
import re

import numpy as np
import pytest
import tensorflow as tf

from app.decoding.config import RULES, broken_rule, check
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
