"""Resuming a run: after a crash it ends as an uninterrupted run does, and a damaged or
half-written checkpoint is named or passed over."""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from app.model_dir import checkpoints
from tests.training.helpers import checkpoint_weights, run_training, summaries

# Why the fast tier runs no test of this file (tests/tiers.py).
ALL_SLOW_BECAUSE = "each test trains a run and resumes it"


@pytest.mark.slow
def test_resuming_after_a_crash_matches_an_uninterrupted_run(small_data, tmp_path):
    uninterrupted = run_training(small_data, tmp_path / "straight", eval_every=4)

    def crash(transformer):
        raise RuntimeError("simulated crash")

    with pytest.raises(RuntimeError, match="simulated crash"):
        run_training(small_data, tmp_path / "resumed", evaluate_fn=crash, eval_every=4)
    # The crash came at step 4; the newest checkpoint is step 3's.
    assert checkpoints.checkpoint_paths(tmp_path / "resumed")[-1].endswith("ckpt-3")
    metrics = tmp_path / "resumed" / "metrics.jsonl"
    assert [json.loads(line)["step"] for line in open(metrics)] == [1, 2, 3, 4]
    with open(metrics, "a") as f:
        f.write('{"step": 5, "lo')  # a record cut off by the crash
    resumed = run_training(small_data, tmp_path / "resumed", eval_every=4)

    assert resumed["step"] == uninterrupted["step"] == 6
    expected, actual = checkpoint_weights(uninterrupted["checkpoint"]), checkpoint_weights(resumed["checkpoint"])
    assert expected.keys() == actual.keys() and expected
    for name in expected:
        np.testing.assert_allclose(actual[name], expected[name], atol=1e-6, err_msg=name)
    # Step 4 was recorded before the crash and again after the resume from step 3: once.
    expected, actual = (
        [json.loads(line) for line in open(run / "metrics.jsonl")] for run in (tmp_path / "straight", metrics.parent)
    )
    assert [(r["step"], sorted(r)) for r in actual] == [(r["step"], sorted(r)) for r in expected]
    assert [r["step"] for r in actual] == [1, 2, 3, 4, 4, 5, 6, 6]  # evaluations at 4 and (the final) 6
    losses = [[r.get("loss", r.get("valid_loss")) for r in records] for records in (actual, expected)]
    np.testing.assert_allclose(*losses, rtol=1e-5)
    # So in TensorBoard's files: step 4's loss, written before the crash, once.
    expected, actual = (summaries(run) for run in (tmp_path / "straight", metrics.parent))
    assert sorted(actual) == sorted(expected)
    assert ("loss", 4) in actual and len(set(actual)) == len(actual)


@pytest.fixture(scope="module")
def three_steps(small_data, tmp_path_factory):
    """`copy(model_dir)`: writes into `model_dir` a copy of one 3-step run (a checkpoint at
    step 3), trained once for this file's tests that damage or resume it, each its own copy."""
    run = tmp_path_factory.mktemp("three_steps")
    run_training(small_data, run, train_steps=3, checkpoint_every=3)

    def copy(model_dir):
        shutil.copytree(run, model_dir, dirs_exist_ok=True)

    return copy


@pytest.mark.slow
def test_a_damaged_checkpoint_or_best_record_is_named_when_training_resumes(small_data, tmp_path, three_steps):
    from app.model_dir.checkpoints import CheckpointError

    three_steps(tmp_path)
    best = tmp_path / "best" / "best.json"
    best.write_text('{"step": 3, "sco')
    with pytest.raises(CheckpointError, match=f"^{best} is not valid JSON .*; restore it, or delete it"):
        run_training(small_data, tmp_path, train_steps=6)
    best.write_text("[3]")
    with pytest.raises(CheckpointError, match=f"^{best} holds list, not a JSON object"):
        run_training(small_data, tmp_path, train_steps=6)
    best.unlink()
    newest = tf.train.latest_checkpoint(str(tmp_path / "checkpoints"))
    (data_file,) = (tmp_path / "checkpoints").glob(os.path.basename(newest) + ".data-*")
    data_file.write_bytes(data_file.read_bytes()[:100])  # cut short
    with pytest.raises(CheckpointError, match=f"^checkpoint {newest} cannot be read .*missing or damaged$"):
        run_training(small_data, tmp_path, train_steps=6)


@pytest.mark.slow
def test_a_checkpoint_cut_off_while_saving_is_never_the_one_resumed(small_data, tmp_path, three_steps):
    three_steps(tmp_path)
    # What a crash in the middle of saving step 6 leaves: data files, no index entry.
    directory = tmp_path / "checkpoints"
    (directory / "ckpt-6.index").write_bytes(b"\x00half-written")
    (directory / "ckpt-6.data-00000-of-00001").write_bytes(b"\x00half-written")
    assert checkpoints.checkpoint_paths(tmp_path)[-1].endswith("ckpt-3")
    resumed = run_training(small_data, tmp_path, train_steps=4, checkpoint_every=100)
    assert resumed["step"] == 4 and resumed["checkpoint"].endswith("ckpt-4")


@pytest.mark.slow
@pytest.mark.parametrize("checkpoint_every", [1, 100])
def test_patience_counts_the_same_evaluations_in_a_resumed_run_as_in_an_uninterrupted_one(
    small_data, tmp_path, checkpoint_every
):
    # The scores of the evaluations at steps 1, 2, ...: the best at step 2, then two
    # without gain stop the run at step 4.
    scores = [5.0, 9.0, 7.0, 8.0, 8.5]

    def scored(first_step, last_step=len(scores)):
        left = iter(scores[first_step - 1 : last_step])

        def evaluate(transformer):
            score = next(left, None)
            if score is None:
                raise RuntimeError("simulated crash")
            return {"bleu": score}

        return evaluate

    flags = dict(eval_every=1, patience=2, train_steps=6, checkpoint_every=checkpoint_every)
    assert run_training(small_data, tmp_path / "straight", evaluate_fn=scored(1), **flags)["step"] == 4
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_training(small_data, tmp_path / "resumed", evaluate_fn=scored(1, last_step=2), **flags)
    # The crash came in step 3's evaluation. Resumed from step 3's checkpoint, the run
    # trains on to step 4; from none (a checkpoint every 100 steps), it starts again from
    # step 0 with step 2's best on record, and its evaluations of steps 1 and 2, redone,
    # are no losses.
    resume_from = {1: 3, 100: 0}[checkpoint_every]
    resumed = run_training(small_data, tmp_path / "resumed", evaluate_fn=scored(resume_from + 1), **flags)
    assert resumed["step"] == 4
