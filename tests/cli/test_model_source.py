"""--ensemble (app/cli/model_source.py): more model directories beside --model-dir, in the
`ModelSource` of every command that loads a model, refused with --saved-model and where a
directory is missing, by name."""

import os

import pytest

import export
from app.cli.flag_types import FlagError
from app.cli.model_source import model_source_from_args
from app.commands import evaluate, score, translate
from app.commands.export import plan_export
from app.export.model_source import ModelSource


@pytest.fixture
def runs(tmp_path, monkeypatch):
    """A working directory with the runs a, b and c, and an export base with version 1."""
    monkeypatch.chdir(tmp_path)
    for run in ("a", "b", "c"):
        os.makedirs(run)
    os.makedirs(os.path.join("exports", "1"))
    (tmp_path / "exports" / "1" / "saved_model.pb").write_bytes(b"")


def parsed(command, *argv):
    """The parsed flags of `command` (app.translate, app.score, app.evaluate), argparse's
    conflicts checked."""
    if command is evaluate:
        return evaluate.parse_args(list(argv))
    return command.parse_args(list(argv))[1]


@pytest.mark.parametrize("command", [translate, score, evaluate], ids=["translate", "score", "evaluate"])
def test_every_command_that_loads_a_model_takes_an_ensemble_of_model_directories(runs, command):
    extra = ["--source", "a", "--target", "a"] if command is score else []
    args = parsed(command, "--model-dir", "a", "--ensemble", "b", "c", "--checkpoint", "best", *extra)
    assert model_source_from_args(args) == ModelSource(model_dir="a", checkpoint="best", ensemble=("b", "c"))
    assert ModelSource(model_dir="a", ensemble=("b", "c")).model_dirs == ("a", "b", "c")
    alone = model_source_from_args(parsed(command, "--model-dir", "a", *extra))
    assert (alone.ensemble, alone.model_dirs) == ((), ("a",))


@pytest.mark.parametrize("command", [translate, evaluate], ids=["translate", "evaluate"])
def test_an_ensemble_with_a_saved_model_is_refused_when_parsed(runs, command, capsys):
    with pytest.raises(SystemExit) as exited:
        parsed(command, "--saved-model", "exports", "--ensemble", "b")
    assert exited.value.code == 2
    assert (
        "error: --ensemble applies to --model-dir only; a SavedModel holds the model (or ensemble) it was "
        "exported with" in capsys.readouterr().err
    )


def test_an_ensemble_without_a_model_directory_or_with_a_missing_one_is_refused_by_name(runs):
    args = score.parse_args(["--saved-model", "exports", "--ensemble", "b", "--source", "a", "--target", "a"])[1]
    with pytest.raises(FlagError, match="^--ensemble applies to --model-dir only"):
        model_source_from_args(args)
    args = score.parse_args(["--model-dir", "a", "--ensemble", "b", "gone", "--source", "a", "--target", "a"])[1]
    with pytest.raises(FlagError, match="^--ensemble gone: no such directory$"):
        model_source_from_args(args)
    with pytest.raises(ValueError, match="a SavedModel holds the model"):
        ModelSource(saved_model="exports/1", ensemble=("b",))


def test_export_takes_an_ensemble_for_a_saved_model_only(runs):
    assert plan_export(export.parse_args(["--model-dir", "a", "--ensemble", "b"])).model == ModelSource(
        model_dir="a", ensemble=("b",)
    )
    assert plan_export(export.parse_args(["--model-dir", "a"])).model.ensemble == ()
    with pytest.raises(FlagError, match="--ensemble applies to --format savedmodel only"):
        plan_export(export.parse_args(["--model-dir", "a", "--ensemble", "b", "--format", "ctranslate2"]))
