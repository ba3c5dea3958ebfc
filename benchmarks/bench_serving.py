"""Serving under load: 1 and 16 clients x 50 requests over REST and gRPC, with dynamic batching and without.

    python benchmarks/bench_serving.py --tiny                        # exports a tiny model first
    python benchmarks/bench_serving.py --model_base_path saved_models/translator
    python benchmarks/bench_serving.py --url http://localhost:8501   # a running server (TF Serving too)

For each mode it starts `python -m app.serve` on free ports of 127.0.0.1 (--enable_batching
true, then false), then, for each API in `--apis` (REST, then gRPC through TF Serving's
stubs, against the same server) and each count in `--clients`, runs that many threads that
each send `--requests` predict requests of 1 to 3 Multi30k validation sentences (mixed
lengths) one after another. It prints requests/s, sentences/s, p50, p95 and p99 latency,
the errors, and, from the server's /monitoring/prometheus/metrics, how many model calls of
each batch size it made. A server
that exits, serves no version or fails the first request stops the run with the cause and
the path of its log, which is then kept (a temporary file; a good run's logs are removed).

`--tiny` trains a small model for four steps (the tests' recipe) and exports it: its
translations are junk that runs to the maximum length, the slowest case per sentence.
"""

import argparse
import concurrent.futures
import gzip
import json
import os
import random
import re
import select
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.serving.models import list_versions  # noqa: E402
from app.cli.flag_types import int_list, name_list, positive_int  # noqa: E402

# --modes: the local server with dynamic batching (--enable_batching true) and without.
MODES = ("batching", "unbatched")
# --apis: TF Serving's REST API (JSON over HTTP/1.1) and its gRPC API (protos over HTTP/2).
APIS = ("rest", "grpc")


class ServerFailed(Exception):
    """The local server exited, did not answer, or serves nothing; the message names its log."""


def export_tiny(directory):
    """Trains the tests' small model for four steps and exports it; returns the base path."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from app.export.saved_model import export, load_translator
    from tests.tiny_run import train_tiny_run

    run = Path(directory) / "run"
    run.mkdir()
    train_tiny_run(run)
    translator, _ = load_translator(str(run))
    base = str(Path(directory) / "translator")
    export(translator, base)
    return base


def start_server(base, flags, log, root=ROOT):
    """A `python -m app.serve` process of the checkout `root` (this one by default) on a free
    port (REST, and gRPC on another: `process.grpc_address`); `(process, url)` once it answers.
    `base`: the --model_base_path, or None where `flags` name a --model_config_file.

    `log` is the open file its stderr goes to. Raises ServerFailed when the server exits
    or is silent for 300 s before it answers, or answers with no version loaded (the
    first poll, which loads them, comes before it listens: each one failed to load).
    """
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        grpc_port = probe.getsockname()[1]
    where = ["--model_base_path", base] if base is not None else []
    process = subprocess.Popen(
        [sys.executable, "-m", "app.serve", *where, "--rest_api_port", "0", "--port", str(grpc_port), *flags],
        cwd=root, stdout=subprocess.PIPE, stderr=log, text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(root)},
    )
    process.grpc_address = f"127.0.0.1:{grpc_port}"
    line = ""
    while "Serving model" not in line:
        ready, _, _ = select.select([process.stdout], [], [], 300)
        line = process.stdout.readline() if ready else ""
        if not line and (not ready or process.poll() is not None):
            process.kill()
            process.wait()
            raise ServerFailed(f"the server did not start{_cause(log)}; see its log, {log.name}")
    if "(versions: none yet)" in line:
        process.terminate()
        process.wait()
        raise ServerFailed(f"the server loaded no version of {base}{_cause(log)}; see its log, {log.name}")
    return process, re.search(r"(http://[^/\s]+)", line).group(1)


def _cause(log):
    """` (the log's likeliest cause)`: its last line that says a version failed to load,
    else its last line (an error or a traceback's end); "" for an empty log."""
    log.flush()
    with open(log.name, encoding="utf-8", errors="replace") as f:
        lines = [line.strip() for line in f if line.strip()]
    causes = [line for line in lines if "failed to load" in line] or lines
    return f" ({causes[-1]})" if causes else ""


def post(url, body, timeout=300):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def grpc_predictor(address, model):
    """`instances -> translations` over TF Serving's gRPC API (its official stubs), one
    channel per client thread, as a gRPC client keeps it."""
    import grpc
    import numpy as np

    from app.serving.protos import apis
    from app.serving.tensor_proto import to_tensor_proto

    channel = grpc.insecure_channel(address)
    stub = apis.prediction_service_pb2_grpc.PredictionServiceStub(channel)

    def predict(instances):
        request = apis.predict_pb2.PredictRequest()
        request.model_spec.name = model
        request.inputs["inputs"].CopyFrom(to_tensor_proto(np.array([s.encode() for s in instances], dtype=object)))
        return list(stub.Predict(request, timeout=300).outputs["translations"].string_val)

    return predict


def load(url, model, sentences, clients, requests, seed=0, grpc_address=None):
    """Runs the clients (over gRPC at `grpc_address` where given, else REST at `url`);
    returns (latencies in s, sentences sent, errors, wall seconds)."""
    endpoint = f"{url}/v1/models/{model}:predict"

    def client(index):
        rng = random.Random(seed * 1000 + index)
        latencies, sent, errors = [], 0, []
        if grpc_address:
            import grpc

            predict, failures = grpc_predictor(grpc_address, model), (grpc.RpcError,)
        else:
            predict, failures = (lambda instances: post(endpoint, {"instances": instances})["predictions"]), ()
        for _ in range(requests):
            instances = rng.sample(sentences, rng.choice([1, 1, 2, 3]))
            start = time.perf_counter()
            try:
                predictions = predict(instances)
                if len(predictions) != len(instances):
                    errors.append("wrong number of predictions")
            except (urllib.error.URLError, OSError, ValueError, KeyError, *failures) as error:
                errors.append(repr(error))
            latencies.append(time.perf_counter() - start)
            sent += len(instances)
        return latencies, sent, errors

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(client, range(clients)))
    wall = time.perf_counter() - start
    latencies = sorted(t for r in results for t in r[0])
    return latencies, sum(r[1] for r in results), [e for r in results for e in r[2]], wall


