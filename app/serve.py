"""A local server that speaks TensorFlow Serving's REST API over the exported SavedModels.

    python -m app.serve                                        # saved_models/translator, port 8501
    python -m app.serve --model_base_path saved_models/en-de --model_name en-de --rest_api_port 9000
    python -m app.serve --batching_parameters_file serving/batching_parameters.txt

Flags carry `tensorflow_model_server`'s names, so clients, tests and the page work the same
against either server. Endpoints (TF Serving's, plus the page and the batch metrics):

    GET  /v1/models/{name}[/versions/{v}]              version status
    GET  /v1/models/{name}[/versions/{v}]/metadata     signature definitions
    POST /v1/models/{name}[/versions/{v}]:predict      row ("instances") or columnar ("inputs")
    GET  /                                             the translation page (app/serving/static/)
    GET  /monitoring/prometheus/metrics                requests and batch sizes, Prometheus text

As in TF Serving, "/v1/models" matches in any case, and a version label
(`/labels/{label}` in place of `/versions/{v}`) is parsed, then refused: labels come from
TF Serving's model config file, which this server does not read.

It serves the newest version under the base path and switches to a newly exported one
without a restart (app/serving/models.py); concurrent requests are batched into one model
call (app/serving/batching.py). Built on aiohttp. Binds 127.0.0.1 unless --host says otherwise.
"""

import argparse
import asyncio
import concurrent.futures
import html
import json
import logging
import os
import re
import signal
import sys
import urllib.parse
from pathlib import Path

from aiohttp import web

from app.cli.quiet_tensorflow import import_tensorflow
from app.serving.batching import Batcher, BatchingParameters, client_connected
from app.serving.models import LoadedVersion, ModelManager
from app.serving.rest_api import (
    MODEL_NAME,
    Limits,
    ServingError,
    error_body,
    format_response,
    parse_json_body,
    parse_predict_request,
    signature_name_of,
)

