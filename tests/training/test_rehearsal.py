"""The rehearsal `python -m app.preflight` runs (its command: tests/commands/test_preflight.py):
what it measures, its checks, and the devices' peaks."""

import math
import statistics

import pytest

from app.training.peaks import Peak, compute_dtype, device_peak, known_gpu_peak
from app.training.rehearsal import Check, Rehearsal, checks, format_duration


def _rehearsal(**overrides):
    fields = dict(
        replicas=2, local_replicas=2, batches="synthetic", jit=False, first_call_seconds=12.5, first_call_steps=2,
        first_call_shapes=0, call_seconds=[1.0, 1.0], call_steps=[4, 4], call_new_shapes=[1, 0], tokens_per_step=1024.0,
        flops_per_step=2.0e12, losses=[6.9, 6.5, 6.1], peak_memory_bytes=[2**30], replica_differences={},
    )
    fields.update(overrides)
    return Rehearsal(**fields)


def test_a_rehearsals_rates_come_from_its_steady_steps():
    # Two calls of 4 updates, 1 s each; the first met a new shape, but took no longer.
    rehearsal = _rehearsal()
    assert rehearsal.steps == 8 and rehearsal.seconds_per_step == 0.25
    assert rehearsal.tokens_per_second == 1024 / 0.25 == 4096
    assert rehearsal.trace_seconds == 12.5 - 2 * 0.25
    assert rehearsal.flops_per_second == 8.0e12
    assert rehearsal.seconds_per_new_shape == 0.0
    # Per-step times 0.25 and 0.3 of calls that met no new shape: two standard errors of
    # their mean, 2 * stdev / sqrt(2).
    spread = _rehearsal(call_seconds=[1.0, 1.2], call_new_shapes=[0, 0])
    assert spread.step_time_error == pytest.approx(2 * statistics.stdev([0.25, 0.3]) / math.sqrt(2))
    assert _rehearsal(call_seconds=[1.0], call_steps=[4], call_new_shapes=[0]).step_time_error == 0.0


def test_calls_that_met_new_shapes_time_a_shapes_first_batch_not_the_steady_pace():
    # Three calls of 4 updates: the first met 2 new shapes, the others (the same batches
    # again) none. Steady: the last two, 0.25 s an update; the first's 3.0 s less 4 x 0.25
    # is 2 new shapes, 1 s each. The first call met 1 shape: its 12.5 s less 2 updates and
    # that shape is tracing.
    rehearsal = _rehearsal(
        call_seconds=[3.0, 1.0, 1.0], call_steps=[4, 4, 4], call_new_shapes=[2, 0, 0], first_call_shapes=1
    )
    assert rehearsal.seconds_per_step == 0.25 and rehearsal.seconds_per_new_shape == 1.0
    assert rehearsal.trace_seconds == 12.5 - 2 * 0.25 - 1.0
    # Every call met a new shape: all of them are the pace, and nothing is left to the shapes.
    every = _rehearsal(call_seconds=[1.0, 1.0], call_new_shapes=[1, 1])
    assert every.seconds_per_step == 0.25 and every.seconds_per_new_shape == 0.0


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


@pytest.mark.parametrize("name, precision, tflops", [
    ("NVIDIA H100 80GB HBM3", "mixed_bfloat16", 989.0),
    ("NVIDIA H100 PCIe", "mixed_bfloat16", 756.0),
    ("NVIDIA H200", "float32", 494.5),
    ("NVIDIA H100 NVL", "mixed_bfloat16", 835.0),  # the NVL cards: lower power than SXM
    ("NVIDIA H200 NVL", "mixed_bfloat16", 835.0),
    ("NVIDIA H200 NVL", "float32", 417.5),
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


def test_the_peak_is_per_device_and_counted_from_the_table_or_measured():
    measured = []

    def measure(dtype):
        measured.append(dtype)
        return 5e12

    eight = device_peak(["NVIDIA H100 80GB HBM3"] * 8, "mixed_bfloat16", measure)
    assert eight == Peak(989e12, 8, "bfloat16", "datasheet") and eight.total == 8 * 989e12
    assert eight.describe() == "8 x 989 TFLOP/s bfloat16 dense (datasheet)"
    assert device_peak(["NVIDIA A100-SXM4-80GB"], "float32", measure).describe() == (
        "1 x 156 TFLOP/s TF32/FP32 dense (datasheet)"
    )
    assert measured == []
    cpu = device_peak([], "float32", measure)
    assert cpu == Peak(5e12, 1, "float32", "measured: the CPU's matrix products")
    assert cpu.describe() == "1 x 5 TFLOP/s float32 dense (measured: the CPU's matrix products)"
    unknown = device_peak(["NVIDIA GeForce RTX 3060"] * 2, "mixed_bfloat16", measure)
    assert unknown == Peak(5e12, 2, "bfloat16", "measured: one GPU's matrix products")
    assert measured == ["float32", "bfloat16"]
    assert [compute_dtype(p) for p in ("float32", "mixed_bfloat16", "mixed_float16")] == [
        "float32", "bfloat16", "float16"
    ]


def test_durations_read_as_hours_minutes_or_seconds():
    assert [format_duration(s) for s in (42, 450, 42_300, 3600)] == ["42 s", "7 min 30 s", "11 h 45 min", "1 h 00 min"]


def test_the_share_of_a_global_batch_is_this_processs_replicas():
    from types import SimpleNamespace

    from app.training.rehearsal import local_share

    # Two workers of 8 GPUs: each counts the FLOPs of its 8 of the 16 replicas, against
    # its own 8 GPUs' peak.
    gpus = [f"/job:worker/replica:0/task:1/device:GPU:{i}" for i in range(8)]
    worker = SimpleNamespace(num_replicas_in_sync=16, extended=SimpleNamespace(worker_devices=gpus))
    assert local_share(worker) == (8, 0.5)

    class Default:
        num_replicas_in_sync = 1

        @property
        def extended(self):
            raise RuntimeError("the default strategy has no worker devices")

    assert local_share(Default()) == (1, 1.0)
