"""export.py's flags made into an `ExportPlan` (app/commands/export.py), the flags left as
parsed. The export itself: tests/export/."""

import copy
import os

import pytest

import export
from app.commands.export import ExportPlan, plan_export
from app.decoding.config import DecodingConfig
from app.export.model_source import ModelSource


@pytest.fixture(autouse=True)
def runs(tmp_path, monkeypatch):
    """A working directory holding the default run's directory and `run`: the plan checks
    that --model-dir is there."""
    monkeypatch.chdir(tmp_path)
    for run in (os.path.join("runs", "tiny-multi30k-en-de"), "run"):
        os.makedirs(run)


def planned(*argv):
    """The plan of export.py's flags `argv`, after checking that it left them as parsed."""
    args = export.parse_args(list(argv))
    before = copy.deepcopy(vars(args))
    plan = plan_export(args)
    assert vars(args) == before
    return plan


def test_without_flags_the_default_run_goes_to_a_new_version_of_saved_models_translator():
    assert planned() == ExportPlan(
        model=ModelSource(model_dir=os.path.join("runs", "tiny-multi30k-en-de")),
        decoding=DecodingConfig(beam_size=4, alpha=0.6, max_extra_length=50, parallel_searches=2),
        choose_alpha=True,  # the 0.6 above until the search on validation chooses
        format="savedmodel",
        base=os.path.join("saved_models", "translator"),
        version=None,
        model_name="translator",
    )


def test_an_alpha_given_is_not_searched_and_each_flag_lands_in_its_field():
    flags = ["--model-dir", "run", "--checkpoint", "best", "--alpha", "1.0", "--beam-size", "5",
             "--max-extra-length", "20", "--parallel-searches", "1", "--version", "3", "--model-name", "en-de"]
    assert planned(*flags) == ExportPlan(
        model=ModelSource(model_dir="run", checkpoint="best"), decoding=DecodingConfig(5, 1.0, 20, 1),
        choose_alpha=False, format="savedmodel", base=os.path.join("saved_models", "en-de"), version=3,
        model_name="en-de",
    )
    averaged = planned("--average-last", "5", "--alpha", "0")
    assert (averaged.model.average_last, averaged.decoding.alpha, averaged.choose_alpha) == (5, 0.0, False)


def test_the_base_path_given_wins_and_a_ctranslate2_export_goes_beside_the_savedmodel_versions():
    assert planned("--model-base-path", "/srv/models/m").base == "/srv/models/m"
    assert planned("--output", "/srv/models/m").base == "/srv/models/m"  # --model-base-path's name before
    assert planned("--format", "ctranslate2").base == os.path.join("saved_models", "translator", "ctranslate2")
    assert planned("--format", "ctranslate2", "--name", "en-de").base == os.path.join(
        "saved_models", "en-de", "ctranslate2"
    )
    assert planned("--format", "ctranslate2", "--model-base-path", "/srv/ct2").base == "/srv/ct2"


def test_a_model_directory_that_is_not_there_is_named():
    with pytest.raises(ValueError, match="^--model-dir nowhere: no such directory$"):
        planned("--model-dir", "nowhere")


def test_warmup_signatures_name_the_signatures_warmed_or_none():
    assert planned().warmup_signatures is None  # every signature
    assert planned("--warmup-signatures", "serving_default, align").warmup_signatures == ("serving_default", "align")
    assert planned("--warmup-signatures", "none").warmup_signatures == ()
    with pytest.raises(SystemExit):
        export.parse_args(["--warmup-signatures", "serving_default,,align"])
    from app.cli.flag_types import FlagError

    with pytest.raises(FlagError, match="--warmup-signatures applies to --format savedmodel only"):
        planned("--format", "ctranslate2", "--warmup-signatures", "serving_default")
