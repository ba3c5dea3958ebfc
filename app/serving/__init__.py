"""The parts of the local TF Serving stand-in (`python -m app.serve`).

    server.py     the aiohttp application: routes, status, metadata, predict, the page
    rest_api.py   JSON <-> tensors in TF Serving's row and columnar formats; its errors
    models.py     the versions under a base path: loading, hot reload, status, metadata
    batching.py   dynamic batching of concurrent requests into one model call
"""
