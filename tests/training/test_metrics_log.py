"""The records (`app.training.metrics_log`): metrics.jsonl and TensorBoard, cut back on
resuming, and the training window's loss and speed."""

import json
import os
import time
import types

import pytest

from app.model_dir import checkpoints
from app.training import metrics_log
from tests.training.helpers import run_training


@pytest.mark.slow
def test_tokens_per_second_leave_out_the_time_spent_evaluating(small_data, tmp_path, monkeypatch):
    # A wall clock that moves one second per reading, and 1,000 while evaluating.
    wall = {"now": 0.0}

    def fake_time():
        wall["now"] += 1.0
        return wall["now"]

    def slow_evaluation(transformer):
        wall["now"] += 1000.0
        return {"bleu": 1.0}

    monkeypatch.setattr(metrics_log, "time", types.SimpleNamespace(time=fake_time, monotonic=time.monotonic))
    run_training(small_data, tmp_path, evaluate_fn=slow_evaluation, eval_every=3, train_steps=6)
    rates = [r["tokens_per_second"] for r in map(json.loads, open(tmp_path / "metrics.jsonl")) if "loss" in r]
    assert len(rates) == 6
    # Batches differ in size by less than 10 times; 1,000 seconds more would be 100 times slower.
    assert max(rates) < 10 * min(rates), rates


# ---------------------------------------------------------------------------------------
# The records and the window on their own.


def test_a_record_is_one_json_line_appended_to_metrics_jsonl(tmp_path):
    metrics = metrics_log.MetricsLog(str(tmp_path), chief=True, latest_checkpoint=lambda: None)
    metrics.record({"step": 1, "loss": 2.5, "epoch": 0})
    metrics.record({"step": 2, "planned_steps": 40})
    assert (tmp_path / "metrics.jsonl").read_text() == (
        '{"step": 1, "loss": 2.5, "epoch": 0}\n{"step": 2, "planned_steps": 40}\n'
    )
    assert os.listdir(tmp_path / "train")  # TensorBoard's event file


def test_a_worker_other_than_the_chief_writes_nothing(tmp_path):
    metrics = metrics_log.MetricsLog(str(tmp_path), chief=False, latest_checkpoint=lambda: None)
    metrics.record({"step": 1, "loss": 2.5})
    assert os.listdir(tmp_path) == []


def test_a_record_that_cannot_be_written_names_the_file_and_the_checkpoint_to_resume_from(tmp_path, monkeypatch):
    def open_full_disk(path, mode="r", *args):
        raise OSError(28, "No space left on device")

    metrics = metrics_log.MetricsLog(str(tmp_path), chief=True, latest_checkpoint=lambda: "/runs/ckpt-7")
    monkeypatch.setattr(metrics_log, "open", open_full_disk, raising=False)
    with pytest.raises(checkpoints.CheckpointError) as raised:
        metrics.record({"step": 8, "loss": 2.5})
    assert str(raised.value) == (
        f"cannot write {tmp_path}/metrics.jsonl (OSError: [Errno 28] No space left on device); free some space "
        f"or make {tmp_path} writable, then run the same command to resume from /runs/ckpt-7"
    )


def test_resuming_drops_the_records_after_the_step_and_a_line_cut_off_and_keeps_other_lines(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(
        '{"step": 1, "loss": 3.0}\nwritten by hand\n{"step": 2, "loss": 2.0}\n{"step": 2, "valid_loss": 2.5}\n'
        '{"step": 3, "loss": 1.0}\n{"note": "no step"}\n{"step": 4, "lo'
    )
    metrics_log.drop_records_after(str(tmp_path), 2)
    assert path.read_text() == (
        '{"step": 1, "loss": 3.0}\nwritten by hand\n{"step": 2, "loss": 2.0}\n{"step": 2, "valid_loss": 2.5}\n'
        '{"note": "no step"}\n'
    )
    metrics_log.drop_records_after(str(tmp_path / "elsewhere"), 2)  # no records yet: nothing to do
    assert not (tmp_path / "elsewhere").exists()


def test_the_window_gives_the_token_weighted_loss_and_the_tokens_per_second_of_training_time(monkeypatch):
    wall = {"now": 100.0}
    monkeypatch.setattr(metrics_log, "time", types.SimpleNamespace(time=lambda: wall["now"]))
    window = metrics_log.TrainingWindow()
    window.add(10.0, 4.0)  # a loss of 2.5 a token
    window.add(2.0, 4.0)  # 0.5
    wall["now"] = 102.0
    assert window.mean_loss() == 1.5
    assert window.tokens_per_second() == 4.0
    with window.paused():
        wall["now"] = 1102.0  # evaluating: left out
    wall["now"] = 1104.0
    assert window.tokens_per_second() == 2.0  # 8 tokens in 4 seconds of training
    window.restart()
    assert (window.mean_loss(), window.tokens_per_second()) == (0.0, 0.0)
