"""`--precision auto`: mixed bfloat16 only where the hardware runs bfloat16 natively: GPUs of
compute capability 8.0 and later, or, without GPUs, a CPU whose bfloat16 products are fast
enough to pay."""

import math

import pytest

from app.training import precision
from app.training.precision import (
    BFLOAT16_MIN_SPEEDUP,
    bfloat16_matmul_speedup,
    choose_auto_precision,
    matmul_peak,
    read_cpu_flags,
    resolve_precision,
)

XEON_WITH_AMX = {"fpu", "avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}
EPYC_ZEN4 = {"fpu", "avx2", "avx512f", "avx512_bf16"}
LAPTOP_AVX2 = {"fpu", "sse4_2", "avx2", "fma"}
# The 2-core Intel Xeon of 2026-11-26: the AVX512-BF16 flag, no AMX, and bfloat16
# products at 0.55x float32's speed.
XEON_WITHOUT_AMX = {"fpu", "avx2", "avx512f", "avx512_bf16", "avx512_fp16"}


# Compute capabilities of the GPUs named, as TensorFlow's device details give them.
V100, T4, A100, RTX_3090, H100 = (7, 0), (7, 5), (8, 0), (8, 6), (9, 0)


def timed_at(speedup):
    return lambda: speedup


def never_timed():
    raise AssertionError("auto timed the matrix products where the flags or a GPU already decide")


@pytest.mark.parametrize("precision", ["float32", "mixed_float16", "mixed_bfloat16"])
def test_an_explicit_precision_is_kept_whatever_the_machine(precision):
    assert resolve_precision(precision, gpus=[V100], cpu_flags=XEON_WITH_AMX) == precision
    assert resolve_precision(precision, gpus=[H100], cpu_flags=LAPTOP_AVX2) == precision
    assert resolve_precision(precision, gpus=[], cpu_flags=LAPTOP_AVX2) == precision


@pytest.mark.parametrize(
    "cpu_flags, speedup, want",
    [
        (XEON_WITH_AMX, 4.2, "mixed_bfloat16"),
        (EPYC_ZEN4, 1.9, "mixed_bfloat16"),
        (XEON_WITHOUT_AMX, 0.55, "float32"),
        (EPYC_ZEN4, BFLOAT16_MIN_SPEEDUP, "mixed_bfloat16"),
        (EPYC_ZEN4, BFLOAT16_MIN_SPEEDUP - 0.01, "float32"),
    ],
    ids=["amx", "avx512_bf16_fast", "avx512_bf16_slow", "at_the_threshold", "just_under"],
)
def test_auto_picks_mixed_bfloat16_where_the_cpu_has_the_instructions_and_they_are_fast(cpu_flags, speedup, want):
    assert resolve_precision("auto", gpus=[], cpu_flags=cpu_flags, bfloat16_speedup=timed_at(speedup)) == want


@pytest.mark.parametrize("cpu_flags", [LAPTOP_AVX2, set()], ids=["avx2_only", "unknown_cpu"])
def test_auto_keeps_float32_without_timing_where_the_flags_decide(cpu_flags):
    assert resolve_precision("auto", gpus=[], cpu_flags=cpu_flags, bfloat16_speedup=never_timed) == "float32"


@pytest.mark.parametrize(
    "gpus, want, reason",
    [
        ([H100] * 8, "mixed_bfloat16", "8 GPUs of compute capability 9.0 run bfloat16 natively (8.0 and later do)"),
        ([A100], "mixed_bfloat16", "the GPU of compute capability 8.0 runs bfloat16 natively (8.0 and later do)"),
        (
            [A100, RTX_3090],
            "mixed_bfloat16",
            "2 GPUs of compute capability 8.0 and 8.6 run bfloat16 natively (8.0 and later do)",
        ),
        ([T4], "float32", "the GPU of compute capability 7.5 has no native bfloat16 (8.0 and later do)"),
        ([V100] * 8, "float32", "8 GPUs of compute capability 7.0 have no native bfloat16 (8.0 and later do)"),
        (
            [A100, V100, H100],
            "float32",
            "3 GPUs of compute capability 7.0, 8.0 and 9.0: 7.0 has no native bfloat16 (8.0 and later do), and "
            "all replicas share a precision",
        ),
        (
            [None],
            "float32",
            "the GPU does not say its compute capability, so native bfloat16 (8.0 and later) is not known",
        ),
        (
            [H100, None],
            "float32",
            "1 of 2 GPUs does not say its compute capability, so native bfloat16 (8.0 and later) is not known",
        ),
        (
            [None, H100, None],
            "float32",
            "2 of 3 GPUs do not say their compute capability, so native bfloat16 (8.0 and later) is not known",
        ),
    ],
    ids=[
        "8_h100", "a100", "ampere_mixed", "t4", "8_v100", "one_older_among_newer", "unknown", "one_unknown",
        "two_unknown",
    ],
)
def test_auto_on_gpus_picks_mixed_bfloat16_where_every_one_runs_it_natively(gpus, want, reason):
    # Whatever the CPU: with GPUs, they decide, and nothing is timed.
    for cpu_flags in (XEON_WITH_AMX, LAPTOP_AVX2):
        choice = choose_auto_precision(gpus=gpus, cpu_flags=cpu_flags, bfloat16_speedup=never_timed)
        assert choice == precision.AutoChoice(want, reason)
    assert resolve_precision("auto", gpus=gpus, cpu_flags=XEON_WITH_AMX, bfloat16_speedup=never_timed) == want


class FakeGPU:
    """What `tf.config.list_physical_devices("GPU")` lists, for the device details below."""

    def __init__(self, name, details):
        self.name, self.device_type, self.details = name, "GPU", details


def fake_tensorflow_gpus(monkeypatch, *gpus):
    """Makes TensorFlow list `gpus` (FakeGPU) and give each one's details; a details value
    that is an exception is raised, as TensorFlow does for a device it has none for."""
    import tensorflow as tf

    def details(gpu):
        if isinstance(gpu.details, Exception):
            raise gpu.details
        return gpu.details

    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: list(gpus) if kind == "GPU" else [])
    monkeypatch.setattr(tf.config.experimental, "get_device_details", details)


