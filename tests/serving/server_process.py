"""A `python -m app.serve` process for the tests, and the shared one over the tiny export.

    server = Server(base, "--file_system_poll_wait_seconds", "0.2", log_path=tmp_path / "serve.log")
    status, body = server.predict({"instances": ["A man rides a bike."]})
    server.stop()
"""

import http.client
import json
import os
import re
import select
import shutil
import subprocess
import sys
import time

from tests.tiny_run import ROOT

# Small limits, so the tests can cross them cheaply (the defaults are 64 and 1000).
MAX_INSTANCES, MAX_TEXT_LENGTH = 8, 400


class Server:
    """A `python -m app.serve` process on a free port of 127.0.0.1."""

    def __init__(self, base, *flags, log_path, wait=True):
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "app.serve", *(["--model_base_path", base] if base else []), "--rest_api_port", "0",
             *([] if "--port" in flags else ["--port", "0"]), *flags],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=self.log, text=True,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        )
        if wait:
            self.wait_until_serving()

    def wait_until_serving(self):
        deadline = time.monotonic() + 300
        line = ""
        while "Serving model" not in line:
            ready, _, _ = select.select([self.process.stdout], [], [], max(0.0, deadline - time.monotonic()))
            line = self.process.stdout.readline() if ready else ""
            if not ready or (not line and self.process.poll() is not None):
                self.stop()
                raise RuntimeError(f"the server did not start: {open(self.log_path).read()[-3000:]}")
        self.host, self.port = re.search(r"http://([\d.]+):(\d+)/", line).groups()
        self.url = f"http://{self.host}:{self.port}"
        grpc = re.search(r"gRPC at ([\d.]+:\d+)", line)
        self.grpc_address = grpc.group(1) if grpc else None

    def request(self, method, path, body=None, raw=None, timeout=120):
        """`(status, parsed JSON or text)` of one request on a fresh connection."""
        connection = http.client.HTTPConnection(self.host, int(self.port), timeout=timeout)
        try:
            data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
            connection.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
            response = connection.getresponse()
            text = response.read().decode("utf-8")
            is_json = response.getheader("Content-Type", "").startswith("application/json")
            return response.status, json.loads(text) if is_json else text
        finally:
            connection.close()

    def predict(self, body, path="/v1/models/translator:predict"):
        return self.request("POST", path, body)

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


def serving_base(tmp_path_factory, exported):
    """A base path of its own holding a copy of the exported version 1."""
    _, _, path, _ = exported
    base = tmp_path_factory.mktemp("serving") / "translator"
    shutil.copytree(path, base / "1")
    return str(base)


def start_tiny_server(exported, model_dir, tmp_path_factory):
    """A `Server` of a copy of the shared export (conftest.py's `exported`) as export.py
    leaves a version, with `MAX_INSTANCES`, `MAX_TEXT_LENGTH` and one CPU thread per op."""
    from app.export.saved_model import export_metadata

    base = serving_base(tmp_path_factory, exported)
    # As export.py writes it: the page reads the language pair and decoding defaults there.
    info = export_metadata(model_dir, "weights", exported[0].decoding)
    with open(os.path.join(base, "1", "export_info.json"), "w") as f:
        json.dump(info, f)
    log_path = tmp_path_factory.mktemp("logs") / "serve.log"
    flags = ["--max_instances", str(MAX_INSTANCES), "--max_text_length", str(MAX_TEXT_LENGTH)]
    # One thread per op and one op at a time: what decoded fastest on a 2-core CPU.
    flags += ["--tensorflow_intra_op_parallelism", "1", "--tensorflow-inter-op-parallelism", "1"]
    from tests.serving.fake_models import free_port

    flags += ["--port", str(free_port())]  # gRPC beside REST, on a port no other test's server takes
    return Server(base, *flags, log_path=log_path)
