"""The gRPC API through TF Serving's official stubs over a real channel, and the REST API
beside it, over fake models (fake_models.py): routes, labels, config reloads, status codes."""

import threading
import time

import grpc
import numpy as np
import pytest
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_management_pb2,
    predict_pb2,
)
from tensorflow_serving.config import model_server_config_pb2

from app.serving.model_config import SPECIFIC, ServedModel, VersionPolicy
from app.serving.tensor_proto import to_array, to_tensor_proto
from tests.serving.fake_models import TaggedVersion, serving


def versions(base, *numbers):
    for number in numbers:
        (base / str(number)).mkdir(parents=True, exist_ok=True)
    return str(base)


@pytest.fixture
def two_models(tmp_path):
    """en-de with versions 3 and 4 served, labelled stable and canary; en-fr's newest of 1, 2."""
    return (
        ServedModel("en-de", versions(tmp_path / "en-de", 3, 4), VersionPolicy(SPECIFIC, versions=(3, 4)),
                    (("canary", 4), ("stable", 3))),
        ServedModel("en-fr", versions(tmp_path / "en-fr", 1, 2)),
    )


def strings(*texts):
    return to_tensor_proto(np.array([t.encode() for t in texts], dtype=object))


def predict_request(name, texts=("a man",), version=None, label=None, signature=""):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = name
    request.model_spec.signature_name = signature
    if version is not None:
        request.model_spec.version.value = version
    if label is not None:
        request.model_spec.version_label = label
    request.inputs["inputs"].CopyFrom(strings(*texts))
    return request


def grpc_error(call, request):
    with pytest.raises(grpc.RpcError) as raised:
        call(request, timeout=30)
    return raised.value.code(), raised.value.details()


def test_predict_by_name_version_and_label(two_models):
    with serving(two_models) as servers:
        for spec, version in [({}, 4), ({"version": 3}, 3), ({"label": "stable"}, 3), ({"label": "canary"}, 4)]:
            response = servers.predict_stub.Predict(predict_request("en-de", ("a man", "a dog"), **spec), timeout=30)
            assert list(to_array(response.outputs["translations"], "out")) == [
                f"a man |en-de v{version}".encode(), f"a dog |en-de v{version}".encode()
            ]
            assert (response.model_spec.name, response.model_spec.version.value) == ("en-de", version)
            assert response.model_spec.signature_name == "serving_default"
        response = servers.predict_stub.Predict(predict_request("en-fr"), timeout=30)
        assert response.outputs["translations"].string_val == [b"a man |en-fr v2"]
        # The same over REST, labels included.
        assert servers.rest("POST", "/v1/models/en-de/labels/stable:predict", {"instances": ["a man"]})[:2] == (
            200, {"predictions": ["a man |en-de v3"]}
        )
        # A status names every version whatever the label, as TF Serving's GetModelStatus
        # passes the label over (a label it lacks included).
        for label in ("canary", "beta"):
            assert servers.rest("GET", f"/v1/models/en-de/labels/{label}")[:2] == (200, {"model_version_status": [
                {"version": "4", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}},
                {"version": "3", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}},
            ]})


def test_errors_carry_tf_servings_codes_and_messages(two_models):
    with serving(two_models) as servers:
        predict = servers.predict_stub.Predict
        assert grpc_error(predict, predict_request("xx")) == (
            grpc.StatusCode.NOT_FOUND, "Servable not found for request: Latest(xx)")
        assert grpc_error(predict, predict_request("en-de", version=7)) == (
            grpc.StatusCode.NOT_FOUND, "Servable not found for request: Specific(en-de, 7)")
        assert grpc_error(predict, predict_request("en-de", label="beta")) == (
            grpc.StatusCode.INVALID_ARGUMENT, "Unrecognized servable version label: beta")
        assert grpc_error(predict, predict_request("en-de", signature="classify")) == (
            grpc.StatusCode.FAILED_PRECONDITION, 'Serving signature key "classify" not found.')
        missing = predict_request("en-de", signature="scored")
        assert grpc_error(predict, missing) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "Request inputs do not match required inputs for model `en-de`. Send extra: {}. "
            "Missing but required: {alpha}.")
        wrong_type = predict_request("en-de", signature="scored")
        wrong_type.inputs["alpha"].CopyFrom(to_tensor_proto(np.array([0.5], dtype=np.float64)))
        assert grpc_error(predict, wrong_type) == (
            grpc.StatusCode.INVALID_ARGUMENT, 'Expects arg[0] to be float but double is provided (input "alpha")')
        too_many = predict_request("en-de", ["a"] * 65)
        assert grpc_error(predict, too_many) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "65 instances are more than this server accepts in one request (--max_instances=64)")
        # REST answers the same requests with TF Serving's HTTP statuses.
        assert servers.rest("POST", "/v1/models/en-de/labels/beta:predict", {"instances": ["a"]})[:2] == (
            400, {"error": "Unrecognized servable version label: beta"})
        assert servers.rest("POST", "/v1/models/en-de/versions/7:predict", {"instances": ["a"]})[:2] == (
            404, {"error": "Servable not found for request: Specific(en-de, 7)"})


