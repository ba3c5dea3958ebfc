"""The local server's memory for one model and for two, and its outage after its worker is killed.

    python benchmarks/bench_serving_models.py --tiny                          # exports a tiny model first
    python benchmarks/bench_serving_models.py --export saved_models/translator/1

1. It serves the export as one model (a model config file of one entry), sends a few
   requests, and prints the resident memory of the server and its worker together.
2. It serves two copies of it as two models (en-de and en-fr, each its own base path),
   sends requests to both, and prints their memory and its ratio to one model's.
3. With `--clients` threads looping on both models, it kills the worker with SIGKILL (as
   the kernel's out-of-memory killer would) and prints how long requests failed (from the
   kill to the first answer of each model), how they failed (503 with Retry-After, or not),
   and, beside it, how long one load of both models takes in a fresh worker
   (`WorkerProcess`, timed in this process): the outage should be no longer than that, plus
   the server's poll interval.
"""

import argparse
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import urllib.error
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_serving import export_tiny, post, start_server  # noqa: E402
from benchmarks.bench_serving_soak import _children_by_parent, tree_resident_bytes  # noqa: E402
from app.cli.flag_types import int_at_least  # noqa: E402

SENTENCES = ["A man rides a bike.", "Two dogs play in the snow.", "A woman reads a book on a bench."]
NAMES = ("en-de", "en-fr")


def write_config(path, bases):
    """A TF Serving model config file naming `bases` ({name: base path})."""
    entries = "".join(f'  config {{ name: "{name}" base_path: "{base}" }}\n' for name, base in bases.items())
    Path(path).write_text(f"model_config_list {{\n{entries}}}\n", encoding="utf-8")


def served_memory(work, bases, requests=6):
    """Starts a server of `bases`, answers `requests` per model, and returns (process, url,
    resident bytes of the server and its worker)."""
    config = work / f"models-{len(bases)}.config"
    write_config(config, bases)
    log = open(work / f"serve-{len(bases)}.log", "w")
    process, url = start_server(None, ["--model_config_file", str(config)], log)
    for _ in range(requests):
        for name in bases:
            post(f"{url}/v1/models/{name}:predict", {"instances": SENTENCES})
    time.sleep(1)
    return process, url, tree_resident_bytes(process.pid)


def stop(process):
    process.terminate()
    process.wait(60)


def one_load_seconds(bases):
    """Seconds for a fresh worker to load and warm up every model's version 1."""
    from app.serving.worker_process import WorkerProcess

    start = time.monotonic()
    worker = WorkerProcess([(name, 1, str(Path(base) / "1")) for name, base in bases.items()])
    seconds = time.monotonic() - start
    worker.close()
    return seconds


def outage_after_kill(process, url, clients):
    """Kills the worker while `clients` threads per model loop on requests; returns
    ({model: seconds from the kill to its first answer}, failures by kind)."""
    stop_event, lock = threading.Event(), threading.Lock()
    killed_at, recovered, failures = [None], {}, {}

    def client(name):
        while not stop_event.is_set():
            try:
                post(f"{url}/v1/models/{name}:predict", {"instances": SENTENCES[:1]}, timeout=120)
                with lock:
                    if killed_at[0] is not None and name not in recovered:
                        recovered[name] = time.monotonic() - killed_at[0]
            except urllib.error.HTTPError as error:
                kind = f"HTTP {error.code}" + (" with Retry-After" if error.headers.get("Retry-After") else "")
                with lock:
                    failures[kind] = failures.get(kind, 0) + 1
                time.sleep(float(error.headers.get("Retry-After") or 0.1) / 10)
            except (urllib.error.URLError, OSError) as error:
                with lock:
                    failures[type(error).__name__] = failures.get(type(error).__name__, 0) + 1

    threads = [threading.Thread(target=client, args=(name,), daemon=True) for name in NAMES for _ in range(clients)]
    for thread in threads:
        thread.start()
    time.sleep(2)
    (worker,) = _children_by_parent().get(process.pid, [])
    with lock:
        killed_at[0] = time.monotonic()
    os.kill(worker, signal.SIGKILL)
    deadline = time.monotonic() + 600
    while len(recovered) < len(NAMES) and time.monotonic() < deadline:
        time.sleep(0.05)
    stop_event.set()
    for thread in threads:
        thread.join(120)
    return recovered, failures


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--export", help="one exported version directory (saved_model.pb or model.bin)")
    source.add_argument("--tiny", action="store_true", help="train and export the tests' tiny model first")
    parser.add_argument(
        "--clients", type=int_at_least(1), default=2, help="threads per model sending requests in step 3 (default 2)"
    )
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    work = Path(tempfile.mkdtemp(prefix="models-"))
    export = args.export or str(Path(export_tiny(work)) / "1")
    bases = {}
    for name in NAMES:
        bases[name] = str(work / name)
        shutil.copytree(export, work / name / "1")
    process, _, one = served_memory(work, {NAMES[0]: bases[NAMES[0]]})
    stop(process)
    print(f"one model:  {one / 2**30:.2f} GiB (server and worker)", flush=True)
    process, url, two = served_memory(work, bases)
    print(f"two models: {two / 2**30:.2f} GiB, {two / one:.2f}x one model", flush=True)
    try:
        recovered, failures = outage_after_kill(process, url, args.clients)
    finally:
        stop(process)
    load = one_load_seconds(bases)
    outage = max(recovered.values(), default=float("nan"))
    print(f"worker killed: answered again after {', '.join(f'{n} {s:.1f} s' for n, s in recovered.items())}; "
          f"one load of both models in a fresh worker {load:.1f} s; outage / load {outage / load:.2f}", flush=True)
    print(f"requests that failed meanwhile: {failures or 'none'}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
