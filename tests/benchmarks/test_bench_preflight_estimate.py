"""benchmarks/bench_preflight_estimate.py: the preflight's estimate line read back as the
preflight writes it (the runs themselves are the benchmark's, not a test's)."""

from app.training.rehearsal import format_duration
from benchmarks.bench_preflight_estimate import read_estimate, seconds_of


def test_durations_are_read_back_as_format_duration_writes_them():
    for seconds in (0, 42, 60, 450, 3599, 3600, 42_300):
        text = format_duration(seconds)
        # Past an hour, the format keeps whole minutes.
        assert seconds_of(text) == (seconds if seconds < 3600 else seconds // 60 * 60)


def test_the_estimate_and_its_range_are_read_from_the_preflights_output():
    line = ("estimate: 2 min 35 s (2 min 19 s to 2 min 51 s) for 300 steps, start to finish: start 6 s, "
            "first call 17 s, new shapes 0 s, updates 1 min 45 s, checkpoints 1 s, evaluations 26 s")
    assert read_estimate(f"peak memory: 1.35 GiB\n{line}\n  [ok] losses finite") == (155, 139, 171, line)
