"""The steering flags of app.translate and app.client, and the files they name, read
line by line beside the input (docs/steering.md).

    --constraints FILE          line N: input line N's target phrases, separated by tabs
    --prefixes FILE             line N: the text input line N's translation starts with
    --glossary FILE             source term <TAB> target term (app/decoding/glossary.py)
    --no-repeat-ngram-size N    no n-gram of N tokens twice in a translation (0: off)

    flags = steering_from_args(args)                       # None: no steering asked for
    steering = read_steering(flags, lines, "--input in.en")  # one SentenceSteering a line

Each goes through the export's `constrained` signature, one setting per sentence
(app/export/saved_model.py). A sentence's constraints are its line of --constraints and
the target terms of the glossary whose source terms it holds, each phrase once.

Standard library only (app.client uses it without TensorFlow).
"""

import dataclasses
import os
from typing import Optional

from app.cli.flag_types import FlagError, int_at_least
from app.decoding.glossary import joined_phrases, read_glossary, split_phrases
from data.text_files import read_lines

# The file flags, by their names on the command line and in `SteeringFlags`.
FILE_FLAGS = {"--constraints": "constraints", "--prefixes": "prefixes", "--glossary": "glossary"}


def add_steering_arguments(parser):
    """The four steering flags, in a group of their own."""
    group = parser.add_argument_group(
        "steering (the export's constrained signature, beam search only; docs/steering.md)"
    )
    group.add_argument(
        "--constraints",
        metavar="FILE",
        help="one line per input line: the target phrases its translation must hold, separated by tabs; "
        "an empty line: none (default: none)",
    )
    group.add_argument(
        "--prefixes",
        metavar="FILE",
        help="one line per input line: the text its translation starts with, the search going on from it; "
        "an empty line: none (default: none)",
    )
    group.add_argument(
        "--glossary",
        metavar="FILE",
        help="a TSV of source term <TAB> target term: each input line's translation must hold the target terms "
        "of the source terms it contains, whole words, any case (with --constraints: both; default: none)",
    )
    group.add_argument(
        "--no-repeat-ngram-size",
        type=int_at_least(0),
        default=0,
        metavar="N",
        help="no N tokens in a row occur twice in a translation (default 0: off)",
    )
    return group


@dataclasses.dataclass(frozen=True)
class SteeringFlags:
    """The steering flags given (`steering_from_args`): the files' paths, None where not given."""

    constraints: Optional[str]
    prefixes: Optional[str]
    glossary: Optional[str]
    # No n-gram of this many tokens twice in a translation; 0: off.
    no_repeat_ngram_size: int

    @classmethod
    def of(cls, args):
        """The steering flags of parsed flags `args`, unchecked."""
        return cls(args.constraints, args.prefixes, args.glossary, args.no_repeat_ngram_size)

    def given(self):
        """The flags that steer, as on the command line, for messages ([]: none; an
        n-gram size of 0 is off, not steering)."""
        flags = [flag for flag, field in FILE_FLAGS.items() if getattr(self, field) is not None]
        return flags + (["--no-repeat-ngram-size"] if self.no_repeat_ngram_size else [])


def steering_from_args(args):
    """The `SteeringFlags` of parsed flags `args`, or None where none steers.

    Raises:
        FlagError: a file flag that names no file.
    """
    flags = SteeringFlags.of(args)
    if not flags.given():
        return None
    for flag, field in FILE_FLAGS.items():
        path = getattr(flags, field)
        if path is not None and not os.path.isfile(path):
            raise FlagError(f"{flag} {path}: " + ("is a directory" if os.path.isdir(path) else "no such file"))
    return flags


@dataclasses.dataclass(frozen=True)
class SentenceSteering:
    """One sentence's inputs of the `constrained` signature, but for its text and decoding settings."""

    prefix: str = ""  # "": none
    constraints: str = ""  # target phrases separated by tabs; "": none
    no_repeat_ngram_size: int = 0  # 0: off


def read_steering(flags, lines, input_name, max_phrases=None):
    """One `SentenceSteering` per line of `lines` (the input, called `input_name` in
    messages), from the files `flags` names, each read whole before any decoding.

    Raises:
        FlagError: a file whose line count is not the input's (naming both and both
            counts), or, with `max_phrases`, a line with more phrases than the search takes.
        DataError: a file that is not UTF-8 text (naming the line); GlossaryError, a
            malformed glossary.
    """
    columns = {}
    for flag, field in FILE_FLAGS.items():
        path = getattr(flags, field)
        if path is None or field == "glossary":
            continue
        columns[field] = read_lines(path)
        if len(columns[field]) != len(lines):
            raise FlagError(
                f"{flag} {path} has {len(columns[field])} lines but {input_name} has {len(lines)}: "
                f"line N of {flag} steers input line N"
            )
    glossary = read_glossary(flags.glossary) if flags.glossary is not None else None
    steering = []
    for i, line in enumerate(lines):
        given = split_phrases(columns["constraints"][i]) if "constraints" in columns else []
        terms = glossary.terms(line) if glossary is not None else []
        constraints = joined_phrases(given, terms)
        count = len(split_phrases(constraints))
        if max_phrases is not None and count > max_phrases:
            raise FlagError(f"line {i + 1}: {count} constraints; the search takes at most {max_phrases} a sentence")
        prefix = columns["prefixes"][i] if "prefixes" in columns else ""
        steering.append(SentenceSteering(prefix, constraints, flags.no_repeat_ngram_size))
    return steering
