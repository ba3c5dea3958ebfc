"""A local server that speaks TensorFlow Serving's REST and gRPC APIs over the exported models.

    python -m app.serve                                        # saved_models/translator: REST 8501, gRPC 8500
    python -m app.serve --model_base_path saved_models/en-de --model_name en-de --rest_api_port 9000
    python -m app.serve --model_config_file serving/models.config --model_config_file_poll_wait_seconds 60
    python -m app.serve --batching_parameters_file serving/batching_parameters.txt

Flags carry `tensorflow_model_server`'s names, so clients, tests and the page work the same
against either server; each is also accepted dashed, as the other commands spell theirs
(--model-base-path, --model-name). REST endpoints (TF Serving's, plus the page and the batch
metrics):

    GET  /v1/models/{name}[/versions/{v} | /labels/{l}]             version status
    GET  /v1/models/{name}[/versions/{v} | /labels/{l}]/metadata    signature definitions
    POST /v1/models/{name}[/versions/{v} | /labels/{l}]:predict     row ("instances") or columnar ("inputs")
    GET  /                                             the translation page (app/serving/static/)
    GET  /page.json                                    what the page shows: version, language pair, limits
    GET  /monitoring/prometheus/metrics                requests and batch sizes, Prometheus text

gRPC on --port: tensorflow.serving.PredictionService (Predict, GetModelMetadata) and
ModelService (GetModelStatus, HandleReloadConfigRequest), TF Serving's own protos
(app/serving/grpc_api.py).

It serves one model (--model_name, --model_base_path) or those of a TF Serving model config
file, with their version policies and labels, re-read every
--model_config_file_poll_wait_seconds (app/serving/model_config.py). It switches to a newly
exported version without a restart (app/serving/models.py), every served version in one
worker process, which loads a new version beside the others and unloads what goes
(app/serving/worker_process.py); concurrent requests are batched into one model call, large ones a batch at a time
(app/serving/batching.py). Binds 127.0.0.1 unless --host says otherwise, and answers only
requests that name it and pages of its own origin unless --allowed_hosts / --allowed_origins
say more (app/serving/origins.py).
"""

import argparse
import asyncio
import dataclasses
import functools
import logging
import os
import signal
import socket
import sys

from app.cli.flag_types import FlagError, add_hidden_alias
from app.export.locate import DEFAULT_EXPORT_BASE, DEFAULT_MODEL_NAME
from app.serving.batching import BatchingParameters
from app.serving.core import DEFAULT_RECLAIM_BYTES
from app.serving.model_config import ModelConfigError, ServedModel
from app.serving.rest_api import DEFAULT_READ_TIMEOUT_SECONDS, MODEL_NAME, Limits
from app.serving.worker_process import CpuThreads

log = logging.getLogger("app.serve")

# How long a stopping server waits for the requests in flight (a second signal: no wait).
SHUTDOWN_GRACE_SECONDS = 60.0
# How long a version's load may take (--load_timeout_seconds): the default model's loads
# take about a minute on 2 cores; a base model's several on a slow disk.
DEFAULT_LOAD_TIMEOUT_SECONDS = 900.0


def _bool(text):
    if text.lower() in ("1", "true", "yes"):
        return True
    if text.lower() in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = [*_add_model_flags(parser), *_add_request_flags(parser), *_add_compute_flags(parser)]
    # Each TF Serving name also dashed, as the other commands spell their flags; added last,
    # hidden from --help.
    for action in actions:
        for option in action.option_strings:
            if "_" in option:
                add_hidden_alias(parser, action, option.replace("_", "-"))
    return parser


def parse_args(argv=None, parser=None):
    """The flags as parsed: exits 2 naming a bad value (`parser`: `build_parser()`'s)."""
    parser = parser or build_parser()
    args = parser.parse_args(argv)
    _check(parser, args)
    return args