def test_output_filter_and_numbers(two_models):
    with serving(two_models) as servers:
        request = predict_request("en-de", ("a", "b"), signature="scored")
        request.inputs["alpha"].CopyFrom(to_tensor_proto(np.array([0.25, 1.5], dtype=np.float32)))
        response = servers.predict_stub.Predict(request, timeout=30)
        assert sorted(response.outputs) == ["scores", "translations"]
        assert list(to_array(response.outputs["scores"], "scores")) == [0.5, 3.0]
        request.output_filter.append("scores")
        assert list(servers.predict_stub.Predict(request, timeout=30).outputs) == ["scores"]
        request.output_filter.append("nope")
        assert grpc_error(servers.predict_stub.Predict, request) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "output tensor alias not found in signature: nope Outputs expected to be in the set {scores,translations}.")


def test_metadata_and_status(two_models):
    with serving(two_models) as servers:
        request = get_model_metadata_pb2.GetModelMetadataRequest()
        request.model_spec.name = "en-de"
        request.model_spec.version_label = "stable"
        assert grpc_error(servers.predict_stub.GetModelMetadata, request) == (
            grpc.StatusCode.INVALID_ARGUMENT, "GetModelMetadataRequest must specify at least one metadata_field")
        request.metadata_field.append("signature_def")
        response = servers.predict_stub.GetModelMetadata(request, timeout=30)
        assert response.model_spec.version.value == 3
        signatures = get_model_metadata_pb2.SignatureDefMap()
        assert response.metadata["signature_def"].Unpack(signatures)
        assert signatures.signature_def["serving_default"].inputs["inputs"].name == "serving_default_inputs:0"

        status = get_model_status_pb2.GetModelStatusRequest()
        status.model_spec.name = "en-de"
        answer = servers.model_stub.GetModelStatus(status, timeout=30)
        available = get_model_status_pb2.ModelVersionStatus.AVAILABLE
        assert [(s.version, s.state) for s in answer.model_version_status] == [(4, available), (3, available)]
        status.model_spec.version_label = "stable"  # passed over, as TF Serving does
        answer = servers.model_stub.GetModelStatus(status, timeout=30)
        assert [(s.version, s.state) for s in answer.model_version_status] == [(4, available), (3, available)]
        status.model_spec.name = "xx"
        assert grpc_error(servers.model_stub.GetModelStatus, status) == (
            grpc.StatusCode.NOT_FOUND, "Could not find any versions of model xx")
        assert grpc_error(servers.model_stub.GetModelStatus, get_model_status_pb2.GetModelStatusRequest()) == (
            grpc.StatusCode.INVALID_ARGUMENT, "Missing ModelSpec")


def served_version(servers, label):
    return servers.predict_stub.Predict(predict_request("en-de", label=label), timeout=30).model_spec.version.value


def reload_request(*models):
    request = model_management_pb2.ReloadConfigRequest()
    for model in models:
        config = request.config.model_config_list.config.add(name=model.name, base_path=model.base_path,
                                                             model_platform="tensorflow")
        if model.policy.kind == SPECIFIC:
            config.model_version_policy.specific.versions.extend(model.policy.versions)
        for label, version in model.labels:
            config.version_labels[label] = version
    return request


