"""app.score's flags made into a `ScorePlan` (app/commands/score.py), the flags left as
parsed. The command's scores: test_score.py."""

import copy

import pytest

from app.cli.output_file import STDIN
from app.commands.score import FlagError, ScorePlan, parse_args, plan_scoring
from app.export.model_source import ModelSource
from app.runtime.threads import CpuThreads


def planned(*argv):
    """The plan of app.score's flags `argv`, after checking that it left them as parsed."""
    _, args = parse_args(list(argv))
    before = copy.deepcopy(vars(args))
    plan = plan_scoring(args)
    assert vars(args) == before
    return plan


@pytest.fixture
def files(tmp_path):
    for name in ("source.en", "target.de"):
        (tmp_path / name).write_text("A man.\n", encoding="utf-8")
    return str(tmp_path / "source.en"), str(tmp_path / "target.de")


def test_a_saved_model_base_is_scored_by_its_newest_version(tmp_path, files):
    for version in ("3", "12"):
        (tmp_path / "en-de" / version).mkdir(parents=True)
        (tmp_path / "en-de" / version / "saved_model.pb").write_bytes(b"")
    source, target = files
    assert planned("--saved-model", str(tmp_path / "en-de"), "--source", source, "--target", target) == ScorePlan(
        model=ModelSource(saved_model=str(tmp_path / "en-de" / "12")), source=source, target=target, output=None,
        batch_size=64, normalize=False, threads=CpuThreads(),
    )


def test_a_training_run_and_every_other_flag(tmp_path, files):
    source, _ = files
    flags = ["--model-dir", str(tmp_path), "--average-last", "2", "--source", source, "--target", STDIN,
             "--output", str(tmp_path / "scores.tsv"), "--batch-size", "16", "--normalize"]
    assert planned(*flags) == ScorePlan(
        model=ModelSource(model_dir=str(tmp_path), average_last=2), source=source, target=STDIN,
        output=str(tmp_path / "scores.tsv"), batch_size=16, normalize=True, threads=CpuThreads(),
    )
    _, args = parse_args(["--model-dir", str(tmp_path), "--source", STDIN, "--target", STDIN])
    with pytest.raises(FlagError, match="--source and --target cannot both read standard input"):
        plan_scoring(args)