log = logging.getLogger("app.serve")
PAGE = Path(__file__).resolve().parent / "serving" / "static" / "index.html"
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
    """The aiohttp application around one `ModelManager` and its `Batcher`."""

    def __init__(self, manager, batcher, limits=Limits(), poll_seconds=1.0):
        self.manager = manager
        self.batcher = batcher
        self.limits = limits
        self.poll_seconds = poll_seconds
        self.responses = {}  # HTTP status -> count, for /monitoring
        self._loading = None  # the thread pool that loads versions
        self._poller = None
        page = PAGE.read_text(encoding="utf-8")
        self._page = page.replace("{{MODEL_NAME}}", html.escape(manager.name, quote=True))

    def app(self):
        # Room for max_instances texts of max_text_length characters, \u-escaped.
        client_max_size = 2**20 + self.limits.max_instances * self.limits.max_text_length * 12
        app = web.Application(middlewares=[self._json_errors], client_max_size=client_max_size)
        app.router.add_get("/", self.page)
        app.router.add_get("/monitoring/prometheus/metrics", self.metrics)
        app.router.add_route("*", "/{v1:[vV]1}/{path:.*}", self.model_request)
        app.on_startup.append(self._start)
        app.on_cleanup.append(self._stop)
        return app

    # Lifecycle: the first poll runs before the server listens, so it answers once loaded.

    async def _start(self, app):
        self._loading = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="load")
        self.batcher.start()
        await self.poll()
        polling = self.poll_seconds > 0  # TF Serving's 0: the versions there at start, no later ones
        if not self.manager.loaded:
            log.warning("no servable version of %s under %s %s", self.manager.name, self.manager.base_path,
                        "yet; polling" if polling else "and polling is off")
        if polling:
            self._poller = asyncio.create_task(self._poll_forever())

    async def _stop(self, app):
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
        await self.batcher.stop()
        # A version still loading is not waited for: it would be thrown away. (Its thread
        # cannot be stopped; main() exits without joining it.)
        self._loading.shutdown(wait=False, cancel_futures=True)

    async def _poll_forever(self):
        while True:
            await asyncio.sleep(self.poll_seconds)
            try:
                await self.poll()
            except Exception:  # a bad poll must not stop later ones
                log.exception("polling %s failed", self.manager.base_path)

    async def poll(self):
        """Loads (in a thread, while serving goes on) the versions the manager wants."""
        loop = asyncio.get_running_loop()
        for version, path in self.manager.to_load():
            self.manager.start_loading(version)
            try:
                loaded = await loop.run_in_executor(self._loading, self.manager.load, version, path)
            except Exception as error:
                self.manager.failed(version, error)
            else:
                self.manager.publish(loaded)
        self.manager.unload_removed()

    # Handlers.

    @web.middleware
    async def _json_errors(self, request, handler):
        """Every answer, errors included, is JSON as TF Serving's: {"error": "..."}."""
        try:
            response = await handler(request)
        except ServingError as error:
            response = _json(error_body(error.message), error.status)
        except web.HTTPException as error:
            if error.status < 400:
                raise
            response = _json(error_body(f"{error.reason}: {request.method} {request.path}"), error.status)
        except Exception as error:
            log.exception("%s %s failed", request.method, request.path)
            response = _json(error_body(f"{type(error).__name__}: {error}"), 500)
        self.responses[response.status] = self.responses.get(response.status, 0) + 1
        return response

    async def page(self, request):
        return web.Response(text=self._page, content_type="text/html")

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
            _check_label(label)
            if metadata:
                self._check_name(name, version)
                return _json(self.manager.metadata_json(version))
            if name != self.manager.name:
                raise ServingError(f"Could not find any versions of model {name}", status=404)
            return _json(self.manager.status_json(version))
        raise malformed

    def _check_name(self, name, version, label=None):
        _check_label(label)
        if name != self.manager.name:
            request = f"Specific({name}, {version})" if version is not None else f"Latest({name})"
            raise ServingError(f"Servable not found for request: {request}", status=404)

    async def predict(self, request, name, version, label=None):
        document = parse_json_body(await request.read())
        signature_name = signature_name_of(document)
        self._check_name(name, version, label)
        loaded = self.manager.get(version)  # held until answered, even if a newer one arrives
        parsed = parse_predict_request(document, signature_name, loaded.input_specs(signature_name), self.limits)
        outputs = await self.batcher.run(  # dropped unrun once its client has gone
            loaded, signature_name, parsed.inputs, parsed.rows, lambda: client_connected(request)
        )
        return _json(format_response(outputs, parsed.format))

    async def metrics(self, request):
        name = self.manager.name
        lines = ["# TYPE serving_responses_total counter"]
        lines += [
            f'serving_responses_total{{model_name="{name}",code="{code}"}} {count}'
            for code, count in sorted(self.responses.items())
        ]
        lines.append("# TYPE serving_batches_total counter")
        lines += [
            f'serving_batches_total{{model_name="{name}",batch_size="{size}"}} {count}'
            for size, count in sorted(self.batcher.batch_sizes.items())
        ]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")


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


def _check_label(label):
    # TF Serving with no labels configured answers every label so (server_core.cc).
    if label is not None:
        raise ServingError(f"Unrecognized servable version label: {label}")


