"""The rehearsal `python -m app.preflight` runs (its command: tests/commands/test_preflight.py):
what it measures, its checks, and the devices' peaks."""

import math

import pytest

from app.training.peaks import compute_dtype, device_peak, known_gpu_peak
from app.training.rehearsal import Check, Rehearsal, checks, format_duration, rows_per_replica


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
