"""Versions in a worker process (app/serving/worker_process.py): on the tiny export, the same
answers as in-process; on the stand-in's (tests/stand_in.py), which a process loads in a
fraction of a second, workers that start, fail, are replaced and end with their versions."""

import gc
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from app.serving.models import ModelManager
from app.serving.rest_api import ServingError
from app.serving.worker_process import CpuThreads, RemoteError, VersionProcess
from tests.conftest import SENTENCES
from tests.serving.server_process import Server
from tests.serving.test_serve_models import poll
from tests.tiny_run import ROOT


def gone(pid, seconds=20):
    """Whether process `pid` has exited (and been reaped) within `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(")")[-1].split()[0] == "Z":  # exited, not yet reaped
                    time.sleep(0.05)
                    continue
        except (FileNotFoundError, ProcessLookupError):  # reaped before the open, or between it and the read
            return True
        time.sleep(0.05)
    return False


@pytest.mark.slow
def test_a_version_in_its_own_process_answers_as_in_process_and_ends_with_its_last_reference(exported):
    _, _, path, expected = exported
    version = VersionProcess(1, path, CpuThreads(1, 1), max_calls=2)
    version.warm_up()
    assert {"greedy", "nbest", "serving_default", "translate_with_options"} <= set(version.signatures)
    assert version.input_specs("serving_default")["inputs"].dtype == np.dtype(object)
    # Two calls at once, from two threads, each matched to its own answer.
    results = {}

    def call(loaded, name, sentences):
        results[name] = loaded.run("serving_default", {"inputs": np.array(sentences, dtype=object)})

    threads = [threading.Thread(target=call, args=(version, i, SENTENCES[i::2])) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    del threads  # they hold the version
    for i in range(2):
        assert results[i]["translations"].tolist() == expected["translations"][i::2].tolist()
        np.testing.assert_allclose(results[i]["scores"], expected["scores"][i::2], rtol=1e-5)
    with pytest.raises(ServingError, match='signature name: "nope" not found'):
        version.input_specs("nope")
    # An input the model refuses is that request's error, and the process goes on.
    with pytest.raises(ServingError):
        version.run("translate_with_options", {
            "inputs": np.array([b"a"], dtype=object), "alpha": np.array([-1.0], np.float32),
            "max_extra_length": np.array([5], np.int32),
        })
    assert version.run("greedy", {"inputs": np.array([b"a"], dtype=object)})["translations"].shape == (1,)
    pid = version.pid
    del version
    gc.collect()
    assert gone(pid), "the version's process outlived its last reference"


@pytest.mark.slow
def test_a_version_that_fails_to_load_leaves_no_process(tmp_path):
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "saved_model.pb").write_bytes(b"not a SavedModel")
    before = set(_children())
    with pytest.raises(RemoteError) as error:
        VersionProcess(1, str(tmp_path / "1"))
    assert error.value.type_name in ("DecodeError", "OSError", "ValueError", "RuntimeError")
    assert set(_children()) <= before


@pytest.mark.slow
def test_a_dead_version_process_fails_its_calls_and_is_loaded_again(stand_in_export, tmp_path):
    base = tmp_path / "translator"
    base.mkdir()
    os.symlink(stand_in_export, base / "1")
    manager = ModelManager("translator", str(base), loader=VersionProcess, load_retry_interval_seconds=0)
    poll(manager)
    first = manager.get()
    os.kill(first.pid, signal.SIGKILL)
    with pytest.raises(ServingError, match="the process of version 1 ended unexpectedly") as error:
        for _ in range(100):
            first.run("greedy", {"inputs": np.array([b"a"], dtype=object)})
            time.sleep(0.05)
    assert error.value.status == 503
    assert not first.alive
    poll(manager)  # counted as a failed load, and retried at once (no retry interval here)
    again = manager.get()
    assert again is not first and again.alive
    assert again.run("greedy", {"inputs": np.array([b"a"], dtype=object)})["translations"].shape == (1,)
    again.close()
    assert gone(again.pid)


@pytest.mark.slow
def test_a_newer_version_ends_the_older_ones_process(stand_in_export, tmp_path):
    base = tmp_path / "translator"
    base.mkdir()
    os.symlink(stand_in_export, base / "1")
    manager = ModelManager("translator", str(base), loader=VersionProcess)
    poll(manager)
    first_pid = manager.get().pid
    os.symlink(stand_in_export, base / "2")
    poll(manager)
    assert manager.get().version == 2
    gc.collect()
    assert gone(first_pid)
    manager.get().close()


def _children():
    """The pids of this process's living children."""
    children = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, NotADirectoryError, ProcessLookupError):
            continue
        if fields[0] != "Z" and int(fields[1]) == os.getpid():
            children.append(int(name))
    return children