def test_handle_reload_config_request_moves_labels_all_or_none(two_models, tmp_path):
    en_de, en_fr = two_models
    with serving(two_models) as servers:
        moved = ServedModel(en_de.name, en_de.base_path, en_de.policy, (("stable", 4),))
        response = servers.model_stub.HandleReloadConfigRequest(reload_request(moved), timeout=60)
        assert response.status.error_code == 0
        assert served_version(servers, "stable") == 4
        # en-fr left the config: unloaded, NOT_FOUND.
        assert grpc_error(servers.predict_stub.Predict, predict_request("en-fr"))[0] == grpc.StatusCode.NOT_FOUND
        # A label on a version that is not loaded: refused, and no label moves.
        bad = ServedModel(en_de.name, en_de.base_path, en_de.policy, (("canary", 3), ("stable", 9)))
        assert grpc_error(servers.model_stub.HandleReloadConfigRequest, reload_request(bad)) == (
            grpc.StatusCode.FAILED_PRECONDITION,
            "Request to assign label to version 9 of model en-de, which is not currently available for inference")
        assert servers.core.models.managers["en-de"].labels == {"stable": 4}


def test_a_new_label_may_name_an_unloaded_version_only_where_allowed(two_models):
    en_de = two_models[0]
    ahead = ServedModel(en_de.name, en_de.base_path, en_de.policy, (("next", 5), ("stable", 3)))
    with serving(two_models, allow_labels_for_unavailable=True) as servers:
        servers.model_stub.HandleReloadConfigRequest(reload_request(ahead), timeout=60)
        assert servers.core.models.managers["en-de"].labels == {"next": 5, "stable": 3}
        # ... but an existing label may not be moved onto one.
        moved = ServedModel(en_de.name, en_de.base_path, en_de.policy, (("next", 5), ("stable", 6)))
        assert grpc_error(servers.model_stub.HandleReloadConfigRequest, reload_request(moved))[0] == (
            grpc.StatusCode.FAILED_PRECONDITION)


def write_config(path, stable, canary, versions):
    config = model_server_config_pb2.ModelServerConfig()
    entry = config.model_config_list.config.add(name="en-de", base_path=str(path.parent / "en-de"),
                                                model_platform="tensorflow")
    entry.model_version_policy.specific.versions.extend(versions)
    for label, version in (("stable", stable), ("canary", canary)):
        if version is not None:
            entry.version_labels[label] = version
    from google.protobuf import text_format

    temporary = path.with_suffix(".tmp")
    temporary.write_text(text_format.MessageToString(config))
    temporary.replace(path)


def test_a_canary_rollout_fails_no_request(tmp_path):
    """stable -> 3 and canary -> 4, then stable -> 4, then 3 unloaded, by rewriting the config
    file, while clients loop on both labels over REST and gRPC."""
    versions(tmp_path / "en-de", 3, 4)
    config = tmp_path / "models.config"
    write_config(config, 3, None, [3])
    from app.serving.model_config import read_model_config

    with serving(read_model_config(str(config)), config_file=str(config), config_poll_seconds=0.05) as servers:
        answers, failures, stop = [], [], threading.Event()

        def loop_on(label, over):
            while not stop.is_set():
                try:
                    if over == "grpc":
                        response = servers.predict_stub.Predict(predict_request("en-de", label=label), timeout=30)
                        answers.append((label, response.model_spec.version.value))
                    else:
                        status, body, _ = servers.rest("POST", f"/v1/models/en-de/labels/{label}:predict",
                                                       {"instances": ["a"]})
                        if status != 200 and not (label == "canary" and "Unrecognized" in body["error"]):
                            failures.append((label, over, status, body))
                        elif status == 200:
                            answers.append((label, int(body["predictions"][0].rsplit("v", 1)[1])))
                except grpc.RpcError as error:
                    if not (label == "canary" and error.code() == grpc.StatusCode.INVALID_ARGUMENT):
                        failures.append((label, over, error.code(), error.details()))

        clients = [threading.Thread(target=loop_on, args=(label, over)) for label in ("stable", "canary")
                   for over in ("rest", "grpc")]
        for client in clients:
            client.start()

        def serves(label, version):
            deadline = time.monotonic() + 30
            while servers.core.models.managers["en-de"].labels.get(label) != version:
                assert time.monotonic() < deadline, (label, version)
                time.sleep(0.02)
            time.sleep(0.3)  # let the clients see it

        serves("stable", 3)
        # As TF Serving takes it: a version first, its label once it is loaded (a config that
        # did both at once would be refused, and re-applied in vain at every poll).
        write_config(config, 3, None, [3, 4])
        deadline = time.monotonic() + 30
        while 4 not in servers.core.models.managers["en-de"].loaded:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        write_config(config, 3, 4, [3, 4])
        serves("canary", 4)
        write_config(config, 4, 4, [3, 4])
        serves("stable", 4)
        write_config(config, 4, None, [4])
        serves("canary", None)
        deadline = time.monotonic() + 30
        while 3 in servers.core.models.managers["en-de"].loaded:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        stop.set()
        for client in clients:
            client.join(30)
    assert failures == []
    assert {("stable", 3), ("canary", 4), ("stable", 4)} <= set(answers)


