"""No request makes the server allocate what its limits forbid, over gRPC or REST.

A TensorProto's shape is the client's word: a message of a few dozen bytes may declare
[10**12] values, filled by repetition. These tests hold that every input path checks the
declared sizes against --max_instances and --max_text_length before an array of that size
exists (the memory traced while a request is read stays within a bound derived from the
limits), and that every request, however malformed, is answered with a result or a
client error: never INTERNAL, a 500 or a crash. Properties are checked on thousands of
generated requests in this process, and on a few hundred through the servers' sockets.
"""

import json
import tracemalloc

import grpc
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.serving.model_config import ServedModel
from app.serving.protos import apis, tensor_pb2, types_pb2
from app.serving.rest_api import Limits, ServingError, parse_json_body, parse_predict_request
from app.serving.tensor_proto import request_arrays, to_array, to_tensor_proto
from tests.serving.fake_models import FLOATS, STRINGS, serving

LIMITS = Limits(max_instances=64, max_text_length=1000)
# The signature the generated requests are read against: a vector of strings and one of
# floats, as translate_with_options takes its texts and alphas.
SPECS = {"inputs": STRINGS, "alpha": FLOATS}
# The most memory reading one request may take here: its arrays hold at most 64 values of
# at most the message's bytes, and a text longer than the limit is decoded once to be
# measured (2 KB here); 1 MiB leaves room for Python's and numpy's own bookkeeping.
MAX_TRACED_BYTES = 2**20
CLIENT_ERRORS = {"INVALID_ARGUMENT", "FAILED_PRECONDITION", "NOT_FOUND"}


