"""The gRPC door of the local TF Serving stand-in: TF Serving's PredictionService and ModelService.

    server = await start_grpc_server(core, "127.0.0.1", 8500, limits)     # grpc.aio, this event loop
    ...
    await server.stop(grace)

Built on `grpcio` and the official `tensorflow-serving-api` messages and service stubs
(protos.py), so that a client written against `tensorflow_model_server --port 8500` works
unchanged: `PredictionService.Predict` and `GetModelMetadata`, `ModelService.GetModelStatus`
and `HandleReloadConfigRequest`. A request goes through the same `ServerCore` as a REST one
(core.py): the same loaded versions, the same batcher, the same limits, so the two give
the same translations for the same sentences. Errors carry TF Serving's status codes and
messages (tensorflow_serving/servables/tensorflow/predict_util.cc,
model_servers/get_model_status_impl.cc, model_service_impl.cc): NOT_FOUND for a model or
version that is not served, INVALID_ARGUMENT for a bad input or an unknown label,
FAILED_PRECONDITION for a signature the version does not have, UNAVAILABLE (with the
seconds to wait as `retry-after` trailing metadata) while a version is loaded again.
"""

import asyncio
import logging

import grpc
from google.protobuf import json_format

from app.serving.model_config import ModelConfigError, parse_model_config
from app.serving.protos import apis, error_codes_pb2
from app.serving.rest_api import DEFAULT_SIGNATURE, Limits, ServingError
from app.serving.tensor_proto import request_arrays, to_tensor_proto

log = logging.getLogger("app.serve")

_STATES = apis.get_model_status_pb2.ModelVersionStatus.State


def _version_and_label(model_spec):
    """(version, label) of a ModelSpec: at most one of them is set (the `version_choice` oneof)."""
    choice = model_spec.WhichOneof("version_choice")
    if choice == "version":
        return model_spec.version.value, None
    if choice == "version_label":
        return None, model_spec.version_label
    return None, None


async def _answer(context, call):
    """`await call()`, or the RPC aborted with the `ServingError`'s code and message."""
    try:
        return await call()
    except ServingError as error:
        if error.retry_after is not None:
            context.set_trailing_metadata((("retry-after", str(error.retry_after)),))
        await context.abort(grpc.StatusCode[error.code], error.message)
    except Exception as error:  # as REST's 500: the model or the worker failed
        log.exception("a gRPC call failed")
        type_name = getattr(error, "type_name", type(error).__name__)  # as raised in the worker
        await context.abort(grpc.StatusCode.INTERNAL, f"{type_name}: {error}")


class PredictionService(apis.prediction_service_pb2_grpc.PredictionServiceServicer):
    """Predict and GetModelMetadata (Classify, Regress and MultiInference answer
    UNIMPLEMENTED: the exports have predict signatures only)."""

    def __init__(self, core, limits=Limits()):
        self.core = core
        self.limits = limits

    async def Predict(self, request, context):
        return await _answer(context, lambda: self._predict(request, context))

    async def GetModelMetadata(self, request, context):
        return await _answer(context, lambda: self._metadata(request))

    async def _predict(self, request, context):
        spec = request.model_spec
        version, label = _version_and_label(spec)
        loaded = self.core.models.get(spec.name, version, label)  # held until answered
        signature_name = spec.signature_name or DEFAULT_SIGNATURE
        if signature_name not in loaded.inputs:
            raise ServingError(f'Serving signature key "{signature_name}" not found.', code="FAILED_PRECONDITION")
        input_specs = loaded.inputs[signature_name]
        inputs = request_arrays(request.inputs, spec.name, input_specs, self.limits)
        output_names = self._output_names(request, loaded.outputs[signature_name])
        rows = max((len(array) for array in inputs.values() if array.ndim), default=1)
        outputs = await self.core.batcher.run(
            loaded, signature_name, inputs, rows, lambda: not context.cancelled()
        )
        response = apis.predict_pb2.PredictResponse()
        response.model_spec.name = spec.name
        response.model_spec.version.value = loaded.version
        response.model_spec.signature_name = signature_name
        for name in output_names:
            response.outputs[name].CopyFrom(to_tensor_proto(outputs[name]))
        return response

    @staticmethod
    def _output_names(request, output_specs):
        """The outputs to answer with: `output_filter`'s, or all of them."""
        if not request.output_filter:
            return sorted(output_specs)
        seen = set()
        for name in request.output_filter:
            if name not in output_specs:
                raise ServingError(
                    f"output tensor alias not found in signature: {name} Outputs expected to be in the set "
                    f"{{{','.join(sorted(output_specs))}}}."
                )
            if name in seen:
                raise ServingError(f"duplicate output tensor alias: {name}")
            seen.add(name)
        return list(request.output_filter)

    async def _metadata(self, request):
        if not request.metadata_field:
            raise ServingError("GetModelMetadataRequest must specify at least one metadata_field")
        for field in request.metadata_field:
            if field != "signature_def":
                raise ServingError(f"Metadata field {field} is not supported")
        spec = request.model_spec
        version, label = _version_and_label(spec)
        loaded = self.core.models.get(spec.name, version, label)
        signatures = apis.get_model_metadata_pb2.SignatureDefMap()
        json_format.ParseDict(loaded.signature_def, signatures)
        response = apis.get_model_metadata_pb2.GetModelMetadataResponse()
        response.model_spec.name = spec.name
        response.model_spec.version.value = loaded.version
        response.metadata["signature_def"].Pack(signatures)
        return response


