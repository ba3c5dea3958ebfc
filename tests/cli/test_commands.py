"""Every command's flags: checked by argparse before TensorFlow is imported, each default in
--help, one name per concept (the old names hidden aliases)."""

import argparse
import importlib
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Runs a command as `python COMMAND ARGS` would, then says on stderr whether TensorFlow was
# imported: argparse exits through SystemExit, which is caught here.
RUNNER = """
import runpy, sys
target, sys.argv = sys.argv[1], sys.argv[1:]
try:
    if target.endswith(".py"):
        runpy.run_path(target, run_name="__main__")
    else:
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    code = 0
except SystemExit as exited:
    code = exited.code
print("tensorflow imported:", "tensorflow" in sys.modules, file=sys.stderr)
sys.exit(code)
"""

# (command, a bad value, argparse's message for it)
COMMANDS = [
    ("train.py", ["--train-steps", "0"], "argument --train-steps: must be at least 1, got 0"),
    ("export.py", ["--model-name", "en/de"], "argument --model-name: 'en/de' is not a model name"),
    ("app.prepare", ["--workers", "0"], "argument --workers: must be at least 1, got 0"),
    ("app.evaluate", ["--model-dir", "x", "--beam-size", "0"], "argument --beam-size: must be at least 1, got 0"),
    ("app.serve", ["--rest_api_port", "70000"], "--rest_api_port must be 0-65535 (0: a free one), got 70000"),
    ("app.client", ["--batch-size", "x"], "argument --batch-size: expected a whole number, got 'x'"),
    (
        "app.pictures",
        ["attention", "--model-dir", "x", "--sentence", "A man.", "--alpha", "-1"],
        "argument --alpha: must be a finite number of at least 0, got -1",
    ),
]


def run(command, *args):
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    return subprocess.run(
        [sys.executable, "-c", RUNNER, command, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.slow
@pytest.mark.parametrize("command, bad, message", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_help_and_a_bad_value_answer_without_importing_tensorflow(command, bad, message):
    shown = run(command, "--help")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("usage: ")
    assert shown.stderr == "tensorflow imported: False\n"

    refused = run(command, *bad)
    assert refused.returncode == 2, refused.stderr
    lines = refused.stderr.splitlines()
    assert f": error: {message}" in lines[-2], refused.stderr
    assert lines[-1] == "tensorflow imported: False"


def parsers_of(module_name):
    """The argparse parsers a command's parse_args builds, its subcommands' included."""
    built = []

    class Built(Exception):
        pass

    def record(self, args=None, namespace=None):
        built.append(self)
        raise Built

    module = importlib.import_module(module_name)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(argparse.ArgumentParser, "parse_args", record)
        with pytest.raises(Built):
            module.parse_args([])
    parsers = list(built)
    for action in built[0]._actions:
        if isinstance(action, argparse._SubParsersAction):
            parsers += list(action.choices.values())
    return parsers


@pytest.mark.parametrize(
    "module_name",
    ["train", "export", "app.commands.prepare", "app.commands.evaluate", "app.commands.serve", "app.commands.client",
     "app.commands.pictures", "app.commands.translate", "app.commands.score", "app.commands.preflight"],
)
def test_every_optional_flag_says_its_default_in_help(module_name):
    missing = []
    for parser in parsers_of(module_name):
        groups = [group for group in parser._mutually_exclusive_groups if group.required]
        required = {id(action) for group in groups for action in group._group_actions}
        for action in parser._actions:
            if not action.option_strings or isinstance(action, argparse._HelpAction):
                continue
            if action.help == argparse.SUPPRESS:  # a hidden alias
                continue
            if action.required or id(action) in required:
                continue
            if "default" not in (action.help or ""):
                missing.append(action.option_strings[0])
    assert missing == []


def test_one_name_per_concept_and_the_old_names_still_work():
    import export
    from app.commands import client, evaluate, serve

    assert vars(export.parse_args(["--model-name", "en-de", "--model-base-path", "b"])) == vars(
        export.parse_args(["--name", "en-de", "--output", "b"])
    )
    defaults = export.parse_args([])
    assert (defaults.model_name, defaults.model_base_path) == ("translator", None)
    assert client.parse_args(["--model", "en-de"]).model_name == "en-de"
    assert client.parse_args([]).model_name == "translator"
    flags = ["--model_name", "en-de", "--model_base_path", "b", "--rest_api_port", "9", "--enable_batching", "0"]
    dashed = serve.parse_args([flag.replace("_", "-") for flag in flags])
    assert vars(dashed) == vars(serve.parse_args(flags))
    assert (dashed.model_name, dashed.model_base_path, dashed.rest_api_port, dashed.enable_batching) == (
        "en-de", "b", 9, False
    )
    assert evaluate.parse_args(["--saved-model", "saved_models/translator"]).saved_model == "saved_models/translator"


@pytest.mark.parametrize("command, hidden", [("export.py", ["--name", "--output"]), ("app.client", ["--model"])])
def test_help_shows_one_name_per_flag(command, hidden):
    shown = run(command, "--help").stdout
    assert "--model-name" in shown
    for name in hidden:
        assert f"{name} " not in shown and f"{name}\n" not in shown


def test_the_server_help_shows_tf_servings_names_only():
    shown = run("app.serve", "--help").stdout
    assert "--model_base_path" in shown and "--rest_api_port" in shown
    assert "--model-base-path" not in shown.split("\n\n", 2)[0]  # the usage line
    assert "--rest-api-port" not in shown


def test_the_training_flags_strategies_are_the_ones_the_strategy_module_makes():
    import train
    from app.training.devices import STRATEGIES, check_strategy

    # Every strategy train.py's --strategy takes is one make_strategy makes, and no other.
    for kind in STRATEGIES:
        assert train.parse_args(["--strategy", kind]).strategy == kind
        check_strategy(kind, None)
    with pytest.raises(SystemExit):
        train.parse_args(["--strategy", "tpu"])
    with pytest.raises(ValueError, match="unknown strategy 'tpu'"):
        check_strategy("tpu", None)
