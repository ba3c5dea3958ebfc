"""TF Serving's own protos (the `tensorflow-serving-api` package), without TensorFlow's runtime.

    from app.serving.protos import apis, config
    request = apis.predict_pb2.PredictRequest()
    text_format.Parse(text, config.model_server_config_pb2.ModelServerConfig())

The generated modules import their TensorFlow messages as
`tensorflow.core.framework.tensor_pb2` and so on, and importing any `tensorflow.*` module
first runs `tensorflow/__init__.py`, which loads the whole runtime: seconds and hundreds of
megabytes more in a process that only reads and writes messages. The server process never
runs a model (each runs in a worker process), so where TensorFlow is not imported yet, the
messages are imported under a stand-in `tensorflow` package whose path is the real one: its
`core/` protos load, its runtime does not. The stand-in is removed at once, so that a later
`import tensorflow` (a test beside the server's code) still gets the real package, which
finds the same message modules already loaded.
"""

import importlib
import importlib.util
import sys
import types

_MODULES = (
    "tensorflow_serving.apis.get_model_metadata_pb2",
    "tensorflow_serving.apis.get_model_status_pb2",
    "tensorflow_serving.apis.model_management_pb2",
    "tensorflow_serving.apis.model_pb2",
    "tensorflow_serving.apis.model_service_pb2_grpc",
    "tensorflow_serving.apis.predict_pb2",
    "tensorflow_serving.apis.prediction_service_pb2_grpc",
    "tensorflow_serving.config.model_server_config_pb2",
    "tensorflow.core.framework.tensor_pb2",
    "tensorflow.core.framework.types_pb2",
    "tensorflow.core.protobuf.error_codes_pb2",
)


def _import_without_runtime():
    if "tensorflow" in sys.modules:  # the real package is there already: nothing to avoid
        return [importlib.import_module(name) for name in _MODULES]
    spec = importlib.util.find_spec("tensorflow")  # finds the package without running it
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("TF Serving's protos need the tensorflow package installed (requirements.txt)")
    stand_in = types.ModuleType("tensorflow")
    stand_in.__path__ = list(spec.submodule_search_locations)
    sys.modules["tensorflow"] = stand_in
    try:
        return [importlib.import_module(name) for name in _MODULES]
    finally:
        if sys.modules.get("tensorflow") is stand_in:
            del sys.modules["tensorflow"]


# Taken from sys.modules, not `from tensorflow.core... import`: that statement would import
# the real `tensorflow` package first.
_loaded = dict(zip(_MODULES, _import_without_runtime()))
tensor_pb2 = _loaded["tensorflow.core.framework.tensor_pb2"]
types_pb2 = _loaded["tensorflow.core.framework.types_pb2"]
error_codes_pb2 = _loaded["tensorflow.core.protobuf.error_codes_pb2"]
apis = sys.modules["tensorflow_serving.apis"]
config = sys.modules["tensorflow_serving.config"]

__all__ = ["apis", "config", "error_codes_pb2", "tensor_pb2", "types_pb2"]