def traced_peak(read):
    """(what `read()` returned or the ServingError it raised, the peak bytes it allocated)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        try:
            result = read()
        except ServingError as error:
            result = error
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def string_tensor(shape, values=(b"a",)):
    proto = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING)
    for size in shape:
        proto.tensor_shape.dim.add(size=size)
    proto.string_val.extend(values)
    return proto


def predict_request(**inputs):
    request = apis.predict_pb2.PredictRequest()
    request.model_spec.name = "en-de"
    request.model_spec.signature_name = "scored"
    for name, proto in inputs.items():
        request.inputs[name].CopyFrom(proto)
    return request


def read_grpc_inputs(request):
    return request_arrays(request.inputs, "en-de", SPECS, LIMITS)


@pytest.mark.parametrize("rows", [65, 30_000_000, 10**12, 2**63 - 1])
def test_a_declared_shape_beyond_max_instances_is_refused_before_it_is_filled(rows):
    request = predict_request(inputs=string_tensor([rows]), alpha=to_tensor_proto(np.array([0.6], np.float32)))
    error, peak = traced_peak(lambda: read_grpc_inputs(request))
    assert isinstance(error, ServingError) and error.code == "INVALID_ARGUMENT"
    assert error.message == (
        f"{rows} instances are more than this server accepts in one request (--max_instances=64)"
    )
    assert peak < MAX_TRACED_BYTES


def test_inner_dimensions_are_bounded_too():
    """A [1, 10**9] string input is refused by its shape, and a shape whose sizes multiply
    past any integer type ([2**62, 2**62, 1]) is not read as a small one."""
    request = predict_request(inputs=string_tensor([1, 10**9]), alpha=to_tensor_proto(np.array([0.6], np.float32)))
    error, _ = traced_peak(lambda: read_grpc_inputs(request))
    assert error.message == 'input "inputs" has shape [1, 1000000000], expected [?]'
    with pytest.raises(ServingError, match=r"holds 21267647932558653966460912964485513216 values, more than .* \(64\)"):
        to_array(string_tensor([2**62, 2**62, 1]), "x", max_values=64)


def test_a_filled_tensor_within_the_limits_is_read_as_tensorflow_reads_it():
    request = predict_request(inputs=string_tensor([3], [b"x", b"y"]),
                              alpha=to_tensor_proto(np.array([0.5, 0.25, 1.0], np.float32)))
    inputs = read_grpc_inputs(request)
    assert inputs["inputs"].tolist() == [b"x", b"y", b"y"]
    assert inputs["alpha"].tolist() == [0.5, 0.25, 1.0]


def test_string_tensor_content_is_tensorflows_encoded_list():
    """tensor_content of a string tensor: each string's length as a varint, then the bytes
    (what TensorFlow's Tensor::AsProtoTensorContent writes)."""
    proto = string_tensor([2], values=())
    proto.tensor_content = bytes([3, 200, 1]) + b"abc" + b"z" * 200
    assert to_array(proto, "x").tolist() == [b"abc", b"z" * 200]
    proto.tensor_content = bytes([3, 5]) + b"abc"
    with pytest.raises(ServingError, match="tensor_content does not hold 2 strings"):
        to_array(proto, "x")


def test_a_long_text_in_a_filled_tensor_is_measured_and_refused():
    request = predict_request(inputs=string_tensor([64], ["é".encode() * 1001]),
                              alpha=to_tensor_proto(np.array([0.6], np.float32)))
    error, peak = traced_peak(lambda: read_grpc_inputs(request))
    assert error.message == (
        'a text of 1001 characters in input "inputs" is longer than this server accepts (--max_text_length=1000)'
    )
    assert peak < MAX_TRACED_BYTES


# Arbitrary TensorProtos: any dtype number (valid or not), any shape (huge, negative,
# unknown rank), values in any field, tensor_content of any bytes.
DIMENSION = st.one_of(st.integers(-2, 70), st.sampled_from([10**6, 10**12, 2**62, 2**63 - 1]))
TENSOR_PROTOS = st.builds(
    lambda dtype, unknown_rank, dims, strings, floats, ints, int64s, bools, content: _tensor(
        dtype, unknown_rank, dims, strings, floats, ints, int64s, bools, content),
    dtype=st.one_of(st.sampled_from(sorted(types_pb2.DataType.values())), st.integers(-3, 400)),
    unknown_rank=st.sampled_from([False] * 9 + [True]),  # mostly a known rank, to reach what follows
    dims=st.lists(DIMENSION, max_size=4),
    strings=st.lists(st.one_of(st.binary(max_size=12), st.sampled_from([b"a" * 1001, "é".encode() * 1001])),
                     max_size=4),
    floats=st.lists(st.floats(width=32, allow_nan=True), max_size=4),
    ints=st.lists(st.integers(-(2**31), 2**31 - 1), max_size=4),
    int64s=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=4),
    bools=st.lists(st.booleans(), max_size=4),
    content=st.one_of(st.just(b""), st.binary(max_size=600)),
)


def _tensor(dtype, unknown_rank, dims, strings, floats, ints, int64s, bools, content):
    proto = tensor_pb2.TensorProto(dtype=dtype)
    proto.tensor_shape.unknown_rank = unknown_rank
    for size in dims:
        proto.tensor_shape.dim.add(size=size)
    proto.string_val.extend(strings)
    proto.float_val.extend(floats)
    proto.int_val.extend(ints)
    proto.int64_val.extend(int64s)
    proto.bool_val.extend(bools)
    proto.tensor_content = content
    return proto


REQUESTS = st.dictionaries(st.sampled_from(["inputs", "alpha", "extra"]), TENSOR_PROTOS, max_size=3).map(
    lambda inputs: predict_request(**inputs))


@pytest.mark.slow
@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(REQUESTS)
def test_any_tensor_proto_is_read_or_refused_as_a_client_error_within_bounded_memory(request):
    result, peak = traced_peak(lambda: read_grpc_inputs(request))
    if isinstance(result, ServingError):
        assert result.status == 400 and result.code in CLIENT_ERRORS, result.message
    else:
        assert set(result) == {"inputs", "alpha"}
        for name, array in result.items():
            assert array.dtype == SPECS[name].dtype and array.ndim == 1 and len(array) <= LIMITS.max_instances
    assert peak < MAX_TRACED_BYTES


