"""app/commands/serve.py over real HTTP on 127.0.0.1: TF Serving's REST API, its errors, the client,
load, and the page in a headless Chromium. One server process (conftest.py's `tiny_server`) serves
the whole module."""

import base64
import concurrent.futures
import json
import random
import re
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import SENTENCES
from tests.serving.chromium import headless_chromium
from tests.serving.server_process import MAX_INSTANCES, MAX_TEXT_LENGTH
from tests.tiny_run import ROOT

# Each export is loaded once per test process (conftest.py), however many tests load it.
pytestmark = pytest.mark.usefixtures("load_each_export_once")

@pytest.fixture
def server(tiny_server):
    """The server of this run (conftest.py's `tiny_server`): started once per test process."""
    return tiny_server


@pytest.fixture(scope="module")
def saved_model(exported):
    """The SavedModel's own outputs for SENTENCES, per signature (numpy)."""
    import tensorflow as tf

    _, _, path, _ = exported
    loaded = tf.saved_model.load(path)
    n = len(SENTENCES)
    calls = {
        "serving_default": {"inputs": tf.constant(SENTENCES)},
        "nbest": {"inputs": tf.constant(SENTENCES)},
        "greedy": {"inputs": tf.constant(SENTENCES)},
        "translate_with_options": {
            "inputs": tf.constant(SENTENCES),
            "alpha": tf.fill([n], 1.0),
            "max_extra_length": tf.fill([n], 5),
        },
    }
    return {
        name: {k: v.numpy() for k, v in loaded.signatures[name](**kwargs).items()}
        for name, kwargs in calls.items()
    }


def texts(array):
    return np.vectorize(lambda b: b.decode("utf-8"), otypes=[object])(array).tolist()


def assert_outputs_equal(got, want):
    """JSON outputs (lists) against the SavedModel's arrays: texts exactly, scores to float32 noise."""
    assert got["translations"] == texts(want["translations"])
    np.testing.assert_allclose(np.array(got["scores"], dtype=np.float32), want["scores"], rtol=1e-6)


# Status and metadata.

