"""How to decode, and the one rule of each decoding setting.

    DecodingConfig(beam_size=4, alpha=0.6, max_extra_length=50, parallel_searches=2)
    SamplingConfig(top_k=0, top_p=0.9, temperature=1.0, seed=0)
    AlignmentHead.parse("-2:mean").resolved(num_layers=6, num_heads=8)   # AlignmentHead(layer=4, head=None)
    chosen_alignment_head(model_config, train_settings=settings)         # which head word alignments read

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


@dataclasses.dataclass(frozen=True)
class AlignmentHead:
    """Which decoder cross-attention word alignments read (app/decoding/alignment.py):
    one head of one layer, or the mean of the layer's heads. Written `LAYER:HEAD` or
    `LAYER:mean` (`parse`, `str`), as export.py's --alignment-head takes it and
    export_info.json records it."""

    # The decoder layer, from 0; a negative one counts from the end (-1: the last).
    layer: int
    # The head's index, from 0; None: the mean of the layer's heads.
    head: typing.Optional[int] = None

    @classmethod
    def parse(cls, text):
        """`"4:mean"` -> `AlignmentHead(4, None)`, `"-1:0"` -> `AlignmentHead(-1, 0)`.

        Raises:
            ValueError naming `text`, unless it is an integer layer, a colon, and a head
            index from 0 or `mean`.
        """
        layer, colon, head = str(text).strip().partition(":")
        if colon and _is_integer(layer) and (head == "mean" or (head.isdigit() and head.isascii())):
            return cls(int(layer), None if head == "mean" else int(head))
        raise ValueError(f"alignment head {text!r}: not LAYER:HEAD or LAYER:mean (such as 4:mean or -1:0)")

    def __str__(self):
        return f"{self.layer}:{'mean' if self.head is None else self.head}"

    def resolved(self, num_layers, num_heads):
        """The same head in a model of `num_layers` decoder layers of `num_heads` heads, its
        layer counted from 0.

        Raises:
            ValueError naming the head and what the model has.
        """
        if not -num_layers <= self.layer < num_layers:
            raise ValueError(
                f"alignment head {self}: the model has {_layers(num_layers)}, 0 to {num_layers - 1} "
                f"(or -1 to -{num_layers} from the end)"
            )
        if self.head is not None and not 0 <= self.head < num_heads:
            raise ValueError(f"alignment head {self}: the model's layers have {num_heads} heads, 0 to {num_heads - 1}")
        return AlignmentHead(self.layer % num_layers, self.head)


def _layers(count):
    return f"{count} decoder layer" + ("" if count == 1 else "s")


def _is_integer(text):
    digits = text[1:] if text.startswith("-") else text
    return digits.isdigit() and digits.isascii()


# The head a model trained without alignment supervision aligns with until the benchmark
# measures them: the second-to-last layer's mean, as Garg et al. (2019) found best and
# fairseq's alignment_layer (4 of 6) reads.
DEFAULT_UNGUIDED = AlignmentHead(-2, None)
# The head guided alignment training supervises unless told another (train.py's
# --guided-alignment-head): the last layer's first head, as OpenNMT-tf's guided alignment
# and CTranslate2's default alignment read.
DEFAULT_GUIDED = AlignmentHead(-1, 0)


def default_alignment_head(num_layers):
    """`DEFAULT_UNGUIDED`, or layer 0's mean in a one-layer model (it has no second-to-last)."""
    return DEFAULT_UNGUIDED if num_layers > 1 else AlignmentHead(0, None)


def chosen_alignment_head(model_config, override=None, *, train_settings=None):
    """The one rule for the head a model's word alignments read, resolved against
    `model_config` (its `num_layers` and `num_heads`): `override` (export.py's
    --alignment-head) where given; else the head a guided run was trained to align with
    (`train_settings`, the training section of its settings.json, names it as
    `guided_alignment_head`); else `default_alignment_head`.

    Raises:
        ValueError naming a head the model does not have.
    """
    guided = (train_settings or {}).get("guided_alignment_head")
    if override is not None:
        head = override
    elif guided is not None:
        head = AlignmentHead.parse(guided)
    else:
        head = default_alignment_head(model_config.num_layers)
    return head.resolved(model_config.num_layers, model_config.num_heads)