def test_a_config_file_that_cannot_be_served_is_logged_and_the_old_one_kept(tmp_path, caplog):
    versions(tmp_path / "en-de", 3, 4)
    config = tmp_path / "models.config"
    write_config(config, 3, None, [3])
    from app.serving.model_config import read_model_config

    with serving(read_model_config(str(config)), config_file=str(config), config_poll_seconds=0.05) as servers:
        with caplog.at_level("ERROR", logger="app.serve"):
            config.write_text(config.read_text().replace("base_path", "base_pth"))
            deadline = time.monotonic() + 10
            while "not applied" not in caplog.text:
                assert time.monotonic() < deadline
                time.sleep(0.02)
        assert 'has no field named "base_pth"' in caplog.text and "models.config:4:5: " in caplog.text
        assert served_version(servers, "stable") == 3


class SlowToReload(TaggedVersion):
    """A TaggedVersion whose loads after the first wait for `released`."""

    released = threading.Event()
    loads = 0

    def __init__(self, version, path):
        type(self).loads += 1
        if type(self).loads > 1:
            assert self.released.wait(30)
        super().__init__(version, path)


def test_a_dead_version_is_loaded_again_at_once_and_requests_meanwhile_get_503(tmp_path):
    model = ServedModel.from_flags("en-de", versions(tmp_path / "en-de", 1))
    with serving([model], loader=SlowToReload) as servers:
        manager = servers.core.models.managers["en-de"]
        manager.loaded[1].alive = False  # as worker_process.py says of a killed process
        deadline = time.monotonic() + 10
        while manager.status[1].state != "LOADING":  # the next poll (within 1 s) takes it up
            assert time.monotonic() < deadline
            time.sleep(0.02)
        status, body, headers = servers.rest("POST", "/v1/models/en-de:predict", {"instances": ["a"]})
        assert status == 503 and headers["Retry-After"] == "1"
        assert "being loaded again after its process ended" in body["error"]
        assert grpc_error(servers.predict_stub.Predict, predict_request("en-de"))[0] == grpc.StatusCode.UNAVAILABLE
        assert servers.rest("GET", "/v1/models/en-de")[1]["model_version_status"][0]["status"]["error_code"] == (
            "UNAVAILABLE")
        SlowToReload.released.set()
        while 1 not in manager.loaded:
            assert time.monotonic() < deadline + 20
            time.sleep(0.02)
        assert servers.rest("POST", "/v1/models/en-de:predict", {"instances": ["a"]})[:2] == (
            200, {"predictions": ["a |en-de v1"]})


@pytest.mark.parametrize("array", [
    np.array([b"Ein Mann.", "Straße".encode(), b""], dtype=object),
    np.array([[1.5, -2.0], [0.0, 3.25]], dtype=np.float32),
    np.array([1, 2, 3], dtype=np.int32),
    np.array([2**40, -1], dtype=np.int64),
    np.array([True, False]),
    np.array([[True], [False], [True]]),  # a [B, K] bool output
    np.array(0.5, dtype=np.float64),
])
def test_tensor_protos_are_read_and_written_as_tensorflow_does(array):
    import tensorflow as tf

    # What tf.make_tensor_proto writes (tensor_content for numbers) this reads ...
    assert np.array_equal(to_array(tf.make_tensor_proto(array), "x"), array)
    # ... and what this writes, tf.make_ndarray reads.
    written = tf.make_ndarray(to_tensor_proto(array))
    assert written.shape == array.shape and np.array_equal(written, array)
    # A value given once fills the shape, as TensorFlow reads it.
    filled = tf.make_tensor_proto(array.ravel()[:1].item(), shape=[3], dtype=tf.as_dtype(
        tf.string if array.dtype == object else array.dtype))
    assert np.array_equal(to_array(filled, "x"), tf.make_ndarray(filled))


