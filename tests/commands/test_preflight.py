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
from app.commands.train_plan import device_config_from_args, plan_train
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
    devices = device_config_from_args(args)
    plan = plan_preflight(args, devices)
    assert vars(args) == before
    train_args = train.parse_args(flags)
    train_plan = plan_train(train_args, device_config_from_args(train_args))
    assert plan == PreflightPlan(run=train_plan, steps=4, max_seconds=30, length=16)
    assert plan_preflight(parse_args(flags), devices) == dataclasses.replace(plan, steps=20, max_seconds=60, length=32)


def test_what_train_py_would_refuse_the_preflight_refuses(tmp_path):
    # The run's own plan (app.commands.train_plan.plan_run), so the same errors.
    with pytest.raises(ValueError, match=r"--max-length 300 is longer than the model's 256 positions"):
        args = parse_args(["--max-length", "300", "--model-dir", str(tmp_path / "a")])
        plan_preflight(args, device_config_from_args(args))


@pytest.mark.slow
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
    # Not prepared in the model directory: synthetic batches of the corpus's sampled lengths.
    assert line("batches: ") == (
        "batches: synthetic: the lengths of the corpus's first 2,000 pairs, in words x 1.3 (not prepared in "
        f"{model_dir}: `python -m app.prepare` with these flags for its own)"
    )
    assert line("  1024 tokens a side over 2 replica(s), accumulating 1: ").endswith(
        "target tokens (padding excluded) per replica per step"
    )
    assert line("first call: ").endswith("s") and "tracing and compiling about" in line("first call: ")
    # 4 updates' batches after the first call's 2, then the same 4 again: 6 timed.
    assert "over 6 updates (2 per call)" in line("steady: ") and "target tokens/s" in line("steady: ")
    assert "x what training takes" in line("input pipeline: ")
    assert "on this process's 2 replica(s)" in line("model FLOPs: ")
    assert "of the peak 1 x " in line("model FLOPs: ") and line("model FLOPs: ").endswith(
        "TFLOP/s float32 dense (measured: the CPU's matrix products)"
    )
    assert line("peak memory: ").endswith("GiB (the process's resident memory)")
    assert line("a checkpoint: ").endswith(" s")  # timed in a temporary directory
    # tiny's 16,000 steps under its 58-minute budget; no prepared corpus to evaluate on.
    estimate = line("estimate: ")
    assert "for 16,000 steps, start to finish: start " in estimate
    assert "evaluations not included (no prepared corpus to evaluate on), nor the data's preparation" in estimate
    assert estimate.endswith("; --time-budget 58 min ends the run sooner if it must")
    assert line("  [ok] every replica holds the same weights") == (
        "  [ok] every replica holds the same weights: all 2 replicas equal after 8 updates"
    )
    assert lines[-1] == "preflight passed: tiny on 2 replica(s) (the CPU)"
    assert sorted(os.listdir(tmp_path)) == []  # no model directory, nothing else


