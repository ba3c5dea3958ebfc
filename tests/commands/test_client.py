"""app/commands/client.py against servers that are not TF Serving: each failure is one error line.

The client against the real server is in test_serve.py.
"""

import http.server
import io
import json
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


class _QuietServer(http.server.ThreadingHTTPServer):
    """A server whose handler may find its client gone without a word: a test's client
    that timed out leaves the handler to write later, from a thread that outlives the
    test, and socketserver would print the BrokenPipeError's traceback into whichever
    test's captured stderr is current then."""

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@pytest.fixture
def answering():
    """`answering(status, body, delay)` starts a server that answers so; returns its URL."""
    servers = []

    def start(status=200, body=b"", delay=0.0):
        handler = type("Handler", (_Handler,), {"status": status, "body": body, "delay": delay})
        server = _QuietServer(("127.0.0.1", 0), handler)
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
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.requests.append((self.path, payload))
        body = json.dumps({"predictions": [{"translations": f"<{s}>", "scores": 0.0} for s in payload["instances"]]})
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())


def test_stdin_lines_lose_their_line_endings_and_bad_bytes_are_named():
    server = _QuietServer(("127.0.0.1", 0), _RecordingHandler)
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


# Steering: the constrained signature's instances.


class _SteeredHandler(http.server.BaseHTTPRequestHandler):
    """A server as `python -m app.serve` answers the client: /page.json says `page` (404
    where None), and each constrained instance is answered "<inputs|prefixes>", its
    constraints met unless they hold "never". Records each request."""

    page, requests = None, []

    def _answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.requests.append(("GET", self.path, None))
        if self.path == "/page.json" and self.page is not None:
            self._answer(200, self.page)
        else:
            self._answer(404, {"error": "not found"})

    def do_POST(self):
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.requests.append(("POST", self.path, payload))
        self._answer(200, {"predictions": [
            {"translations": f"<{i['inputs']}|{i['prefixes']}>", "scores": -1.5,
             "constraints_met": "never" not in i["constraints"]}
            for i in payload["instances"]
        ]})

    def log_message(self, *args):
        pass


@pytest.fixture
def steered_server():
    """`start(page)`: a `_SteeredHandler` server whose /page.json says `page`; its URL and requests."""
    servers = []

    def start(page):
        handler = type("Handler", (_SteeredHandler,), {"page": page, "requests": []})
        server = _QuietServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}", handler.requests

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


PAGE = {"model_name": "translator", "version": "3", "alpha": 1.25, "max_extra_length": 20}


def client_main(args, stdin, monkeypatch, capsys):
    """app.client's main in this process: `(exit status, stdout, stderr)`."""
    from app.commands.client import main

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
    status = main(args)
    out, err = capsys.readouterr()
    return status, out, err


def test_steered_lines_go_as_constrained_instances_with_the_exports_settings(steered_server, tmp_path, monkeypatch,
                                                                             capsys):
    url, requests = steered_server(PAGE)
    (tmp_path / "terms.tsv").write_text("bike\tFahrrad\nmountain bike\tMountainbike\n", encoding="utf-8")
    (tmp_path / "c.txt").write_text("Mann\t\nnever\n\n", encoding="utf-8")
    (tmp_path / "p.txt").write_text("Ein\n\nZwei\n", encoding="utf-8")
    args = ["--url", url, "--glossary", str(tmp_path / "terms.tsv"), "--constraints", str(tmp_path / "c.txt"),
            "--prefixes", str(tmp_path / "p.txt"), "--no-repeat-ngram-size", "3", "--batch-size", "2"]
    stdin = "A man on a mountain bike.\nA dog.\nA bike, a bike.\n"
    status, out, err = client_main(args, stdin, monkeypatch, capsys)
    assert status == 0, err
    assert out == "<A man on a mountain bike.|Ein>\n<A dog.|>\n<A bike, a bike.|Zwei>\n"
    assert err == (
        "warning: line 2: no translation within the length limit holds every constraint; the best one found is "
        "printed\n"
    )
    settings = {"no_repeat_ngram_size": 3, "alpha": 1.25, "max_extra_length": 20}  # /page.json's alpha and length
    # The version /page.json describes, so that its settings are the answering version's.
    path = "/v1/models/translator/versions/3:predict"
    assert requests == [
        ("GET", "/page.json", None),
        ("POST", path, {"signature_name": "constrained", "instances": [
            {"inputs": "A man on a mountain bike.", "prefixes": "Ein", "constraints": "Mann\tMountainbike", **settings},
            {"inputs": "A dog.", "prefixes": "", "constraints": "never", **settings},
        ]}),
        ("POST", path, {"signature_name": "constrained", "instances": [
            {"inputs": "A bike, a bike.", "prefixes": "Zwei", "constraints": "Fahrrad", **settings},
        ]}),
    ]


