"""TF Serving's SavedModel warm-up: requests a version carries, run as it loads.

    write_warmup_requests(export_dir, [("serving_default", {"inputs": np.array([b"A man."], object)})])
    requests = read_warmup_requests(export_dir)   # [PredictRequest], or None: no file

TensorFlow builds a signature's executor on its first call: seconds for a beam search (4
to 13 s for each of the default model's signatures, 57 s for all eight, on a 2-core CPU),
paid by the first request after a load unless something calls the signature first. TF
Serving calls it first with the requests the SavedModel carries in
`assets.extra/tf_serving_warmup_requests`
(tensorflow_serving/servables/tensorflow/saved_model_warmup_util.cc):

- a TFRecord file of `PredictionLog` protos, at most 1,000 of them;
- each request runs `num_request_iterations` times (1 unless told), in the file's order;
- a request that fails, a record that is not a PredictionLog or a file that is not a
  TFRecord file fails the load; a session_run log is refused, a record of no log type
  passed over;
- no file: no warm-up, and the load goes on.

export.py writes such a file (`app.export.warmup_requests` says which requests); the
local server reads any SavedModel's by these rules (`LoadedVersion.warm_up`),
so TF Serving and it warm the same versions the same way.

TensorFlow is imported by the functions that read and write, never at import: the server
process imports this module's names without TensorFlow's runtime (protos.py says why).
"""

import os

# Where the requests lie, relative to the SavedModel's directory (TF Serving's
# kSavedModelAssetsExtraDirectory and WarmupConsts::kRequestsFileName).
WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
# The most records a warm-up file may hold (WarmupConsts::kMaxNumRecords).
MAX_RECORDS = 1000
# The log types this server warms up with: it answers Predict only (grpc_api.py).
_PREDICT = "predict_log"
# Log types TF Serving refuses in a warm-up file.
_REFUSED = ("session_run_log",)


class WarmupError(Exception):
    """A warm-up file that cannot be read, or a request of it that failed: the version does
    not load (as in TF Serving)."""


def warmup_path(export_dir):
    return os.path.join(export_dir, WARMUP_FILE)


def write_warmup_requests(export_dir, requests):
    """Writes `requests` ([(signature name, {input name: np.ndarray})]) as the warm-up file
    of the SavedModel in `export_dir`, one PredictLog each, in order.

    Raises:
        ValueError: more than `MAX_RECORDS` requests (TF Serving would refuse the load).
    """
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    from app.serving.protos import apis
    from app.serving.tensor_proto import to_tensor_proto

    if len(requests) > MAX_RECORDS:
        raise ValueError(f"{len(requests)} warm-up requests: TF Serving reads at most {MAX_RECORDS}")
    path = warmup_path(export_dir)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path) as writer:
        for signature_name, inputs in requests:
            request = apis.predict_pb2.PredictRequest()
            request.model_spec.signature_name = signature_name
            for name, array in inputs.items():
                request.inputs[name].CopyFrom(to_tensor_proto(array))
            log = prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=request))
            writer.write(log.SerializeToString())


def read_warmup_requests(export_dir):
    """The PredictRequests of the warm-up file of the SavedModel in `export_dir`, in order;
    None when it has none. Records of no log type are passed over, as TF Serving does.

    Raises:
        WarmupError: the file is not a TFRecord file, a record is not a PredictionLog, there
            are more than `MAX_RECORDS`, or a record is of a log type not served here.
    """
    path = warmup_path(export_dir)
    if not os.path.exists(path):
        return None
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    requests = []
    try:
        for number, record in enumerate(tf.data.TFRecordDataset(path).as_numpy_iterator(), start=1):
            if number > MAX_RECORDS:
                raise WarmupError(f"{path}: more than {MAX_RECORDS} warm-up records, the most TF Serving reads")
            log = prediction_log_pb2.PredictionLog()
            try:
                log.ParseFromString(record)
            except Exception:  # noqa: BLE001 (protobuf's DecodeError, whichever implementation)
                raise WarmupError(f"{path}: record {number} is not a PredictionLog") from None
            log_type = log.WhichOneof("log_type")
            if log_type is None:
                continue
            if log_type in _REFUSED:
                raise WarmupError(f"{path}: record {number}: unsupported log_type for warm-up: {log_type}")
            if log_type != _PREDICT:
                raise WarmupError(
                    f"{path}: record {number} is a {log_type}; this server answers Predict only, so only "
                    "predict_log records can warm it up"
                )
            requests.append(log.predict_log.request)
    except tf.errors.DataLossError as error:
        raise WarmupError(f"{path}: {error.message}; a warm-up file must be in TFRecord format") from None
    return requests
