"""The server's guards, over real HTTP with a fake model: who may call it (Host, Origin,
content type), and clients that stall, leave or send bad framing."""

import contextlib
import logging
import socket
import time

import numpy as np
import pytest

from app.serving.model_config import ServedModel
from app.serving.origins import OriginPolicy
from app.serving.rest_api import TensorSpec
from app.serving.server import OneLineErrors
from tests.serving.fake_models import serving

STRINGS = TensorSpec(np.dtype(object), (None,))
BODY = b'{"instances": ["a man"]}'


class EchoVersion:
    """A version whose one signature echoes its inputs."""

    def __init__(self, version, path):
        self.version, self.path = version, path
        self.inputs = {"serving_default": {"inputs": STRINGS}}
        self.outputs = {"serving_default": {"translations": STRINGS}}
        self.signatures = dict(self.inputs)
        self.signature_def = {"signature_def": {}}

    def input_specs(self, signature_name):
        return self.inputs[signature_name]

    def run(self, signature_name, inputs):
        return {"translations": inputs["inputs"]}

    def warm_up(self):
        pass


@contextlib.contextmanager
def running(tmp_path, origins=OriginPolicy(), read_timeout_seconds=30.0):
    """A Server over EchoVersion on a free port of 127.0.0.1, in a thread of its own loop
    (fake_models.serving): yields `(server, port)`."""
    (tmp_path / "1").mkdir(exist_ok=True)
    model = ServedModel.from_flags("translator", str(tmp_path))
    with serving([model], EchoVersion, origins=origins, read_timeout_seconds=read_timeout_seconds) as servers:
        yield servers.server, servers.rest_port


