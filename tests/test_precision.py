"""`--precision auto`: mixed bfloat16 only where the CPU multiplies bfloat16 natively."""

import pytest

from app.precision import read_cpu_flags, resolve_precision

XEON_WITH_AMX = {"fpu", "avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}
EPYC_ZEN4 = {"fpu", "avx2", "avx512f", "avx512_bf16"}
LAPTOP_AVX2 = {"fpu", "sse4_2", "avx2", "fma"}


@pytest.mark.parametrize("precision", ["float32", "mixed_float16", "mixed_bfloat16"])
def test_an_explicit_precision_is_kept_whatever_the_machine(precision):
    assert resolve_precision(precision, has_gpu=True, cpu_flags=XEON_WITH_AMX) == precision
    assert resolve_precision(precision, has_gpu=False, cpu_flags=LAPTOP_AVX2) == precision


@pytest.mark.parametrize(
    "has_gpu, cpu_flags, want",
    [
        (False, XEON_WITH_AMX, "mixed_bfloat16"),
        (False, EPYC_ZEN4, "mixed_bfloat16"),
        (False, LAPTOP_AVX2, "float32"),
        (False, set(), "float32"),
        (True, XEON_WITH_AMX, "float32"),
    ],
    ids=["amx", "avx512_bf16", "avx2_only", "unknown_cpu", "gpu"],
)
def test_auto_picks_mixed_bfloat16_only_on_a_cpu_only_machine_with_bfloat16_instructions(has_gpu, cpu_flags, want):
    assert resolve_precision("auto", has_gpu=has_gpu, cpu_flags=cpu_flags) == want


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
    assert resolve_precision("auto", has_gpu=False, cpu_flags=flags) == "float32"


def test_train_resolves_auto_by_default_and_keeps_an_explicit_flag(monkeypatch):
    import train
    from app import precision
    from app.train_command import train_config_from_args

    monkeypatch.setattr(precision, "read_cpu_flags", lambda: set(XEON_WITH_AMX))
    assert train_config_from_args(train.parse_args([])).precision == "mixed_bfloat16"
    assert train_config_from_args(train.parse_args(["--precision", "float32"])).precision == "float32"
    monkeypatch.setattr(precision, "read_cpu_flags", lambda: set(LAPTOP_AVX2))
    assert train_config_from_args(train.parse_args([])).precision == "float32"