@dataclasses.dataclass(frozen=True)
class ServePlan:
    """The server, as its flags describe it (`plan_serving`)."""

    # What is served: the models of --model_config_file, or the one of --model_name (its
    # name in /v1/models/<name>) and --model_base_path (its directory of numbered versions),
    # whose newest --num_versions are kept loaded.
    models: tuple
    # The config file, re-read every this many seconds (--model_config_file_poll_wait_seconds;
    # 0: never), and whether a label may name a version not loaded yet
    # (--allow_version_labels_for_unavailable_models).
    model_config_file: str | None
    config_poll_seconds: float
    allow_labels_for_unavailable: bool
    # Their versions: looked for every this many seconds (--file_system_poll_wait_seconds; 0:
    # once, at start), one that fails to load retried this many times (--max_num_load_retries),
    # this long apart at least (--load_retry_interval_micros, in seconds here).
    poll_wait_seconds: float
    max_num_load_retries: int
    load_retry_interval_seconds: float
    # A load's time limit (--load_timeout_seconds; None: no limit), and the memory the worker
    # may hold for unloaded versions before a fresh one takes over (--reclaim_unloaded_memory_mb).
    load_timeout_seconds: float | None
    reclaim_bytes: int
    # Where it listens (--host; --rest_api_port, 0: a free port; --port for gRPC, 0: none)
    # and who else may call it (--allowed_hosts, --allowed_origins: comma-separated, as given).
    host: str
    port: int
    grpc_port: int
    allowed_hosts: str
    allowed_origins: str
    # The gRPC server's channel arguments ((key, int or str), ...: --grpc_channel_arguments)
    # and the most calls it handles at once (--grpc_max_threads; None: no limit).
    grpc_channel_arguments: tuple
    grpc_max_calls: int | None
    # Requests: how long one may stall (--read_timeout_seconds), and what it may hold
    # (--max_instances, --max_text_length).
    read_timeout_seconds: float
    limits: Limits
    # Model calls: concurrent requests merged into one (--enable_batching) as these
    # parameters say (--batching_parameters_file, or the defaults), on these CPU threads
    # (--tensorflow_intra_op_parallelism, --tensorflow_inter_op_parallelism).
    enable_batching: bool
    batching: BatchingParameters
    threads: CpuThreads
    # How often each request of a version's warm-up file runs as it loads (app/serving/
    # warmup.py): --num_request_iterations_for_warmup, at least 1; 0: --enable_model_warmup
    # is false.
    warmup_iterations: int = 1


def plan_serving(args):
    """The `ServePlan` of parsed app.serve flags `args` (left as they are). Reads
    --model_config_file and --batching_parameters_file.

    Raises:
        FlagError: a file that cannot be read or parsed, or a model config that cannot be served.
    """
    batching = BatchingParameters()
    if args.batching_parameters_file:
        try:
            batching = BatchingParameters.from_file(args.batching_parameters_file)
        except (OSError, ValueError) as error:
            raise FlagError(f"--batching_parameters_file: {error}") from None
    if args.model_config_file:
        from app.serving.model_config import read_model_config

        try:
            models = read_model_config(args.model_config_file)
            _check_first_config(models, args.allow_version_labels_for_unavailable_models)
        except ModelConfigError as error:
            raise FlagError(f"--model_config_file: {error}") from None
        if args.model_name is not None or args.model_base_path is not None:
            # TF Serving ignores them beside a config file; its Docker image always passes them.
            log.warning("--model_config_file given: --model_name and --model_base_path are ignored")
    else:
        models = (ServedModel.from_flags(
            args.model_name or DEFAULT_MODEL_NAME, args.model_base_path or DEFAULT_EXPORT_BASE, args.num_versions,
        ),)
    return ServePlan(
        models=models,
        model_config_file=args.model_config_file,
        config_poll_seconds=args.model_config_file_poll_wait_seconds,
        allow_labels_for_unavailable=args.allow_version_labels_for_unavailable_models,
        poll_wait_seconds=args.file_system_poll_wait_seconds,
        max_num_load_retries=args.max_num_load_retries,
        load_retry_interval_seconds=args.load_retry_interval_micros / 1e6,
        load_timeout_seconds=args.load_timeout_seconds or None,
        reclaim_bytes=int(args.reclaim_unloaded_memory_mb * 2**20),
        host=args.host,
        port=args.rest_api_port,
        grpc_port=args.port,
        allowed_hosts=args.allowed_hosts,
        allowed_origins=args.allowed_origins,
        grpc_channel_arguments=parse_channel_arguments(args.grpc_channel_arguments),
        grpc_max_calls=args.grpc_max_threads,
        read_timeout_seconds=args.read_timeout_seconds,
        limits=Limits(args.max_instances, args.max_text_length),
        enable_batching=args.enable_batching,
        batching=batching,
        threads=CpuThreads(args.tensorflow_intra_op_parallelism, args.tensorflow_inter_op_parallelism),
        warmup_iterations=max(1, args.num_request_iterations_for_warmup) if args.enable_model_warmup else 0,
    )