def test_the_report_and_estimate_of_a_prepared_run_and_a_failed_check(monkeypatch):
    import tensorflow as tf

    import app.commands.preflight as preflight
    from app.model.config import ModelConfig
    from app.training.config import TrainConfig
    from app.training.rehearsal import RunExtras
    from app.training.run_estimate import Measured
    from app.training.run_plan import RunPlan

    class Batches:
        description = "real: the prepared corpus's training batches, 500 an epoch, in the run's order"

        def run_shapes(self, batches):
            return {(8, n, n) for n in range(min(batches, 12))}

    rehearsal = _rehearsal(replica_differences={"decoder/kernel": 6e-8}, batches=Batches.description)
    extras = RunExtras(checkpoint_seconds=2.0, best_save_seconds=1.0, first_evaluation_seconds=9.0,
                       evaluation_seconds=4.0)
    measured = Measured(
        startup_seconds=5.0, first_call_seconds=12.5, first_call_steps=2, first_call_shapes=2,
        seconds_per_step=0.25, step_time_error=0.0, seconds_per_new_shape=0.0, checkpoint_seconds=2.0,
        best_save_seconds=1.0, first_evaluation_seconds=9.0, evaluation_seconds=4.0,
    )
    monkeypatch.setattr(preflight, "_rehearsal_data",
                        lambda plan, replicas, readable: preflight._RehearsalData(Batches(), None, 100))
    monkeypatch.setattr(preflight, "_measure", lambda *args: (rehearsal, extras, measured, 5000.0))
    monkeypatch.setattr("app.training.precision.matmul_peak", lambda dtype: 1e13)
    printed = []
    rehearsed = RunPlan(
        size="tiny", variant=None, model_dir="unused", model_config=ModelConfig.from_size("tiny", vocab_size=300),
        data_config=DataConfig(batch_tokens=1024),
        train_config=TrainConfig(train_steps=100, precision="float32", eval_every=50, checkpoint_every=50),
    )
    plan = PreflightPlan(run=rehearsed, steps=4, max_seconds=60, length=32)
    assert preflight.run(plan, tf.distribute.get_strategy(), out=printed.append) == 1
    report = printed[printed.index(f"batches: {Batches.description}"):]
    assert report[:7] == [
        f"batches: {Batches.description}",
        "  1024 tokens a side over 2 replica(s), accumulating 1: 512 target tokens (padding excluded) per replica "
        "per step",
        "first call: 12.5 s for 2 update(s), of which tracing and compiling about 12.0 s",
        "steady: 250.0 ms per step (+-0.0) over 8 updates (1 per call), 4,096 target tokens/s; a new batch "
        "shape's first batch 0.00 s more",
        "input pipeline: 5,000 target tokens/s alone, 1.2x what training takes",
        "model FLOPs: 8 TFLOP/s on this process's 2 replica(s), 80.0% of the peak 1 x 10 TFLOP/s float32 dense "
        "(measured: the CPU's matrix products)",
        "peak memory: 1.00 GiB (the process's resident memory)",
    ]
    assert report[7] == "a checkpoint: 2.0 s; an evaluation 4.0 s (the first 9.0 s)"
    # 5 + 12.5 + 98 x 0.25 + 2 checkpoints x 2 + evaluations 9 + 4 = 59 s, and half of the
    # one best save that may come after the second evaluation; the range 10% either way,
    # that save in the high end: 53.1 to 65.9 s.
    assert report[8] == (
        "the run's batches: 12 shapes, 1.00x the rehearsed ones' FLOPs on average (padded): 250.0 ms per step "
        "over the run"
    )
    assert report[9] == (
        "estimate: 1 min 00 s (53 s to 1 min 06 s) for 100 steps, start to finish: start 5 s, first call 12 s, "
        "new shapes 0 s, updates 24 s, checkpoints 4 s, evaluations 13 s"
    )
    assert printed[-1] == "preflight failed: every replica holds the same weights"


def test_an_input_pipeline_slower_than_training_is_warned_of():
    from app.commands.preflight import _report
    from app.training.rehearsal import RunExtras
    from app.training.run_plan import RunPlan
    from app.model.config import ModelConfig
    from app.training.config import TrainConfig

    printed = []
    rehearsed = RunPlan(
        size="tiny", variant=None, model_dir="unused", model_config=ModelConfig.from_size("tiny", vocab_size=300),
        data_config=DataConfig(batch_tokens=1024), train_config=TrainConfig(train_steps=100, precision="float32"),
    )
    plan = PreflightPlan(run=rehearsed, steps=4, max_seconds=60, length=32)
    extras = RunExtras(2.0, 1.0, None, None)
    _report(plan, _rehearsal(), extras, 2048.0, ["NVIDIA H100 80GB HBM3"] * 2, printed.append)
    assert printed[4] == (
        "input pipeline: 2,048 target tokens/s alone, 0.5x what training takes -- warning: it cannot keep up; "
        "the run will wait for its batches (more cores, or data prepared on a faster disk)"
    )
    assert printed[5].endswith("of the peak 2 x 494.5 TFLOP/s TF32/FP32 dense (datasheet)")
    assert printed[-1] == "a checkpoint: 2.0 s"


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
