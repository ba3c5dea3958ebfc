"""The local server under fuzzed requests: every answer a result or a client error, and its memory flat.

    python benchmarks/bench_serving_fuzz.py --tiny                      # exports a tiny model first
    python benchmarks/bench_serving_fuzz.py --export saved_models/translator/3 --requests 10000

It starts `python -m app.serve` on one exported version, warms it up with well-formed
requests over both APIs (every signature, up to the largest request the limits allow) and
with `--warm-requests` fuzzed requests of another seed (the shapes of the well-formed ones
among them fill TensorFlow's per-shape caches once), measures the resident memory of the
server and its worker, then sends `--requests` fuzzed requests, half over gRPC (PredictRequests of arbitrary
TensorProtos: any dtype number, shapes of up to 2**63 - 1 values, values in any field,
tensor_content of any bytes, any signature name) and half over REST (JSON bodies in the row
and columnar formats with values of every kind, lists either side of --max_instances,
texts either side of --max_text_length, and raw bytes). The requests are made by a seeded
generator (`--seed`), so a run can be repeated. It prints the answers by status, the
memory before and after, and exits 1 if any answer was a server error (500 / INTERNAL /
UNKNOWN) or the server died, or if memory grew by more than `--max-growth-mb`.
"""

import argparse
import base64
import collections
import json
import random
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_serving import export_tiny, post, start_server  # noqa: E402
from benchmarks.bench_serving_soak import place, resident_bytes, tree_resident_bytes  # noqa: E402
from app.cli.flag_types import int_at_least  # noqa: E402

SIGNATURES = ["", "serving_default", "translate_with_options", "nbest", "score", "no_such_signature"]
INPUT_NAMES = ["inputs", "alpha", "max_extra_length", "targets", "extra"]
DIMENSIONS = [0, 1, 2, 3, 63, 64, 65, 1000, 10**6, 30_000_000, 10**12, 2**62, 2**63 - 1, -1]
SERVER_ERRORS = {"500", "INTERNAL", "UNKNOWN"}
# A well-formed value of each input type of the exports' signatures (None: the text).
WARM_UP_VALUES = {"DT_STRING": None, "DT_FLOAT": 0.6, "DT_INT32": 50, "DT_INT64": 5}
WARM_UP_DTYPES = {"DT_STRING": object, "DT_FLOAT": "float32", "DT_INT32": "int32", "DT_INT64": "int64"}


