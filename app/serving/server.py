"""The REST door of the local TF Serving stand-in: an aiohttp application over a `ServerCore`.

`python -m app.serve` (app/commands/serve.py) parses the flags, then builds a `ServerCore`
(core.py: the models, their loading, the batcher) and serves it here and over gRPC
(grpc_api.py); request bodies are read and answers written by rest_api.py.
"""

import asyncio
import html
import json
import logging
import re
import urllib.parse
from pathlib import Path

from aiohttp import web

from app.export.export_info import read_export_info
from app.serving.batching import client_connected
from app.serving.origins import OriginPolicy, is_json
from app.serving.rest_api import (
    DEFAULT_READ_TIMEOUT_SECONDS,
    Limits,
    ServingError,
    error_body,
    format_response,
    parse_json_body,
    parse_predict_request,
    signature_name_of,
)

# The server's log, one logger for the command and its parts (as models.py).
log = logging.getLogger("app.serve")

STATIC = Path(__file__).resolve().parent / "static"
PAGE = STATIC / "index.html"
# The page's ES modules and the sentence splitter's wasm, by URL path: a fixed list, so that
# no request names another file. The page imports the modules only for its "keep HTML markup"
# and "paragraphs" boxes; beside TF Serving nginx serves the same folder (serving/compose.yaml).
STATIC_FILES = {
    "/words.js": "text/javascript",
    "/html.js": "text/javascript",
    "/html_entities.js": "text/javascript",
    "/markup.js": "text/javascript",
    "/documents.js": "text/javascript",
    "/vendor/sentencex/sentencex_wasm.js": "text/javascript",
    # application/wasm, or the browser's WebAssembly.instantiateStreaming refuses it.
    "/vendor/sentencex/sentencex_wasm_bg.wasm": "application/wasm",
    "/vendor/sentencex/LICENSE": "text/plain",
}
# What the page reads of a version's export_info.json (app/export/saved_model.py).
PAGE_EXPORT_INFO = ("source_lang", "target_lang", "beam_size", "alpha", "max_extra_length")
# tensorflow_serving/model_servers/http_rest_api_util.cc:
# /v1/models[/NAME][/versions/N | /labels/LABEL][:METHOD][/metadata], case-insensitive.
MODEL_PATH = re.compile(
    r"/v1/models(?:/(?P<name>[^/:]+))?(?:/versions/(?P<version>\d+)|/labels/(?P<label>[^/:]+))?"
    r"(?::(?P<method>\w+))?(?P<metadata>/metadata)?",
    re.IGNORECASE,
)
# Methods TF Serving answers, which need classification or regression signatures.
SIGNATURE_METHODS = {"classify": "classification", "regress": "regression"}