AVAILABLE_1 = {
    "model_version_status": [
        {"version": "1", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
    ]
}


@pytest.mark.parametrize("flags, message", [
    (["--model_name", "en/de"], "--model_name 'en/de': use letters, digits, '.', '_' and '-'"),
    (["--model-name", "en/de"], "--model_name 'en/de': use letters, digits, '.', '_' and '-'"),  # dashed too
    (["--rest-api-port", "70000"], "--rest_api_port must be 0-65535 (0: a free one), got 70000"),
    (["--rest_api_port", "70000"], "--rest_api_port must be 0-65535 (0: a free one), got 70000"),
    (["--file_system_poll_wait_seconds", "-1"], "--file_system_poll_wait_seconds must be >= 0 (0: look once"),
    (["--num_versions", "0"], "--num_versions must be at least 1, got 0"),
    (["--max_num_load_retries", "-1"], "--max_num_load_retries must be at least 0, got -1"),
    (["--max_instances", "0"], "--max_instances must be at least 1, got 0"),
    (["--max_text_length", "0"], "--max_text_length must be at least 1, got 0"),
    (["--batching_parameters_file", "/nonexistent/batching.txt"], "No such file or directory"),
    (["--tensorflow_intra_op_parallelism", "-1"], "--tensorflow_intra_op_parallelism must be at least 0, got -1"),
    (["--tensorflow-inter-op-parallelism", "-2"], "--tensorflow_inter_op_parallelism must be at least 0, got -2"),
])
def test_a_bad_flag_is_refused_by_name_before_anything_loads(flags, message, capsys):
    from app.commands.serve import main

    with pytest.raises(SystemExit) as exit_:
        main(flags)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.slow
def test_the_thread_flags_size_tensorflows_pools(server):
    with open(server.log_path) as log:
        assert "CPU threads: 1 per op, 1 ops at once" in log.read()


def test_model_status_as_tf_serving_reports_it(server):
    assert server.request("GET", "/v1/models/translator") == (200, AVAILABLE_1)
    assert server.request("GET", "/v1/models/translator/versions/1") == (200, AVAILABLE_1)


def test_metadata_holds_the_signature_defs(server):
    status, body = server.request("GET", "/v1/models/translator/metadata")
    assert status == 200
    assert body["model_spec"] == {"name": "translator", "signature_name": "", "version": "1"}
    signatures = body["metadata"]["signature_def"]["signature_def"]
    assert {"serving_default", "nbest", "greedy", "translate_with_options"} <= set(signatures)
    default = signatures["serving_default"]
    assert default["method_name"] == "tensorflow/serving/predict"
    vector = {"dim": [{"size": "-1", "name": ""}], "unknown_rank": False}
    assert default["inputs"]["inputs"]["dtype"] == "DT_STRING"
    assert default["inputs"]["inputs"]["tensor_shape"] == vector
    assert {k: v["dtype"] for k, v in default["outputs"].items()} == {"translations": "DT_STRING", "scores": "DT_FLOAT"}
    nbest = signatures["nbest"]["outputs"]["translations"]["tensor_shape"]["dim"]
    assert [d["size"] for d in nbest] == ["-1", "4"]  # [B, K]
    options = signatures["translate_with_options"]["inputs"]
    assert {k: v["dtype"] for k, v in options.items()} == {
        "inputs": "DT_STRING",
        "alpha": "DT_FLOAT",
        "max_extra_length": "DT_INT32",
    }
    assert server.request("GET", "/v1/models/translator/versions/1/metadata")[1] == body


# Predict: both formats, every signature, equal to the SavedModel's own output.


@pytest.mark.slow
def test_row_format_batch_equals_the_saved_model(server, saved_model):
    status, body = server.predict({"instances": SENTENCES})
    assert status == 200, body
    predictions = body["predictions"]
    assert len(predictions) == len(SENTENCES) and all(set(p) == {"translations", "scores"} for p in predictions)
    assert_outputs_equal(
        {"translations": [p["translations"] for p in predictions], "scores": [p["scores"] for p in predictions]},
        saved_model["serving_default"],
    )
    # The same through the version's own endpoint, and with named instances.
    named = [{"inputs": s} for s in SENTENCES]
    assert server.predict({"instances": named}, "/v1/models/translator/versions/1:predict") == (200, body)


def test_columnar_format_equals_the_saved_model(server, saved_model):
    status, body = server.predict({"inputs": SENTENCES})
    assert status == 200, body
    assert set(body) == {"outputs"}
    assert_outputs_equal(body["outputs"], saved_model["serving_default"])
    assert server.predict({"inputs": {"inputs": SENTENCES}, "signature_name": "serving_default"}) == (200, body)


def test_nbest_and_greedy_signatures(server, saved_model):
    status, body = server.predict({"signature_name": "nbest", "instances": SENTENCES})
    assert status == 200, body
    beams = saved_model["nbest"]["translations"].shape[1]
    assert all(len(p["translations"]) == len(p["scores"]) == beams for p in body["predictions"])
    assert_outputs_equal(
        {
            "translations": [p["translations"] for p in body["predictions"]],
            "scores": [p["scores"] for p in body["predictions"]],
        },
        saved_model["nbest"],
    )
    status, columnar = server.predict({"signature_name": "nbest", "inputs": SENTENCES})
    assert status == 200 and np.array(columnar["outputs"]["scores"]).shape == (len(SENTENCES), beams)
    assert_outputs_equal(columnar["outputs"], saved_model["nbest"])
    status, greedy = server.predict({"signature_name": "greedy", "inputs": SENTENCES})
    assert status == 200
    assert_outputs_equal(greedy["outputs"], saved_model["greedy"])


def test_translate_with_options_in_both_formats(server, saved_model):
    instances = [{"inputs": s, "alpha": 1.0, "max_extra_length": 5} for s in SENTENCES]
    status, body = server.predict({"signature_name": "translate_with_options", "instances": instances})
    assert status == 200, body
    assert_outputs_equal(
        {
            "translations": [p["translations"] for p in body["predictions"]],
            "scores": [p["scores"] for p in body["predictions"]],
        },
        saved_model["translate_with_options"],
    )
    n = len(SENTENCES)
    columns = {"inputs": SENTENCES, "alpha": [1] * n, "max_extra_length": [5] * n}  # an int is a valid float
    status, body = server.predict({"signature_name": "translate_with_options", "inputs": columns})
    assert status == 200, body
    assert_outputs_equal(body["outputs"], saved_model["translate_with_options"])


def test_strings_may_be_base64(server, saved_model):
    encoded = [{"b64": base64.b64encode(s.encode("utf-8")).decode()} for s in SENTENCES]
    status, body = server.predict({"inputs": encoded})
    assert status == 200, body
    assert_outputs_equal(body["outputs"], saved_model["serving_default"])


def test_base64_is_read_as_tf_serving_reads_it(server, saved_model):
    """Padding optional, "." as padding, line breaks skipped (abseil's Base64Unescape)."""
    sentence = SENTENCES[0].encode("utf-8")
    padded = base64.b64encode(sentence).decode()
    assert padded.endswith("=")  # so that the variants below differ from it
    variants = [padded.rstrip("="), padded.replace("=", "."), base64.encodebytes(sentence * 4).decode()]
    assert "\n" in variants[2][:-1]  # wrapped, as the base64 command writes it
    status, body = server.predict({"instances": [{"b64": v} for v in variants]})
    assert status == 200, body
    want = texts(saved_model["serving_default"]["translations"])[0]
    assert [p["translations"] for p in body["predictions"][:2]] == [want, want]
    status, alone = server.predict({"instances": [SENTENCES[0] * 4]})
    assert body["predictions"][2] == alone["predictions"][0]


def test_a_json_body_is_read_as_tf_servings_parser_reads_it(server, saved_model):
    # Of a repeated key, the first value counts.
    status, body = server.request(
        "POST", "/v1/models/translator:predict",
        raw=b'{"signature_name": "nbest", "signature_name": "serving_default", "instances": ["A man."], "instances": 5}',
    )
    assert status == 200, body
    assert len(body["predictions"][0]["translations"]) == saved_model["nbest"]["translations"].shape[1]
    # A surrogate pair is one character (U+1F600 here); only a lone half is refused.
    status, body = server.request("POST", "/v1/models/translator:predict", raw=b'{"instances": ["\\ud83d\\ude00"]}')
    assert status == 200, body
    # Keys of a columnar object other than the signature's inputs are passed over.
    with_extra = server.predict({"inputs": {"inputs": SENTENCES[:2], "comment": "ignored"}})
    assert with_extra == server.predict({"inputs": SENTENCES[:2]}) and with_extra[0] == 200


@pytest.mark.parametrize("signature, inputs, outputs", [
    ("serving_default", {"inputs": []}, {"scores": [], "translations": []}),
    ("nbest", {"inputs": []}, {"scores": [], "translations": []}),
    ("translate_with_options", {"inputs": [], "alpha": [], "max_extra_length": []}, {"scores": [], "translations": []}),
])
def test_an_empty_columnar_batch_gets_empty_outputs(server, signature, inputs, outputs):
    # Alone here; merged into a batch with other requests it must answer the same.
    assert server.predict({"signature_name": signature, "inputs": inputs}) == (200, {"outputs": outputs})


def test_a_huge_max_extra_length_is_capped_at_the_models_length(server):
    def options(extra):
        instances = [{"inputs": s, "alpha": 0.6, "max_extra_length": extra} for s in SENTENCES[:2]]
        return server.predict({"signature_name": "translate_with_options", "instances": instances})

    status, body = options(2**31 - 1)  # int32's largest: source length + it would overflow
    assert status == 200, body
    assert body == options(1000)[1]  # both past the model's positions


def test_requests_with_different_options_in_flight_together_get_their_own_answers(server):
    """Concurrent translate_with_options requests are batched only with equal options."""
    sentences = SENTENCES[:1] + SENTENCES[3:5]

    def request(i):
        alpha, extra = (0.0, 3) if i % 2 else (1.0, 6)
        instances = [{"inputs": s, "alpha": alpha, "max_extra_length": extra} for s in sentences[i % 3 :]]
        return (alpha, extra, i % 3), server.predict(
            {"signature_name": "translate_with_options", "instances": instances}
        )

    alone = dict(request(i) for i in range(6))  # one at a time
    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        together = list(pool.map(request, range(24)))
    for key, (status, body) in together:
        assert status == 200, body
        want = alone[key][1]["predictions"]
        assert [p["translations"] for p in body["predictions"]] == [p["translations"] for p in want]
        # Other rows in the same call may change the padding, so float noise, no more.
        np.testing.assert_allclose([p["scores"] for p in body["predictions"]], [p["scores"] for p in want], rtol=1e-5)


# Errors: {"error": ...} with TF Serving's status.

LONG = "x" * (MAX_TEXT_LENGTH + 1)
ERRORS = [
    # (name, method, path, raw body, status, message pattern)
    ("malformed JSON", "POST", ":predict", b'{"instances": [', 400, "JSON Parse error"),
    ("empty body", "POST", ":predict", b"", 400, "The document is empty"),
    ("not an object", "POST", ":predict", b'["a"]', 400, "Is not object"),
    ("neither key", "POST", ":predict", b'{"examples": ["a"]}', 400, "Missing 'inputs' or 'instances' key"),
    ("both keys", "POST", ":predict", b'{"instances": ["a"], "inputs": ["a"]}', 400, "only one of 'inputs' or 'instances'"),
    ("instances not a list", "POST", ":predict", b'{"instances": "a"}', 400, "to be an list/array"),
    ("no instances", "POST", ":predict", b'{"instances": []}', 400, "No values in 'instances' array"),
    ("number for a string", "POST", ":predict", b'{"instances": [1]}', 400, "is not of expected type: string"),
    ("null for a string", "POST", ":predict", b'{"inputs": [null]}', 400, "is not of expected type: string"),
    ("nested list", "POST", ":predict", b'{"instances": [["a"]]}', 400, "has shape \\[1\\], expected \\[\\]"),
    ("scalar inputs", "POST", ":predict", b'{"inputs": "a"}', 400, "has shape \\[\\], expected \\[\\?\\]"),
    ("unknown named input", "POST", ":predict", b'{"instances": [{"text": "a"}]}', 400, "does not have named input: text"),
    ("mixed instances", "POST", ":predict", b'{"instances": [{"inputs": "a"}, "b"]}', 400, "Expecting object but got"),
    ("bad base64", "POST", ":predict", b'{"instances": [{"b64": "%%%"}]}', 400, "Unable to base64 decode"),
    ("lone surrogate", "POST", ":predict", b'{"instances": ["a\\ud800"]}', 400, "^JSON Parse error: The surrogate pair in string is invalid$"),
    ("lone surrogate in a key", "POST", ":predict", b'{"instances": [{"x\\udc00": "a"}]}', 400, "^JSON Parse error: The surrogate pair in string is invalid$"),
    ("lone surrogate in signature_name", "POST", ":predict", b'{"signature_name": "\\udc00", "instances": ["a"]}', 400, "The surrogate pair in string is invalid"),
    ("byte-order mark", "POST", ":predict", b'\xef\xbb\xbf{"instances": ["a"]}', 400, "^JSON Parse error: Unexpected UTF-8 BOM"),
    ("UTF-16", "POST", ":predict", '{"instances": ["a"]}'.encode("utf-16"), 400, "^JSON Parse error: 'utf-8' codec can't decode"),
    ("nested past the parser", "POST", ":predict", b'{"inputs": ' + b"[" * 5000 + b'"a"' + b"]" * 5000 + b"}", 400, "^JSON Parse error: The document is nested too deeply$"),
    # 512 levels of arrays and objects are read (MAX_NESTING), the object included, on every Python.
    ("nested past the input's rank", "POST", ":predict", b'{"inputs": ' + b"[" * 511 + b'"a"' + b"]" * 511 + b"}", 400, "has shape \\[1, 1\\], expected \\[\\?\\]"),
    ("nested one level past the limit", "POST", ":predict", b'{"inputs": ' + b"[" * 512 + b'"a"' + b"]" * 512 + b"}", 400, "^JSON Parse error: The document is nested too deeply$"),
    ("nested past the limit in an object", "POST", ":predict", b'{"inputs": ["a"], "x": ' + b'{"y": ' * 600 + b"1" + b"}" * 600 + b"}", 400, "^JSON Parse error: The document is nested too deeply$"),
    ("number past a double", "POST", ":predict", b'{"signature_name": "translate_with_options", "instances": [{"inputs": "a", "alpha": 1e400, "max_extra_length": 5}]}', 400, "^JSON Parse error: Number too big to be stored in double: 1e400$"),
    ("options: alpha past float32", "POST", ":predict", b'{"signature_name": "translate_with_options", "instances": [{"inputs": "a", "alpha": 1e39, "max_extra_length": 5}]}', 400, "Cannot convert JSON value: 1e\\+39 to float32 without loss of precision at element 0 key alpha"),
    ("options: integer inexact in float32", "POST", ":predict", b'{"signature_name": "translate_with_options", "inputs": {"inputs": ["a"], "alpha": [16777217], "max_extra_length": [5]}}', 400, "Cannot convert JSON value: 16777217 to float32 without loss of precision"),
    ("options: infinite alpha", "POST", ":predict", b'{"signature_name": "translate_with_options", "instances": [{"inputs": "a", "alpha": Infinity, "max_extra_length": 5}]}', 400, "alpha must be finite"),
    ("signature_name not a string", "POST", ":predict", b'{"signature_name": 3, "instances": ["a"]}', 400, "signature_name"),
    ("unknown signature", "POST", ":predict", b'{"signature_name": "beam9", "instances": ["a"]}', 400, 'Serving signature name: "beam9" not found in signature def'),
    ("options: missing input", "POST", ":predict", b'{"signature_name": "translate_with_options", "instances": [{"inputs": "a", "alpha": 0.6}]}', 400, "must only have keys: alpha,inputs,max_extra_length"),
    ("options: plain instances", "POST", ":predict", b'{"signature_name": "translate_with_options", "instances": ["a"]}', 400, "expecting list of objects"),
    ("options: string alpha", "POST", ":predict", b'{"signature_name": "translate_with_options", "instances": [{"inputs": "a", "alpha": "0.6", "max_extra_length": 5}]}', 400, "is not of expected type: float32"),
    ("options: float length", "POST", ":predict", b'{"signature_name": "translate_with_options", "instances": [{"inputs": "a", "alpha": 0.6, "max_extra_length": 1.5}]}', 400, "is not of expected type: int32"),
    ("options: columnar missing", "POST", ":predict", b'{"signature_name": "translate_with_options", "inputs": {"inputs": ["a"], "alpha": [0.6]}}', 400, "Missing named input: max_extra_length"),
    ("options: alpha past the model's limit", "POST", ":predict", b'{"signature_name": "translate_with_options", "instances": [{"inputs": "a", "alpha": 40.73, "max_extra_length": 5}]}', 400, "alpha must be at most 40.72 for a model of 48 positions"),
    ("options: negative alpha", "POST", ":predict", b'{"signature_name": "translate_with_options", "instances": [{"inputs": "a", "alpha": -1.0, "max_extra_length": 5}]}', 400, "alpha must not be negative"),
    ("options: non-positive length", "POST", ":predict", b'{"signature_name": "translate_with_options", "instances": [{"inputs": "a", "alpha": 0.6, "max_extra_length": 0}]}', 400, "max_extra_length must be positive"),
    ("too many instances", "POST", ":predict", json.dumps({"instances": ["a"] * (MAX_INSTANCES + 1)}).encode(), 400, f"--max_instances={MAX_INSTANCES}"),
    ("too many columnar rows", "POST", ":predict", json.dumps({"inputs": ["a"] * (MAX_INSTANCES + 1)}).encode(), 400, f"--max_instances={MAX_INSTANCES}"),
    ("too long a text", "POST", ":predict", json.dumps({"instances": ["a", LONG]}).encode(), 400, f"{MAX_TEXT_LENGTH + 1} characters .*--max_text_length={MAX_TEXT_LENGTH}"),
    ("unknown model: predict", "POST", "/v1/models/nope:predict", b'{"instances": ["a"]}', 404, "Servable not found for request: Latest\\(nope\\)"),
    ("unknown version: predict", "POST", "/v1/models/translator/versions/7:predict", b'{"instances": ["a"]}', 404, "Servable not found for request: Specific\\(translator, 7\\)"),
    ("unknown model: status", "GET", "/v1/models/nope", None, 404, "Could not find any versions of model nope"),
    ("unknown version: status", "GET", "/v1/models/translator/versions/7", None, 404, "Could not find version 7 of model translator"),
    ("unknown model: metadata", "GET", "/v1/models/nope/metadata", None, 404, "Servable not found for request: Latest\\(nope\\)"),
    ("unknown version: metadata", "GET", "/v1/models/translator/versions/7/metadata", None, 404, "Specific\\(translator, 7\\)"),
    ("unknown method", "POST", "/v1/models/translator:explain", b'{"instances": ["a"]}', 400, "Malformed request: POST /v1/models/translator:explain"),
    ("GET predict", "GET", "/v1/models/translator:predict", None, 400, "Malformed request: GET"),
    ("bad version", "GET", "/v1/models/translator/versions/latest", None, 400, "Malformed request"),
    ("version past int64", "GET", "/v1/models/translator/versions/99999999999999999999", None, 400, "^Failed to convert version: 99999999999999999999 to numeric.$"),
    ("escaped colon", "POST", "/v1/models/translator%3Apredict", b'{"instances": ["a"]}', 400, "^Malformed request: POST /v1/models/translator%3Apredict$"),
    ("escaped slash in a name", "GET", "/v1/models/a%2Fb", None, 404, "^Could not find any versions of model a/b$"),
    ("unknown path", "GET", "/v2/anything", None, 404, "Not Found"),
    ("no model name", "GET", "/v1/models", None, 400, "^Missing model name in request.$"),
    ("label: predict", "POST", "/v1/models/translator/labels/stable:predict", b'{"instances": ["a"]}', 400, "^Unrecognized servable version label: stable$"),
    ("label: metadata", "GET", "/v1/models/translator/labels/canary/metadata", None, 400, "^Unrecognized servable version label: canary$"),
    ("version and label", "POST", "/v1/models/translator/versions/1/labels/stable:predict", b'{"instances": ["a"]}', 400, "Malformed request"),
    ("classify", "POST", "/v1/models/translator:classify", b'{"examples": [{}]}', 400, "Expected classification signature method_name to be tensorflow/serving/classify"),
    ("regress", "POST", "/v1/models/translator/versions/1:regress", b'{"examples": [{}]}', 400, "Expected regression signature method_name to be tensorflow/serving/regress"),
    ("regress: unknown model", "POST", "/v1/models/nope:regress", b'{"examples": [{}]}', 404, "Servable not found for request: Latest\\(nope\\)"),
]


@pytest.mark.parametrize("case", ERRORS, ids=[case[0] for case in ERRORS])
def test_bad_requests_get_a_json_error_and_tf_servings_status(server, case):
    _, method, path, raw, status, pattern = case
    if path == ":predict":
        path = "/v1/models/translator:predict"
    got_status, body = server.request(method, path, raw=raw)
    assert got_status == status, body
    assert set(body) == {"error"}
    assert re.search(pattern, body["error"]), body["error"]


def test_the_v1_models_prefix_matches_in_any_case_as_in_tf_serving(server):
    lower = server.request("POST", "/v1/models/translator:predict", raw=b'{"instances": ["A man rides a bike."]}')
    upper = server.request("POST", "/V1/MODELS/translator:predict", raw=b'{"instances": ["A man rides a bike."]}')
    assert lower[0] == 200 and upper == lower
    assert server.request("GET", "/V1/Models/translator/Versions/1") == (200, AVAILABLE_1)
    # The model name is not case-folded: TF Serving looks it up as given.
    assert server.request("GET", "/v1/models/TRANSLATOR")[0] == 404


def test_a_response_holding_a_lone_surrogate_is_still_json():
    # Requests with one are refused, but an echoed path or name must never make the
    # error answer itself fail (aiohttp would send a plain-text 500).
    from app.serving.server import _json

    response = _json({"error": "bad name: a\ud800"}, 400)
    assert response.status == 400 and response.content_type == "application/json"
    assert json.loads(response.body) == {"error": "bad name: a\ud800"}
    assert json.loads(_json({"error": "Straße"}).body.decode("utf-8")) == {"error": "Straße"}  # UTF-8, unescaped


def test_errors_do_not_disturb_the_server(server):
    assert server.request("GET", "/v1/models/translator") == (200, AVAILABLE_1)
    assert server.predict({"instances": ["A man rides a bike."]})[0] == 200


# The client.


def client(*args, stdin=None):
    return subprocess.run(
        [sys.executable, "-m", "app.client", *args], cwd=ROOT, input=stdin, capture_output=True, text=True, timeout=120
    )


def test_client_prints_translations(server, saved_model):
    want = texts(saved_model["serving_default"]["translations"])
    result = client("A man rides a bike.", "--url", server.url)
    assert result.returncode == 0, result.stderr
    assert result.stdout == want[0] + "\n"
    lines = [SENTENCES[0], SENTENCES[3], SENTENCES[4]]
    result = client("--url", server.url, "--batch-size", "2", stdin="\n".join(lines) + "\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [want[0], want[3], want[4]]
    result = client("--url", server.url, "--nbest", "--scores", SENTENCES[0])
    beams = saved_model["nbest"]["translations"].shape[1]
    assert result.returncode == 0 and len(result.stdout.strip().splitlines()) == beams
    assert result.stdout.splitlines()[0].split("\t")[1] == texts(saved_model["nbest"]["translations"])[0][0]


def test_client_reports_server_errors(server):
    result = client("a", "--url", server.url, "--model", "nope")
    assert result.returncode == 1
    assert "HTTP 404: Servable not found for request: Latest(nope)" in result.stderr


# gRPC: TF Serving's official stubs against the same server, the same version, the same batcher.


def test_grpc_and_rest_give_the_same_answers_for_every_signature(server, saved_model):
    import grpc
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    from app.serving.tensor_proto import to_array, to_tensor_proto

    n = len(SENTENCES)
    columns = {
        "serving_default": {"inputs": SENTENCES},
        "nbest": {"inputs": SENTENCES},
        "greedy": {"inputs": SENTENCES},
        "translate_with_options": {"inputs": SENTENCES, "alpha": [1.0] * n, "max_extra_length": [5] * n},
    }
    dtypes = {"alpha": np.float32, "max_extra_length": np.int32}
    with grpc.insecure_channel(server.grpc_address) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        for signature, inputs in columns.items():
            request = predict_pb2.PredictRequest()
            request.model_spec.name, request.model_spec.signature_name = "translator", signature
            for name, values in inputs.items():
                array = np.array([v.encode() for v in values], dtype=object) if name == "inputs" else np.array(
                    values, dtype=dtypes[name])
                request.inputs[name].CopyFrom(to_tensor_proto(array))
            response = stub.Predict(request, timeout=120)
            assert response.model_spec.version.value == 1
            over_grpc = {name: to_array(tensor, name) for name, tensor in response.outputs.items()}
            over_grpc["translations"] = texts(over_grpc["translations"])
            assert_outputs_equal(over_grpc, saved_model[signature])
            status, body = server.predict({"signature_name": signature, "inputs": inputs})
            assert status == 200, body
            assert over_grpc["translations"] == body["outputs"]["translations"]


def test_client_over_grpc_prints_what_it_prints_over_rest(server, saved_model):
    over_rest = client("--url", server.url, "--scores", SENTENCES[0], SENTENCES[1])
    over_grpc = client("--grpc", server.grpc_address, "--scores", SENTENCES[0], SENTENCES[1])
    assert over_grpc.returncode == 0, over_grpc.stderr
    assert over_grpc.stdout == over_rest.stdout
    assert over_grpc.stdout.splitlines()[0].split("\t")[1] == texts(saved_model["serving_default"]["translations"])[0]
    missing = client("a", "--grpc", server.grpc_address, "--model-name", "nope")
    assert missing.returncode == 1
    assert f"{server.grpc_address}: NOT_FOUND: Servable not found for request: Latest(nope)" in missing.stderr


# Load: many clients at once; the figures are benchmarks/bench_serving.py's job.


@pytest.mark.slow
def test_sixteen_clients_fifty_requests_each_without_an_error(server):
    import gzip

    with gzip.open(ROOT / "data" / "multi30k" / "val.en.gz", "rt", encoding="utf-8") as f:
        corpus = [line.strip() for _, line in zip(range(200), f)]
    corpus += ["", "Hi.", " ".join(["dog"] * 80)]
    failures = []

    def client_loop(seed):
        rng = random.Random(seed)
        for _ in range(50):
            instances = rng.sample(corpus, rng.choice([1, 1, 2, 3]))
            status, body = server.predict({"instances": instances})
            if status != 200 or len(body["predictions"]) != len(instances):
                failures.append((status, body))

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(client_loop, range(16)))
    assert failures == []
    assert server.request("GET", "/v1/models/translator") == (200, AVAILABLE_1)
    assert server.predict({"instances": ["A man rides a bike."]})[0] == 200
    _, metrics = server.request("GET", "/monitoring/prometheus/metrics")
    sizes = [int(size) for size in re.findall(r'batch_size="(\d+)"', metrics)]
    assert max(sizes) > 3  # concurrent requests shared model calls


# The page, in a real browser.


@pytest.mark.slow
def test_page_json_says_what_the_page_shows_and_obeys(server, exported):
    decoding = exported[0].decoding
    assert server.request("GET", "/page.json") == (200, {
        "model_name": "translator",
        "version": "1",
        "source_lang": "en",
        "target_lang": "de",
        "beam_size": decoding.beam_size,
        "alpha": decoding.alpha,
        "max_extra_length": decoding.max_extra_length,
        "signatures": sorted(exported[0].signatures()),
        "max_instances": MAX_INSTANCES,
        "max_text_length": MAX_TEXT_LENGTH,
    })


@pytest.mark.slow
def test_the_page_translates_in_headless_chromium(server, saved_model, exported):
    want = texts(saved_model["serving_default"]["translations"])
    nbest = texts(saved_model["nbest"]["translations"])
    beam_size = exported[0].decoding.beam_size
    with headless_chromium() as browser:
        context = browser.new_context(permissions=["clipboard-read", "clipboard-write"])
        page = context.new_page()
        bodies = []  # each predict request's JSON body, in order
        page.on("request", lambda r: bodies.append((r.url, r.post_data_json)) if r.method == "POST" else None)
        page.goto(server.url + "/")
        page.wait_for_function("document.getElementById('version').textContent != ''", timeout=60_000)
        assert page.text_content("#pair") == "en → de"
        assert page.text_content("#version") == "translator, version 1"
        assert page.get_attribute("#alpha", "placeholder") == str(exported[0].decoding.alpha)

        page.fill("#source", SENTENCES[0])
        page.click("#translate")
        page.wait_for_selector("#results:not([hidden]) tbody tr", timeout=60_000)
        assert page.text_content("#results tbody tr .translation") == want[0]
        assert re.fullmatch(r"-?\d+\.\d{3}", page.text_content("#results tbody tr .score"))
        assert bodies == [(server.url + "/v1/models/translator/versions/1:predict", {"instances": [SENTENCES[0]]})]

        # More lines than --max_instances: several requests, the results in the paste's order.
        order = [0, 3, 4, 5, 3, 0, 4, 0, 5, 3, 3, 4, 0, 0, 5, 4, 3, 0, 4]  # the non-empty SENTENCES
        bodies.clear()
        page.fill("#source", "\n".join(SENTENCES[i] for i in order))
        page.click("#translate")
        page.wait_for_function(f"document.querySelectorAll('#results tbody tr').length == {len(order)}")
        rows = page.query_selector_all("#results tbody tr")
        assert [row.query_selector(".translation").text_content() for row in rows] == [want[i] for i in order]
        assert [len(body["instances"]) for _, body in bodies] == [8, 8, 3]
        assert [instance for _, body in bodies for instance in body["instances"]] == [SENTENCES[i] for i in order]

        # "Copy all": every translation, one per line.
        page.click("#copy")
        page.wait_for_selector("#status:has-text('Copied')")
        assert page.text_content("#status") == f"Copied {len(order)} translations."
        assert page.evaluate("navigator.clipboard.readText()") == "\n".join(want[i] for i in order)

        # A length penalty: translate_with_options, with the export's max_extra_length.
        bodies.clear()
        page.fill("#source", SENTENCES[3])
        page.fill("#alpha", "1.5")
        page.click("#translate")
        page.wait_for_selector("#status:has-text('with α 1.5')", timeout=60_000)
        options = {"inputs": SENTENCES[3], "alpha": 1.5, "max_extra_length": exported[0].decoding.max_extra_length}
        body = {"signature_name": "translate_with_options", "instances": [options]}
        assert [body for _, body in bodies] == [body]
        status, reply = server.predict(body)
        assert status == 200
        assert page.text_content("#results tbody tr .translation") == reply["predictions"][0]["translations"]
        page.fill("#alpha", "")

        # n-best: the K hypotheses of each source, with their scores.
        bodies.clear()
        page.fill("#source", f"{SENTENCES[0]}\n{SENTENCES[3]}")
        page.check("#nbest")
        assert page.is_disabled("#alpha")  # the nbest signature has the export's alpha
        page.click("#translate")
        page.wait_for_function("document.querySelectorAll('#results ol.nbest').length == 2", timeout=60_000)
        assert [body for _, body in bodies] == [{"signature_name": "nbest", "instances": [SENTENCES[0], SENTENCES[3]]}]
        rows = page.query_selector_all("#results tbody tr")
        assert [row.query_selector(".translation").text_content() for row in rows] == [want[0], want[3]]
        items = [li.text_content() for li in rows[1].query_selector_all("ol.nbest li")]
        assert len(items) == beam_size
        # Each score as the server writes it (float32's shortest decimal), to 3 decimals.
        scores = [float(str(score)) for score in saved_model["nbest"]["scores"][3]]
        assert items == [f"{text} ({score:.3f})" for text, score in zip(nbest[3], scores)]

        # While a request runs, the button is off; an error hides the earlier results.
        page.fill("#source", LONG)  # past the server's --max_text_length: a 400
        disabled_at_once = page.evaluate(
            "() => { const b = document.getElementById('translate'); b.click(); return b.disabled; }"
        )
        assert disabled_at_once
        page.wait_for_selector("#status.error", timeout=60_000)
        assert page.text_content("#status").startswith("Error: a text of 401 characters")
        assert page.is_hidden("#results") and page.is_enabled("#translate") and page.is_hidden("#copy")

        # Beside TF Serving (serving/compose.yaml) nginx has no /page.json: the version
        # comes from the metadata answer, the language pair is not shown.
        page = context.new_page()
        page.route("**/page.json", lambda route: route.fulfill(status=404, body="<html>404 Not Found</html>"))
        page.goto(server.url + "/")
        page.wait_for_function("document.getElementById('version').textContent != ''", timeout=60_000)
        assert (page.text_content("#pair"), page.text_content("#version")) == ("", "translator, version 1")
        page.fill("#source", SENTENCES[0])
        page.click("#translate")
        page.wait_for_selector("#results:not([hidden]) tbody tr", timeout=60_000)
        assert page.text_content("#results tbody tr .translation") == want[0]