def test_a_model_is_added_repointed_and_removed_by_a_config_reload(two_models, tmp_path):
    en_de, en_fr = two_models
    elsewhere = ServedModel("en-fr", versions(tmp_path / "fr-v2", 7))
    added = ServedModel("de-en", versions(tmp_path / "de-en", 1))
    with serving(two_models) as servers:
        servers.call(servers.core.reload_config, [en_de, elsewhere, added])
        assert servers.rest("POST", "/v1/models/en-fr:predict", {"instances": ["a"]})[:2] == (
            200, {"predictions": ["a |fr-v2 v7"]})
        assert servers.predict_stub.Predict(predict_request("de-en"), timeout=30).outputs[
            "translations"].string_val == [b"a man |de-en v1"]
        servers.call(servers.core.reload_config, [en_de])
        assert servers.rest("POST", "/v1/models/en-fr:predict", {"instances": ["a"]})[:2] == (
            404, {"error": "Servable not found for request: Latest(en-fr)"})
        assert servers.rest("GET", "/v1/models/de-en")[:2] == (
            404, {"error": "Could not find any versions of model de-en"})


class SlowVersion(TaggedVersion):
    """A version whose load takes a second."""

    def __init__(self, version, path):
        time.sleep(1.0)
        super().__init__(version, path)


@pytest.mark.slow
def test_a_reload_whose_client_gives_up_is_still_applied_whole(two_models, tmp_path):
    """A client's deadline ends its HandleReloadConfigRequest, not the reload: the model it
    adds loads and is served, as the status then shows."""
    added = ServedModel("de-en", versions(tmp_path / "de-en", 1))
    with serving(two_models, loader=SlowVersion) as servers:
        request = reload_request(*two_models, added)
        code, _ = grpc_error(lambda r, timeout: servers.model_stub.HandleReloadConfigRequest(r, timeout=0.2), request)
        assert code == grpc.StatusCode.DEADLINE_EXCEEDED
        deadline = time.monotonic() + 30
        while "de-en" not in servers.core.models.managers:
            assert time.monotonic() < deadline, "the reload was dropped with its call"
            time.sleep(0.05)
        assert servers.rest("GET", "/v1/models/de-en")[1]["model_version_status"][0]["state"] == "AVAILABLE"
        assert servers.core.models.managers["en-de"].labels == {"canary": 4, "stable": 3}


def test_a_message_larger_than_the_limits_allow_is_refused_before_it_is_read(two_models):
    with serving(two_models) as servers:
        # 64 texts of 1,000 characters of 4 UTF-8 bytes each, and 1 MB for the rest, fit ...
        fits = predict_request("en-de", ["\U0001f600" * 1000] * 64)
        assert len(servers.predict_stub.Predict(fits, timeout=60).outputs["translations"].string_val) == 64
        assert grpc_error(servers.predict_stub.Predict, predict_request("en-de", ["\u00e9" * 1001])) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            'a text of 1001 characters in input "inputs" is longer than this server accepts (--max_text_length=1000)')
        # ... twice that does not.
        code, _ = grpc_error(servers.predict_stub.Predict, predict_request("en-de", ["x" * 2**20] * 3))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_channel_arguments_raise_the_message_size_but_not_the_request_limits(two_models):
    """--grpc_channel_arguments, as TF Serving takes it: a larger message gets through gRPC,
    and is then refused by --max_text_length, not read as a request."""
    from app.commands.serve import parse_channel_arguments

    arguments = parse_channel_arguments("grpc.max_receive_message_length=8388608,grpc.primary_user_agent=x")
    assert arguments == (("grpc.max_receive_message_length", 8388608), ("grpc.primary_user_agent", "x"))
    with serving(two_models, grpc_channel_arguments=arguments) as servers:
        assert grpc_error(servers.predict_stub.Predict, predict_request("en-de", ["x" * 2**20] * 3)) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            'a text of 1048576 characters in input "inputs" is longer than this server accepts '
            '(--max_text_length=1000)')
