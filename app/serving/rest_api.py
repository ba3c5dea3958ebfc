"""TF Serving's REST payloads: JSON requests to input arrays, output arrays to JSON.

Follows tensorflow_serving/util/json_tensor.cc and http_rest_api_handler.cc:

    row        {"signature_name": "nbest", "instances": ["A man.", ...]}
               {"signature_name": "translate_with_options",
                "instances": [{"inputs": "A man.", "alpha": 0.6, "max_extra_length": 50}]}
               -> {"predictions": [{"translations": ..., "scores": ...}, ...]}
    columnar   {"inputs": ["A man.", ...]}  or  {"inputs": {"inputs": [...], "alpha": [...]}}
               -> {"outputs": {"translations": [...], "scores": [...]}}

A row instance is a bare value when the signature has one input, else an object with
exactly the signature's input names. A response holds bare values instead of objects when
the signature has one output. Strings may be sent as {"b64": "..."}. A bool tensor (the
`constrained` signature's `constraints_met`) is JSON true and false both ways, as TF
Serving reads and writes DT_BOOL: a number or a string is not a bool.

Errors are `ServingError`s, answered as {"error": message} with TF Serving's HTTP status:
400 for a bad request (including an unknown signature name, as TF Serving answers it),
404 for an unknown model or version, 503 when the batch queue is full.
"""

import base64
import binascii
import dataclasses
import json
import math
import re

import numpy as np

from app.export import locate

ROW, COLUMNAR = "row", "columnar"
DEFAULT_SIGNATURE = "serving_default"


