"""argparse types for count and list flags: whole (or finite) numbers with a least value,
and comma-separated lists of whole numbers or of known names.

`add_hidden_alias` gives a flag a second name that --help does not list, and `FlagError`
is the one error of a flag's value that only a command's plan can find. Standard library
only (with app/export/locate.py, which is too): app.client uses them.

A bad value fails in `parse_args`, so argparse names the flag in its message and the
command exits (status 2) before it loads TensorFlow, prepares data or starts a process:

    parser.add_argument("--steps", type=positive_int)
    parser.add_argument("--batch-sizes", type=int_list(), default="1,32")
    parser.add_argument("--sizes", type=name_list(SIZES, "size"), default="tiny")
"""

import argparse
import math

from app.export.locate import MODEL_NAME


class FlagError(ValueError):
    """A flag's value that cannot be used, found when a command plans its work (a missing
    path, flags that contradict each other) or once the model is known: the command exits
    2 with the message, as argparse does for a value it refuses."""


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


def model_name(text):
    """The type of a model name (`MODEL_NAME`): letters, digits, '.', '_' and '-', not
    starting with '.'."""
    if not MODEL_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a model name: use letters, digits, '.', '_' and '-', not starting with '.'"
        )
    return text


class _SameAs(argparse.Action):
    """The action of a hidden alias: it does what the flag's own action does (`argparse.Action`
    is the documented base for custom actions, so no private argparse class is named)."""

    def __init__(self, option_strings, dest, flag, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.flag = flag

    def __call__(self, parser, namespace, values, option_string=None):
        self.flag(parser, namespace, values, option_string)


def add_hidden_alias(parser, action, alias):
    """Adds `alias` (e.g. "--name"), another spelling of the flag `action` that
    `parser.add_argument` returned: it takes the same arguments and sets the same value, and
    --help does not list it.

    For the names a flag had before it was renamed, so that no script breaks, and for the
    dashed spellings of the server's TF Serving names.
    """
    return parser.add_argument(
        alias, action=_SameAs, flag=action, dest=action.dest, nargs=action.nargs, const=action.const,
        type=action.type, choices=action.choices, metavar=action.metavar,
        default=argparse.SUPPRESS, help=argparse.SUPPRESS,
    )
