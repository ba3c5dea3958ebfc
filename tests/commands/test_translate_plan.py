"""app.translate's flags made into a `TranslatePlan` (app/commands/translate.py), the flags
left as parsed. The command's translations: test_translate.py."""

import copy

import pytest

from app.cli.output_file import STDIN
from app.cli.steering import SteeringFlags
from app.commands.translate import ExportOverrides, FlagError, TranslatePlan, parse_args, plan_translation
from app.decoding.config import DecodingConfig, SamplingConfig
from app.export.model_source import ModelSource
from app.runtime.threads import CpuThreads


def planned(*argv):
    """The plan of app.translate's flags `argv`, after checking that it left them as parsed."""
    _, args = parse_args(list(argv))
    before = copy.deepcopy(vars(args))
    plan = plan_translation(args)
    assert vars(args) == before
    return plan


@pytest.fixture
def base(tmp_path):
    """An export base whose newest version is 2 (two empty saved_model.pb files)."""
    for version in ("1", "2"):
        (tmp_path / "translator" / version).mkdir(parents=True)
        (tmp_path / "translator" / version / "saved_model.pb").write_bytes(b"")
    return tmp_path / "translator"


def test_a_saved_model_decodes_as_exported_but_for_the_flags_given(base):
    assert planned("--saved-model", str(base)) == TranslatePlan(
        model=ModelSource(saved_model=str(base / "2")), input=STDIN, output=None, batch_size=64, nbest=None,
        scores=False, decoding=None, overrides=ExportOverrides(), sampling=None, steering=None, alignments=None,
        markup=None, document=False, threads=CpuThreads(decoding=True),
    )
    assert planned("--saved-model", str(base / "1"), "--beam-size", "1").overrides == ExportOverrides(1, None, None)
    given = planned("--saved-model", str(base), "--alpha", "1.0", "--max-extra-length", "9", "--scores")
    assert (given.overrides, given.scores, given.decoding) == (ExportOverrides(None, 1.0, 9), True, None)


def test_a_training_run_decodes_with_the_flags_over_the_papers_settings(tmp_path):
    (tmp_path / "in.en").write_text("A man.\n", encoding="utf-8")
    flags = ["--model-dir", str(tmp_path), "--checkpoint", "best", "--input", str(tmp_path / "in.en"),
             "--output", str(tmp_path / "out.de"), "--batch-size", "8", "--nbest", "3", "--alpha", "1.0"]
    assert planned(*flags) == TranslatePlan(
        model=ModelSource(model_dir=str(tmp_path), checkpoint="best"),
        input=str(tmp_path / "in.en"), output=str(tmp_path / "out.de"), batch_size=8, nbest=3, scores=False,
        decoding=DecodingConfig(beam_size=4, alpha=1.0, max_extra_length=50), overrides=None, sampling=None,
        steering=None, alignments=None, markup=None, document=False, threads=CpuThreads(decoding=True),
    )
    assert planned("--model-dir", str(tmp_path), "--beam-size", "6", "--max-extra-length", "7").decoding == (
        DecodingConfig(6, 0.6, 7)
    )


def test_the_steering_flags_make_one_steering_of_their_files(tmp_path):
    for name in ("c.txt", "p.txt", "g.tsv"):
        (tmp_path / name).write_text("", encoding="utf-8")
    paths = [str(tmp_path / name) for name in ("c.txt", "p.txt", "g.tsv")]
    plan = planned("--model-dir", str(tmp_path), "--constraints", paths[0], "--prefixes", paths[1], "--glossary",
                   paths[2], "--no-repeat-ngram-size", "3", "--beam-size", "6")
    assert plan.steering == SteeringFlags(*paths, no_repeat_ngram_size=3)
    assert plan.decoding == DecodingConfig(6, 0.6, 50)  # the in-memory search's beam: --beam-size
    assert planned("--model-dir", str(tmp_path), "--no-repeat-ngram-size", "2").steering == SteeringFlags(
        None, None, None, 2
    )
    assert planned("--model-dir", str(tmp_path), "--no-repeat-ngram-size", "0").steering is None  # off
    with pytest.raises(FlagError, match=f"--constraints {tmp_path / 'none'}: no such file"):
        planned("--model-dir", str(tmp_path), "--constraints", str(tmp_path / "none"))


def test_the_align_flags_go_into_the_plan_and_the_alignments_file_is_checked(tmp_path):
    alignments = str(tmp_path / "out.align")
    plan = planned("--model-dir", str(tmp_path), "--alignments", alignments, "--markup", "html", "--document")
    assert (plan.alignments, plan.markup, plan.document, plan.aligned) == (alignments, "html", True, True)
    assert planned("--model-dir", str(tmp_path), "--document").aligned
    assert not planned("--model-dir", str(tmp_path)).aligned
    with pytest.raises(FlagError, match=f"--alignments {tmp_path}/ is a directory"):
        planned("--model-dir", str(tmp_path), "--alignments", f"{tmp_path}/")


def test_any_sampling_flag_samples_with_the_others_defaults(tmp_path):
    assert planned("--model-dir", str(tmp_path), "--sampling-topp", "0.9").sampling == SamplingConfig(0, 0.9, 1.0, 0)
    flags = ["--sampling-topk", "5", "--sampling-temperature", "0.5", "--seed", "7"]
    assert planned("--model-dir", str(tmp_path), *flags).sampling == SamplingConfig(
        top_k=5, top_p=1.0, temperature=0.5, seed=7
    )


def test_paths_that_cannot_be_used_are_named(tmp_path):
    for flags, message in (
        (["--saved-model", str(tmp_path / "none")], "--saved-model: no model exported under"),
        (["--model-dir", str(tmp_path / "none")], f"--model-dir {tmp_path / 'none'}: no such directory"),
        (["--model-dir", str(tmp_path), "--input", str(tmp_path)], "is a directory; give the file"),
    ):
        _, args = parse_args(flags)
        with pytest.raises(FlagError, match=message):
            plan_translation(args)
