"""app/serving/batching.py with a fake model: what is merged, what is not, and who gets which rows."""

import asyncio
import threading
import time

import numpy as np
import pytest

from app.serving.batching import Batcher, BatchingParameters, client_connected
from app.serving.rest_api import ServingError
from tests.tiny_run import ROOT


class FakeVersion:
    """Echoes its inputs; records every call's signature and rows."""

    def __init__(self, seconds=0.05, fail=False, barrier=None):
        self.calls = []
        self.seconds = seconds
        # A threading.Barrier every call waits at: it passes only once that many calls
        # run at once, whatever the machine's load (a sleep alone would race it).
        self.barrier = barrier
        self.fail = fail
        self.lock = threading.Lock()
        self.running = 0
        self.most_running = 0  # the most calls that ran at once

    def run(self, signature_name, inputs):
        with self.lock:
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        if self.barrier is not None:
            self.barrier.wait(timeout=60)
        time.sleep(self.seconds)  # a model call; requests queue up meanwhile
        with self.lock:
            self.running -= 1
            self.calls.append((signature_name, {k: v.tolist() for k, v in inputs.items()}))
        if self.fail:
            raise ServingError("the model said no")
        return {"echo": inputs["inputs"], "twice": np.stack([inputs["inputs"], inputs["inputs"]], axis=1)}


def strings(*texts):
    return np.array([t.encode() for t in texts], dtype=object)


def run_all(batcher, requests):
    """Submits every `(version, signature, inputs)` at once; returns the outputs in order."""

    async def main():
        batcher.start()
        try:
            return await asyncio.gather(
                *(batcher.run(v, s, x, len(x["inputs"])) for v, s, x in requests), return_exceptions=True
            )
        finally:
            await batcher.stop()

    return asyncio.run(main())


def test_concurrent_requests_share_calls_and_get_their_own_rows_back():
    version = FakeVersion()
    requests = [
        (version, "serving_default", {"inputs": strings(*[f"r{i}-{j}" for j in range(1 + i % 3)])}) for i in range(12)
    ]
    outputs = run_all(Batcher(BatchingParameters(max_batch_size=8, batch_timeout_micros=20_000)), requests)
    for (_, _, inputs), output in zip(requests, outputs):
        np.testing.assert_array_equal(output["echo"], inputs["inputs"])
        np.testing.assert_array_equal(output["twice"][:, 1], inputs["inputs"])
    sizes = [len(call[1]["inputs"]) for call in version.calls]
    assert sum(sizes) == 24 and max(sizes) <= 8 and len(sizes) < 12


def test_different_options_signatures_and_versions_are_never_merged():
    v1, v2 = FakeVersion(), FakeVersion()

    def options(texts, alpha, extra):
        n = len(texts)
        return {
            "inputs": strings(*texts),
            "alpha": np.full([n], alpha, np.float32),
            "max_extra_length": np.full([n], extra, np.int32),
        }

    requests = [
        (v1, "translate_with_options", options(["a", "b"], 0.6, 50)),
        (v1, "translate_with_options", options(["c"], 1.0, 50)),
        (v1, "translate_with_options", options(["d"], 0.6, 50)),
        (v1, "translate_with_options", options(["e"], 0.6, 10)),
        (v1, "nbest", {"inputs": strings("f")}),
        (v1, "serving_default", {"inputs": strings("g")}),
        (v2, "serving_default", {"inputs": strings("h")}),
        (v1, "serving_default", {"inputs": strings("i")}),
        # Its own rows disagree: it runs alone, and the model decides.
        (
            v1,
            "translate_with_options",
            {
                "inputs": strings("j", "k"),
                "alpha": np.array([0.6, 1.0], np.float32),
                "max_extra_length": np.array([50, 50], np.int32),
            },
        ),
    ]
    run_all(Batcher(BatchingParameters(max_batch_size=32, batch_timeout_micros=50_000)), requests)
    calls = sorted((signature, "".join(c.decode() for c in inputs["inputs"])) for signature, inputs in v1.calls)
    assert calls == [
        ("nbest", "f"),
        ("serving_default", "gi"),
        ("translate_with_options", "abd"),
        ("translate_with_options", "c"),
        ("translate_with_options", "e"),
        ("translate_with_options", "jk"),
    ]
    assert [inputs["inputs"] for _, inputs in v2.calls] == [[b"h"]]


def test_a_request_larger_than_max_batch_size_is_answered_over_several_calls():
    version = FakeVersion()
    requests = [
        (version, "serving_default", {"inputs": strings(*"abcdef")}),
        (version, "serving_default", {"inputs": strings("g")}),
    ]
    outputs = run_all(Batcher(BatchingParameters(max_batch_size=4, batch_timeout_micros=20_000)), requests)
    assert [o["echo"].tolist() for o in outputs] == [[t.encode() for t in "abcdef"], [b"g"]]
    assert [o["twice"].shape for o in outputs] == [(6, 2), (1, 2)]
    # Its first slice, then the request that waited behind it, with the rest.
    assert [inputs["inputs"] for _, inputs in version.calls] == [[b"a", b"b", b"c", b"d"], [b"g", b"e", b"f"]]