def test_the_compute_capabilities_are_read_from_tensorflows_device_details(monkeypatch):
    fake_tensorflow_gpus(
        monkeypatch,
        FakeGPU("/physical_device:GPU:0", {"device_name": "NVIDIA H100 80GB HBM3", "compute_capability": (9, 0)}),
        FakeGPU("/physical_device:GPU:1", {"device_name": "Tesla V100-SXM2-16GB", "compute_capability": (7, 0)}),
        FakeGPU("/physical_device:GPU:2", {}),  # a build or device without the field
        FakeGPU("/physical_device:GPU:3", ValueError("no details")),
    )
    assert precision.gpu_compute_capabilities() == [H100, V100, None, None]
    fake_tensorflow_gpus(monkeypatch)
    assert precision.gpu_compute_capabilities() == []


def test_auto_asks_tensorflow_for_the_gpus_when_not_told(monkeypatch):
    monkeypatch.setattr(precision, "read_cpu_flags", lambda: set(LAPTOP_AVX2))
    a100 = {"device_name": "NVIDIA A100-SXM4-40GB", "compute_capability": (8, 0)}
    fake_tensorflow_gpus(monkeypatch, *[FakeGPU(f"/physical_device:GPU:{i}", a100) for i in range(8)])
    assert choose_auto_precision() == precision.AutoChoice(
        "mixed_bfloat16", "8 GPUs of compute capability 8.0 run bfloat16 natively (8.0 and later do)"
    )
    fake_tensorflow_gpus(monkeypatch, FakeGPU("/physical_device:GPU:0", a100), FakeGPU("/physical_device:GPU:1", {}))
    assert resolve_precision("auto") == "float32"
    fake_tensorflow_gpus(monkeypatch)
    assert choose_auto_precision() == precision.AutoChoice("float32", "this CPU has no bfloat16 instructions")


