"""app.cli.flag_types: count and list flags fail in parse_args, with argparse naming the flag."""

import argparse
import re

import pytest

from app.cli.flag_types import (
    add_hidden_alias,
    float_at_least,
    int_at_least,
    int_list,
    model_name,
    name_list,
    positive_int,
)


def parser():
    parser = argparse.ArgumentParser(prog="bench")
    parser.add_argument("--steps", type=positive_int, default=60)
    parser.add_argument("--warmup", type=int_at_least(0), default=10)
    parser.add_argument("--alpha", type=float_at_least(0), default=0.6)
    parser.add_argument("--batch-sizes", type=int_list(), default="1,32")
    parser.add_argument("--sizes", type=name_list(["tiny", "small"], "size"), default="tiny")
    return parser


def test_good_values_and_string_defaults_are_parsed():
    args = parser().parse_args([])
    assert (args.steps, args.warmup, args.batch_sizes, args.sizes) == (60, 10, [1, 32], ["tiny"])
    args = parser().parse_args(["--warmup", "0", "--alpha", "0", "--batch-sizes", "4", "--sizes", "small,tiny"])
    assert (args.warmup, args.alpha, args.batch_sizes, args.sizes) == (0, 0.0, [4], ["small", "tiny"])


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--steps", "0"], "argument --steps: must be at least 1, got 0"),
        (["--steps", "ten"], "argument --steps: expected a whole number, got 'ten'"),
        (["--warmup", "-1"], "argument --warmup: must be at least 0, got -1"),
        (["--alpha", "-0.5"], "argument --alpha: must be a finite number of at least 0, got -0.5"),
        (["--alpha", "nan"], "argument --alpha: must be a finite number of at least 0, got nan"),
        (["--alpha", "x"], "argument --alpha: expected a number, got 'x'"),
        (["--batch-sizes", "1,0,-2"], "argument --batch-sizes: each must be at least 1, got 0, -2"),
        (["--batch-sizes", "1,,2"], "argument --batch-sizes: expected comma-separated whole numbers, got '1,,2'"),
        (["--sizes", "tny,small,"], "argument --sizes: unknown size(s) 'tny', ''; known: tiny, small"),
    ],
)
def test_a_bad_value_is_a_usage_error_naming_the_flag(flags, message, capsys):
    with pytest.raises(SystemExit) as exit:
        parser().parse_args(flags)
    assert exit.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"bench: error: {message}"


def test_a_hidden_alias_sets_the_same_value_and_is_not_in_help():
    parser = argparse.ArgumentParser(prog="p")
    name = parser.add_argument("--model-name", type=str.upper, default="translator", help="the name (default x)")
    quiet = parser.add_argument("--quiet", action="store_true", help="say less (default: off)")
    enable = parser.add_argument("--enable_it", nargs="?", const="yes", default="no", help="(default no)")
    add_hidden_alias(parser, name, "--name")
    add_hidden_alias(parser, quiet, "--silent")
    add_hidden_alias(parser, enable, "--enable-it")
    assert vars(parser.parse_args([])) == {"model_name": "TRANSLATOR", "quiet": False, "enable_it": "no"}
    assert vars(parser.parse_args(["--name", "en", "--silent", "--enable-it"])) == {
        "model_name": "EN", "quiet": True, "enable_it": "yes"
    }
    assert parser.parse_args(["--enable-it", "x"]).enable_it == "x"
    shown = parser.format_help()
    assert all(name in shown for name in ("--model-name", "--quiet", "--enable_it"))
    assert not any(name in shown for name in ("--name", "--silent", "--enable-it"))
    # Any action: the alias calls the flag's own.
    add_hidden_alias(parser, parser.add_argument("--count", action="count"), "--c")
    assert parser.parse_args(["--count", "--c", "--c"]).count == 3
    with pytest.raises(SystemExit):
        parser.parse_args(["--silent=yes"])  # a switch takes no value under either name


@pytest.mark.parametrize("name", ["translator", "en-de", "v1.2_x", "_a"])
def test_a_model_name_is_accepted(name):
    assert model_name(name) == name


@pytest.mark.parametrize("name", ["", ".hidden", "en/de", "../x", "a b"])
def test_a_model_name_that_is_no_directory_name_or_url_part_is_refused_by_value(name):
    with pytest.raises(argparse.ArgumentTypeError, match=f"^{re.escape(repr(name))} is not a model name"):
        model_name(name)