def batch_sizes(url):
    """{batch size: model calls} from the local server's metrics ({} for TF Serving)."""
    try:
        with urllib.request.urlopen(f"{url}/monitoring/prometheus/metrics", timeout=30) as response:
            text = response.read().decode()
    except urllib.error.URLError:
        return {}
    return {int(size): int(count) for size, count in re.findall(r'batch_size="(\d+)"\} (\d+)', text)}


def new_calls(before, after):
    """Model calls per batch size made between two readings of the server's counters."""
    return {size: count - before.get(size, 0) for size, count in after.items() if count > before.get(size, 0)}


def report(name, latencies, sent, errors, wall, sizes):
    def percentile(p):
        return latencies[min(len(latencies) - 1, int(p / 100 * len(latencies)))] * 1000

    calls = sum(sizes.values())
    print(f"{name:<22} {len(latencies) / wall:8.1f} req/s {sent / wall:8.1f} sentences/s   "
          f"p50 {percentile(50):7.0f} ms   p95 {percentile(95):7.0f} ms   p99 {percentile(99):7.0f} ms   "
          f"errors {len(errors)}")
    if calls:
        mean = sum(size * count for size, count in sizes.items()) / calls
        histogram = ", ".join(f"{size}: {count}" for size, count in sorted(sizes.items()))
        print(f"{'':<22} {calls} model calls, mean batch {mean:.1f} sentences; calls per batch size {{{histogram}}}")
    for error in errors[:3]:
        print(f"{'':<22} error: {error}")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--model_base_path",
        default=os.path.join("saved_models", "translator"),
        help="an export to serve: a directory of numbered versions (default saved_models/translator)",
    )
    where.add_argument(
        "--tiny", action="store_true", help="export the tests' tiny model to a temporary directory and serve that"
    )
    where.add_argument("--url", help="measure a server that is already running instead")
    parser.add_argument("--model", default="translator", help="model name (default translator)")
    parser.add_argument(
        "--clients",
        type=int_list(),
        default="1,16",
        help="concurrent clients, comma-separated, one measurement per count (default 1,16)",
    )
    parser.add_argument("--requests", type=positive_int, default=50, help="requests per client (default 50)")
    parser.add_argument(
        "--modes",
        type=name_list(MODES, "mode"),
        default=",".join(MODES),
        help=f"which local server modes to run, comma-separated (default {','.join(MODES)})",
    )
    parser.add_argument(
        "--apis",
        type=name_list(APIS, "API"),
        default=",".join(APIS),
        help=f"which APIs to measure on each local server, comma-separated (default {','.join(APIS)})",
    )
    parser.add_argument(
        "--server-flags",
        default="",
        help="extra flags for python -m app.serve, e.g. '--batching_parameters_file serving/batching_parameters.txt'",
    )
    args = parser.parse_args(argv)
    if not args.url and not args.tiny:
        # The server runs in the repository root: a relative path is made absolute here, where the user meant it.
        args.model_base_path = os.path.abspath(args.model_base_path)
        # Before the server starts: without a version it would start, then answer every request 404.
        if not list_versions(args.model_base_path):
            parser.error(
                f"--model_base_path {args.model_base_path} holds no version to serve "
                "(a numbered directory such as 1/, as export.py writes)"
            )
    return args