class ServingError(Exception):
    """A request that fails, as TF Serving fails it: `status` is its HTTP status over REST,
    `code` its gRPC status code (by default the one TF Serving maps to `status`; named
    where two codes share one HTTP status, as FAILED_PRECONDITION and INVALID_ARGUMENT
    share 400), and `retry_after` the seconds a client should wait before trying again
    (the Retry-After of a 503), where known."""

    def __init__(self, message, status=400, code=None, retry_after=None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code or GRPC_CODE_OF_HTTP_STATUS.get(status, "UNKNOWN")
        self.retry_after = retry_after


# tensorflow_serving/model_servers/http_rest_api_handler's status mapping, read backwards.
GRPC_CODE_OF_HTTP_STATUS = {
    400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 408: "DEADLINE_EXCEEDED", 413: "RESOURCE_EXHAUSTED",
    415: "INVALID_ARGUMENT", 499: "CANCELLED", 500: "INTERNAL", 503: "UNAVAILABLE",
}


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """One input or output of a signature."""

    dtype: np.dtype  # numpy dtype; strings are np.object_ (bytes)
    shape: tuple  # dimensions, None where unknown; shape[0] is the batch


# The method of every signature a client can call, in the metadata.
PREDICT_METHOD = "tensorflow/serving/predict"


def signature_def_json(signatures):
    """The "signature_def" of the metadata endpoint, as TF Serving writes a SavedModel's
    SignatureDefMap: each signature in proto JSON with its default values, by name.

    Args:
        signatures: `{name: SignatureDef as a dict}`: a SavedModel's, read from its
            saved_model.pb (`models.saved_model_signatures`), or a CTranslate2 version's,
            written from its specs (`signature_of_specs`).
    """
    return {"signature_def": dict(sorted(signatures.items()))}


_DTYPE_NAMES = {
    np.dtype(object): "DT_STRING", np.dtype(np.float32): "DT_FLOAT", np.dtype(np.int32): "DT_INT32",
    np.dtype(np.bool_): "DT_BOOL",
}


def signature_of_specs(name, inputs, outputs):
    """The SignatureDef dict a SavedModel signature `name` with these `inputs` and `outputs`
    (`{key: TensorSpec}` each) has in `signature_def_json`: its inputs named as
    tf.saved_model names them, its outputs numbered in the order of their keys."""

    def tensor(tensor_name, spec):
        dims = [{"size": str(-1 if size is None else size), "name": ""} for size in spec.shape]
        return {
            "name": tensor_name, "dtype": _DTYPE_NAMES[spec.dtype], "tensor_shape": {"dim": dims, "unknown_rank": False}
        }

    return {
        "inputs": {key: tensor(f"{name}_{key}:0", spec) for key, spec in inputs.items()},
        "outputs": {
            key: tensor(f"StatefulPartitionedCall:{i}", spec) for i, (key, spec) in enumerate(sorted(outputs.items()))
        },
        "method_name": PREDICT_METHOD,
        "defaults": {},
    }


# A model name: one part of /v1/models/<name>[/versions/<v>]:predict, and the directory
# saved_models/<name> that export.py writes to; with the flags that take one.
MODEL_NAME = locate.MODEL_NAME


# Seconds a connection may stall mid-request, or stay idle between requests, before it is
# closed (--read_timeout_seconds): long enough for a slow link to send a full request.
DEFAULT_READ_TIMEOUT_SECONDS = 30.0


@dataclasses.dataclass(frozen=True)
class Limits:
    """What the server accepts per request (flags --max_instances, --max_text_length)."""

    # Rows of one request (instances, or the batch dimension of columnar inputs).
    max_instances: int = 64
    # Characters of one string input (bytes for {"b64": ...} values).
    max_text_length: int = 1000

    def max_values(self, shape):
        """The most values one input of the signature shape `shape` (None where its rank is
        unknown) may hold in a request: `max_instances` rows of `max_values_per_row`. The
        exports' inputs are vectors, [B]: `max_instances`."""
        return (1 if shape == () else self.max_instances) * self.max_values_per_row(shape)

    def max_values_per_row(self, shape):
        """The most values one row of an input of the signature shape `shape` may hold: its
        fixed inner sizes, a size the signature leaves open counting as `max_text_length`
        (the longest any one dimension of a request needs to be)."""
        if shape is None:
            return self.max_text_length
        return math.prod(self.max_text_length if size is None else size for size in shape[1:])

    def check_rows(self, rows):
        """A 400 `ServingError` where a request of `rows` rows is more than one may hold."""
        if rows > self.max_instances:
            raise ServingError(
                f"{rows} instances are more than this server accepts in one request "
                f"(--max_instances={self.max_instances})"
            )

    def check_text(self, length, where, unit="characters"):
        """A 400 `ServingError` where a text of `length` `unit` at `where` ("at element 0
        key inputs of 'instances'", say) is longer than one may be."""
        if length > self.max_text_length:
            raise ServingError(
                f"a text of {length} {unit} {where} is longer than this server accepts "
                f"(--max_text_length={self.max_text_length})"
            )


@dataclasses.dataclass(frozen=True)
class PredictRequest:
    """A parsed request: one array per input, all with `rows` rows (when they agree)."""

    signature_name: str
    inputs: dict  # input name -> np.ndarray [rows, ...]
    format: str  # ROW or COLUMNAR
    rows: int


def parse_json_body(body):
    """The request body (bytes) as a JSON object (400 otherwise).

    As TF Serving's parser (rapidjson) reads it: UTF-8 only, no byte-order mark; of a
    repeated key the first value counts; a number too big for a double and an escaped
    lone surrogate (half a UTF-16 pair, e.g. "\\ud800") are parse errors.
    """
    if not body:
        raise ServingError("JSON Parse error: The document is empty")
    try:
        document = json.loads(body.decode("utf-8"), object_pairs_hook=_first_of_repeated_keys, parse_float=_double)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ServingError(f"JSON Parse error: {error}") from None
    except RecursionError:
        raise ServingError(TOO_DEEP) from None
    _check_parsed_values(document)
    if not isinstance(document, dict):
        raise ServingError(f"JSON Value: {_short(document)} Is not object")
    return document


def _first_of_repeated_keys(pairs):
    document = {}
    for key, value in pairs:
        document.setdefault(key, value)
    return document


def _double(text):
    value = float(text)
    if math.isinf(value):
        raise ServingError(f"JSON Parse error: Number too big to be stored in double: {text}")
    return value


_SURROGATE = re.compile("[\ud800-\udfff]")  # what json.loads leaves of an unpaired escape

# The deepest nesting of arrays and objects a request may have; a request needs 3. Set
# here rather than left to the interpreter: Python 3.11 and 3.12 stop json.loads at
# about 1,000 levels (the recursion limit, less the server's own frames), 3.13 at about
# 10,000 (its C recursion limit), so the same request was refused or read by version.
# Well below the lowest, so that everything within it parses on each.
MAX_NESTING = 512
TOO_DEEP = "JSON Parse error: The document is nested too deeply"


def _check_parsed_values(document):
    """400 for nesting deeper than `MAX_NESTING`, or for a string or key holding half a
    surrogate pair, which is not text (its UTF-8 cannot be written). Iterative: the
    nesting is the client's choice."""
    pending = [(document, 1)]  # (value, its depth: the document's top value is 1)
    while pending:
        value, depth = pending.pop()
        if isinstance(value, (dict, list)) and depth > MAX_NESTING:
            raise ServingError(TOO_DEEP)
        if isinstance(value, dict):
            pending.extend((key, depth + 1) for key in value)
            pending.extend((item, depth + 1) for item in value.values())
        elif isinstance(value, list):
            pending.extend((item, depth + 1) for item in value)
        elif isinstance(value, str) and _SURROGATE.search(value):
            raise ServingError("JSON Parse error: The surrogate pair in string is invalid")


def signature_name_of(document):
    """The request's `signature_name`, serving_default when absent."""
    name = document.get("signature_name", "")
    if not isinstance(name, str):
        raise ServingError(f"JSON Value: {_short(name)} Excepting 'signature_name' to be a string")
    return name or DEFAULT_SIGNATURE


def parse_predict_request(document, signature_name, input_specs, limits=Limits()):
    """Reads `instances` (row format) or `inputs` (columnar) into arrays.

    Args:
        document: the request's JSON object.
        input_specs: the signature's inputs, name -> `TensorSpec`.
    """
    has_instances, has_inputs = "instances" in document, "inputs" in document
    if has_instances and has_inputs:
        raise ServingError("Not formatted correctly expecting only one of 'inputs' or 'instances' keys to exist")
    if has_instances:
        inputs = _read_instances(document["instances"], input_specs, limits)
        request_format = ROW
    elif has_inputs:
        inputs = _read_columns(document["inputs"], input_specs, limits)
        request_format = COLUMNAR
    else:
        raise ServingError("Missing 'inputs' or 'instances' key")
    sizes = {len(array) for array in inputs.values() if array.ndim}
    rows = max(sizes, default=1)
    limits.check_rows(rows)
    return PredictRequest(signature_name, inputs, request_format, rows)


def _read_instances(instances, input_specs, limits):
    if not isinstance(instances, list):
        raise ServingError("Excepting 'instances' to be an list/array")
    if not instances:
        raise ServingError("No values in 'instances' array")
    limits.check_rows(len(instances))
    names = sorted(input_specs)
    named = _is_named(instances[0])
    if not named and len(names) > 1:
        raise ServingError(
            "instances is a plain list, but expecting list of objects as multiple input tensors "
            "required as per tensorinfo_map"
        )
    columns = {name: [] for name in names}
    for i, instance in enumerate(instances):
        if named != _is_named(instance):
            kind = "object" if named else "value/list"
            raise ServingError(f"Expecting {kind} but got {'list' if named else 'object'} at item {i} of input list")
        if not named:
            instance = {names[0]: instance}
        for key in instance:
            if key not in input_specs:
                raise ServingError(
                    f"Failed to process element: {i} key: {key} of 'instances' list. "
                    f"Error: JSON object: does not have named input: {key}"
                )
        if set(instance) != set(names):
            raise ServingError(
                f"Failed to process element: {i} of 'instances' list. "
                f"JSON object: {_short(instance)} must only have keys: {','.join(names)}"
            )
        for name in names:
            spec = input_specs[name]
            where = f"element {i} key {name} of 'instances'"
            columns[name].append(_to_array(instance[name], spec.dtype, spec.shape[1:], where, limits,
                                           max_values=limits.max_values_per_row(spec.shape)))
    return {name: np.stack(values) for name, values in columns.items()}


def _read_columns(value, input_specs, limits):
    names = sorted(input_specs)
    if not _is_named(value):
        if len(names) > 1:
            raise ServingError(
                "inputs is a plain value/list, but expecting an object as multiple input tensors "
                "required as per tensorinfo_map"
            )
        value = {names[0]: value}
    missing = [name for name in names if name not in value]
    if missing:
        raise ServingError(f"Missing named input: {missing[0]} in 'inputs' object.")
    # Other keys are passed over, as TF Serving does (it looks up only the signature's
    # inputs); row-format instances, where it checks, must have exactly those keys.
    arrays = {}
    for name in names:
        spec = input_specs[name]
        arrays[name] = _to_array(value[name], spec.dtype, spec.shape, f"input {name} of 'inputs'", limits,
                                 max_values=limits.max_values(spec.shape), batch=True)
    return arrays


def _is_named(value):
    return isinstance(value, dict) and not _is_base64(value)


def _is_base64(value):
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get("b64"), str)


