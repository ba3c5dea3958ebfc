"""Whole runs of `train` (`app.training.loop`) on a small slice of Multi30k: the loss
falls, the progress lines, a non-finite loss and a full disk stop it."""

import json
import os
import re

import numpy as np
import pytest
import tensorflow as tf

from app.model_dir import checkpoints
from app.training import metrics_log
from app.training.config import TrainConfig
from app.training.loop import NonFiniteLoss, train
from app.training.run_plan import RunPlan
from tests.training.helpers import checkpoint_weights, run_training, small_model_config

# Why the fast tier runs no test of this file (tests/tiers.py).
ALL_SLOW_BECAUSE = "each test trains a run, which is what the loop does"


@pytest.mark.slow
def test_a_few_steps_lower_the_loss(small_data, tmp_path):
    result = run_training(small_data, tmp_path, train_steps=30, learning_rate_scale=2.0)
    records = [r for r in map(json.loads, open(tmp_path / "metrics.jsonl")) if "loss" in r]
    first, last = np.mean([r["loss"] for r in records[:3]]), np.mean([r["loss"] for r in records[-3:]])
    assert last < first - 0.5, (first, last)
    assert result["step"] == 30
    assert all(r["tokens_per_second"] > 0 for r in records)


@pytest.mark.slow
def test_off_a_terminal_progress_is_plain_lines_between_the_messages(small_data, tmp_path):
    lines = []
    config = TrainConfig(train_steps=6, warmup_steps=2, eval_every=4, log_every=3)
    train(
        RunPlan(size="tiny", variant=None, model_dir=str(tmp_path), model_config=small_model_config(small_data),
                data_config=small_data.config, train_config=config),
        small_data, tf.distribute.get_strategy(), lambda t: {"bleu": 1.0}, log=lines.append,
    )
    progress = [line for line in lines if line.startswith("step ") and "/" in line.split()[1]]
    assert [line.split(" - ")[0] for line in progress] == ["step 3/6", "step 6/6"]
    pattern = r"step \d/6 - loss: \d+\.\d{4} - lr: \S+ - tok/s: \d+( - eta: 0:\d\d)?"
    assert all(re.fullmatch(pattern, line) for line in progress), progress
    assert any(line.startswith("step 4: validation loss") for line in lines)
    assert not [line for line in lines if "\x1b" in line or "\b" in line or "\r" in line or line.startswith("\n")]


@pytest.mark.slow
def test_a_non_finite_loss_stops_training_and_keeps_the_last_good_checkpoint(small_data, tmp_path):
    def poison(transformer):
        kernel = transformer.encoder_layers[0].feed_forward.inner_dense.kernel
        kernel.assign(np.full(kernel.shape, np.nan, "float32"))
        return {}

    with pytest.raises(NonFiniteLoss, match=r"the loss became nan at step 3.*ckpt-2"):
        run_training(small_data, tmp_path, evaluate_fn=poison, eval_every=2, checkpoint_every=2)
    newest = checkpoints.checkpoint_paths(tmp_path)[-1]
    assert newest.endswith("ckpt-2")
    assert all(np.isfinite(w).all() for w in checkpoint_weights(newest).values())


@pytest.mark.slow
def test_a_full_disk_names_the_file_it_could_not_write_and_the_checkpoint_to_resume_from(
    small_data, tmp_path, monkeypatch
):
    from app.model_dir.checkpoints import CheckpointError

    # What TensorFlow raised on a full disk, but for the temporary file's name.
    no_space = tf.errors.ResourceExhaustedError(
        None, None,
        "{{function_node __wrapped__SaveV2_dtypes_49_device_/job:localhost/replica:0/task:0/device:CPU:0}} "
        "/x/ckpt-4_temp/part-00000-of-00001.data-00000-of-00001.tempstate1; No space left on device [Op:SaveV2]",
    )
    save = tf.train.CheckpointManager.save

    def save_until_step_4(manager, checkpoint_number):
        if checkpoint_number == 4:
            os.makedirs(os.path.join(manager.directory, "ckpt-4_temp"))  # as TensorFlow leaves it
            raise no_space
        return save(manager, checkpoint_number=checkpoint_number)

    monkeypatch.setattr(tf.train.CheckpointManager, "save", save_until_step_4)
    directory = tmp_path / "checkpoints"
    with pytest.raises(CheckpointError) as raised:
        run_training(small_data, tmp_path, checkpoint_every=2)
    assert str(raised.value) == (
        f"cannot write {directory}/ckpt-4 (ResourceExhaustedError: "
        "/x/ckpt-4_temp/part-00000-of-00001.data-00000-of-00001.tempstate1; No space left on device); "
        f"free some space or make {directory} writable, then run the same command to resume from {directory}/ckpt-2"
    )
    assert not (directory / "ckpt-4_temp").exists()
    # The best record: no half-written file is left beside it.
    monkeypatch.setattr(tf.train.CheckpointManager, "save", save)
    # The disk fills as the record's bytes are flushed (data.atomic_files).
    monkeypatch.setattr(os, "fsync", mock_raise(OSError(28, "No space left on device")))
    with pytest.raises(CheckpointError) as raised:
        run_training(
            small_data, tmp_path / "best-run", evaluate_fn=lambda t: {"bleu": 1.0}, eval_every=2, checkpoint_every=2
        )
    best = tmp_path / "best-run" / "best"
    assert str(raised.value) == (
        f"cannot write {best}/best.json (OSError: [Errno 28] No space left on device); free some space or make "
        f"{best} writable, then run the same command to resume from {tmp_path}/best-run/checkpoints/ckpt-2"
    )
    assert sorted(p.name for p in best.iterdir()) == ["checkpoint", "ckpt-2.data-00000-of-00001", "ckpt-2.index"]
    # metrics.jsonl, written at every record.
    monkeypatch.undo()
    def open_full_disk(path, mode="r", *args):
        if "a" in mode:
            raise OSError(28, "No space left on device")
        return open(path, mode, *args)

    monkeypatch.setattr(metrics_log, "open", open_full_disk, raising=False)
    with pytest.raises(CheckpointError) as raised:
        run_training(small_data, tmp_path / "metrics-run")
    assert str(raised.value) == (
        f"cannot write {tmp_path}/metrics-run/metrics.jsonl (OSError: [Errno 28] No space left on device); free "
        f"some space or make {tmp_path}/metrics-run writable, then run the same command to resume from the start"
    )


def mock_raise(error):
    def fail(*args, **kwargs):
        raise error

    return fail