class ModelService(apis.model_service_pb2_grpc.ModelServiceServicer):
    """GetModelStatus and HandleReloadConfigRequest."""

    def __init__(self, core):
        self.core = core

    async def GetModelStatus(self, request, context):
        return await _answer(context, lambda: self._status(request))

    async def HandleReloadConfigRequest(self, request, context):
        return await _answer(context, lambda: self._reload(request))

    async def _status(self, request):
        # As get_model_status_impl.cc: a ModelSpec is required, and its version_label is
        # passed over (the status of every version).
        if not request.HasField("model_spec"):
            raise ServingError("Missing ModelSpec")
        version, _ = _version_and_label(request.model_spec)
        statuses = self.core.models.status_json(request.model_spec.name, version)["model_version_status"]
        response = apis.get_model_status_pb2.GetModelStatusResponse()
        for status in statuses:
            entry = response.model_version_status.add()
            entry.version = int(status["version"])
            entry.state = _STATES.Value(status["state"])
            entry.status.error_code = error_codes_pb2.Code.Value(status["status"]["error_code"])
            entry.status.error_message = status["status"]["error_message"]
        return response

    async def _reload(self, request):
        """Serves the request's config as a reload of the config file would, and answers
        with its status (OK, or the error, also as the RPC's status)."""
        if request.config.WhichOneof("config") != "model_config_list":  # model_service_impl.cc's message
            raise ServingError("ServerModelConfig type not supported by HandleReloadConfigRequest. "
                               "Only ModelConfigList is currently supported")
        from google.protobuf import text_format

        try:
            models = parse_model_config(text_format.MessageToString(request.config), "the request's config")
        except ModelConfigError as error:
            raise ServingError(str(error)) from None
        # Shielded: a client that gives up (a deadline, a dropped connection) cancels this
        # handler, not the reload, which goes on to be applied whole or refused whole.
        await asyncio.shield(self.core.reload_config(models))
        response = apis.model_management_pb2.ReloadConfigResponse()
        response.status.error_code = error_codes_pb2.OK
        return response


def receive_limit(limits):
    """The largest message the gRPC server reads by default: what `limits` let through (UTF-8:
    at most 4 bytes a character) and 1 MiB for the rest of the message."""
    return 2**20 + limits.max_instances * limits.max_text_length * 4


async def start_grpc_server(core, host, port, limits=Limits(), channel_arguments=(), max_calls=None):
    """A started grpc.aio server of both services on `host:port` (in this event loop).

    It receives messages of up to `receive_limit(limits)` (a larger one is
    RESOURCE_EXHAUSTED before it is read whole) and sends any size, unless
    `channel_arguments` (--grpc_channel_arguments: (key, value) pairs) say otherwise; the
    request limits are checked whatever gRPC lets through. `max_calls`
    (--grpc_max_threads): the most calls handled at once (None: no limit)."""
    options = {"grpc.max_receive_message_length": receive_limit(limits), "grpc.max_send_message_length": -1}
    options.update(channel_arguments)
    server = grpc.aio.server(options=list(options.items()), maximum_concurrent_rpcs=max_calls)
    apis.prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(PredictionService(core, limits), server)
    apis.model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelService(core), server)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if server.add_insecure_port(address) == 0:
        raise OSError(f"cannot listen on {address}")
    await server.start()
    return server