def test_the_auto_choice_says_what_was_timed():
    slow = choose_auto_precision(gpus=[], cpu_flags=XEON_WITHOUT_AMX, bfloat16_speedup=timed_at(0.554))
    assert slow == precision.AutoChoice(
        "float32",
        "bfloat16 matrix products ran 0.55x as fast as float32 ones on this CPU, "
        "under the 1.2x that pays for mixed precision",
    )
    fast = choose_auto_precision(gpus=[], cpu_flags=XEON_WITH_AMX, bfloat16_speedup=timed_at(4.2))
    assert fast.reason == "bfloat16 matrix products ran 4.20x as fast as float32 ones on this CPU"
    assert choose_auto_precision(gpus=[], cpu_flags=LAPTOP_AVX2).reason == "this CPU has no bfloat16 instructions"


def test_the_timing_compares_the_two_precisions_on_this_machine():
    # Small products, so the test is quick: a ratio of two real timings, whatever the CPU.
    speedup = bfloat16_matmul_speedup(n=64, chain=2, repeats=2)
    assert math.isfinite(speedup) and speedup > 0
    assert matmul_peak("float32", n=64, chain=2, repeats=2) > 0


def test_an_unknown_precision_is_named_in_the_error():
    with pytest.raises(ValueError, match="precision='float8'"):
        resolve_precision("float8", gpus=[], cpu_flags=set())


def test_cpu_flags_are_read_from_the_first_processor_of_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu avx2 amx_bf16\n\n"
        "processor\t: 1\nflags\t\t: fpu\n"
    )
    assert read_cpu_flags(str(cpuinfo)) == {"fpu", "avx2", "amx_bf16"}


def test_an_unreadable_cpuinfo_gives_no_flags_and_so_float32(tmp_path):
    flags = read_cpu_flags(str(tmp_path / "missing"))
    assert flags == set()
    assert resolve_precision("auto", gpus=[], cpu_flags=flags, bfloat16_speedup=never_timed) == "float32"


def test_train_resolves_auto_by_default_and_keeps_an_explicit_flag(monkeypatch):
    import train
    from app.commands.train_plan import resolved_flags, train_config_from_args

    monkeypatch.setattr(precision, "gpu_compute_capabilities", lambda: [])
    monkeypatch.setattr(precision, "read_cpu_flags", lambda: set(XEON_WITH_AMX))
    monkeypatch.setattr(precision, "measured_bfloat16_speedup", timed_at(4.2))
    assert train_config_from_args(resolved_flags(train.parse_args([]))).precision == "mixed_bfloat16"
    assert train_config_from_args(resolved_flags(train.parse_args(["--precision", "float32"]))).precision == "float32"
    monkeypatch.setattr(precision, "read_cpu_flags", lambda: set(XEON_WITHOUT_AMX))
    monkeypatch.setattr(precision, "measured_bfloat16_speedup", timed_at(0.55))
    assert train_config_from_args(resolved_flags(train.parse_args([]))).precision == "float32"
    given = train.parse_args(["--precision", "mixed_bfloat16"])
    assert train_config_from_args(resolved_flags(given)).precision == "mixed_bfloat16"
    monkeypatch.setattr(precision, "read_cpu_flags", lambda: set(LAPTOP_AVX2))
    assert train_config_from_args(resolved_flags(train.parse_args([]))).precision == "float32"
    # On GPUs, whatever the CPU.
    monkeypatch.setattr(precision, "gpu_compute_capabilities", lambda: [H100] * 8)
    assert train_config_from_args(resolved_flags(train.parse_args(["--size", "base"]))).precision == "mixed_bfloat16"
    assert train_config_from_args(resolved_flags(train.parse_args(["--precision", "float32"]))).precision == "float32"
    monkeypatch.setattr(precision, "gpu_compute_capabilities", lambda: [V100] * 8)
    monkeypatch.setattr(precision, "read_cpu_flags", lambda: set(XEON_WITH_AMX))
    assert train_config_from_args(resolved_flags(train.parse_args(["--size", "base"]))).precision == "float32"
