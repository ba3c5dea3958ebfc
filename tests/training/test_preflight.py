"""python -m app.preflight: a rehearsal of the run on synthetic batches, and its verdict."""

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.training.peaks import compute_dtype, device_peak, known_gpu_peak
from app.training.preflight import Check, Rehearsal, checks, format_duration, rows_per_replica

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--num-layers", "1", "--d-model", "32", "--d-ff", "64", "--num-heads", "2", "--vocab-size", "300"]


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


def _rehearsal(**overrides):
    fields = dict(
        replicas=2, rows_per_replica=16, length=32, tokens_per_replica_per_step=512, first_call_seconds=12.5,
        first_call_steps=2, seconds_per_step=0.25, steps=8, losses=[6.9, 6.5, 6.1], flops_per_step=2.0e12,
        peak_memory_bytes=[2**30], replica_differences={},
    )
    fields.update(overrides)
    return Rehearsal(**fields)


def test_a_rehearsals_rates_come_from_its_steady_steps():
    rehearsal = _rehearsal()
    assert rehearsal.tokens_per_second == 512 * 2 / 0.25 == 4096
    assert rehearsal.trace_seconds == 12.5 - 2 * 0.25
    assert rehearsal.flops_per_second == 8.0e12
    assert rows_per_replica(25_000, 8, 32) == 97 and rows_per_replica(10, 8, 32) == 1


def test_each_check_fails_on_its_own_fault():
    assert all(check.passed for check in checks(_rehearsal()))
    diverged = checks(_rehearsal(replica_differences={"encoder/kernel": 6e-8, "decoder/kernel": 1e-7}))
    assert [check.passed for check in diverged] == [True, True, True, False]
    assert diverged[3].detail == (
        "2 variables differ between replicas (largest 1e-07), e.g. decoder/kernel, encoder/kernel"
    )
    assert [check.passed for check in checks(_rehearsal(losses=[6.9, math.nan]))] == [True, True, False, True]
    unseen = checks(_rehearsal(), unseen_gpu_warning="warning: this machine seems to have an NVIDIA GPU")
    assert [check.passed for check in unseen] == [True, False, True, True]
    unread = checks(_rehearsal(), data_problem="file not found: train.en")
    assert [check.passed for check in unread] == [False, True, True, True]
    assert unread[0] == Check("the corpus can be read", False, "file not found: train.en")


def test_a_failed_check_ends_with_its_name_and_exit_code_1(monkeypatch):
    import tensorflow as tf

    import app.training.preflight
    from app.commands.preflight import PreflightPlan, run
    from app.training.config import TrainConfig
    from app.model.config import ModelConfig
    from app.training.run_plan import RunPlan
    from data.config import DataConfig

    monkeypatch.setattr(
        app.training.preflight, "rehearse",
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


@pytest.mark.parametrize("name, precision, tflops", [
    ("NVIDIA H100 80GB HBM3", "mixed_bfloat16", 989.0),
    ("NVIDIA H100 PCIe", "mixed_bfloat16", 756.0),
    ("NVIDIA H200", "float32", 494.5),
    ("NVIDIA A100-SXM4-80GB", "mixed_bfloat16", 312.0),
    ("NVIDIA A100 80GB PCIe", "float32", 156.0),
    ("NVIDIA A10", "mixed_float16", 125.0),
    ("NVIDIA L4", "mixed_bfloat16", 121.0),
    ("NVIDIA L40S", "mixed_bfloat16", 362.0),
    ("Tesla V100-SXM2-16GB", "mixed_float16", 125.0),
    ("Tesla V100-SXM2-16GB", "mixed_bfloat16", None),  # no bfloat16 tensor cores
    ("Tesla T4", "float32", 8.1),
    ("NVIDIA GeForce RTX 3060", "float32", None),  # not in the table: measured instead
])
def test_known_gpu_peaks_by_device_name_and_precision(name, precision, tflops):
    peak = known_gpu_peak(name, precision)
    assert (peak is None and tflops is None) or peak == pytest.approx(tflops * 1e12)


def test_the_peak_is_the_tables_sum_for_known_gpus_and_measured_otherwise():
    measured = []

    def measure(dtype):
        measured.append(dtype)
        return 5e12

    assert device_peak(["NVIDIA H100 80GB HBM3"] * 8, "mixed_bfloat16", measure) == (
        8 * 989e12, "datasheet, dense bfloat16"
    )
    assert measured == []
    assert device_peak([], "float32", measure) == (5e12, "measured: the CPU's float32 matrix products")
    assert device_peak(["NVIDIA GeForce RTX 3060"] * 2, "mixed_bfloat16", measure) == (
        1e13, "measured: one GPU's bfloat16 matrix products x 2"
    )
    assert measured == ["float32", "bfloat16"]
    assert [compute_dtype(p) for p in ("float32", "mixed_bfloat16", "mixed_float16")] == [
        "float32", "bfloat16", "float16"
    ]


def test_durations_read_as_hours_minutes_or_seconds():
    assert [format_duration(s) for s in (42, 450, 42_300, 3600)] == ["42 s", "7 min 30 s", "11 h 45 min", "1 h 00 min"]


def test_a_bad_flag_is_refused_before_tensorflow_loads():
    result = subprocess.run(
        [sys.executable, "-m", "app.preflight", "--preflight-steps", "0"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2 and "--preflight-steps" in result.stderr


def test_a_corpus_the_run_could_not_read_fails_the_preflight(tmp_path):
    from app.commands.preflight import _data_source
    from data.config import DataConfig

    missing = DataConfig(dataset=f"files:{tmp_path}/a.en,{tmp_path}/a.de", source_lang="en", target_lang="de")
    assert _data_source(missing) == (None, f"file not found: {tmp_path}/a.en")
    for lang in ("en", "de"):
        (tmp_path / f"a.{lang}").write_text("one\ntwo\n", encoding="utf-8")
    assert _data_source(missing) == ("2 text files, 0.00 GB", None)