def parse_channel_arguments(text):
    """TF Serving's --grpc_channel_arguments: "key=value,key=value", each value passed as an
    int where it reads as a 32-bit one, else as a string (server.cc). A part with no "=" is
    a `FlagError` naming it."""
    arguments = []
    for part in filter(None, text.split(",")):
        key, equals, value = part.partition("=")
        if not equals or not key:
            raise FlagError(f"--grpc_channel_arguments: {part!r} is not key=value")
        try:
            number = int(value)
        except ValueError:
            number = None
        arguments.append((key, number if number is not None and -(2**31) <= number < 2**31 else value))
    return tuple(arguments)


def _check_first_config(models, allow_labels_for_unavailable):
    """Refuses, before anything loads, a config file TF Serving would not start on, with its
    message: its checks (model_config.py), then its labels, which name versions not loaded
    yet in a first config (allowed by --allow_version_labels_for_unavailable_models only).

    Raises:
        ModelConfigError: the file, the line and TF Serving's message.
    """
    from app.serving.model_config import check_config, check_platforms
    from app.serving.models import check_labels
    from app.serving.rest_api import ServingError

    if models is None:  # an empty file: TF Serving starts with no model
        return
    check_config(models)
    for model in models:
        try:
            check_labels(model.name, model.label_map, {}, {}, allow_labels_for_unavailable)
        except ServingError as error:
            raise model.refused(error.message) from None
    check_platforms(models)


def _add_model_flags(parser):
    """What is served, and how its versions are found, loaded and retried."""
    return [
        parser.add_argument(
            "--model_name",
            help=f"the name in /v1/models/<name> (default {DEFAULT_MODEL_NAME})",
        ),
        parser.add_argument(
            "--model_base_path",
            help=f"directory of numbered versions (default {DEFAULT_EXPORT_BASE})",
        ),
        parser.add_argument(
            "--model_config_file",
            help="a TF Serving model config file (text ModelServerConfig: model_config_list { config { name "
            "base_path model_version_policy version_labels } }) naming the models to serve, in place of "
            "--model_name and --model_base_path (default none: the one model of those two)",
        ),
        parser.add_argument(
            "--model_config_file_poll_wait_seconds",
            type=float,
            default=0.0,
            help="how often to re-read --model_config_file, in seconds (default 0: never, as TF Serving); "
            "a file that cannot be served is logged and the config before it kept",
        ),
        parser.add_argument(
            "--allow_version_labels_for_unavailable_models",
            type=_bool,
            nargs="?",
            const=True,
            default=False,
            help="let a new version label name a version that is not loaded yet (default false, as TF Serving)",
        ),
        parser.add_argument(
            "--file_system_poll_wait_seconds",
            type=float,
            default=1.0,
            help="how often to look for new versions, in seconds (default 1; 0: only once, at start, as TF Serving)",
        ),
        parser.add_argument(
            "--num_versions",
            type=int,
            default=1,
            help="how many of the newest versions to keep loaded and addressable (default 1, as TF Serving)",
        ),
        parser.add_argument(
            "--max_num_load_retries", type=int, default=5, help="retries of a version that fails to load (default 5)"
        ),
        parser.add_argument(
            "--enable_model_warmup",
            type=_bool,
            nargs="?",
            const=True,
            default=True,
            help="run the requests of a version's assets.extra/tf_serving_warmup_requests as it loads, which "
            "export.py writes; a version whose warm-up fails does not load (default true, as TF Serving)",
        ),
        parser.add_argument(
            "--num_request_iterations_for_warmup",
            type=int,
            default=0,
            help="how often each warm-up request runs (default 0: once, as TF Serving)",
        ),
        parser.add_argument(
            "--load_timeout_seconds",
            type=float,
            default=DEFAULT_LOAD_TIMEOUT_SECONDS,
            help="a version whose load has not ended after this long fails (DEADLINE_EXCEEDED; retried as a failed "
            "load), and what is served moves to a fresh worker process (default "
            f"{DEFAULT_LOAD_TIMEOUT_SECONDS:g}: a stalled network mount must not hold the server; 0: no limit)",
        ),
        parser.add_argument(
            "--reclaim_unloaded_memory_mb",
            type=float,
            default=DEFAULT_RECLAIM_BYTES / 2**20,
            help="a new version loads beside the served ones in their worker process; when that process holds more "
            "than this many MB for versions it unloaded, a fresh one takes what is served and the old one ends, "
            f"giving its memory back (default {DEFAULT_RECLAIM_BYTES / 2**20:g}; 0: after every unload)",
        ),
        parser.add_argument(
            "--load_retry_interval_micros",
            type=int,
            default=60_000_000,
            help="least time between two tries of a version that failed to load (default 60000000: one minute, "
            "as TF Serving)",
        ),
    ]


