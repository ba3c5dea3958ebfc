"""argparse types for count and list flags: whole (or finite) numbers with a least value,
and comma-separated lists of whole numbers or of known names.

A bad value fails in `parse_args`, so argparse names the flag in its message and the
command exits (status 2) before it loads TensorFlow, prepares data or starts a process:

    parser.add_argument("--steps", type=positive_int)
    parser.add_argument("--batch-sizes", type=int_list(), default="1,32")
    parser.add_argument("--sizes", type=name_list(SIZES, "size"), default="tiny")
"""

import argparse
import math


def _whole_number(text):
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def int_at_least(least):
    """The type of a whole number of at least `least`."""

    def parse(text):
        value = _whole_number(text)
        if value < least:
            raise argparse.ArgumentTypeError(f"must be at least {least}, got {value}")
        return value

    # argparse names the type in some messages ("invalid ... value").
    parse.__name__ = f"int_at_least_{least}"
    return parse


# A count (of steps, sentences, repeats): a whole number of at least 1.
positive_int = int_at_least(1)
positive_int.__name__ = "positive_int"


def float_at_least(least):
    """The type of a finite number of at least `least` (nan and inf are refused)."""

    def parse(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not (math.isfinite(value) and value >= least):
            raise argparse.ArgumentTypeError(f"must be a finite number of at least {least}, got {text}")
        return value

    parse.__name__ = f"float_at_least_{least}"
    return parse


def int_list(least=1):
    """The type of comma-separated whole numbers, each at least `least`: a list of them."""

    def parse(text):
        try:
            values = [int(item) for item in text.split(",")]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, got {text!r}") from None
        small = [value for value in values if value < least]
        if small:
            raise argparse.ArgumentTypeError(f"each must be at least {least}, got {', '.join(map(str, small))}")
        return values

    parse.__name__ = "int_list"
    return parse


def name_list(known, what):
    """The type of comma-separated names out of `known` (`what` names one, e.g. "size"):
    a list of them, in the order given."""

    def parse(text):
        names = text.split(",")
        unknown = [name for name in names if name not in known]
        if unknown:
            raise argparse.ArgumentTypeError(
                f"unknown {what}(s) {', '.join(map(repr, unknown))}; known: {', '.join(known)}"
            )
        return names

    parse.__name__ = f"{what}_list"
    return parse
