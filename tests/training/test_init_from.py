"""Fine-tuning, `python train.py --init-from MODEL_DIR`: a new run starts from a trained
run's chosen weights and vocabulary with a schedule of its own, resumes itself, and refuses
flags that contradict the run it starts from."""

import contextlib
import io
import json
import os
import shutil

import numpy as np
import pytest

import train
from app.export.saved_model import load_translator
from app.model_dir import checkpoints
from app.training import loop
from app.training.init_from import nearest_size, read_init_run
from data.tokenizer import MODEL_FILENAME


def fine_tune(model_dir, corpus, new_dir, *flags, steps=1):
    """Runs train.py --init-from `model_dir` on `corpus` into `new_dir`, in this process.

    Returns:
        (exit code, stdout + stderr, the weights [values in the model's order] and
        optimizer step just before the first update, or None if it made none).
    """
    before = {}

    def capturing(model, optimizer, *args, **kwargs):
        steps_fn = loop_make_train_steps(model, optimizer, *args, **kwargs)

        def first_call(iterator, count):
            if not before:
                before["weights"] = [variable.numpy() for variable in model.weights]
                before["step"] = int(optimizer.iterations.numpy())
            return steps_fn(iterator, count)

        return first_call

    argv = [
        "--init-from", str(model_dir), "--dataset", "files:" + ",".join(corpus), "--model-dir", str(new_dir),
        "--train-steps", str(steps), "--batch-tokens", "512", "--no-bleu", "--eval-every", "0",
        "--precision", "float32", *flags,
    ]
    output = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
        patch.setattr(loop, "make_train_steps", capturing)
        code = train.main(argv)
    return code, output.getvalue(), (before or None)


loop_make_train_steps = loop.make_train_steps


def chosen_by_export(model_dir, checkpoint=None):
    """The weights export.py takes from `model_dir` (in the model's order), and their name."""
    translator, weights = load_translator(str(model_dir), checkpoint)
    return [variable.numpy() for variable in translator.model_variables], weights


def assert_same_weights(actual, expected):
    assert len(actual) == len(expected) > 0
    for got, want in zip(actual, expected):
        np.testing.assert_array_equal(got, want)


@pytest.fixture(scope="module")
def fine_tuned(model_dir, small_corpus, tmp_path_factory):
    """One run fine-tuned from `model_dir` for 1 step: `(new_dir, output, before)`."""
    new_dir = tmp_path_factory.mktemp("fine-tuned") / "run"
    code, output, before = fine_tune(model_dir, small_corpus, new_dir)
    assert code == 0, output
    return new_dir, output, before


@pytest.mark.slow
def test_a_fine_tuned_run_starts_from_the_weights_export_takes_with_the_same_vocabulary(model_dir, fine_tuned):
    new_dir, output, before = fine_tuned
    expected, weights = chosen_by_export(model_dir)
    # The fixture's run names no average: export takes its best checkpoint.
    assert weights == checkpoints.best_checkpoint(model_dir)
    assert_same_weights(before["weights"], expected)
    assert before["step"] == 0  # a fresh optimizer, at step 0
    assert f"initialized from {model_dir}: {weights}" in output.splitlines()
    assert checkpoints.checkpoint_paths(new_dir) == [os.path.join(new_dir, "checkpoints", "ckpt-1")]
    with open(os.path.join(model_dir, MODEL_FILENAME), "rb") as a, open(new_dir / MODEL_FILENAME, "rb") as b:
        assert a.read() == b.read()
    with open(os.path.join(model_dir, "settings.json")) as a, open(new_dir / "settings.json") as b:
        init_settings, settings = json.load(a), json.load(b)
    assert settings["model"] == init_settings["model"]
    assert settings["init_from"] == {
        "model_dir": os.path.abspath(model_dir), "weights": weights, "checkpoints": [os.path.abspath(weights)]
    }
    # The vocabulary settings are the init run's, and so are the languages and --max-length not given.
    for field in ("vocab_size", "subword_model", "lowercase", "source_lang", "target_lang", "max_length"):
        assert settings["data"][field] == init_settings["data"][field], field
    assert settings["train"]["train_steps"] == 1


