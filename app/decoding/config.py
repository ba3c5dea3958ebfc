"""How to decode, and the one rule of each decoding setting.

    DecodingConfig(beam_size=4, alpha=0.6, max_extra_length=50, parallel_searches=2)
    SamplingConfig(top_k=0, top_p=0.9, temperature=1.0, seed=0)

`RULES` says which values each setting may take, once: `DecodingConfig` checks its
Python values with them (`check`), the export's signatures check a request's tensors
with them (`model_search.checked_request`), and the CTranslate2 version a request's
arrays. Each rule's test is written with comparison operators only, so that one
expression holds for a Python number, a NumPy array and a tensor alike.

No TensorFlow here: the commands' flags take their defaults from it before TensorFlow
loads (app/cli/flags.py), and decoding (translate.py) runs with it.
"""

import dataclasses
import math
import typing


class Rule(typing.NamedTuple):
    """One condition on a setting's values: `holds(values)` is true (element-wise) where
    they meet it, and `f"{name} {phrase}"` says what it asks.

    `graph_assertion`, where set, names the `tf.debugging` function (`assert_positive`,
    `assert_non_negative`) that checks a request's tensor in the graph instead of a plain
    `Assert`: the error text a serving client gets stays the one exports have always given.
    """

    phrase: str
    holds: typing.Callable
    graph_assertion: typing.Optional[str] = None


def _is_positive_int(value):
    return isinstance(value, int) and value >= 1


def _finite(values):
    return (values > -math.inf) & (values < math.inf)  # NaN fails both comparisons


# Each setting's rules, in the order they are checked. beam_size and parallel_searches
# fix the loop's shapes and the graph's structure: Python ints, never a request's.
RULES = {
    "beam_size": (Rule("must be a positive int", _is_positive_int),),
    "parallel_searches": (Rule("must be a positive int", _is_positive_int),),
    # A negative exponent would rank short hypotheses above long ones; +inf would score
    # every hypothesis -0.0.
    "alpha": (
        Rule("must be finite", _finite),
        Rule("must not be negative", lambda values: values >= 0, "assert_non_negative"),
    ),
    "max_extra_length": (Rule("must be positive", lambda values: values > 0, "assert_positive"),),
    # Sampling (app/decoding/sampling.py).
    "top_k": (Rule("must be >= 0 (0: the whole vocabulary)", lambda values: values >= 0, "assert_non_negative"),),
    "top_p": (Rule("must be in (0, 1]", lambda values: (values > 0) & (values <= 1)),),
    "temperature": (Rule("must be a finite number > 0", lambda values: _finite(values) & (values > 0)),),
    # Steering, for every strategy (app/decoding/steering.py).
    "no_repeat_ngram_size": (Rule("must be >= 0 (0: off)", lambda values: values >= 0, "assert_non_negative"),),
}


def broken_rule(name, value):
    """The first of `RULES[name]` that the Python value `value` breaks, or None."""
    return next((rule for rule in RULES[name] if not rule.holds(value)), None)


def check(name, value):
    """ValueError naming the setting, what it must be and `value`, unless the Python value
    `value` (a number, not a tensor) meets every rule of `RULES[name]`."""
    rule = broken_rule(name, value)
    if rule is not None:
        raise ValueError(f"{name} {rule.phrase}, got {value!r}")


@dataclasses.dataclass(frozen=True)
class DecodingConfig:
    """How to decode; the defaults are the paper's (section 6.1). Checked by `RULES`."""

    # K, the number of beams (1 = greedy). A Python int: it fixes the loop's shapes.
    beam_size: int = 4
    # The GNMT length-penalty exponent; 0 ranks hypotheses by plain log-probability.
    alpha: float = 0.6
    # Each sentence may have at most (its source length + this) output tokens.
    max_extra_length: int = 50
    # How many beam searches share a call's sentences, side by side on TensorFlow's
    # inter-op threads (`translate_ids`); the translations are the same for any count.
    parallel_searches: int = 2

    def __post_init__(self):
        for field in dataclasses.fields(self):
            check(field.name, getattr(self, field.name))


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
    """One random translation per sentence instead of beam search: top-k / nucleus sampling
    (app/decoding/sampling.py, the export's `sample` signature). The defaults draw from the
    whole distribution. Checked by `RULES`."""

    # Draw among the K most likely tokens; 0: all of them.
    top_k: int = 0
    # Among the fewest most likely tokens whose probability reaches P; 1: all.
    top_p: float = 1.0
    # The logits are divided by T before the draw.
    temperature: float = 1.0
    # Sentence n of a run draws with `sentence_seed(n)`: a stream per sentence, and per seed.
    seed: int = 0

    # The distance between two seeds' streams: a run never reaches the next seed's.
    SEED_STRIDE: typing.ClassVar[int] = 2**32
    # The largest seed: `sentence_seed` stays an int64 for any sentence number below 2**32.
    MAX_SEED: typing.ClassVar[int] = 2**31 - 1

    def __post_init__(self):
        for name in ("top_k", "top_p", "temperature"):
            check(name, getattr(self, name))
        if not 0 <= self.seed <= self.MAX_SEED:
            raise ValueError(f"seed must be in [0, {self.MAX_SEED}], got {self.seed!r}")

    def sentence_seed(self, number):
        """The seed sentence `number` draws with (an int64)."""
        return self.seed * self.SEED_STRIDE + number
