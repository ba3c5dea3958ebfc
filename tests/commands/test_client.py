"""app/commands/client.py against servers that are not TF Serving: each failure is one error line.

The client against the real server is in test_serve.py.
"""

import http.server
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from app.commands.client import ClientError, predict

ROOT = Path(__file__).resolve().parents[2]


class _Handler(http.server.BaseHTTPRequestHandler):
    """Answers every POST with the class's `status` and `body`, after `delay` seconds."""

    status, body, delay = 200, b"", 0.0

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        time.sleep(self.delay)
        self.send_response(self.status)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


@pytest.fixture
def answering():
    """`answering(status, body, delay)` starts a server that answers so; returns its URL."""
    servers = []

    def start(status=200, body=b"", delay=0.0):
        handler = type("Handler", (_Handler,), {"status": status, "body": body, "delay": delay})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        # A short poll: shutdown() waits for serve_forever's next look (0.5 s by default).
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_a_web_page_in_place_of_predictions_is_an_error_that_shows_it(answering):
    url = answering(body=b"<html><body>It works!</body></html>")
    with pytest.raises(ClientError, match=r"did not answer as TF Serving does \(no \"predictions\"\): '<html><body>It"):
        predict(url, "translator", ["A man."])
    url = answering(body=b'{"outputs": []}')  # JSON, but not a :predict answer in the row format
    with pytest.raises(ClientError, match="no \"predictions\""):
        predict(url, "translator", ["A man."])


def test_an_error_status_shows_the_servers_error_or_its_reason(answering):
    with pytest.raises(ClientError, match=r":predict: HTTP 400: bad input$"):
        predict(answering(400, b'{"error": "bad input"}'), "translator", ["A man."])
    with pytest.raises(ClientError, match=r":predict: HTTP 502: Bad Gateway$"):
        predict(answering(502, b"[1, 2]"), "translator", ["A man."])


def test_an_answer_slower_than_the_timeout_is_an_error(answering):
    url = answering(body=b'{"predictions": []}', delay=2.0)
    with pytest.raises(ClientError, match="timed out"):
        predict(url, "translator", ["A man."], timeout=0.3)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--url", "localhost:8501"], "error: --url 'localhost:8501' is not an http:// or https:// URL"),
        (["--batch-size", "0"], "error: argument --batch-size: must be at least 1, got 0"),
        (["--nbest", "--alpha", "1"], "error: --nbest cannot be combined with --alpha or --max-extra-length"),
    ],
)
def test_the_command_names_a_bad_flag_in_one_line(flags, message):
    result = subprocess.run(
        [sys.executable, "-m", "app.client", "A man.", *flags], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode in (1, 2)
    assert result.stderr.strip().splitlines()[-1].endswith(message) and result.stdout == ""


@pytest.mark.parametrize(
    "body, nbest, message",
    [
        (b'{"predictions": []}', False, r"answered 0 predictions for 2 sentences$"),
        (b'{"predictions": null}', False, r"answered NoneType predictions for 2 sentences$"),
        (b'{"predictions": [1, 2]}', False, r"answered prediction 0 as 1, not translations"),
        (b'{"predictions": [{"translations": "x"}, {"translations": "y"}]}', False, "prediction 0 as"),
        (b'{"predictions": [{"translations": "x", "scores": "high"}, {"translations": "y", "scores": 1}]}', False,
         "prediction 0 as"),
        (b'{"predictions": [{"translations": ["a", "b"], "scores": [1.0]}, {"translations": ["c"], "scores": [0]}]}',
         True, r"answered prediction 0 as .*not translations \(strings\) and scores"),
    ],
)
def test_an_answer_that_does_not_line_up_with_the_inputs_is_an_error(answering, body, nbest, message):
    from app.commands.client import translate

    with pytest.raises(ClientError, match=message):
        translate(answering(body=body), "translator", ["A man.", "B."], nbest=nbest)


def test_a_well_formed_answer_gives_each_input_its_hypotheses(answering):
    from app.commands.client import translate

    body = (
        b'{"predictions": [{"translations": ["a", "b"], "scores": [-0.5, -1]},'
        b' {"translations": ["c", "d"], "scores": [0, -2]}]}'
    )
    got = translate(answering(body=body), "translator", ["A man.", "B."], nbest=True)
    assert got == [[("a", -0.5), ("b", -1)], [("c", 0), ("d", -2)]]


class _RecordingHandler(_Handler):
    """Answers one translation per instance and records the requests' paths and bodies."""

    requests = []

    def do_POST(self):
        import json

        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.requests.append((self.path, payload))
        body = json.dumps({"predictions": [{"translations": f"<{s}>", "scores": 0.0} for s in payload["instances"]]})
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())


def test_stdin_lines_lose_their_line_endings_and_bad_bytes_are_named():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RecordingHandler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        command = [sys.executable, "-m", "app.client", "--url", url, "--version", "0"]
        result = subprocess.run(command, cwd=ROOT, input=b"A man.\r\n\r\nB.\n", capture_output=True, timeout=60)
        assert result.returncode == 0, result.stderr
        assert result.stdout == b"<A man.>\n<>\n<B.>\n"
        # Version 0 is a version, sent as such, not "the newest".
        want = ("/v1/models/translator/versions/0:predict", {"instances": ["A man.", "", "B."]})
        assert _RecordingHandler.requests == [want]
        result = subprocess.run(command, cwd=ROOT, input=b"ok\nbad \xff byte\n", capture_output=True, timeout=60)
        assert result.returncode == 1
        assert result.stderr.decode() == "error: standard input, line 2: not valid UTF-8 (invalid start byte)\n"
        assert len(_RecordingHandler.requests) == 1  # nothing was sent
        result = subprocess.run(command, cwd=ROOT, input=b"A man.\rB.\r", capture_output=True, timeout=60)
        assert result.returncode == 1
        assert result.stderr.decode() == (
            "error: standard input: its lines end with a lone carriage return (\\r), which does not end a line "
            "here (only \\n or \\r\\n does); convert its line ends to \\n (e.g. with tr '\\r' '\\n')\n"
        )
        assert len(_RecordingHandler.requests) == 1
    finally:
        server.shutdown()
        server.server_close()


def test_alpha_must_be_a_finite_number_at_least_zero():
    for bad in ("nan", "-1", "inf"):
        result = subprocess.run(
            [sys.executable, "-m", "app.client", "A man.", "--alpha", bad], cwd=ROOT, capture_output=True, text=True,
            timeout=60,
        )
        assert result.returncode == 2
        assert f"error: argument --alpha: must be a finite number of at least 0, got {bad}" in result.stderr