def exchange(port, data, read=True, timeout=10):
    """Sends raw bytes; returns `(status, headers dict, body)` of the answer ((None, {}, b"") if none)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as connection:
        connection.sendall(data)
        if not read:
            return None, {}, b""
        answer = b""
        while True:
            chunk = connection.recv(65536)
            if not chunk:
                break
            answer += chunk
            head, _, body = answer.partition(b"\r\n\r\n")
            length = [line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")]
            if length and len(body) >= int(length[0].split(b":")[1]):
                break
    head, _, body = answer.partition(b"\r\n\r\n")
    if not head:
        return None, {}, b""
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), {k.lower(): v for k, v in headers.items()}, body


def post(port, host="127.0.0.1", origin=None, content_type="application/json", body=BODY, method="POST",
         path="/v1/models/translator:predict", extra=""):
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", "Connection: close", f"Content-Length: {len(body)}"]
    if origin is not None:
        lines.append(f"Origin: {origin}")
    if content_type is not None:
        lines.append(f"Content-Type: {content_type}")
    return exchange(port, ("\r\n".join(lines) + "\r\n" + extra + "\r\n").encode() + body)


def test_a_request_that_names_another_host_is_refused(tmp_path):
    with running(tmp_path) as (server, port):
        status, _, body = post(port, host=f"attacker.example:{port}")
        assert status == 403
        assert b"Host 'attacker.example:" in body and b"--allowed_hosts attacker.example" in body
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "10.0.0.7", "app.localhost"):
            assert post(port, host=host)[0] == 200, host
    with running(tmp_path, OriginPolicy.from_flags(allowed_hosts="translate.example.com")) as (server, port):
        assert post(port, host="translate.example.com")[0] == 200
        assert post(port, host="attacker.example")[0] == 403
    with running(tmp_path, OriginPolicy.from_flags(allowed_hosts="*")) as (server, port):
        assert post(port, host="attacker.example")[0] == 200
    # Bound beyond the loopback, it serves names it cannot know (a compose service's, say),
    # unless told which.
    with running(tmp_path, OriginPolicy.from_flags(bind_host="0.0.0.0")) as (server, port):
        assert post(port, host="translator:8501")[0] == 200
        assert post(port, host="translator:8501", origin="https://evil.example")[0] == 403
    with running(tmp_path, OriginPolicy.from_flags("translate.example.com", bind_host="0.0.0.0")) as (server, port):
        assert post(port, host="translator:8501")[0] == 403


def test_a_page_of_another_site_is_refused_and_gets_no_cors_headers(tmp_path):
    with running(tmp_path) as (server, port):
        for content_type in ("text/plain", "application/json", None):
            status, headers, body = post(port, origin="https://evil.example", content_type=content_type)
            assert status == 403 and "access-control-allow-origin" not in headers
            assert b"cross-origin request from 'https://evil.example' refused" in body
            assert b"--allowed_origins https://evil.example" in body
        preflight = "Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: content-type\r\n"
        status, headers, _ = post(port, origin="https://evil.example", method="OPTIONS", body=b"", extra=preflight)
        assert status == 403 and "access-control-allow-origin" not in headers
        assert post(port, origin="null")[0] == 403  # a sandboxed frame or a file
        assert server.responses[403] == 5


def test_the_servers_own_page_posts_json_but_no_form(tmp_path):
    with running(tmp_path) as (server, port):
        own = f"http://127.0.0.1:{port}"
        status, headers, body = post(port, host=f"127.0.0.1:{port}", origin=own)
        assert status == 200 and body == b'{"predictions": ["a man"]}'
        assert "access-control-allow-origin" not in headers  # same origin: nothing to allow
        status, _, body = post(port, host=f"127.0.0.1:{port}", origin=own, content_type="text/plain")
        assert status == 415 and b"Content-Type: application/json" in body
        # Clients that are not browsers send no Origin, and any content type, as curl -d does.
        for content_type in ("application/x-www-form-urlencoded", "text/plain", None):
            assert post(port, content_type=content_type)[0] == 200


def test_an_allowed_origin_gets_cors_headers_and_its_preflight_an_answer(tmp_path):
    policy = OriginPolicy.from_flags(allowed_origins="https://app.example, http://localhost:3000/")
    with running(tmp_path, policy) as (server, port):
        preflight = "Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: content-type\r\n"
        status, headers, _ = post(port, origin="https://app.example", method="OPTIONS", body=b"", extra=preflight)
        assert status == 204
        assert headers["access-control-allow-origin"] == "https://app.example"
        assert headers["access-control-allow-methods"] == "GET, POST"
        assert headers["access-control-allow-headers"] == "Content-Type"
        status, headers, body = post(port, origin="http://localhost:3000")
        assert status == 200 and headers["access-control-allow-origin"] == "http://localhost:3000"
        assert headers["vary"] == "Origin"
        # Its errors are readable too.
        status, headers, _ = post(port, origin="https://app.example", body=b"{")
        assert status == 400 and headers["access-control-allow-origin"] == "https://app.example"
        assert post(port, origin="https://other.example")[0] == 403


def test_a_client_gone_mid_body_is_a_499_in_one_log_line(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    with running(tmp_path) as (server, port):
        head = f"POST /v1/models/translator:predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(BODY)}\r\n\r\n"
        for _ in range(3):
            exchange(port, head.encode() + BODY[:5], read=False)
        deadline = time.monotonic() + 10
        while server.responses.get(499, 0) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.responses == {499: 3}
    lines = [r for r in caplog.records if "closed the connection" in r.getMessage()]
    assert len(lines) == 3 and all(r.exc_info is None and r.levelno == logging.INFO for r in lines)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_stalled_body_is_a_408_and_stalled_headers_are_closed(tmp_path):
    with running(tmp_path, read_timeout_seconds=0.5) as (server, port):
        head = f"POST /v1/models/translator:predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(BODY)}\r\n\r\n"
        start = time.monotonic()
        status, _, body = exchange(port, head.encode() + BODY[:5])
        assert status == 408 and b"no data for 0.5 s" in body and b"--read_timeout_seconds" in body
        # Headers that never end: closed, with no answer, a timeout or so later.
        status, _, _ = exchange(port, b"POST /v1/models/translator:predict HTTP/1.1\r\nHost: 127.0.0.1\r\nCont")
        assert status is None and time.monotonic() - start < 5


def test_bad_framing_logs_one_short_line(tmp_path, caplog):
    logging.getLogger("aiohttp.server").addFilter(OneLineErrors())
    caplog.set_level(logging.INFO)
    try:
        with running(tmp_path) as (server, port):
            # A body longer than its Content-Length: the rest reads as a request of its own.
            request = f"POST /v1/models/translator:predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(BODY)}"
            exchange(port, (request + "\r\n\r\n").encode() + BODY + b"x" * 131072)
            exchange(port, b"\x16\x03\x01 not http\r\n\r\n")  # a TLS hello, say
    finally:
        logging.getLogger("aiohttp.server").filters.clear()
    records = [r for r in caplog.records if r.name == "aiohttp.server"]
    assert records, "aiohttp logged nothing"
    for record in records:
        assert record.exc_info is None and "\n" not in record.getMessage()
        assert len(record.getMessage()) <= OneLineErrors.MAX_CHARACTERS + 4


@pytest.mark.parametrize("host, expected", [
    ("127.0.0.1:8501", "127.0.0.1"), ("[::1]:8501", "::1"), ("LocalHost.", "localhost"), ("example.com", "example.com"),
])
def test_split_host(host, expected):
    from app.serving.origins import split_host

    assert split_host(host) == expected