def _to_array(value, dtype, shape, where, limits, max_values, batch=False):
    """A JSON value (nested lists) as an array of `dtype` whose shape fits `shape`, of at
    most `max_values` values and, where its first dimension is the `batch`, at most
    `limits.max_instances` rows: both checked on the lists' lengths, before the array is made."""
    actual = _nested_shape(value, depth=len(shape))
    if actual is None:
        raise ServingError(f"JSON Value: {_short(value)} at {where} is not a dense tensor (lists of unequal lengths)")
    if len(actual) != len(shape) or any(want is not None and want != got for want, got in zip(shape, actual)):
        want = "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"
        raise ServingError(f"JSON Value: {_short(value)} at {where} has shape {list(actual)}, expected {want}")
    if batch and actual:
        limits.check_rows(actual[0])
    if math.prod(actual) > max_values:
        raise ServingError(
            f"JSON Value at {where} of shape {list(actual)} holds {math.prod(actual)} values, more than this server "
            f"accepts ({max_values})"
        )
    array = np.empty(actual, dtype=dtype)
    array[...] = _convert(value, dtype, where, limits)  # (np.array would nest bytes lists oddly)
    return array


def _nested_shape(value, depth):
    """The shape of nested lists, None when ragged. Looks at most `depth` + 1 levels
    down, one past the expected rank, enough to tell a value of the wrong rank."""
    if not isinstance(value, list):
        return ()
    if depth <= 0:
        return (len(value),)
    shapes = {_nested_shape(item, depth - 1) for item in value}
    if len(shapes) > 1 or None in shapes:
        return None
    return (len(value),) + (shapes.pop() if shapes else ())


