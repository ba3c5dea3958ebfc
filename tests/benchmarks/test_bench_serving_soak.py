"""benchmarks/bench_serving_soak.py on the tiny export: reloads, failed loads and label moves
under load, no request failed, and memory that stays where the first load put it."""

import re
import time

import pytest

from benchmarks import bench_serving_soak

# Why the fast tier runs no test of this file (tests/tiers.py).
ALL_SLOW_BECAUSE = "its one test runs the soak benchmark against a real server and worker"


@pytest.mark.slow
def test_reloads_and_failed_loads_fail_no_request_and_keep_memory_flat(exported, capsys, monkeypatch):
    _, _, path, _ = exported
    post = bench_serving_soak.post

    def post_then_pause(*args, **kwargs):
        # The client calls again 50 ms after each answer, not at once: it still calls all
        # through every reload and failed load, but back-to-back calls took about half of
        # this test's CPU time (4,500 requests of 12 ms while three versions loaded).
        try:
            return post(*args, **kwargs)
        finally:
            time.sleep(0.05)

    monkeypatch.setattr(bench_serving_soak, "post", post_then_pause)
    # New versions load into the serving worker; past --reclaim_unloaded_memory_mb held for
    # the ones unloaded, a fresh worker takes what is served.
    reclaim_mb = 300
    argv = ["--export", path, "--reloads", "2", "--broken", "2", "--label-moves", "2", "--clients", "1",
            "--server-flags", f"--reclaim_unloaded_memory_mb {reclaim_mb}"]
    assert bench_serving_soak.main(argv) == 0
    out = capsys.readouterr().out
    assert "reload to version 2 in" in out and "reload to version 3 in" in out
    assert "after 2 failed loads of version 4" in out
    assert "label move 1 (stable -> 3, canary -> 2)" in out and "label move 2 (stable -> 2, canary -> 3)" in out
    growth = [float(g) for g in re.findall(r"\(([+-]\d+\.\d)%", out)]
    assert len(growth) == 6, out
    # At most what the worker may hold for unloaded versions, and the 10% a worker's memory
    # moves by between two measures (a version loaded in the server's own process, before
    # the worker, grew it by about a quarter each time, and kept it).
    first_gib = float(re.search(r"after the first load: (\d+\.\d+) GiB", out).group(1))
    assert max(growth) < 100 * reclaim_mb / 1024 / first_gib + 10, out
    assert re.search(r"answered \d+ requests, failed 0;", out), out