@pytest.mark.slow
def test_the_same_command_again_resumes_the_fine_tuned_run(model_dir, small_corpus, fine_tuned, tmp_path):
    new_dir = tmp_path / "run"
    shutil.copytree(fine_tuned[0], new_dir)
    settings = json.loads((new_dir / "settings.json").read_text())
    code, output, before = fine_tune(model_dir, small_corpus, new_dir, steps=2)
    assert code == 0, output
    assert f"resumed from {new_dir / 'checkpoints' / 'ckpt-1'} at step 1 (epoch 0, batch 1)" in output
    assert "initialized from" not in output
    # Its own step 1, not the init run's weights again.
    assert before["step"] == 1
    assert_same_weights(before["weights"], _weights_of(new_dir / "checkpoints" / "ckpt-1", settings))
    # The record of where its weights came from stays that of its first start.
    assert json.loads((new_dir / "settings.json").read_text())["init_from"] == settings["init_from"]


def _weights_of(path, settings):
    """The weights of checkpoint `path`, in the order of the model `settings` describe."""
    from app.model.config import ModelConfig
    from app.model.transformer import build_transformer

    model = build_transformer(ModelConfig.from_dict(settings["model"]))
    checkpoints.restore_weights(model, str(path))
    return [variable.numpy() for variable in model.weights]


def test_a_run_that_averages_its_checkpoints_starts_fine_tuning_from_their_average(model_dir, tmp_path):
    from app.model.transformer import build_transformer

    init_dir = tmp_path / "init"
    shutil.copytree(model_dir, init_dir)
    settings = json.loads((init_dir / "settings.json").read_text())
    settings["train"]["average_last"] = 2
    (init_dir / "settings.json").write_text(json.dumps(settings))
    expected, weights = chosen_by_export(init_dir)
    assert weights == "average of ckpt-3, ckpt-4"
    # What train() calls on the model it built (the whole command: the tests above).
    init = read_init_run(str(init_dir))
    model = build_transformer(init.model_config)
    assert init.initialize(model) == f"initialized from {init_dir}: {weights}"
    assert_same_weights([variable.numpy() for variable in model.weights], expected)
    assert init.record() == {
        "model_dir": str(init_dir), "weights": weights,
        "checkpoints": [str(init_dir / "checkpoints" / "ckpt-3"), str(init_dir / "checkpoints" / "ckpt-4")],
    }


@pytest.mark.parametrize("checkpoint", [None, "best", "latest", "ckpt-3", "path"])
def test_init_checkpoint_chooses_as_export_checkpoint_does(model_dir, checkpoint):
    if checkpoint == "path":
        checkpoint = checkpoints.checkpoint_paths(model_dir)[0]
    assert read_init_run(model_dir, checkpoint).weights == load_translator(model_dir, checkpoint)[1]


def test_nearest_size_names_the_size_a_model_was_built_from():
    from app.model.config import ModelConfig

    assert nearest_size(ModelConfig.from_size("base", vocab_size=37000, num_heads=16)) == "base"
    assert nearest_size(ModelConfig.from_size("small", vocab_size=8000, dropout=0.3)) == "small"
    assert nearest_size(ModelConfig.from_size("tiny", vocab_size=400, num_layers=1, d_model=32)) == "tiny"


def test_flags_given_leaves_out_defaults():
    from app.commands.train_plan import given_flags

    given = given_flags(train.parse_args(["--size", "tiny", "--no-norm-first", "--lowercase"]))
    assert {"size", "norm_first", "lowercase"} <= given
    assert not {"subword_model", "vocab_size", "max_length", "d_model"} & given