def _add_request_flags(parser):
    """The port, who may call it, and what a request may hold."""
    return [
        parser.add_argument(
            "--port",
            type=int,
            default=8500,
            help="gRPC port (default 8500, as TF Serving; 0: no gRPC)",
        ),
        parser.add_argument(
            "--grpc_channel_arguments",
            default="",
            help="comma-separated key=value arguments for the gRPC server, as TF Serving takes them "
            "(e.g. grpc.max_receive_message_length=8388608,grpc.max_connection_age_ms=60000); a value that is an "
            "integer is passed as one (default none: max_receive_message_length is the largest request "
            "--max_instances and --max_text_length allow, plus 1 MiB, where TF Serving's is 2 GiB; the request "
            "limits hold whatever it is)",
        ),
        parser.add_argument(
            "--grpc_max_threads",
            type=int,
            help="most gRPC calls handled at once; more are answered RESOURCE_EXHAUSTED (default: no limit, the "
            "batch queue bounds the work; TF Serving's flag sizes its gRPC thread pool, 4 per core)",
        ),
        parser.add_argument(
            "--rest_api_port",
            type=int,
            default=8501,
            help="HTTP port (default 8501; 0 picks a free one, printed at start)",
        ),
        parser.add_argument(
            "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; 0.0.0.0 for every interface)"
        ),
        parser.add_argument(
            "--allowed_hosts",
            default="",
            help="comma-separated names besides IP addresses, localhost and this machine's name that requests may "
            "give as Host, e.g. the name a reverse proxy forwards (default: none, and any name where --host is "
            "not a loopback address; '*': any)",
        ),
        parser.add_argument(
            "--allowed_origins",
            default="",
            help="comma-separated origins (https://app.example.com) of web pages allowed to call the server "
            "(default none: only the server's own page; '*': any)",
        ),
        parser.add_argument(
            "--read_timeout_seconds",
            type=float,
            default=DEFAULT_READ_TIMEOUT_SECONDS,
            help=f"close a connection whose request stalls, or that stays idle, this long "
            f"(default {DEFAULT_READ_TIMEOUT_SECONDS:g})",
        ),
        parser.add_argument(
            "--max_instances",
            type=int,
            default=Limits.max_instances,
            help=f"most instances (rows) per request (default {Limits.max_instances})",
        ),
        parser.add_argument(
            "--max_text_length",
            type=int,
            default=Limits.max_text_length,
            help=f"most characters per input text (default {Limits.max_text_length})",
        ),
    ]