def stand_in_base(stand_in_export, directory):
    """A base path in `directory` holding a copy of the stand-in's version 1."""
    shutil.copytree(stand_in_export, directory / "translator" / "1")
    return str(directory / "translator")


@pytest.mark.slow
def test_the_server_process_holds_no_tensorflow(stand_in_export, tmp_path):
    server = Server(stand_in_base(stand_in_export, tmp_path), log_path=tmp_path / "serve.log")
    try:
        with open(f"/proc/{server.process.pid}/maps") as f:
            maps = f.read()
        assert "libtensorflow" not in maps  # the versions' processes have it, and give it back
        status, body = server.predict({"instances": SENTENCES[:2]})
        assert status == 200, body
    finally:
        server.stop()
    assert server.process.returncode == 0


@pytest.mark.slow
def test_sigterm_answers_the_request_in_flight_then_exits_0(stand_in_export, tmp_path):
    server = Server(stand_in_base(stand_in_export, tmp_path), log_path=tmp_path / "serve.log")
    body = json.dumps({"instances": SENTENCES[:3]}).encode()
    head = (
        f"POST /v1/models/translator:predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    with socket.create_connection((server.host, int(server.port)), timeout=120) as connection:
        connection.sendall(head + body[:10])  # in flight: its handler is reading the body
        time.sleep(0.5)
        server.process.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        with pytest.raises(OSError):  # no new connections once stopping
            socket.create_connection((server.host, int(server.port)), timeout=5)
        connection.sendall(body[10:])
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200 OK"), answer[:300]
    assert len(json.loads(answer.partition(b"\r\n\r\n")[2])["predictions"]) == 3
    assert server.process.wait(60) == 0
    server.log.close()


def test_a_port_in_use_is_one_line_naming_the_flag_before_anything_loads(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        start = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "app.serve", "--model_base_path", str(tmp_path), "--rest_api_port", str(port)],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )
    assert result.returncode == 1
    assert result.stderr.strip() == f"app.serve: --rest_api_port {port} on --host 127.0.0.1: Address already in use"
    assert time.monotonic() - start < 20  # no model loaded, no TensorFlow imported
    # The gRPC port likewise, named by its own flag.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "app.serve", "--model_base_path", str(tmp_path), "--rest_api_port", "0",
             "--port", str(port)],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )
    assert result.returncode == 1
    assert result.stderr.strip() == f"app.serve: --port {port} on --host 127.0.0.1: Address already in use"


