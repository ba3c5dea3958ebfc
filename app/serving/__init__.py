"""The parts of the local TF Serving stand-in (`python -m app.serve`, app/commands/serve.py).

    server.py               the aiohttp application: routes, status, metadata, predict, the page
    rest_api.py             JSON <-> tensors in TF Serving's row and columnar formats; its errors
    models.py               the versions under a base path: loading, hot reload, status, metadata
    version_process.py      each version loaded and run in a process of its own, so that
                            unloading it gives its memory back
    ctranslate2_version.py  a CTranslate2 export served as a version, with the same signatures
    batching.py             dynamic batching of concurrent requests into one model call
    origins.py              which Host and Origin may call the server
    static/index.html       the translation page
"""
