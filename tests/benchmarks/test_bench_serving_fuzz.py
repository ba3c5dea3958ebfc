"""benchmarks/bench_serving_fuzz.py on the tiny export: fuzzed requests over REST and gRPC to
the real server answer a result or a client error, never a server error."""

import re

import pytest

from benchmarks import bench_serving_fuzz


def test_the_fuzzer_makes_requests_of_every_kind():
    fuzzer = bench_serving_fuzz.Fuzzer(seed=0)
    requests = [fuzzer.grpc_request("translator") for _ in range(100)]
    sizes = {dim.size for request in requests for proto in request.inputs.values() for dim in proto.tensor_shape.dim}
    assert {10**12, 2**63 - 1, 30_000_000, 64, 65} <= sizes
    bodies = [fuzzer.rest_body() for _ in range(100)]
    assert any(b'"instances"' in body for body in bodies) and any(b'"inputs"' in body for body in bodies)
    # The same seed, the same requests: a run can be repeated.
    again = bench_serving_fuzz.Fuzzer(seed=0)
    assert [again.grpc_request("translator") for _ in range(100)] == requests


@pytest.mark.slow
def test_fuzzed_requests_get_no_server_error(exported, capsys):
    _, _, path, _ = exported
    # Memory is the benchmark's to measure over 10,000 requests (docs/results.md); here a
    # bound no run can miss, the answers being what is checked.
    argv = ["--export", path, "--requests", "300", "--warm-requests", "100", "--max-growth-mb", "100000"]
    assert bench_serving_fuzz.main(argv) == 0
    out = capsys.readouterr().out
    assert "server errors: 0 (of both passes)" in out
    assert re.search(r"gRPC INVALID_ARGUMENT: \d+", out) and re.search(r"REST 400: \d+", out), out
