"""The parts of the local TF Serving stand-in (`python -m app.serve`, app/commands/serve.py).

    core.py                 what both APIs serve from: the models, their loading and polling,
                            config reloads, the batcher (TF Serving's ServerCore)
    server.py               the REST door, an aiohttp application: routes, status, metadata, predict, the page
    grpc_api.py             the gRPC door: TF Serving's PredictionService and ModelService
    rest_api.py             JSON <-> tensors in TF Serving's row and columnar formats; its errors
    tensor_proto.py         TensorProto <-> numpy, without TensorFlow
    protos.py               TF Serving's protos, imported without TensorFlow's runtime
    model_config.py         TF Serving's model config file: models, version policies, labels
    model_set.py            the served models by name, changed by a new config
    models.py               one model's versions under its base path: loading, hot reload, status,
                            labels, metadata
    worker_process.py       every served version in one worker process, which loads each new
                            version beside the others and unloads what goes
    ctranslate2_version.py  a CTranslate2 export served as a version, with the same signatures
    batching.py             dynamic batching of concurrent requests into one model call
    origins.py              which Host and Origin may call the server
    static/index.html       the translation page
"""