def test_a_small_request_waits_for_one_slice_of_a_large_one_not_for_all_of_it():
    version = FakeVersion(seconds=0.2)

    async def main():
        batcher = Batcher(BatchingParameters(max_batch_size=4, batch_timeout_micros=0))
        batcher.start()
        try:
            twelve = {"inputs": strings(*"abcdefghijkl")}
            large = asyncio.ensure_future(batcher.run(version, "serving_default", twelve, 12))
            while not version.running:  # the first slice is in the model
                await asyncio.sleep(0.01)
            small = await batcher.run(version, "serving_default", {"inputs": strings("x")}, 1)
            return small, len(version.calls), await large
        finally:
            await batcher.stop()

    small, calls_before_small_answered, large = asyncio.run(main())
    assert small["echo"].tolist() == [b"x"] and calls_before_small_answered == 2
    assert large["echo"].tolist() == [t.encode() for t in "abcdefghijkl"]
    assert [inputs["inputs"] for _, inputs in version.calls] == [
        [b"a", b"b", b"c", b"d"], [b"x", b"e", b"f", b"g"], [b"h", b"i", b"j", b"k"], [b"l"],
    ]


def test_a_request_whose_inputs_cannot_be_sliced_runs_whole():
    version = FakeVersion()

    async def main():
        batcher = Batcher(BatchingParameters(max_batch_size=2, batch_timeout_micros=0))
        batcher.start()
        try:
            # A scalar input: no rows to slice, so the three texts go in one call.
            return await batcher.run(version, "serving_default", {"inputs": strings(*"abc"), "k": np.array(3)}, 3)
        finally:
            await batcher.stop()

    outputs = asyncio.run(main())
    assert outputs["echo"].tolist() == [b"a", b"b", b"c"]
    assert [inputs["inputs"] for _, inputs in version.calls] == [[b"a", b"b", b"c"]]


def test_a_failing_call_fails_each_of_its_requests():
    version = FakeVersion(fail=True)
    requests = [(version, "serving_default", {"inputs": strings(t)}) for t in "abc"]
    outputs = run_all(Batcher(BatchingParameters(batch_timeout_micros=20_000)), requests)
    assert all(isinstance(o, ServingError) and o.message == "the model said no" for o in outputs)


def test_without_batching_every_request_is_its_own_call():
    version = FakeVersion(seconds=0.01)
    requests = [(version, "serving_default", {"inputs": strings(t)}) for t in "abcd"]
    run_all(Batcher(BatchingParameters(), enabled=False), requests)
    assert sorted(inputs["inputs"][0] for _, inputs in version.calls) == [b"a", b"b", b"c", b"d"]


def test_without_batching_concurrent_requests_run_concurrently():
    # TF Serving runs each request on its own HTTP thread; one thread would answer at 1, 2, 3, 4 x.
    # Each call waits until all four run: run one after another, the first would wait for
    # ever (here: fail after the barrier's timeout).
    version = FakeVersion(seconds=0.0, barrier=threading.Barrier(4))
    requests = [(version, "serving_default", {"inputs": strings(t)}) for t in "abcd"]
    outputs = run_all(Batcher(BatchingParameters(), enabled=False), requests)
    assert [o["echo"].tolist() for o in outputs] == [[b"a"], [b"b"], [b"c"], [b"d"]]
    assert version.most_running == 4


def test_without_batching_threads_bound_the_calls_at_once():
    version = FakeVersion(seconds=0.05)
    requests = [(version, "serving_default", {"inputs": strings(t)}) for t in "abcde"]
    outputs = run_all(Batcher(BatchingParameters(), enabled=False, threads=2), requests)
    assert [o["echo"].tolist() for o in outputs] == [[b"a"], [b"b"], [b"c"], [b"d"], [b"e"]]
    assert version.most_running == 2


def test_a_full_queue_refuses_with_503():
    version = FakeVersion(seconds=0.2)
    requests = [(version, "serving_default", {"inputs": strings(t)}) for t in "abcdef"]
    outputs = run_all(
        Batcher(BatchingParameters(max_batch_size=1, max_enqueued_batches=2, batch_timeout_micros=0)), requests
    )
    refused = [o for o in outputs if isinstance(o, ServingError)]
    assert refused and all(o.status == 503 for o in refused)


def test_without_batching_a_full_queue_refuses_with_503():
    version = FakeVersion(seconds=0.05)
    requests = [(version, "serving_default", {"inputs": strings(t)}) for t in "abcdef"]
    parameters = BatchingParameters(max_batch_size=1, max_enqueued_batches=2)
    outputs = run_all(Batcher(parameters, enabled=False, threads=1), requests)
    refused = [o for o in outputs if isinstance(o, ServingError)]
    assert refused and all(o.status == 503 for o in refused)
    assert len(version.calls) == 6 - len(refused)


def submit(batcher, version, text, still_wanted=lambda: True):
    """One request of one row, as a task of the running loop."""
    return asyncio.ensure_future(batcher.run(version, "serving_default", {"inputs": strings(text)}, 1, still_wanted))


