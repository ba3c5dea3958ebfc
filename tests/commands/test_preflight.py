"""`python -m app.preflight`: its flags planned as train.py plans them, its report and
verdict, and a rehearsal run as a user runs it. The rehearsal itself (what it measures, its
checks): tests/training/test_rehearsal.py."""

import copy
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

import train
from app.commands.preflight import PreflightPlan, parse_args, plan_preflight
from app.commands.train_plan import plan_run
from data.config import DataConfig
from tests.training.test_rehearsal import _rehearsal

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--num-layers", "1", "--d-model", "32", "--d-ff", "64", "--num-heads", "2", "--vocab-size", "300"]


@pytest.mark.parametrize("flags", [
    [],
    ["--size", "base", "--batch-tokens", "2000", "--steps-per-loop", "10", "--precision", "float32"],
    [*SMALL, "--dropout", "0.3", "--target-lang", "fr", "--train-steps", "50", "--time-budget", "5"],
])
def test_the_run_rehearsed_is_the_one_train_py_plans_from_the_same_flags(flags, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default model directory, runs/..., is relative: none here
    args = parse_args([*flags, "--preflight-steps", "4", "--preflight-seconds", "30", "--preflight-length", "16"])
    before = copy.deepcopy(vars(args))
    plan = plan_preflight(args)
    assert vars(args) == before
    assert plan == PreflightPlan(run=plan_run(train.parse_args(flags)), steps=4, max_seconds=30, length=16)
    assert plan_preflight(parse_args(flags)) == dataclasses.replace(plan, steps=20, max_seconds=60, length=32)


def test_what_train_py_would_refuse_the_preflight_refuses(tmp_path):
    # The run's own plan (app.commands.train_plan.plan_run), so the same errors.
    with pytest.raises(ValueError, match=r"--max-length 300 is longer than the model's 256 positions"):
        plan_preflight(parse_args(["--max-length", "300", "--model-dir", str(tmp_path / "a")]))


def test_a_rehearsal_over_two_cpu_replicas_reports_and_passes_and_writes_nothing(tmp_path):
    model_dir = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "app.preflight", "--size", "tiny", *SMALL, "--cpu-replicas", "2",
         "--batch-tokens", "1024", "--steps-per-loop", "2", "--precision", "float32", "--dropout", "0.3",
         "--preflight-steps", "4", "--preflight-length", "16", "--model-dir", str(model_dir)],
        cwd=tmp_path, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()

    def line(start):
        found = [text for text in lines if text.startswith(start)]
        assert found, f"no line starting {start!r} in:\n{result.stdout}"
        return found[0]

    assert line("TensorFlow ").endswith("devices: 1 CPU")
    assert line("strategy: ") == "strategy: MirroredStrategy over 2 replica(s) on the CPU"
    assert line("precision: ") == "precision: float32; XLA: off"
    assert line("data: ") == "data: multi30k en->de: multi30k en->de, bundled"
    # 1,024 tokens over 2 replicas: 32 sentences of 16 each.
    assert line("batches: ") == (
        "batches: 1024 tokens a side over 2 replica(s), accumulating 1: 512 target tokens per replica per step "
        "(32 sentences of 16)"
    )
    assert line("first call: ").endswith("s") and "tracing and compiling about" in line("first call: ")
    assert "over 4 updates (2 per call)" in line("steady: ") and "target tokens/s" in line("steady: ")
    assert "(measured: the CPU's float32 matrix products)" in line("model FLOPs: ")
    assert line("peak memory: ").endswith("GiB (the process's resident memory)")
    # tiny's 16,000 steps under its 58-minute budget.
    assert "for 16,000 steps (training steps only" in line("estimate: ")
    assert "--time-budget 58 min ends the run sooner if it must" in line("estimate: ")
    assert line("  [ok] every replica holds the same weights") == (
        "  [ok] every replica holds the same weights: all 2 replicas equal after 6 updates"
    )
    assert lines[-1].startswith("preflight passed: tiny on 2 replica(s) (the CPU), about ")
    assert sorted(os.listdir(tmp_path)) == []  # no model directory, nothing else


def test_a_failed_check_ends_with_its_name_and_exit_code_1(monkeypatch):
    import tensorflow as tf

    import app.training.rehearsal
    from app.commands.preflight import PreflightPlan, run
    from app.training.config import TrainConfig
    from app.model.config import ModelConfig
    from app.training.run_plan import RunPlan

    monkeypatch.setattr(
        app.training.rehearsal, "rehearse",
        lambda *args, **kwargs: _rehearsal(replica_differences={"decoder/kernel": 6e-8}),
    )
    monkeypatch.setattr("app.training.peaks.matmul_peak", lambda dtype: 1e11, raising=False)
    monkeypatch.setattr("app.training.precision.matmul_peak", lambda dtype: 1e11)
    printed = []
    rehearsed = RunPlan(
        size="tiny", variant=None, model_dir="unused", model_config=ModelConfig.from_size("tiny", vocab_size=300),
        data_config=DataConfig(batch_tokens=1024), train_config=TrainConfig(train_steps=100, precision="float32"),
    )
    plan = PreflightPlan(run=rehearsed, steps=4, max_seconds=60, length=32)
    code = run(plan, tf.distribute.get_strategy(), out=printed.append)
    assert code == 1
    assert printed[-1] == "preflight failed: every replica holds the same weights"
    assert "estimate: 25 s for 100 steps (training steps only; validation and checkpoints add to it)" in printed


def test_a_bad_flag_is_refused_before_tensorflow_loads():
    result = subprocess.run(
        [sys.executable, "-m", "app.preflight", "--preflight-steps", "0"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2 and "--preflight-steps" in result.stderr


def test_a_corpus_the_run_could_not_read_fails_the_preflight(tmp_path):
    from app.commands.preflight import _data_source

    missing = DataConfig(dataset=f"files:{tmp_path}/a.en,{tmp_path}/a.de", source_lang="en", target_lang="de")
    assert _data_source(missing) == (None, f"file not found: {tmp_path}/a.en")
    for lang in ("en", "de"):
        (tmp_path / f"a.{lang}").write_text("one\ntwo\n", encoding="utf-8")
    assert _data_source(missing) == ("2 text files, 0.00 GB", None)