class Fuzzer:
    """Requests of every kind, from a seeded generator."""

    def __init__(self, seed):
        self.random = random.Random(seed)

    def text(self):
        pick = self.random.random()
        if pick < 0.1:
            return "é" * self.random.choice([999, 1000, 1001, 5000])
        alphabet = "A man rides a bike. Ein Mann fährt Rad. \u00e9\u4e2d\U0001f600\n\t\"\\"
        return "".join(self.random.choice(alphabet) for _ in range(self.random.randint(0, 40)))

    def json_value(self, depth=0):
        kinds = ["null", "bool", "int", "float", "text", "b64", "list", "object"]
        kind = self.random.choice(kinds if depth < 4 else kinds[:6])
        if kind == "null":
            return None
        if kind == "bool":
            return self.random.random() < 0.5
        if kind == "int":
            return self.random.choice([0, 1, -1, 50, 2**31, 2**63, 10**30])
        if kind == "float":
            return self.random.choice([0.6, -1.0, 1e38, 3.5e38, 1e-45, 16777217.0])
        if kind == "text":
            return self.text()
        if kind == "b64":
            return {"b64": self.random.choice([base64.b64encode(b"A man.").decode(), "!!", "QQ", "x" * 2000])}
        if kind == "list":
            return [self.json_value(depth + 1) for _ in range(self.list_length())]
        return {self.random.choice(INPUT_NAMES): self.json_value(depth + 1) for _ in range(self.random.randint(0, 3))}

    def list_length(self):
        return self.random.choice([0, 1, 2, 3, 63, 64, 65, 200])

    def rest_body(self):
        """Bytes of a REST predict body."""
        pick = self.random.random()
        if pick < 0.05:
            return bytes(self.random.randrange(256) for _ in range(self.random.randint(0, 200)))
        body = {}
        if self.random.random() < 0.7:
            body["signature_name"] = self.random.choice(SIGNATURES[1:])
        if pick < 0.35:
            body["instances"] = [self.text() for _ in range(self.list_length())]
        elif pick < 0.55:
            body["instances"] = [{name: self.json_value(2) for name in self.random.sample(INPUT_NAMES, 3)}
                                 for _ in range(self.list_length())]
        elif pick < 0.8:
            rows = self.list_length()
            body["inputs"] = {"inputs": [self.text() for _ in range(rows)],
                              "alpha": [self.json_value(3) for _ in range(self.random.choice([rows, 1]))],
                              "max_extra_length": [50] * self.random.choice([rows, 1])}
        else:
            body[self.random.choice(["inputs", "instances", "other"])] = self.json_value()
        return json.dumps(body).encode()

    def tensor_proto(self):
        from app.serving.protos import tensor_pb2, types_pb2

        dtype = self.random.choice(sorted(types_pb2.DataType.values()) + [types_pb2.DT_STRING] * 8 +
                                   [types_pb2.DT_FLOAT, types_pb2.DT_INT32] * 3 + [-1, 999])
        proto = tensor_pb2.TensorProto(dtype=dtype)
        proto.tensor_shape.unknown_rank = self.random.random() < 0.05
        for _ in range(self.random.choice([0, 1, 1, 1, 1, 2, 3])):
            proto.tensor_shape.dim.add(size=self.random.choice(DIMENSIONS))
        for _ in range(self.random.randint(0, 4)):
            proto.string_val.append(self.text().encode("utf-8", "surrogatepass"))
        proto.float_val.extend(self.random.uniform(-2, 2) for _ in range(self.random.randint(0, 3)))
        proto.int_val.extend(self.random.randint(-(2**31), 2**31 - 1) for _ in range(self.random.randint(0, 3)))
        if self.random.random() < 0.2:
            proto.tensor_content = bytes(self.random.randrange(256) for _ in range(self.random.randint(0, 64)))
        return proto

    def grpc_request(self, model):
        from app.serving.protos import apis

        request = apis.predict_pb2.PredictRequest()
        request.model_spec.name = model if self.random.random() < 0.9 else "no-such-model"
        request.model_spec.signature_name = self.random.choice(SIGNATURES)
        if self.random.random() < 0.1:
            request.model_spec.version.value = self.random.choice([1, 2, 2**62])
        for name in self.random.sample(INPUT_NAMES, self.random.randint(0, 3)):
            request.inputs[name].CopyFrom(self.tensor_proto())
        return request


def rest_status(url, body):
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            response.read()
            return str(response.status)
    except urllib.error.HTTPError as error:
        error.read()
        return str(error.code)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--export", help="one exported version directory (saved_model.pb)")
    source.add_argument("--tiny", action="store_true", help="train and export the tests' tiny model first")
    parser.add_argument("--requests", type=int_at_least(1), default=10_000, help="fuzzed requests (default 10000)")
    parser.add_argument("--warm-requests", type=int_at_least(0), default=2000,
                        help="fuzzed requests of another seed sent before memory is measured (default 2000)")
    parser.add_argument("--seed", type=int, default=0, help="the generator's seed (default 0)")
    parser.add_argument("--max-growth-mb", type=float, default=50.0,
                        help="the most the server may grow over the fuzzed requests, in MB (default 50)")
    return parser.parse_args(argv)