def _add_compute_flags(parser):
    """How model calls are batched and threaded."""
    return [
        parser.add_argument(
            "--enable_batching",
            type=_bool,
            nargs="?",
            const=True,
            default=True,
            help="merge concurrent requests into one model call (default true, unlike TF Serving)",
        ),
        parser.add_argument(
            "--batching_parameters_file",
            help="TF Serving batching parameters (default: max_batch_size 32, batch_timeout_micros 5000, "
            "num_batch_threads 1, max_enqueued_batches 100)",
        ),
        parser.add_argument(
            "--tensorflow_intra_op_parallelism",
            type=int,
            help="threads one op may use on the CPU (default: a quarter of the cores, at least 1, fewer where "
            "several model calls may run at once: what decoded fastest, docs/serving.md#threads; 0: TensorFlow's "
            "choice, every core, as TF Serving's default); a CTranslate2 version's threads per call",
        ),
        parser.add_argument(
            "--tensorflow_inter_op_parallelism",
            type=int,
            default=0,
            help="ops run at once on the CPU (default 0: TensorFlow's choice, one per core, as TF Serving)",
        ),
    ]


def _check(parser, args):
    """Refuses a bad value through `parser.error`, naming its flag as argparse does, before
    TensorFlow loads anything."""
    if args.model_name is not None and not MODEL_NAME.fullmatch(args.model_name):
        parser.error(f"--model_name {args.model_name!r}: use letters, digits, '.', '_' and '-' (it is part of URLs)")
    if not 0 <= args.rest_api_port <= 65535:
        parser.error(f"--rest_api_port must be 0-65535 (0: a free one), got {args.rest_api_port}")
    if not 0 <= args.port <= 65535:
        parser.error(f"--port must be 0-65535 (0: no gRPC), got {args.port}")
    if args.port and args.port == args.rest_api_port:
        parser.error(f"--port and --rest_api_port are both {args.port}: the gRPC and REST APIs need a port each")
    if not args.model_config_file_poll_wait_seconds >= 0:
        wait = args.model_config_file_poll_wait_seconds
        parser.error(f"--model_config_file_poll_wait_seconds must be >= 0 (0: never), got {wait}")
    if not args.read_timeout_seconds > 0:
        parser.error(f"--read_timeout_seconds must be more than 0, got {args.read_timeout_seconds}")
    if not args.file_system_poll_wait_seconds >= 0:
        wait = args.file_system_poll_wait_seconds
        parser.error(f"--file_system_poll_wait_seconds must be >= 0 (0: look once, at start), got {wait}")
    least_values = (
        ("num_versions", 1), ("max_num_load_retries", 0), ("load_retry_interval_micros", 0), ("max_instances", 1),
        ("max_text_length", 1), ("tensorflow_intra_op_parallelism", 0),
        ("grpc_max_threads", 1), ("tensorflow_inter_op_parallelism", 0), ("load_timeout_seconds", 0),
        ("reclaim_unloaded_memory_mb", 0), ("num_request_iterations_for_warmup", 0),
    )
    for flag, least in least_values:
        if getattr(args, flag) is not None and getattr(args, flag) < least:
            parser.error(f"--{flag} must be at least {least}, got {getattr(args, flag)}")


