"""TF Serving's SavedModel warm-up: the requests an export carries
(app/export/warmup_requests.py) and how a version runs them as it loads, by TF Serving's
rules (app/serving/warmup.py). The stand-in's export (tests/stand_in.py) loads in a
fraction of a second; the tiny model's, warmed by every signature, in about half a minute."""

import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import prediction_log_pb2

from app.export.saved_model import ExportError, export
from app.export.warmup_requests import WARMUP_SENTENCE, warmup_requests
from app.serving.models import LoadedVersion
from app.serving.protos import apis
from app.serving.tensor_proto import to_array
from app.serving.warmup import MAX_RECORDS, WarmupError, read_warmup_requests, warmup_path, write_warmup_requests
from app.serving.worker_process import CpuThreads, RemoteError, WorkerProcess
from tests.stand_in import StandInTranslator

ONE_SENTENCE = {"inputs": np.array([b"ein Satz"], dtype=object)}


def test_an_export_carries_one_request_of_one_sentence_per_signature(stand_in_export):
    requests = read_warmup_requests(stand_in_export)
    assert [request.model_spec.signature_name for request in requests] == ["serving_default", "greedy"]
    for request in requests:
        assert to_array(request.inputs["inputs"], "inputs").tolist() == [WARMUP_SENTENCE.encode()]
        assert list(request.inputs) == ["inputs"]


def test_every_signature_of_the_translator_gets_a_request_of_its_inputs(exported):
    translator = exported[0]
    signatures = translator.signatures()
    requests = warmup_requests(signatures)
    assert [name for name, _ in requests] == list(signatures)
    for name, inputs in requests:
        wanted = {
            spec.name: np.dtype(object) if spec.dtype == tf.string else np.dtype(spec.dtype.as_numpy_dtype)
            for spec in signatures[name].input_signature
        }
        assert {key: value.dtype for key, value in inputs.items()} == wanted, name
        assert all(value.shape == (1,) for value in inputs.values()), name
    assert [name for name, _ in warmup_requests(signatures, ["align", "serving_default"])] == [
        "serving_default", "align"]  # the export's order


def test_a_signature_the_export_lacks_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ExportError, match="no signature 'nbest' to warm up; the export's are serving_default, greedy"):
        export(StandInTranslator(), str(tmp_path / "base"), warmup_signatures=["nbest"])
    assert not os.path.exists(tmp_path / "base")
    path = export(StandInTranslator(), str(tmp_path / "base"), warmup_signatures=())
    assert read_warmup_requests(path) is None and not os.path.exists(os.path.join(path, "assets.extra"))


@pytest.mark.slow
def test_the_tiny_models_every_signature_warms_up_from_its_requests(exported, tmp_path):
    """The requests' values pass every signature's checks (a failed warm-up request fails
    the load, in TF Serving too): each runs, and answers."""
    translator, _, path, _ = exported
    copy = str(tmp_path / "1")
    shutil.copytree(path, copy)
    write_warmup_requests(copy, warmup_requests(translator.signatures()))
    version = LoadedVersion(1, copy)
    answered = []
    run = version.run
    version.run = lambda name, inputs: answered.append((name, run(name, inputs)))
    version.warm_up()
    assert [name for name, _ in answered] == list(translator.signatures())
    for name, outputs in answered:
        assert all(len(value) == 1 for value in outputs.values()), name


# The rules, on the stand-in's export, loaded in this process.


@pytest.fixture
def stand_in_version(stand_in_export, tmp_path):
    """A copy of the stand-in's export, for a test to give its own warm-up file."""
    copy = str(tmp_path / "1")
    shutil.copytree(stand_in_export, copy)
    return copy


def runs_of(path, iterations=1):
    """The signatures a version at `path` ran as it warmed up, in order."""
    version = LoadedVersion(1, path)
    called = []
    run = version.run
    version.run = lambda name, inputs: called.append(name) or run(name, inputs)
    version.warm_up(iterations)
    return called


def write_records(path, records):
    os.makedirs(os.path.dirname(warmup_path(path)), exist_ok=True)
    with tf.io.TFRecordWriter(warmup_path(path)) as writer:
        for record in records:
            writer.write(record if isinstance(record, bytes) else record.SerializeToString())