def contradictions(model_dir):
    """(flags, the error they give) for flags that contradict the fixture's run."""
    vocabulary = json.load(open(os.path.join(model_dir, "settings.json")))["model"]["vocab_size"]
    whose = f"contradicts --init-from {model_dir}, whose"
    keep = "a fine-tuned run keeps its init run's model and vocabulary; leave {} out"
    return [
        (["--d-model", "64"], f"--d-model 64 {whose} d_model is 32: {keep.format('--d-model')}"),
        (["--no-norm-first"], f"--no-norm-first {whose} norm_first is True: {keep.format('--no-norm-first')}"),
        (["--dropout", "0.3"], f"--dropout 0.3 {whose} dropout is 0.2: {keep.format('--dropout')}"),
        (["--max-positions", "64"], f"--max-positions 64 {whose} max_length is 48"),
        (
            ["--size", "base"],
            f"--size base {whose} model has num_layers 1, d_model 32, d_ff 64, num_heads 2 "
            "(base: num_layers 6, d_model 512, d_ff 2048, num_heads 8)",
        ),
        (["--size", "base", "--variant", "C1"], f"--variant C1 {whose} num_layers is 1 (the row's 2)"),
        (["--vocab-size", "8000"], f"--vocab-size 8000 {whose} vocabulary has {vocabulary} subwords"),
        (["--subword-model", "unigram"], f"--subword-model unigram {whose} vocabulary is bpe"),
        (["--lowercase"], f"--lowercase {whose} vocabulary keeps case"),
    ]


def test_each_flag_that_contradicts_the_init_run_is_refused_naming_both_values(model_dir, small_corpus, tmp_path):
    for flags, message in contradictions(model_dir):
        code, output, _ = fine_tune(model_dir, small_corpus, tmp_path / "run", *flags)
        assert (code, flags) == (1, flags), output
        assert f"error: {message}" in output, (flags, output)
    assert not (tmp_path / "run").exists()


def test_a_missing_or_untrained_init_run_is_refused(model_dir, small_corpus, tmp_path):
    empty, no_vocabulary, untrained = tmp_path / "empty", tmp_path / "no-vocabulary", tmp_path / "untrained"
    for directory in (empty, no_vocabulary, untrained):
        directory.mkdir()
    for directory in (no_vocabulary, untrained):
        shutil.copy(os.path.join(model_dir, "settings.json"), directory)
    shutil.copy(os.path.join(model_dir, MODEL_FILENAME), untrained)
    cases = [
        (tmp_path / "missing", [], f"error: --init-from {tmp_path / 'missing'}: no such directory"),
        (empty, [], f"error: --init-from {empty} is not a trained run: {empty} is not a model directory: "
                    "no settings.json in it"),
        (no_vocabulary, [], f"error: --init-from {no_vocabulary} is not a trained run: it has no vocabulary file "
                            f"{MODEL_FILENAME}"),
        (untrained, [], f"error: --init-from {untrained} is not a trained run: it has no checkpoint yet"),
        (model_dir, ["--init-checkpoint", "ckpt-9"], f"error: --init-checkpoint 'ckpt-9' is no checkpoint of "
                                                     f"--init-from {model_dir}: give 'best', 'latest', a checkpoint "
                                                     "path (without .index) or the name of one it keeps "
                                                     "(ckpt-2, ckpt-3, ckpt-4)"),
    ]
    for init_dir, flags, message in cases:
        code, output, _ = fine_tune(init_dir, small_corpus, tmp_path / "run", *flags)
        assert code == 1 and message in output.splitlines(), (init_dir, output)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_model_dir_that_is_the_init_run_or_holds_another_run_is_refused(
    model_dir, small_corpus, fine_tuned, tmp_path
):
    new_dir = fine_tuned[0]
    scratch = tmp_path / "scratch"
    shutil.copytree(model_dir, scratch)  # a run trained from scratch
    other = tmp_path / "other"
    shutil.copytree(new_dir, other)
    settings = json.loads((other / "settings.json").read_text())
    settings["init_from"]["model_dir"] = "/somewhere/else"
    (other / "settings.json").write_text(json.dumps(settings))
    source = os.path.abspath(model_dir)
    cases = [
        (model_dir, [], f"--model-dir {model_dir} is --init-from {model_dir} itself: a fine-tuned run needs a model "
                        "directory of its own; give another --model-dir"),
        (scratch, [], f"--model-dir {scratch} holds another run (trained from scratch), not one fine-tuned from "
                      f"--init-from {source}; use another --model-dir"),
        (other, [], f"--model-dir {other} holds another run (fine-tuned from /somewhere/else), not one fine-tuned "
                    f"from --init-from {source}; use another --model-dir"),
        # The same init run, other data settings.
        (new_dir, ["--max-length", "40"], f"{new_dir} holds a run with another data configuration "
                                          "(max_length: 48 -> 40); use another --model-dir"),
    ]
    for directory, flags, message in cases:
        code, output, _ = fine_tune(model_dir, small_corpus, directory, *flags)
        assert code == 1 and f"error: {message}" in output.splitlines(), (directory, output)