async def serve(plan):
    # Here, not at the top: --help and a bad flag answer without loading the web server.
    from aiohttp import web

    from app.serving.batching import Batcher
    from app.serving.core import ServerCore
    from app.serving.model_set import ModelSet
    from app.serving.origins import OriginPolicy
    from app.serving.server import Server
    from app.serving.worker_process import WorkerProcess

    batcher = Batcher(plan.batching, plan.enable_batching)
    core = ServerCore(
        ModelSet(functools.partial(make_manager, plan), plan.allow_labels_for_unavailable),
        batcher, plan.models, plan.poll_wait_seconds, plan.model_config_file, plan.config_poll_seconds,
        start_worker=functools.partial(WorkerProcess, threads=plan.threads, max_calls=batcher.threads,
                                       warmup_iterations=plan.warmup_iterations,
                                       timeout=plan.load_timeout_seconds),
        load_timeout_seconds=plan.load_timeout_seconds, reclaim_bytes=plan.reclaim_bytes,
    )
    server = Server(
        core, plan.limits, OriginPolicy.from_flags(plan.allowed_hosts, plan.allowed_origins, plan.host),
        plan.read_timeout_seconds,
    )
    # The signals first: the first versions may load for a while.
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
    starting = asyncio.create_task(core.start())
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():  # stopped while the first versions loaded: nothing was served yet
        return
    try:
        starting.result()
    except Exception as error:  # a label of the config on a version that did not load, say
        sys.exit(f"app.serve: {getattr(error, 'message', error)}")
    runner = server.runner()
    await runner.setup()
    site = web.TCPSite(runner, plan.host, plan.port)
    grpc_server = None
    flag, port = "--rest_api_port", plan.port
    try:
        await site.start()
        if plan.grpc_port:
            from app.serving.grpc_api import start_grpc_server

            flag, port = "--port", plan.grpc_port
            grpc_server = await start_grpc_server(core, plan.host, plan.grpc_port, plan.limits,
                                                  plan.grpc_channel_arguments, plan.grpc_max_calls)
    except OSError as error:  # taken while the first versions loaded
        await runner.cleanup()
        await core.stop()
        sys.exit(port_error(plan.host, port, error, flag))
    host, port = runner.addresses[0][:2]
    served = "; ".join(
        f"model {manager.name} (versions: {', '.join(str(v) for v in sorted(manager.loaded)) or 'none yet'}) "
        f"from {manager.base_path}"
        for manager in core.models.managers.values()
    )
    grpc_address = f", gRPC at {plan.host}:{plan.grpc_port}" if grpc_server else ""
    print(f"Serving {served} at http://{host}:{port}/{grpc_address}", flush=True)
    await stopping
    # Stop accepting, then let the requests in flight finish, those still sending their
    # body included (aiohttp's own shutdown would stop reading them), then close.
    log.info("stopping: no new connections; answering the %d requests in flight", server.in_flight)
    await site.stop()
    if grpc_server is not None:
        await grpc_server.stop(SHUTDOWN_GRACE_SECONDS)
    await server.drained(SHUTDOWN_GRACE_SECONDS)
    await runner.cleanup()
    await core.stop()


def make_manager(plan, model):
    """The `ModelManager` of one `ServedModel`; its versions load in the core's worker process."""
    from app.serving.models import ModelManager

    return ModelManager(
        model.name, model.base_path, model.policy, plan.max_num_load_retries,
        load_retry_interval_seconds=plan.load_retry_interval_seconds,
    )


def check_port(host, port, flag="--rest_api_port"):
    """Exits with one line naming `flag` when the port cannot be bound, before a version
    loads for long seconds. (Bound again to serve: the check leaves it free.)"""
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        for family, kind, protocol, _, address in addresses:
            with socket.socket(family, kind, protocol) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as asyncio binds
                probe.bind(address)
    except OSError as error:
        sys.exit(port_error(host, port, error, flag))


def port_error(host, port, error, flag="--rest_api_port"):
    """The one line a port that cannot be bound ends the server with."""
    return f"app.serve: {flag} {port} on --host {host}: {error.strerror or error}"


def main(argv=None):
    parser = build_parser()
    args = parse_args(argv, parser)
    try:
        plan = plan_serving(args)
    except FlagError as error:
        parser.error(str(error))
    check_port(plan.host, plan.port)
    if plan.grpc_port:
        check_port(plan.host, plan.grpc_port, "--port")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    from app.serving.server import OneLineErrors

    logging.getLogger("aiohttp.server").addFilter(OneLineErrors())
    asyncio.run(serve(plan))
    # os._exit, not a return: Python would join the loading thread at exit, which a
    # version still loading would hold up for as long as its load takes.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