def _json(body, status=200):
    try:
        text = json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (from a request's path, say) has no UTF-8: escape it
        text = json.dumps(body).encode("ascii")
    return web.Response(body=text, status=status, content_type="application/json", charset="utf-8")


def _bool(text):
    if text.lower() in ("1", "true", "yes"):
        return True
    if text.lower() in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_name", default="translator", help="the name in /v1/models/<name> (default translator)")
    parser.add_argument(
        "--model_base_path",
        default=os.path.join("saved_models", "translator"),
        help="directory of numbered versions (default saved_models/translator)",
    )
    parser.add_argument(
        "--rest_api_port", type=int, default=8501, help="HTTP port (default 8501; 0 picks a free one, printed at start)"
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; 0.0.0.0 for every interface)"
    )
    parser.add_argument(
        "--file_system_poll_wait_seconds",
        type=float,
        default=1.0,
        help="how often to look for new versions, in seconds (default 1; 0: only once, at start, as TF Serving)",
    )
    parser.add_argument(
        "--num_versions",
        type=int,
        default=1,
        help="how many of the newest versions to keep loaded and addressable (default 1, as TF Serving)",
    )
    parser.add_argument(
        "--max_num_load_retries", type=int, default=5, help="retries of a version that fails to load (default 5)"
    )
    parser.add_argument(
        "--load_retry_interval_micros",
        type=int,
        default=60_000_000,
        help="least time between two tries of a version that failed to load (default 60000000: one minute, "
        "as TF Serving)",
    )
    parser.add_argument(
        "--enable_batching",
        type=_bool,
        nargs="?",
        const=True,
        default=True,
        help="merge concurrent requests into one model call (default true, unlike TF Serving)",
    )
    parser.add_argument(
        "--batching_parameters_file",
        help="TF Serving batching parameters (default: max_batch_size 32, batch_timeout_micros 5000, "
        "num_batch_threads 1, max_enqueued_batches 100)",
    )
    parser.add_argument(
        "--max_instances",
        type=int,
        default=Limits.max_instances,
        help=f"most instances (rows) per request (default {Limits.max_instances})",
    )
    parser.add_argument(
        "--max_text_length",
        type=int,
        default=Limits.max_text_length,
        help=f"most characters per input text (default {Limits.max_text_length})",
    )
    args = parser.parse_args(argv)
    # Checked before TensorFlow loads anything, each naming its flag, as argparse does.
    if not MODEL_NAME.fullmatch(args.model_name):
        parser.error(f"--model_name {args.model_name!r}: use letters, digits, '.', '_' and '-' (it is part of URLs)")
    if not 0 <= args.rest_api_port <= 65535:
        parser.error(f"--rest_api_port must be 0-65535 (0: a free one), got {args.rest_api_port}")
    if not args.file_system_poll_wait_seconds >= 0:
        wait = args.file_system_poll_wait_seconds
        parser.error(f"--file_system_poll_wait_seconds must be >= 0 (0: look once, at start), got {wait}")
    least_values = (
        ("num_versions", 1), ("max_num_load_retries", 0), ("load_retry_interval_micros", 0), ("max_instances", 1),
        ("max_text_length", 1),
    )
    for flag, least in least_values:
        if getattr(args, flag) < least:
            parser.error(f"--{flag} must be at least {least}, got {getattr(args, flag)}")
    args.batching_parameters = BatchingParameters()
    if args.batching_parameters_file:
        try:
            args.batching_parameters = BatchingParameters.from_file(args.batching_parameters_file)
        except (OSError, ValueError) as error:
            parser.error(f"--batching_parameters_file: {error}")
    return args


async def serve(args):
    parameters = args.batching_parameters
    manager = ModelManager(
        args.model_name,
        args.model_base_path,
        args.num_versions,
        args.max_num_load_retries,
        LoadedVersion,
        load_retry_interval_seconds=args.load_retry_interval_micros / 1e6,
    )
    server = Server(
        manager,
        Batcher(parameters, args.enable_batching),
        Limits(args.max_instances, args.max_text_length),
        args.file_system_poll_wait_seconds,
    )
    # The signals first: the first poll, inside runner.setup(), may load for a while.
    # A first SIGINT or SIGTERM stops the server once the requests in flight are answered;
    # a second exits at once.
    stop = asyncio.Event()

    def on_signal():
        if stop.is_set():
            log.warning("second signal: exiting now")
            os._exit(1)
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(signum, on_signal)
    runner = web.AppRunner(server.app(), access_log=None)
    setup = asyncio.create_task(runner.setup())
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({setup, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if not setup.done():  # stopped while the first versions loaded: nothing was served yet
        return
    setup.result()  # its error, if it failed
    site = web.TCPSite(runner, args.host, args.rest_api_port)
    await site.start()
    host, port = runner.addresses[0][:2]
    versions = ", ".join(str(v) for v in sorted(manager.loaded)) or "none yet"
    print(
        f"Serving model {manager.name} (versions: {versions}) from {manager.base_path} at http://{host}:{port}/",
        flush=True,
    )
    await stopping
    await runner.cleanup()


def main(argv=None):
    args = parse_args(argv)
    import_tensorflow()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    asyncio.run(serve(args))
    # os._exit, not a return: Python would join the loading thread at exit, which a
    # version still loading would hold up for as long as its load takes.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
