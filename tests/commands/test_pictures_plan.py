"""app.pictures' flags made into an `AttentionPlan` or a `CurvesPlan` (app/commands/pictures.py),
the flags left as parsed. The command: test_pictures.py; the pictures: tests/visualization/."""

import copy
import os

import pytest

from app.commands.pictures import AttentionPlan, CurvesPlan, parse_args, plan_pictures
from app.cli.flag_types import FlagError
from app.decoding.config import DecodingConfig
from app.export.model_source import ModelSource
from app.visualization.output import PicturesError


def planned(*argv):
    args = parse_args(list(argv))
    before = copy.deepcopy(vars(args))
    plan = plan_pictures(args)
    assert vars(args) == before
    return plan


@pytest.fixture(autouse=True)
def run(tmp_path, monkeypatch):
    """A working directory with the model directory `run`: the attention plan checks it is there."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run").mkdir()


def test_attention_pictures_go_under_the_run_unless_told():
    assert planned("attention", "--model-dir", "run", "--sentence", "A man.") == AttentionPlan(
        model=ModelSource(model_dir="run"), sentence="A man.", target=None,
        output=os.path.join("run", "pictures", "attention"), per_layer=False, decoding=DecodingConfig(4, 0.6, 50),
    )
    flags = ["--target", "Ein Mann.", "--output", "out", "--per-layer", "--checkpoint", "latest", "--beam-size", "2",
             "--alpha", "0", "--max-extra-length", "5"]
    assert planned("attention", "--model-dir", "run", "--sentence", "A man.", *flags) == AttentionPlan(
        model=ModelSource(model_dir="run", checkpoint="latest"), sentence="A man.", target="Ein Mann.",
        output="out", per_layer=True, decoding=DecodingConfig(2, 0.0, 5),
    )


def test_curves_go_under_the_run_unless_told():
    assert planned("curves", "--model-dir", "run") == CurvesPlan("run", os.path.join("run", "pictures", "curves.png"))
    assert planned("curves", "--model-dir", "run", "--output", "c.png") == CurvesPlan("run", "c.png")


def test_an_empty_sentence_or_target_is_refused_by_name():
    for flags, message in ((["--sentence", " "], "--sentence is empty"), (["--sentence", "a", "--target", ""],
                                                                            "--target is empty")):
        with pytest.raises(PicturesError, match=message):
            plan_pictures(parse_args(["attention", "--model-dir", "run", *flags]))


def test_a_model_directory_that_is_not_there_is_named():
    with pytest.raises(FlagError, match="^--model-dir nowhere: no such directory$"):
        plan_pictures(parse_args(["attention", "--model-dir", "nowhere", "--sentence", "A man."]))