class Server:
    """The aiohttp application around a `ServerCore` (core.py)."""

    def __init__(self, core, limits=Limits(), origins=OriginPolicy(),
                 read_timeout_seconds=DEFAULT_READ_TIMEOUT_SECONDS):
        self.core = core
        self.models = core.models
        self.limits = limits
        self.origins = origins
        self.read_timeout_seconds = read_timeout_seconds
        self.responses = {}  # HTTP status -> count, for /monitoring
        self.in_flight = 0  # requests being received or answered
        self._idle = asyncio.Event()
        self._idle.set()
        self._page = PAGE.read_text(encoding="utf-8")
        self._static = {path: (STATIC / path.lstrip("/")).read_bytes() for path in STATIC_FILES}

    def runner(self):
        """The aiohttp runner to serve `app()` with. Its keep-alive timeout is the read
        timeout: aiohttp closes a connection idle for that long, a request whose headers
        stall included; `_read_body` times out a stalled body."""
        return web.AppRunner(self.app(), access_log=None, keepalive_timeout=self.read_timeout_seconds)

    @property
    def _client_max_size(self):
        """The largest body: room for max_instances texts of max_text_length characters, each escaped as \\uXXXX."""
        return 2**20 + self.limits.max_instances * self.limits.max_text_length * 12

    def app(self):
        app = web.Application(
            middlewares=[self._counted_in_flight, self._own_origin_only, self._json_errors],
            client_max_size=self._client_max_size,
        )
        app.router.add_get("/", self.page)
        app.router.add_get("/page.json", self.page_info)
        for path in STATIC_FILES:
            app.router.add_get(path, self.static_file)
        app.router.add_get("/monitoring/prometheus/metrics", self.metrics)
        app.router.add_route("*", "/{v1:[vV]1}/{path:.*}", self.model_request)
        return app

    # Handlers.

    @web.middleware
    async def _counted_in_flight(self, request, handler):
        """Counts the requests being received or answered, for a stopping server (`drained`)."""
        self.in_flight += 1
        self._idle.clear()
        try:
            return await handler(request)
        finally:
            self.in_flight -= 1
            if not self.in_flight:
                self._idle.set()

    @web.middleware
    async def _own_origin_only(self, request, handler):
        """Refuses requests for other names and from other sites' pages (origins.py); lets
        allowed pages read the answers."""
        host, origin = request.headers.get("Host"), request.headers.get("Origin")
        try:
            self.origins.check_host(host)
            cross_origin = self.origins.cross_origin(origin, host)
            if request.method == "POST" and origin is not None and not is_json(request.headers.get("Content-Type")):
                raise ServingError("a request from a web page must be sent as Content-Type: application/json",
                                   status=415)
        except ServingError as error:
            log.info("refused %s %s: %s", request.method, request.path, error.message)
            return self._count(_json(error_body(error.message), error.status))
        if cross_origin and request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers:
            return self._count(web.Response(status=204, headers=self.origins.preflight_headers(origin)))
        response = await handler(request)
        if cross_origin:
            response.headers.update(self.origins.cors_headers(origin))
        return response

    async def drained(self, timeout):
        """Returns once no request is in flight, or after `timeout` seconds."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except asyncio.TimeoutError:
            log.warning("%d requests still in flight after %g s; closing them", self.in_flight, timeout)

    def _count(self, response):
        self.responses[response.status] = self.responses.get(response.status, 0) + 1
        return response

    @web.middleware
    async def _json_errors(self, request, handler):
        """Every answer, errors included, is JSON as TF Serving's: {"error": "..."}."""
        try:
            response = await handler(request)
        except ServingError as error:
            if error.status in (408, 499):  # the client's doing, worth one line
                log.info("%s %s from %s: %s", request.method, request.path, request.remote, error.message)
            response = _json(error_body(error.message), error.status)
            if error.retry_after is not None:  # a version being loaded again after its process died
                response.headers["Retry-After"] = str(error.retry_after)
            if error.status == 408:  # the rest of a stalled body must not be read as a request
                response.force_close()
        except web.HTTPException as error:
            if error.status < 400:
                raise
            response = _json(error_body(f"{error.reason}: {request.method} {request.path}"), error.status)
        except Exception as error:
            log.exception("%s %s failed", request.method, request.path)
            type_name = getattr(error, "type_name", type(error).__name__)  # as raised in the version's process
            response = _json(error_body(f"{type_name}: {error}"), 500)
        return self._count(response)

    async def page(self, request):
        """The page, translating with the config's first model."""
        name = html.escape(self.models.default_name or "", quote=True)
        return web.Response(text=self._page.replace("{{MODEL_NAME}}", name), content_type="text/html")

    async def static_file(self, request):
        """One of the page's `STATIC_FILES`, as read at start, with its content type."""
        content_type = STATIC_FILES[request.path]
        charset = "utf-8" if content_type.startswith("text/") else None
        return web.Response(body=self._static[request.path], content_type=content_type, charset=charset)

    async def page_info(self, request):
        """What the page shows and obeys, beside TF Serving's API (whose answers stay as
        they are): the version that answers requests without one, its language pair and
        decoding defaults from its export_info.json (null where it records none), its
        signatures, and this server's per-request limits. Served beside TF Serving
        (serving/compose.yaml) the page finds no /page.json and reads the metadata instead."""
        name = self.models.default_name
        loaded = self.models.get(name)  # the newest; 404 while there is none
        info = _export_info(loaded.path)
        return _json({
            "model_name": name,
            "version": str(loaded.version),  # a string, as TF Serving's answers write versions
            **{key: info.get(key) for key in PAGE_EXPORT_INFO},
            "signatures": sorted(loaded.signatures),
            "max_instances": self.limits.max_instances,
            "max_text_length": self.limits.max_text_length,
        })

    async def model_request(self, request):
        # The path as sent: "%3Apredict" is part of a name, not a method, as in TF Serving,
        # which matches the raw path and then decodes the name and label.
        path = request.rel_url.raw_path
        match = MODEL_PATH.fullmatch(path)
        malformed = ServingError(f"Malformed request: {request.method} {path}")
        if not match:
            raise malformed
        name, method, metadata = _unquoted(match["name"]), match["method"], match["metadata"]
        label = _unquoted(match["label"])
        version = _version(match["version"])
        if request.method == "POST" and name and method and not metadata:
            if method == "predict":
                return await self.predict(request, name, version, label)
            if method in SIGNATURE_METHODS:
                self._check_name(name, version, label)
                raise ServingError(
                    f"Expected {SIGNATURE_METHODS[method]} signature method_name to be "
                    f"tensorflow/serving/{method}. Was: tensorflow/serving/predict"
                )
        if request.method == "GET" and not method:
            if not name:
                raise ServingError("Missing model name in request.")
            if metadata:
                return _json(self.models.metadata_json(name, version, label))
            return _json(self.models.status_json(name, version))  # a label is passed over, as TF Serving does
        raise malformed

    def _check_name(self, name, version, label=None):
        self.models.get(name, version, label)  # TF Serving's errors for a model, version or label it lacks

    async def predict(self, request, name, version, label=None):
        document = parse_json_body(await self._read_body(request))
        signature_name = signature_name_of(document)
        loaded = self.models.get(name, version, label)  # held until answered, even if a newer one arrives
        parsed = parse_predict_request(document, signature_name, loaded.input_specs(signature_name), self.limits)
        outputs = await self.core.batcher.run(  # dropped unrun once its client has gone
            loaded, signature_name, parsed.inputs, parsed.rows, lambda: client_connected(request)
        )
        return _json(format_response(outputs, parsed.format))

    async def _read_body(self, request):
        """The request's body, as `request.read()` reads it, but a 499 (one log line) when its
        client leaves before sending all of it, and a 408 when it sends nothing for
        `read_timeout_seconds`: a stalled client must not hold a connection forever."""
        body = bytearray()
        while True:
            try:
                chunk = await asyncio.wait_for(request.content.readany(), self.read_timeout_seconds)
            except asyncio.TimeoutError:
                raise ServingError(
                    f"Request Timeout: no data for {self.read_timeout_seconds:g} s while reading the body "
                    "(--read_timeout_seconds)", status=408
                ) from None
            except ConnectionError:
                raise ServingError("The client closed the connection while sending its request", status=499) from None
            if not chunk:
                return bytes(body)
            body.extend(chunk)
            if len(body) > self._client_max_size:
                raise web.HTTPRequestEntityTooLarge(max_size=self._client_max_size, actual_size=len(body))

    async def metrics(self, request):
        name = self.models.default_name
        lines = ["# TYPE serving_responses_total counter"]
        lines += [
            f'serving_responses_total{{model_name="{name}",code="{code}"}} {count}'
            for code, count in sorted(self.responses.items())
        ]
        lines.append("# TYPE serving_batches_total counter")
        lines += [
            f'serving_batches_total{{model_name="{name}",batch_size="{size}"}} {count}'
            for size, count in sorted(self.core.batcher.batch_sizes.items())
        ]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")