def test_without_the_exports_alpha_the_client_asks_for_it(steered_server, tmp_path, monkeypatch, capsys):
    from app.commands.client import constrained_settings, parse_args, plan_client

    url, requests = steered_server(None)  # TF Serving: no /page.json
    args = ["--url", url, "--no-repeat-ngram-size", "2"]
    status, out, err = client_main([*args, "A dog."], "", monkeypatch, capsys)
    assert (status, out) == (1, "")
    assert err == (
        f"error: --no-repeat-ngram-size: the constrained signature needs the length penalty alpha with every "
        f"sentence, and {url} does not say the export's (python -m app.serve does, over REST, for the newest "
        "version of its first model): give --alpha (export.py wrote it in the version's export_info.json)\n"
    )
    assert [request[0] for request in requests] == ["GET"]  # nothing was translated
    status, out, err = client_main([*args, "--alpha", "0.5", "A dog."], "", monkeypatch, capsys)
    assert (status, out) == (0, "<A dog.|>\n")
    assert requests[-1] == ("POST", "/v1/models/translator:predict", {"signature_name": "constrained", "instances": [
        {"inputs": "A dog.", "prefixes": "", "constraints": "", "no_repeat_ngram_size": 2, "alpha": 0.5,
         "max_extra_length": 50},  # DecodingConfig's, as for an export that records none
    ]})
    # /page.json of another model, or of another version than asked for, says nothing of this one.
    url, requests = steered_server(PAGE)
    for flags in (["--model-name", "other"], ["--version", "2"], ["--label", "stable"]):
        plan = plan_client(parse_args(["--url", url, "--no-repeat-ngram-size", "2", *flags]))
        with pytest.raises(ClientError, match="does not say the export's"):
            constrained_settings(plan)
    plan = plan_client(parse_args(["--url", url, "--no-repeat-ngram-size", "2", "--version", "3", "--alpha", "0"]))
    assert constrained_settings(plan) == ((0.0, 20), 3)
    plan = plan_client(parse_args(["--grpc", "localhost:1", "--no-repeat-ngram-size", "2", "--alpha", "1"]))
    assert constrained_settings(plan) == ((1.0, 50), None)  # no REST to ask over: nothing is asked


def test_steering_files_are_checked_before_any_request(steered_server, tmp_path, monkeypatch, capsys):
    url, requests = steered_server(PAGE)
    (tmp_path / "c.txt").write_text("Hund\n", encoding="utf-8")
    (tmp_path / "bad.tsv").write_text("bike\tFahrrad\nbikes\n", encoding="utf-8")
    status, _, err = client_main(["--url", url, "--constraints", str(tmp_path / "c.txt")], "A.\nB.\n", monkeypatch,
                                 capsys)
    assert status == 2
    assert err == f"error: --constraints {tmp_path / 'c.txt'} has 1 lines but standard input has 2: line N of " \
        "--constraints steers input line N\n"
    status, _, err = client_main(["--url", url, "--glossary", str(tmp_path / "bad.tsv"), "A.", "B."], "",
                                 monkeypatch, capsys)
    assert status == 1
    assert err == f"error: {tmp_path / 'bad.tsv'}, line 2: 'bikes' is not two non-empty columns separated by one " \
        "tab (source term <TAB> target term)\n"
    status, _, err = client_main(["--url", url, "--prefixes", str(tmp_path / "none")], "", monkeypatch, capsys)
    assert (status, err) == (2, f"error: --prefixes {tmp_path / 'none'}: no such file\n")
    assert requests == []
    with pytest.raises(SystemExit):
        client_main(["--nbest", "--glossary", str(tmp_path / "bad.tsv")], "", monkeypatch, capsys)
    assert "--nbest cannot be combined with --glossary" in capsys.readouterr().err


def test_a_constrained_answer_without_constraints_met_is_an_error(answering):
    from app.commands.client import translate_steered
    from app.cli.steering import SentenceSteering

    body = b'{"predictions": [{"translations": "x", "scores": -1.0}]}'
    with pytest.raises(ClientError, match=r"answered prediction 0 as .*constraints_met \(true or false\)$"):
        translate_steered(answering(body=body), "translator", ["A."], [SentenceSteering()], (0.6, 50))
