"""A local server that speaks TensorFlow Serving's REST API over the exported SavedModels.

    python -m app.serve                                        # saved_models/translator, port 8501
    python -m app.serve --model_base_path saved_models/en-de --model_name en-de --rest_api_port 9000
    python -m app.serve --batching_parameters_file serving/batching_parameters.txt

Flags carry `tensorflow_model_server`'s names, so clients, tests and the page work the same
against either server; each is also accepted dashed, as the other commands spell theirs
(--model-base-path, --model-name). Endpoints (TF Serving's, plus the page and the batch metrics):

    GET  /v1/models/{name}[/versions/{v}]              version status
    GET  /v1/models/{name}[/versions/{v}]/metadata     signature definitions
    POST /v1/models/{name}[/versions/{v}]:predict      row ("instances") or columnar ("inputs")
    GET  /                                             the translation page (app/serving/static/)
    GET  /page.json                                    what the page shows: version, language pair, limits
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
import logging
import os
import signal
import sys

from app.cli.flag_types import add_hidden_alias
from app.cli.quiet_tensorflow import import_tensorflow
from app.serving.batching import BatchingParameters
from app.serving.rest_api import MODEL_NAME, Limits

log = logging.getLogger("app.serve")


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
    for flag, what in (("intra", "threads one op may use"), ("inter", "ops run at once")):
        parser.add_argument(
            f"--tensorflow_{flag}_op_parallelism",
            type=int,
            default=0,
            help=f"{what} on the CPU (default 0: TensorFlow's choice, as TF Serving; on a 2-core CPU the tiny "
            "model decoded fastest with 1 thread per op and TensorFlow's choice of ops at once: "
            "docs/serving.md#threads)",
        )
    for action in list(parser._actions):
        for option in action.option_strings:
            if "_" in option:
                add_hidden_alias(parser, action, option.replace("_", "-"))
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
        ("max_text_length", 1), ("tensorflow_intra_op_parallelism", 0), ("tensorflow_inter_op_parallelism", 0),
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
    # Here, not at the top: --help and a bad flag answer without loading the web server.
    from aiohttp import web

    from app.serving.batching import Batcher
    from app.serving.models import ModelManager, load_version
    from app.serving.server import Server

    parameters = args.batching_parameters
    manager = ModelManager(
        args.model_name,
        args.model_base_path,
        args.num_versions,
        args.max_num_load_retries,
        load_version,
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
    import tensorflow as tf

    # Before the first op runs: TensorFlow makes its pools then, once per process.
    tf.config.threading.set_intra_op_parallelism_threads(args.tensorflow_intra_op_parallelism)
    tf.config.threading.set_inter_op_parallelism_threads(args.tensorflow_inter_op_parallelism)
    from app.cli.threads import describe_cpu_threads

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    log.info(describe_cpu_threads())
    asyncio.run(serve(args))
    # os._exit, not a return: Python would join the loading thread at exit, which a
    # version still loading would hold up for as long as its load takes.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