def _convert(value, dtype, where, limits):
    if isinstance(value, list):
        return [_convert(item, dtype, where, limits) for item in value]
    if dtype == np.object_:
        if isinstance(value, str):
            limits.check_text(len(value), f"at {where}")
            return value.encode("utf-8")
        if _is_base64(value):
            try:
                data = base64.b64decode(_padded_base64(value["b64"]), validate=True)
            except (binascii.Error, ValueError):
                raise ServingError(f"Unable to base64 decode the value at {where}") from None
            limits.check_text(len(data), f"at {where}", unit="bytes")
            return data
    elif isinstance(value, bool):
        if dtype == np.bool_:
            return value
    elif np.issubdtype(dtype, np.floating):
        if isinstance(value, (int, float)):
            return _to_float(value, dtype, where)
    elif np.issubdtype(dtype, np.integer):
        if isinstance(value, int):
            info = np.iinfo(dtype)
            if not info.min <= value <= info.max:
                raise ServingError(f"JSON Value: {value} at {where} is out of range for {np.dtype(dtype).name}")
            return value
    raise ServingError(
        f"JSON Value: {_short(value)} Type: {_json_type(value)} at {where} is not of expected type: {_type_name(dtype)}"
    )


def _padded_base64(text):
    """Base64 as TF Serving's decoder (abseil's Base64Unescape) accepts it: whitespace
    (line breaks of wrapped output) skipped, padding optional, "." as padding."""
    text = "".join(text.split()).replace(".", "=").rstrip("=")
    return text + "=" * (-len(text) % 4)


def _to_float(value, dtype, where):
    """A JSON number as `dtype`, 400 where it would come out infinite or, for an integer,
    inexact (16777217 as float32), as TF Serving refuses a lossy conversion."""
    try:
        with np.errstate(over="ignore"):
            converted = dtype.type(value)
        # Infinity and NaN, which TF Serving's parser also accepts, pass as they are.
        lossless = np.isfinite(converted) or not math.isfinite(value)
        if lossless and isinstance(value, int):
            lossless = int(converted) == value
    except OverflowError:  # an integer past any float
        lossless = False
    if not lossless:
        raise ServingError(
            f"Cannot convert JSON value: {_short(value)} to {_type_name(dtype)} without loss of precision at {where}"
        )
    return converted


def _json_type(value):
    """The JSON type of `value` as TF Serving's errors name it (json_tensor.cc's
    JsonTypeString: rapidjson's types, whose bools are two, True and False)."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, (int, float)):
        return "Number"
    if isinstance(value, str):
        return "String"
    if value is None:
        return "Null"
    return "Object"


def _type_name(dtype):
    return "string" if dtype == np.object_ else np.dtype(dtype).name


def _short(value, limit=120):
    try:
        text = json.dumps(value, ensure_ascii=False)
    except RecursionError:
        text = "[" * limit  # nested past what json.dumps writes: its opening is all there is to show
    return text if len(text) <= limit else text[:limit] + "..."


# Responses.


def format_response(outputs, request_format):
    """The JSON response for the arrays a signature returned (name -> [B, ...])."""
    names = sorted(outputs)
    values = {name: _to_json(outputs[name]) for name in names}
    if request_format == COLUMNAR:
        return {"outputs": values[names[0]] if len(names) == 1 else values}
    sizes = {len(values[name]) for name in names}
    if len(sizes) != 1:
        raise ServingError(
            "Batch size of the outputs differ; they cannot be returned in row format (use 'inputs')", status=500
        )
    rows = sizes.pop()
    if len(names) == 1:
        return {"predictions": values[names[0]]}
    return {"predictions": [{name: values[name][i] for name in names} for i in range(rows)]}


def _to_json(array):
    """Nested lists of JSON values. float32 keeps its shortest decimal form, as TF Serving
    writes it; bools become Python's True and False, which json writes as true and false
    (TF Serving's writer->Bool)."""
    array = np.asarray(array)
    if array.dtype == np.object_ or array.dtype.kind == "S":
        flat = [v.decode("utf-8", errors="replace") for v in array.ravel()]
    elif array.dtype == np.float32:
        flat = [float(str(v)) for v in array.ravel()]
    else:
        flat = array.ravel().tolist()
    return np.array(flat, dtype=object).reshape(array.shape).tolist() if array.ndim else flat[0]


def error_body(message):
    return {"error": message}
