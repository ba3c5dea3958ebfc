"""TF Serving's payloads for bool tensors (the `constrained` signature's `constraints_met`):
JSON true and false over REST (app/serving/rest_api.py), DT_BOOL in `bool_val` over gRPC
(app/serving/tensor_proto.py), both ways, as tensorflow_serving/util/json_tensor.cc and
TensorFlow's TensorProto have them; and through both doors of a server."""

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis.extra import numpy as hnp

from app.serving.protos import apis, tensor_pb2, types_pb2
from app.serving.rest_api import (
    COLUMNAR, ROW, ServingError, TensorSpec, format_response, parse_predict_request, signature_of_specs,
)
from app.serving.tensor_proto import to_array, to_tensor_proto
from tests.serving.fake_models import STRINGS, TaggedVersion, serving

BOOLS = TensorSpec(np.dtype(np.bool_), (None,))


def test_bool_outputs_are_written_as_json_true_and_false():
    outputs = {
        "translations": np.array([b"a", b"b"], dtype=object),
        "scores": np.array([0.5, -1.0], np.float32),
        "constraints_met": np.array([True, False]),
    }
    assert json.dumps(format_response(outputs, ROW)) == (
        '{"predictions": [{"constraints_met": true, "scores": 0.5, "translations": "a"}, '
        '{"constraints_met": false, "scores": -1.0, "translations": "b"}]}'
    )
    assert json.dumps(format_response(outputs, COLUMNAR)) == (
        '{"outputs": {"constraints_met": [true, false], "scores": [0.5, -1.0], "translations": ["a", "b"]}}'
    )
    # [B, K], and a signature of one output: bare values.
    assert json.dumps(format_response({"met": np.array([[True, False], [False, True]])}, ROW)) == (
        '{"predictions": [[true, false], [false, true]]}'
    )


def test_bool_inputs_are_read_from_json_true_and_false():
    specs = {"inputs": STRINGS, "flags": BOOLS}
    rows = {"instances": [{"inputs": "a", "flags": True}, {"inputs": "b", "flags": False}]}
    columns = {"inputs": {"inputs": ["a", "b"], "flags": [True, False]}}
    for document in (rows, columns):
        flags = parse_predict_request(document, "flagged", specs).inputs["flags"]
        assert flags.dtype == np.bool_ and flags.tolist() == [True, False]


@pytest.mark.parametrize("value, kind", [(1, "Number"), (0.0, "Number"), ("true", "String"), (None, "Null")])
def test_a_bool_input_takes_only_json_true_and_false(value, kind):
    # json_tensor.cc's DT_BOOL: `if (!val.IsBool()) return TypeError(val, dtype)`.
    with pytest.raises(ServingError) as raised:
        parse_predict_request({"inputs": [value]}, "flagged", {"flags": BOOLS})
    assert raised.value.status == 400
    assert raised.value.message == (
        f"JSON Value: {json.dumps(value)} Type: {kind} at input flags of 'inputs' is not of expected type: bool"
    )


def test_a_bool_is_no_number_and_is_named_as_tf_serving_names_it():
    # rapidjson's types, as JsonTypeString names them: true is "True", false "False".
    for value, kind in ((True, "True"), (False, "False")):
        with pytest.raises(ServingError, match=f"JSON Value: {json.dumps(value)} Type: {kind} at .* type: int32"):
            parse_predict_request({"inputs": [value]}, "s", {"n": TensorSpec(np.dtype(np.int32), (None,))})


def test_a_bool_output_is_dt_bool_in_the_signature_def():
    signature = signature_of_specs("constrained", {"inputs": STRINGS}, {"constraints_met": BOOLS, "scores": BOOLS})
    assert signature["outputs"]["constraints_met"]["dtype"] == "DT_BOOL"


# Any bool array [B, ...] (B >= 1: an empty list has no inner shape to read back).
BOOL_ARRAYS = hnp.arrays(np.bool_, hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))


@given(BOOL_ARRAYS)
def test_any_bool_array_round_trips_through_json_and_tensor_protos(array):
    spec = {"flags": TensorSpec(np.dtype(np.bool_), (None,) + array.shape[1:])}
    # REST: a response's JSON, sent back as a request, in either format.
    columns = json.loads(json.dumps(format_response({"flags": array}, COLUMNAR)))["outputs"]
    rows = json.loads(json.dumps(format_response({"flags": array}, ROW)))["predictions"]
    for document in ({"inputs": columns}, {"instances": rows}):
        read = parse_predict_request(document, "flagged", spec).inputs["flags"]
        assert read.dtype == np.bool_ and np.array_equal(read, array)
    # gRPC: DT_BOOL with the values in bool_val, over the wire and back.
    proto = tensor_pb2.TensorProto.FromString(to_tensor_proto(array).SerializeToString())
    assert proto.dtype == types_pb2.DT_BOOL and list(proto.bool_val) == array.ravel().tolist()
    read = to_array(proto, "flags")
    assert read.dtype == np.bool_ and np.array_equal(read, array)


class FlaggingVersion(TaggedVersion):
    """`TaggedVersion` with a `flagged` signature: texts and a bool each in, the tagged
    texts and the bools negated out, a bool input and a bool output."""

    def __init__(self, version, path):
        super().__init__(version, path)
        self.inputs["flagged"] = {"inputs": STRINGS, "keep": BOOLS}
        self.outputs["flagged"] = {"translations": STRINGS, "dropped": BOOLS}
        self.signatures = dict(self.inputs)

    def run(self, signature_name, inputs):
        if signature_name == "flagged":
            return {"translations": super().run("serving_default", inputs)["translations"], "dropped": ~inputs["keep"]}
        return super().run(signature_name, inputs)


def test_both_doors_read_and_write_bools_as_tf_serving(tmp_path):
    from app.serving.model_config import ServedModel

    (tmp_path / "en-de" / "1").mkdir(parents=True)
    with serving((ServedModel("en-de", str(tmp_path / "en-de")),), loader=FlaggingVersion) as servers:
        instances = [{"inputs": "a", "keep": True}, {"inputs": "b", "keep": False}]
        status, body, _ = servers.rest("POST", "/v1/models/en-de:predict",
                                       {"signature_name": "flagged", "instances": instances})
        assert status == 200 and json.dumps(body) == (
            '{"predictions": [{"dropped": false, "translations": "a |en-de v1"}, '
            '{"dropped": true, "translations": "b |en-de v1"}]}'
        )
        status, body, _ = servers.rest("POST", "/v1/models/en-de:predict",
                                       {"signature_name": "flagged", "inputs": {"inputs": ["a"], "keep": [1]}})
        assert status == 400 and "JSON Value: 1 Type: Number" in body["error"]

        request = apis.predict_pb2.PredictRequest()
        request.model_spec.name, request.model_spec.signature_name = "en-de", "flagged"
        request.inputs["inputs"].CopyFrom(to_tensor_proto(np.array([b"a", b"b"], dtype=object)))
        request.inputs["keep"].CopyFrom(to_tensor_proto(np.array([True, False])))
        dropped = servers.predict_stub.Predict(request, timeout=30).outputs["dropped"]
        assert dropped.dtype == types_pb2.DT_BOOL and list(dropped.bool_val) == [False, True]
        assert [dim.size for dim in dropped.tensor_shape.dim] == [2]
