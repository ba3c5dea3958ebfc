"""app/commands/serve.py switches to a newly exported version while clients call it, failing none."""

import os
import shutil
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from app.export.saved_model import export
from tests.conftest import SENTENCES
from tests.serving.server_process import Server, serving_base
from tests.stand_in import StandInTranslator

STATUS_AFTER = [
    {"version": "2", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}},
    {"version": "1", "state": "END", "status": {"error_code": "OK", "error_message": ""}},
]


def version_status(server):
    status, body = server.request("GET", "/v1/models/translator")
    assert status == 200, body
    return body["model_version_status"]  # newest first


class OtherStandIn(StandInTranslator):
    """Version 2: the stand-in's translations (tests/stand_in.py), each scored twice as low."""

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def serve(self, inputs):
        return {"translations": tf.strings.upper(inputs), "scores": -2 * tf.cast(tf.strings.length(inputs), tf.float32)}


@pytest.mark.slow
def test_exporting_version_2_under_load_switches_to_it_without_a_failed_request(stand_in_export, tmp_path):
    # Stand-ins for versions 1 and 2: what is tested is which version answers, and when, not
    # what it translates (the tiny model took about 80 s of CPU here: two loads of about 20 s,
    # its export's 20 s, and the clients). benchmarks/bench_serving_soak.py's test reloads the
    # tiny model under load.
    base = tmp_path / "translator"
    shutil.copytree(stand_in_export, base / "1")
    base = str(base)
    # Neither a temporary export nor a stray directory is a version.
    os.makedirs(os.path.join(base, ".tmp-7-123"))
    os.makedirs(os.path.join(base, "notes"))
    server = Server(base, "--file_system_poll_wait_seconds", "0.2", log_path=tmp_path / "serve.log", wait=False)
    try:
        sentences = SENTENCES[:2]
        translator_2 = OtherStandIn()  # other scores
        scores = {
            version: translator.serve(tf.constant(sentences))["scores"].numpy()
            for version, translator in ((1, StandInTranslator()), (2, translator_2))
        }
        assert not np.allclose(scores[1], scores[2], rtol=1e-4)
        server.wait_until_serving()

        # Three clients, each calling again 20 ms after an answer: always a request in
        # flight, while leaving the export some CPU.
        answers, failures, stop = [[] for _ in range(3)], [], threading.Event()

        def client(seen):
            while not stop.is_set():
                status, body = server.predict({"instances": sentences})
                if status != 200:
                    failures.append((status, body))
                    continue
                got = [p["scores"] for p in body["predictions"]]
                matches = [v for v, want in scores.items() if np.allclose(got, want, rtol=1e-5)]
                if len(matches) != 1:
                    failures.append(("unknown answer", body))
                seen.extend(matches)
                time.sleep(0.02)

        threads = [threading.Thread(target=client, args=(seen,)) for seen in answers]
        for thread in threads:
            thread.start()
        time.sleep(1.0)
        export(translator_2, base)  # atomic: .tmp-2-<pid>, then renamed to 2
        deadline = time.monotonic() + 180
        while version_status(server)[0] != STATUS_AFTER[0]:
            assert time.monotonic() < deadline, "version 2 was never served"
            time.sleep(0.2)
        # Keep calling until every client has had a few answers from version 2.
        while min(seen.count(2) for seen in answers) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        stop.set()
        for thread in threads:
            thread.join()

        assert failures == []
        for seen in answers:
            assert seen[0] == 1 and seen[-1] == 2
            assert seen == sorted(seen), "a client got version 1 again after version 2"
        assert server.request("GET", "/v1/models/translator") == (200, {"model_version_status": STATUS_AFTER})
        # TF Serving's default policy: only the newest version is served.
        status, body = server.predict({"instances": sentences}, "/v1/models/translator/versions/1:predict")
        assert status == 404 and "Specific(translator, 1)" in body["error"]

        # A version that cannot be loaded is reported, and the last good one stays served.
        os.makedirs(os.path.join(base, "3"))
        open(os.path.join(base, "3", "saved_model.pb"), "wb").close()
        deadline = time.monotonic() + 120
        while not any(v["version"] == "3" and v["state"] == "END" for v in version_status(server)):
            assert time.monotonic() < deadline, "version 3 was never tried"
            time.sleep(0.2)
        status_3 = version_status(server)[0]
        assert status_3["version"] == "3" and status_3["status"]["error_code"] == "UNKNOWN", status_3
        assert status_3["status"]["error_message"]
        status, body = server.predict({"instances": sentences})
        assert status == 200
        np.testing.assert_allclose([p["scores"] for p in body["predictions"]], scores[2], rtol=1e-5)
    finally:
        server.stop()


@pytest.mark.slow
def test_a_poll_wait_of_zero_serves_the_versions_there_at_start_and_no_later_one(stand_in_export, tmp_path):
    # The stand-in's versions (tests/stand_in.py): what is tested is which versions load.
    base = tmp_path / "translator"
    shutil.copytree(stand_in_export, base / "1")
    server = Server(str(base), "--file_system_poll_wait_seconds", "0", log_path=tmp_path / "serve.log")
    try:
        shutil.copytree(stand_in_export, base / "2")
        time.sleep(3)  # fifteen polls' worth at the other test's 0.2 s
        assert [v["version"] for v in version_status(server)] == ["1"]
    finally:
        server.stop()


def test_a_sigterm_while_the_first_version_loads_stops_the_server_cleanly(exported, tmp_path_factory, tmp_path):
    import signal

    base = serving_base(tmp_path_factory, exported)
    log_path = tmp_path / "serve.log"
    server = Server(base, log_path=log_path, wait=False)
    try:
        deadline = time.monotonic() + 120
        while "model translator version 1 is loading" not in log_path.read_text():
            assert time.monotonic() < deadline and server.process.poll() is None, log_path.read_text()[-2000:]
            time.sleep(0.05)
        server.process.send_signal(signal.SIGTERM)
        # Handled, not TensorFlow's process killed by the signal (-15) or a traceback.
        assert server.process.wait(60) == 0
        assert "Traceback" not in log_path.read_text()
    finally:
        server.stop()