def main(argv=None):
    args = parse_args(argv)
    with gzip.open(ROOT / "data" / "multi30k" / "val.en.gz", "rt", encoding="utf-8") as f:
        sentences = [line.strip() for line in f]
    lengths = sorted(len(s.split()) for s in sentences)
    print(f"{','.join(map(str, args.clients))} clients x {args.requests} requests of 1-3 Multi30k validation "
          f"sentences ({lengths[0]}-{lengths[-1]} words, median {lengths[len(lengths) // 2]})")

    if args.url:
        for clients in args.clients:
            before = batch_sizes(args.url)
            result = load(args.url, args.model, sentences, clients, args.requests)
            report(f"server x{clients}", *result, new_calls(before, batch_sizes(args.url)))
        return 0
    with tempfile.TemporaryDirectory() as scratch:
        base = export_tiny(scratch) if args.tiny else args.model_base_path
        for mode in args.modes:
            flags = [
                "--model_name",
                args.model,
                "--enable_batching",
                "true" if mode == "batching" else "false",
                *args.server_flags.split(),
            ]
            # Outside the scratch directory, which goes at the end: a failed server's log is kept
            # for the message that points to it; a good one's is removed.
            fd, log_path = tempfile.mkstemp(prefix=f"bench_serving-{mode}-", suffix=".log")
            os.close(fd)
            failed = False
            try:
                with open(log_path, "w") as log:
                    measure_mode(mode, base, flags, log, args, sentences)
            except ServerFailed as error:
                failed = True
                raise SystemExit(f"bench_serving.py: error: {mode}: {error}") from None
            finally:
                if not failed:
                    os.remove(log_path)
    return 0


def measure_mode(mode, base, flags, log, args, sentences):
    """Starts the server with `flags` and runs the clients of each count against it."""
    process, url = start_server(base, flags, log)
    try:
        try:
            post(f"{url}/v1/models/{args.model}:predict", {"instances": sentences[:1]})  # warm
        except urllib.error.HTTPError as error:
            answer = error.read().decode("utf-8", "replace").strip()
            raise ServerFailed(
                f"the server answered the first request with HTTP {error.code} {answer}; see its log, {log.name}"
            ) from None
        except urllib.error.URLError as error:
            raise ServerFailed(
                f"the server did not answer the first request ({error.reason}); see its log, {log.name}"
            ) from None
        for api in args.apis:
            grpc_address = process.grpc_address if api == "grpc" else None
            for clients in args.clients:
                before = batch_sizes(url)
                result = load(url, args.model, sentences, clients, args.requests, grpc_address=grpc_address)
                report(f"{mode} {api} x{clients}", *result, new_calls(before, batch_sizes(url)))
    finally:
        process.terminate()
        process.wait()


if __name__ == "__main__":
    sys.exit(main())