# Arbitrary JSON documents, and ones shaped like requests with values of every kind. Texts
# and lists are short but for some exactly at and past the limits, which keeps thousands of
# cases quick to make.
TEXTS = st.one_of(st.text(max_size=12), st.sampled_from(["a" * 1000, "é" * 1000, "a" * 1001, "é" * 1001]))


def lists_of(elements):
    """Lists of a few `elements`, or of 63 to 66 of one: either side of --max_instances (at
    the request's top level only: nested, such lists would multiply past any body limit)."""
    copies = st.builds(lambda item, n: [item] * n, elements, st.integers(63, 66))
    return st.one_of(st.lists(elements, max_size=5), copies)


JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False), TEXTS,
              st.builds(lambda s: {"b64": s}, st.text("AZaz09+/=. \n", max_size=40))),
    lambda children: st.one_of(st.lists(children, max_size=5), st.dictionaries(st.text(max_size=8), children,
                                                                                max_size=3)),
    max_leaves=30,
)
REQUEST_BODIES = st.one_of(
    st.builds(lambda instances: {"instances": instances}, JSON_VALUES),
    st.builds(lambda inputs: {"inputs": inputs}, JSON_VALUES),
    st.builds(lambda texts, alphas: {"inputs": {"inputs": texts, "alpha": alphas}},
              lists_of(TEXTS), lists_of(st.floats(width=32))),
    st.builds(lambda rows: {"instances": rows},
              lists_of(st.fixed_dictionaries({"inputs": JSON_VALUES, "alpha": JSON_VALUES}))),
    JSON_VALUES,
)


def read_rest_body(body):
    return parse_predict_request(parse_json_body(body), "scored", SPECS, LIMITS)


@pytest.mark.slow
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.one_of(REQUEST_BODIES.map(lambda document: json.dumps(document).encode()), st.binary(max_size=300)))
def test_any_json_body_is_read_or_refused_as_a_client_error_within_bounded_memory(body):
    result, peak = traced_peak(lambda: read_rest_body(body))
    if isinstance(result, ServingError):
        assert result.status == 400, result.message
    else:
        assert set(result.inputs) == {"inputs", "alpha"} and result.rows <= LIMITS.max_instances
    # The body itself is parsed whole (its size is bounded by the server's body limit): its
    # Python objects may take some tens of times its bytes; no array of a declared size is made.
    assert peak < MAX_TRACED_BYTES + 64 * len(body)


def test_a_columnar_request_of_more_rows_than_the_limit_is_refused_before_its_array_is_made():
    body = json.dumps({"inputs": {"inputs": ["a"] * 100_000, "alpha": [0.5] * 100_000}}).encode()
    with pytest.raises(ServingError, match=r"100000 instances are more than .* \(--max_instances=64\)"):
        read_rest_body(body)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(grpc_request=REQUESTS, rest_body=REQUEST_BODIES)
def test_the_servers_answer_any_request_with_a_result_or_a_client_error(fake_servers, grpc_request, rest_body):
    """The same, through the real sockets of both doors (fake models behind them)."""
    servers = fake_servers
    try:
        response = servers.predict_stub.Predict(grpc_request, timeout=30)
        assert set(response.outputs) == {"translations", "scores"}
    except grpc.RpcError as error:
        assert error.code().name in CLIENT_ERRORS, (error.code(), error.details())
    status, answer, _ = servers.rest("POST", "/v1/models/en-de:predict", {"signature_name": "scored", **rest_body}
                                     if isinstance(rest_body, dict) else rest_body)
    assert status in (200, 400), (status, answer)


@pytest.fixture(scope="module")
def fake_servers(tmp_path_factory):
    base = tmp_path_factory.mktemp("models") / "en-de"
    (base / "1").mkdir(parents=True)
    with serving((ServedModel("en-de", str(base)),)) as servers:
        yield servers