def predict_log(signature_name="", inputs=ONE_SENTENCE):
    request = apis.predict_pb2.PredictRequest()
    request.model_spec.signature_name = signature_name
    for name, array in inputs.items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(array))
    return prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=request))


def test_each_request_runs_as_often_as_told_in_the_files_order(stand_in_version):
    assert runs_of(stand_in_version) == ["serving_default", "greedy"]
    assert runs_of(stand_in_version, iterations=2) == ["serving_default"] * 2 + ["greedy"] * 2


def test_without_a_file_nothing_runs(stand_in_version, caplog):
    os.remove(warmup_path(stand_in_version))
    with caplog.at_level("INFO", logger="app.serve"):
        assert runs_of(stand_in_version) == []
    assert f"no warm-up file at {warmup_path(stand_in_version)}" in caplog.text


def test_records_of_no_log_type_are_passed_over_and_no_signature_name_is_the_default(stand_in_version):
    write_records(stand_in_version, [prediction_log_pb2.PredictionLog(), predict_log(), predict_log("greedy")])
    assert runs_of(stand_in_version) == ["serving_default", "greedy"]


@pytest.mark.parametrize("record, message", [
    (predict_log("nbest"), r"warm-up request 1 \(nbest\) failed: Serving signature name: \"nbest\" not found"),
    (predict_log(inputs={"text": ONE_SENTENCE["inputs"]}),
     r"warm-up request 1 \(serving_default\) failed: Request inputs do not match required inputs .* "
     r"Send extra: \{text\}. Missing but required: \{inputs\}"),
    (predict_log(inputs={"inputs": np.array([1.0], np.float32)}),
     r"warm-up request 1 \(serving_default\) failed: Expects arg\[0\] to be string but float is provided"),
    (prediction_log_pb2.PredictionLog(session_run_log=prediction_log_pb2.SessionRunLog()),
     "record 1: unsupported log_type for warm-up: session_run_log"),
    (prediction_log_pb2.PredictionLog(classify_log=prediction_log_pb2.ClassifyLog()),
     "record 1 is a classify_log; this server answers Predict only"),
    (b"\xff\xff\xff", "record 1 is not a PredictionLog"),
])
def test_a_request_that_fails_or_a_record_that_cannot_warm_up_fails_the_load_by_name(stand_in_version, record,
                                                                                      message):
    write_records(stand_in_version, [record])
    with pytest.raises(WarmupError, match=message):
        runs_of(stand_in_version)


def test_more_records_than_tf_serving_reads_or_a_file_that_is_not_tfrecord_fail_the_load(stand_in_version):
    write_records(stand_in_version, [predict_log()] * (MAX_RECORDS + 1))
    with pytest.raises(WarmupError, match=f"more than {MAX_RECORDS} warm-up records"):
        read_warmup_requests(stand_in_version)
    write_records(stand_in_version, [predict_log()] * MAX_RECORDS)
    assert len(read_warmup_requests(stand_in_version)) == MAX_RECORDS
    with open(warmup_path(stand_in_version), "wb") as file:
        file.write(b"not a TFRecord file at all")
    with pytest.raises(WarmupError, match="a warm-up file must be in TFRecord format"):
        read_warmup_requests(stand_in_version)


@pytest.mark.slow
def test_a_version_whose_warm_up_fails_does_not_load_in_its_worker_unless_warm_up_is_off(stand_in_version):
    write_records(stand_in_version, [predict_log("nbest")])
    entries = [("translator", 1, stand_in_version)]
    worker = WorkerProcess(entries, CpuThreads(1, 1))
    failed = worker.versions[("translator", 1)]
    assert isinstance(failed, RemoteError) and failed.type_name == "WarmupError"
    assert 'warm-up request 1 (nbest) failed: Serving signature name: "nbest" not found' in str(failed)
    worker = WorkerProcess(entries, CpuThreads(1, 1), warmup_iterations=0)  # --enable_model_warmup=false
    try:
        loaded = worker.versions[("translator", 1)]
        assert loaded.run("serving_default", ONE_SENTENCE)["translations"].tolist() == [b"EIN SATZ"]
    finally:
        worker.close()