@pytest.mark.parametrize("enabled", [True, False])
def test_a_request_whose_client_left_is_dropped_before_it_runs(enabled):
    version = FakeVersion(seconds=0.01)
    batcher = Batcher(BatchingParameters(batch_timeout_micros=20_000), enabled=enabled)

    async def main():
        batcher.start()
        try:
            requests = [submit(batcher, version, t, lambda t=t: t != "b") for t in "abc"]
            return await asyncio.gather(*requests, return_exceptions=True)
        finally:
            await batcher.stop()

    a, b, c = asyncio.run(main())
    assert isinstance(b, ServingError) and b.status == 499
    assert a["echo"].tolist() == [b"a"] and c["echo"].tolist() == [b"c"]
    assert sorted(row for _, inputs in version.calls for row in inputs["inputs"]) == [b"a", b"c"]
    assert sum(batcher.batch_sizes.values()) == len(version.calls)


@pytest.mark.parametrize("enabled", [True, False])
def test_abandoned_requests_do_not_refuse_live_ones(enabled):
    version = FakeVersion(seconds=0.1)
    parameters = BatchingParameters(max_batch_size=1, max_enqueued_batches=2, batch_timeout_micros=0)
    batcher = Batcher(parameters, enabled=enabled, threads=1)
    left = []

    async def main():
        batcher.start()
        try:
            running = submit(batcher, version, "a")
            await asyncio.sleep(0.02)  # "a" is in the model
            abandoned = [submit(batcher, version, t, lambda: not left) for t in "bc"]
            await asyncio.sleep(0)  # queued: the queue is at its limit
            left.append(True)  # their clients disconnect
            return await asyncio.gather(running, *abandoned, submit(batcher, version, "d"), return_exceptions=True)
        finally:
            await batcher.stop()

    a, b, c, d = asyncio.run(main())
    assert a["echo"].tolist() == [b"a"]
    assert [(o.status if isinstance(o, ServingError) else o) for o in (b, c)] == [499, 499]
    assert d["echo"].tolist() == [b"d"]
    assert [inputs["inputs"] for _, inputs in version.calls] == [[b"a"], [b"d"]]


class FakeTransport:
    def __init__(self, closing):
        self.closing = closing

    def is_closing(self):
        return self.closing


@pytest.mark.parametrize("transport, connected", [(FakeTransport(False), True), (FakeTransport(True), False),
                                                   (None, False)])
def test_client_connected_reads_the_aiohttp_requests_transport(transport, connected):
    class Request:  # aiohttp's: transport is None once the connection is lost
        pass

    request = Request()
    request.transport = transport
    assert client_connected(request) is connected


def test_the_shipped_batching_parameters_file_is_read():
    parameters = BatchingParameters.from_file(ROOT / "serving" / "batching_parameters.txt")
    assert parameters == BatchingParameters()  # the file documents the local server's defaults


@pytest.mark.parametrize("text, expected", [
    (
        "max_batch_size { value: 8 }\n# num_batch_threads { value: 9 }\nbatch_timeout_micros {value:100}",
        BatchingParameters(max_batch_size=8, batch_timeout_micros=100),
    ),
    (
        "pad_variable_length_inputs: false\nmax_enqueued_batches { value: 3 }",
        BatchingParameters(max_enqueued_batches=3),
    ),
])
def test_batching_parameters_text_proto(tmp_path, text, expected):
    path = tmp_path / "batching.txt"
    path.write_text(text)
    assert BatchingParameters.from_file(path) == expected


def test_tf_serving_fields_this_server_does_not_use_are_read_past(tmp_path):
    path = tmp_path / "batching.txt"
    path.write_text(
        'max_batch_size { value: 8 }\nallowed_batch_sizes: 2\nallowed_batch_sizes: 8\n'
        'enable_large_batch_splitting { value: true }\nbatch_padding_policy: "PAD_UP"\n'
    )
    assert BatchingParameters.from_file(path) == BatchingParameters(max_batch_size=8)


@pytest.mark.parametrize("text, message", [
    ("max_batch_sise { value: 8 }", "unknown batching parameter 'max_batch_sise'; known: batch_timeout_micros, "),
    ("max_batch_size { valu: 8 }", "cannot read 'max_batch_size { valu: 8 }'"),
    ("max_batch_size: 8", "write max_batch_size { value: 8 }, as TF Serving reads it"),
    ("max_batch_size { value: 2.5 }", "max_batch_size must be a whole number, got '2.5'"),
    ("max_batch_size { value: 0 }", "batching parameter max_batch_size must be an integer >= 1, got 0"),
    ("batch_timeout_micros { value: -1 }", "batch_timeout_micros must be an integer >= 0, got -1"),
    ("num_batch_threads { value: 2 } and more", "cannot read 'and more'"),
])
def test_a_bad_batching_parameters_file_is_refused_naming_the_file_and_value(tmp_path, text, message):
    path = tmp_path / "batching.txt"
    path.write_text(text)
    with pytest.raises(ValueError) as error:
        BatchingParameters.from_file(path)
    assert str(error.value).startswith(f"{path}: ") and message in str(error.value)
