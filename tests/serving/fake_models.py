"""The server's REST and gRPC doors over fake models, in this process: what routes, labels,
config reloads and status codes do, without TensorFlow loading a version.

    with serving(tmp_path, models) as servers:
        servers.rest("POST", "/v1/models/en-de/labels/stable:predict", {"instances": ["a"]})
        servers.predict_stub.Predict(request)          # tensorflow_serving.apis stubs, a real channel
"""

import asyncio
import contextlib
import dataclasses
import http.client
import json
import os
import socket
import threading

import grpc
import numpy as np

from app.serving.batching import Batcher
from app.serving.core import ServerCore
from app.serving.grpc_api import start_grpc_server
from app.serving.model_set import ModelSet
from app.serving.models import ModelManager
from app.serving.origins import OriginPolicy
from app.serving.rest_api import TensorSpec
from app.serving.server import Server

STRINGS = TensorSpec(np.dtype(object), (None,))
FLOATS = TensorSpec(np.dtype(np.float32), (None,))


class TaggedVersion:
    """A version whose translation is its input tagged with the model's base path and its
    version ("a man" -> "a man |en-de v3"); `scored` also takes a float per row and
    returns it doubled."""

    def __init__(self, version, path):
        if os.path.exists(os.path.join(path, "broken")):
            raise OSError(f"{path} is broken")
        self.version, self.path = version, path
        self.tag = f" |{os.path.basename(os.path.dirname(path))} v{version}".encode()
        self.inputs = {"serving_default": {"inputs": STRINGS}, "scored": {"inputs": STRINGS, "alpha": FLOATS}}
        self.outputs = {"serving_default": {"translations": STRINGS},
                        "scored": {"translations": STRINGS, "scores": FLOATS}}
        self.signatures = dict(self.inputs)
        self.signature_def = {"signature_def": {"serving_default": {
            "inputs": {"inputs": {"name": "serving_default_inputs:0", "dtype": "DT_STRING",
                                  "tensor_shape": {"dim": [{"size": "-1"}]}}},
            "outputs": {"translations": {"name": "StatefulPartitionedCall:0", "dtype": "DT_STRING",
                                         "tensor_shape": {"dim": [{"size": "-1"}]}}},
            "method_name": "tensorflow/serving/predict",
        }}}
        self.alive = True

    def input_specs(self, signature_name):
        from app.serving.rest_api import ServingError

        if signature_name not in self.inputs:
            raise ServingError(f'Serving signature name: "{signature_name}" not found in signature def')
        return self.inputs[signature_name]

    def run(self, signature_name, inputs):
        translations = np.array([text + self.tag for text in inputs["inputs"]], dtype=object)
        if signature_name == "scored":
            return {"translations": translations, "scores": inputs["alpha"] * 2}
        return {"translations": translations}

    def warm_up(self):
        pass


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Servers:
    """The REST and gRPC servers of one `ServerCore`, running in a thread of their own loop
    (`server`: the REST one's aiohttp `Server`, with its response counts)."""

    def __init__(self, core, server, loop, rest_port, grpc_port):
        self.core, self.server, self.loop = core, server, loop
        self.rest_port, self.grpc_address = rest_port, f"127.0.0.1:{grpc_port}"
        self.channel = grpc.insecure_channel(self.grpc_address)
        from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc

        self.predict_stub = prediction_service_pb2_grpc.PredictionServiceStub(self.channel)
        self.model_stub = model_service_pb2_grpc.ModelServiceStub(self.channel)

    def rest(self, method, path, body=None):
        """`(status, JSON answer, headers)` of one REST request."""
        connection = http.client.HTTPConnection("127.0.0.1", self.rest_port, timeout=30)
        try:
            data = json.dumps(body).encode() if body is not None else None
            connection.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
            response = connection.getresponse()
            return response.status, json.loads(response.read()), dict(response.getheaders())
        finally:
            connection.close()

    def call(self, coroutine_function, *args):
        """Runs `coroutine_function(*args)` in the servers' loop; its result."""
        return asyncio.run_coroutine_threadsafe(coroutine_function(*args), self.loop).result(60)


@contextlib.contextmanager
def serving(models, loader=TaggedVersion, poll_seconds=0.0, config_file=None, config_poll_seconds=0.0,
            allow_labels_for_unavailable=False, origins=OriginPolicy(), read_timeout_seconds=30.0,
            grpc_channel_arguments=()):
    """`Servers` of the `ServedModel`s `models`, their versions made by `loader`; the REST
    server with `origins` and `read_timeout_seconds` (the guards' tests). Labels are set by
    a second config once the versions are loaded, as TF Serving requires."""
    model_set = ModelSet(
        lambda model: ModelManager(model.name, model.base_path, model.policy, loader=loader,
                                   load_retry_interval_seconds=0),
        allow_labels_for_unavailable,
    )
    # A first config's labels must name versions already loaded, which none is yet (TF
    # Serving's rule), unless allowed: the models start without them, and get them next.
    if not allow_labels_for_unavailable and models:
        models_first = tuple(dataclasses.replace(model, labels=()) for model in models)
    else:
        models_first = models
    core = ServerCore(model_set, Batcher(), models_first, poll_seconds, config_file, config_poll_seconds)
    server = Server(core, origins=origins, read_timeout_seconds=read_timeout_seconds)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    rest_port, grpc_port = [], free_port()

    async def start():
        from aiohttp import web

        await core.start()
        if models_first != models:  # the labels, once their versions are loaded
            await core.reload_config(models)
        runner = server.runner()
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        rest_port.append(runner.addresses[0][1])
        return runner, await start_grpc_server(core, "127.0.0.1", grpc_port, channel_arguments=grpc_channel_arguments)

    runner, grpc_server = asyncio.run_coroutine_threadsafe(start(), loop).result(60)
    servers = Servers(core, server, loop, rest_port[0], grpc_port)
    try:
        yield servers
    finally:
        servers.channel.close()

        async def stop():
            await grpc_server.stop(None)
            await runner.cleanup()
            await core.stop()

        asyncio.run_coroutine_threadsafe(stop(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
