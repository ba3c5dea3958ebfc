"""`--precision auto`: mixed bfloat16 only where the CPU multiplies bfloat16 natively, and
fast enough to pay."""

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


def timed_at(speedup):
    return lambda: speedup


def never_timed():
    raise AssertionError("auto timed the matrix products where the flags or a GPU already decide")


@pytest.mark.parametrize("precision", ["float32", "mixed_float16", "mixed_bfloat16"])
def test_an_explicit_precision_is_kept_whatever_the_machine(precision):
    assert resolve_precision(precision, has_gpu=True, cpu_flags=XEON_WITH_AMX) == precision
    assert resolve_precision(precision, has_gpu=False, cpu_flags=LAPTOP_AVX2) == precision


@pytest.mark.parametrize(
    "has_gpu, cpu_flags, speedup, want",
    [
        (False, XEON_WITH_AMX, 4.2, "mixed_bfloat16"),
        (False, EPYC_ZEN4, 1.9, "mixed_bfloat16"),
        (False, XEON_WITHOUT_AMX, 0.55, "float32"),
        (False, EPYC_ZEN4, BFLOAT16_MIN_SPEEDUP, "mixed_bfloat16"),
        (False, EPYC_ZEN4, BFLOAT16_MIN_SPEEDUP - 0.01, "float32"),
    ],
    ids=["amx", "avx512_bf16_fast", "avx512_bf16_slow", "at_the_threshold", "just_under"],
)
def test_auto_picks_mixed_bfloat16_where_the_cpu_has_the_instructions_and_they_are_fast(
    has_gpu, cpu_flags, speedup, want
):
    assert resolve_precision("auto", has_gpu=has_gpu, cpu_flags=cpu_flags, bfloat16_speedup=timed_at(speedup)) == want


@pytest.mark.parametrize(
    "has_gpu, cpu_flags",
    [(False, LAPTOP_AVX2), (False, set()), (True, XEON_WITH_AMX)],
    ids=["avx2_only", "unknown_cpu", "gpu"],
)
def test_auto_keeps_float32_without_timing_where_a_gpu_or_the_flags_decide(has_gpu, cpu_flags):
    assert resolve_precision("auto", has_gpu=has_gpu, cpu_flags=cpu_flags, bfloat16_speedup=never_timed) == "float32"


def test_the_auto_choice_says_what_was_timed():
    slow = choose_auto_precision(has_gpu=False, cpu_flags=XEON_WITHOUT_AMX, bfloat16_speedup=timed_at(0.554))
    assert slow == precision.AutoChoice(
        "float32",
        "bfloat16 matrix products ran 0.55x as fast as float32 ones on this CPU, "
        "under the 1.2x that pays for mixed precision",
    )
    fast = choose_auto_precision(has_gpu=False, cpu_flags=XEON_WITH_AMX, bfloat16_speedup=timed_at(4.2))
    assert fast.reason == "bfloat16 matrix products ran 4.20x as fast as float32 ones on this CPU"
    assert choose_auto_precision(has_gpu=False, cpu_flags=LAPTOP_AVX2).reason == "this CPU has no bfloat16 instructions"


def test_the_timing_compares_the_two_precisions_on_this_machine():
    # Small products, so the test is quick: a ratio of two real timings, whatever the CPU.
    speedup = bfloat16_matmul_speedup(n=64, chain=2, repeats=2)
    assert math.isfinite(speedup) and speedup > 0
    assert matmul_peak("float32", n=64, chain=2, repeats=2) > 0


def test_an_unknown_precision_is_named_in_the_error():
    with pytest.raises(ValueError, match="precision='float8'"):
        resolve_precision("float8", has_gpu=False, cpu_flags=set())


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
    assert resolve_precision("auto", has_gpu=False, cpu_flags=flags, bfloat16_speedup=never_timed) == "float32"


def test_train_resolves_auto_by_default_and_keeps_an_explicit_flag(monkeypatch):
    import train
    from app.training.command import train_config_from_args

    monkeypatch.setattr(precision, "read_cpu_flags", lambda: set(XEON_WITH_AMX))
    monkeypatch.setattr(precision, "measured_bfloat16_speedup", timed_at(4.2))
    assert train_config_from_args(train.parse_args([])).precision == "mixed_bfloat16"
    assert train_config_from_args(train.parse_args(["--precision", "float32"])).precision == "float32"
    monkeypatch.setattr(precision, "read_cpu_flags", lambda: set(XEON_WITHOUT_AMX))
    monkeypatch.setattr(precision, "measured_bfloat16_speedup", timed_at(0.55))
    assert train_config_from_args(train.parse_args([])).precision == "float32"
    assert train_config_from_args(train.parse_args(["--precision", "mixed_bfloat16"])).precision == "mixed_bfloat16"
    monkeypatch.setattr(precision, "read_cpu_flags", lambda: set(LAPTOP_AVX2))
    assert train_config_from_args(train.parse_args([])).precision == "float32"
