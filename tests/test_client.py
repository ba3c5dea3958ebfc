"""app/client.py against servers that are not TF Serving: each failure is one error line.

The client against the real server is in test_serve.py.
"""

import http.server
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from app.client import ClientError, predict

ROOT = Path(__file__).resolve().parents[1]


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
        threading.Thread(target=server.serve_forever, daemon=True).start()
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
        (["--batch-size", "0"], "error: --batch-size must be at least 1, got 0"),
    ],
)
def test_the_command_names_a_bad_flag_in_one_line(flags, message):
    result = subprocess.run(
        [sys.executable, "-m", "app.client", "A man.", *flags], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode in (1, 2)
    assert result.stderr.strip() == message and result.stdout == ""