@pytest.mark.slow
def test_init_checkpoint_without_init_from_and_a_fine_tuned_run_without_it_are_refused(fine_tuned, model_dir):
    output = io.StringIO()
    with contextlib.redirect_stderr(output), contextlib.redirect_stdout(output):
        code = train.main(["--init-checkpoint", "best", "--dry-run"])
    assert code == 1
    assert "error: --init-checkpoint best names the weights of --init-from: give both" in output.getvalue()
    new_dir = fine_tuned[0]
    output = io.StringIO()
    with contextlib.redirect_stderr(output), contextlib.redirect_stdout(output):
        code = train.main(["--model-dir", str(new_dir), "--train-steps", "2"])
    assert code == 1
    assert (
        f"error: --model-dir {new_dir} holds a run fine-tuned from {os.path.abspath(model_dir)}: give "
        f"--init-from {os.path.abspath(model_dir)} to resume it, or use another --model-dir"
    ) in output.getvalue().splitlines()


def test_every_model_flag_is_checked_against_the_init_run():
    import argparse

    from app.cli.flags import add_model_arguments
    from app.commands.train_plan import MODEL_FLAGS

    group = add_model_arguments(argparse.ArgumentParser())
    # --size and --variant name several fields at once, checked on their own.
    assert {action.dest for action in group._group_actions} - {"size", "variant"} == set(MODEL_FLAGS)


@pytest.mark.slow
def test_fine_tuning_peaks_at_the_rate_the_init_run_had_reached(model_dir, fine_tuned):
    from app.training.schedule import WarmupInverseSqrt, resolve_warmup_steps

    new_dir, _, _ = fine_tuned
    with open(os.path.join(model_dir, "settings.json")) as a, open(new_dir / "settings.json") as b:
        init_train, train_settings = json.load(a)["train"], json.load(b)["train"]
    d_model = json.load(open(new_dir / "settings.json"))["model"]["d_model"]
    step = int(os.path.basename(checkpoints.best_checkpoint(model_dir)).split("-")[1])
    init_schedule = WarmupInverseSqrt(
        d_model, resolve_warmup_steps(init_train["warmup_steps"], init_train["train_steps"]),
        init_train["learning_rate_scale"],
    )
    warmup = resolve_warmup_steps(train_settings["warmup_steps"], train_settings["train_steps"])
    new_schedule = WarmupInverseSqrt(d_model, warmup, train_settings["learning_rate_scale"])
    # The schedules count 0-based iterations: iteration i is step i + 1.
    np.testing.assert_allclose(float(new_schedule(warmup - 1)), float(init_schedule(step - 1)), rtol=1e-6)


@pytest.mark.slow
def test_a_learning_rate_scale_given_is_kept(model_dir, small_corpus, tmp_path):
    code, output, _ = fine_tune(model_dir, small_corpus, tmp_path / "run", "--learning-rate-scale", "0.25", steps=1)
    assert code == 0, output
    with open(tmp_path / "run" / "settings.json") as f:
        assert json.load(f)["train"]["learning_rate_scale"] == 0.25


def test_a_fine_tuned_run_keeps_its_init_runs_label_smoothing_unless_given(model_dir, small_corpus, tmp_path):
    older = tmp_path / "older"
    shutil.copytree(model_dir, older)
    # An init run written while label smoothing was a model setting, with 0.2.
    settings = json.loads((older / "settings.json").read_text())
    settings["train"].pop("label_smoothing")
    settings["model"]["label_smoothing"] = 0.2
    (older / "settings.json").write_text(json.dumps(settings))
    for flags, expected in [([], "0.2"), (["--label-smoothing", "0.05"], "0.05")]:
        code, output, _ = fine_tune(older, small_corpus, tmp_path / "run", "--dry-run", *flags)
        assert code == 0, output
        assert f"label smoothing: {expected}" in output.splitlines(), output