def main(argv=None):
    import grpc
    import numpy as np

    from app.serving.protos import apis
    from app.serving.tensor_proto import to_tensor_proto

    args = parse_args(argv)

    def send(fuzzer, count, answers, examples, report_every=0):
        """Sends `count` fuzzed requests, half over each API, counting the answers; False
        if the server exited."""
        for number in range(count):
            if number % 2:
                try:
                    stub.Predict(fuzzer.grpc_request("translator"), timeout=120)
                    status = "OK"
                except grpc.RpcError as error:
                    status = error.code().name
                    examples.setdefault(status, error.details())
                answers[f"gRPC {status}"] += 1
            else:
                answers[f"REST {rest_status(predict_url, fuzzer.rest_body())}"] += 1
            if process.poll() is not None:
                print(f"the server exited with code {process.returncode} at request {number + 1}")
                return False
            if report_every and (number + 1) % report_every == 0:
                print(f"  {number + 1} requests: {tree_resident_bytes(process.pid) / 2**20:.1f} MB", flush=True)
        return True

    work = Path(tempfile.mkdtemp(prefix="fuzz-"))
    export = args.export or str(Path(export_tiny(work)) / "1")
    base = work / "served"
    base.mkdir()
    place(export, base, 1)
    log = open(work / "serve.log", "w")
    process, url = start_server(str(base), ["--file_system_poll_wait_seconds", "0"], log)
    predict_url = f"{url}/v1/models/translator:predict"
    channel = grpc.insecure_channel(process.grpc_address)
    stub = apis.prediction_service_pb2_grpc.PredictionServiceStub(channel)
    try:
        # Warm-up: well-formed requests up to the largest the limits allow (64 texts of 1,000
        # characters), over both APIs, so that the model's working memory for any request
        # the fuzzed ones can make is in place before memory is measured.
        with urllib.request.urlopen(f"{url}/v1/models/translator/metadata", timeout=60) as response:
            signatures = json.loads(response.read())["metadata"]["signature_def"]["signature_def"]
        for name, signature in sorted(signatures.items()):
            if name.startswith("__"):
                continue
            for rows, text in ((1, "A man rides a bike."), (64, "A man rides a bike."), (64, "é" * 1000),
                               (64, "a b " * 250)):
                columns = {key: [WARM_UP_VALUES[spec["dtype"]] or text] * rows
                           for key, spec in signature["inputs"].items()}
                post(predict_url, {"signature_name": name, "inputs": columns})
                request = apis.predict_pb2.PredictRequest()
                request.model_spec.name, request.model_spec.signature_name = "translator", name
                for key, values in columns.items():
                    array = np.array([v.encode() if isinstance(v, str) else v for v in values],
                                     dtype=WARM_UP_DTYPES[signatures[name]["inputs"][key]["dtype"]])
                    request.inputs[key].CopyFrom(to_tensor_proto(array))
                stub.Predict(request, timeout=120)
        time.sleep(1)
        warm = tree_resident_bytes(process.pid)
        print(f"after the well-formed warm-up: {warm / 2**20:.1f} MB (server and its worker)", flush=True)
        # A first pass of fuzzed requests (another seed): the model's working set for the
        # shapes well-formed ones among them take (batch sizes, text lengths: TensorFlow's
        # per-shape caches) is then in place, so the measured pass shows what requests cost
        # the server as they go on.
        warm_answers = collections.Counter()
        if not send(Fuzzer(args.seed + 1), args.warm_requests, warm_answers, {}):
            return 1
        time.sleep(1)
        before, server_before = tree_resident_bytes(process.pid), resident_bytes(process.pid)
        print(f"after {args.warm_requests} fuzzed requests of another seed: {before / 2**20:.1f} MB "
              f"({(before - warm) / 2**20:+.1f} MB; server {server_before / 2**20:.1f} MB)", flush=True)
        answers, examples = collections.Counter(), {}
        started = time.monotonic()
        if not send(Fuzzer(args.seed), args.requests, answers, examples, report_every=max(args.requests // 5, 1)):
            return 1
        wall = time.monotonic() - started
        time.sleep(1)
        after, server_after = tree_resident_bytes(process.pid), resident_bytes(process.pid)
    finally:
        channel.close()
        process.terminate()
        process.wait(60)
    for answer, count in sorted(answers.items()):
        print(f"{answer}: {count}")
    growth_mb = (after - before) / 2**20
    print(f"after {args.requests} fuzzed requests in {wall:.1f} s: {after / 2**20:.1f} MB ({growth_mb:+.1f} MB; "
          f"server {(server_after - server_before) / 2**20:+.1f} MB, worker "
          f"{(after - server_after - before + server_before) / 2**20:+.1f} MB)")
    server_errors = sum(count for answer, count in (answers + warm_answers).items()
                        if answer.split()[1] in SERVER_ERRORS)
    print(f"server errors: {server_errors} (of both passes)")
    for status in SERVER_ERRORS & set(examples):
        print(f"  e.g. {status}: {examples[status]}")
    return 1 if server_errors or growth_mb > args.max_growth_mb else 0


if __name__ == "__main__":
    sys.exit(main())