@pytest.mark.slow
def test_a_new_version_loads_alone_into_the_worker_that_serves_the_others(stand_in_export, tmp_path):
    """Two models share one worker; a new version of one is loaded into it, the other's
    version answering throughout, untouched; what goes is unloaded in place; a fresh worker
    takes what is served only to give back what unloaded versions left, or after the worker
    died; and the worker ends with the last version served."""
    import asyncio
    import functools

    from app.serving.batching import Batcher
    from app.serving.core import ServerCore
    from app.serving.model_config import ServedModel
    from app.serving.model_set import ModelSet
    from app.serving.worker_process import WorkerProcess

    bases = {name: tmp_path / name for name in ("en-de", "en-fr")}
    for base in bases.values():
        base.mkdir()
        os.symlink(stand_in_export, base / "1")
    row = {"inputs": np.array([b"a"], dtype=object)}

    def pids(core):
        return {name: (manager.get().version, manager.get().pid) for name, manager in core.models.managers.items()}

    async def scenario():
        models = ModelSet(lambda m: ModelManager(m.name, m.base_path, m.policy, load_retry_interval_seconds=0))
        core = ServerCore(
            models, Batcher(), [ServedModel.from_flags(name, str(base)) for name, base in bases.items()],
            poll_seconds=3600, start_worker=functools.partial(WorkerProcess, threads=CpuThreads(1, 1)),
        )
        await core.start()
        (_, first), (_, same) = pids(core).values()
        assert first == same, "two models, one worker"
        en_fr = core.models.get("en-fr")
        # A new version of en-de: loaded into the same worker, en-fr's version not reloaded.
        os.symlink(stand_in_export, bases["en-de"] / "2")
        await core.poll()
        assert pids(core) == {"en-de": (2, first), "en-fr": (1, first)}
        assert core.models.get("en-fr") is en_fr
        assert en_fr.worker.keys == {("en-de", 2), ("en-fr", 1)}, "version 1 of en-de unloaded in place"
        # en-fr leaves the config: unloaded in place too.
        await core.reload_config([ServedModel.from_flags("en-de", str(bases["en-de"]))])
        del en_fr
        assert list(core.models.managers) == ["en-de"] and pids(core)["en-de"] == (2, first)
        assert core.models.get("en-de").worker.keys == {("en-de", 2)}
        # Past what the worker may hold for unloaded versions: a fresh one takes what is served.
        core.reclaim_bytes = 0
        await core.poll()
        second = pids(core)["en-de"][1]
        assert second != first and core.models.get("en-de").worker.keys == {("en-de", 2)}
        assert gone(first), "the worker before ends once none of its versions is served"
        core.reclaim_bytes = 2**40
        # The worker killed: loaded again at the next poll, without the retry interval.
        os.kill(second, signal.SIGKILL)
        dead = core.models.get("en-de")
        while dead.alive:
            await asyncio.sleep(0.05)
        await core.poll()
        assert pids(core)["en-de"][0] == 2 and pids(core)["en-de"][1] != second
        answer = await asyncio.to_thread(core.models.get("en-de").run, "greedy", row)
        assert answer["translations"].shape == (1,)
        last = pids(core)["en-de"][1]
        await core.stop()
        return last

    assert gone(asyncio.run(scenario()))


@pytest.mark.slow
def test_a_load_that_hangs_times_out_and_lets_the_server_go_on(stand_in_export, tmp_path):
    """A version whose saved_model.pb never finishes reading (a FIFO: a stalled network mount)
    fails after --load_timeout_seconds with DEADLINE_EXCEEDED, the change lock is let go,
    the served version answers throughout, and it moves to a fresh worker."""
    import asyncio
    import functools

    from app.serving.batching import Batcher
    from app.serving.core import ServerCore
    from app.serving.model_config import ServedModel
    from app.serving.model_set import ModelSet
    from app.serving.worker_process import WorkerProcess

    base = tmp_path / "en-de"
    base.mkdir()
    os.symlink(stand_in_export, base / "1")
    row = {"inputs": np.array([b"a"], dtype=object)}

    async def scenario():
        models = ModelSet(lambda m: ModelManager(m.name, m.base_path, m.policy, load_retry_interval_seconds=3600))
        core = ServerCore(models, Batcher(), [ServedModel.from_flags("en-de", str(base))], poll_seconds=3600,
                          start_worker=functools.partial(WorkerProcess, threads=CpuThreads(1, 1), timeout=120),
                          load_timeout_seconds=3)
        await core.start()
        first = core.models.get("en-de").pid
        stalled = base / "2"
        stalled.mkdir()
        for name in os.listdir(stand_in_export):
            if name != "saved_model.pb":
                os.symlink(os.path.join(stand_in_export, name), stalled / name)
        os.mkfifo(stalled / "saved_model.pb")
        await asyncio.wait_for(core.poll(), 60)
        status = core.models.status_json("en-de", 2)["model_version_status"][0]
        assert (status["state"], status["status"]["error_code"]) == ("END", "DEADLINE_EXCEEDED")
        assert "did not end in 3 s" in status["status"]["error_message"]
        served = core.models.get("en-de")
        assert served.version == 1 and served.pid != first, "what is served moved to a fresh worker"
        assert (await asyncio.to_thread(served.run, "greedy", row))["translations"].shape == (1,)
        await core.stop()

    asyncio.run(scenario())