class OneLineErrors(logging.Filter):
    """Makes aiohttp's own error records (bad framing, a body longer than its Content-Length,
    a connection lost while answering) one short line: their tracebacks say nothing about
    the server, and their messages may quote a client's bytes at length."""

    MAX_CHARACTERS = 300

    def filter(self, record):
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            detail = " ".join(str(error).split())
            record.msg = f"{record.getMessage()}: {type(error).__name__}: {detail}"
            record.args, record.exc_info, record.exc_text = (), None, None
        if len(str(record.msg)) > self.MAX_CHARACTERS:
            record.msg = str(record.msg)[: self.MAX_CHARACTERS] + " ..."
        return True


def _unquoted(text):
    return None if text is None else urllib.parse.unquote(text)


def _version(text):
    """The version of a /versions/<v> path, None without one; TF Serving reads it as an int64."""
    if text is None:
        return None
    version = int(text)
    if version >= 2**63:
        raise ServingError(f"Failed to convert version: {text} to numeric.")
    return version


def _export_info(path):
    """A version's export_info.json as a dict; {} where it is missing or unreadable (an
    export older than it, a hand-edited one, or a version directory removed while still
    served): the page shows what it can."""
    try:
        return read_export_info(path)
    except (OSError, ValueError):  # DataError is a ValueError
        return {}


def _json(body, status=200):
    try:
        text = json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (from a request's path, say) has no UTF-8: escape it
        text = json.dumps(body).encode("ascii")
    return web.Response(body=text, status=status, content_type="application/json", charset="utf-8")
