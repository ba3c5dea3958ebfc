"""The local server left running: memory across hot reloads and failed loads, under load.

    python benchmarks/bench_serving_soak.py --tiny                      # exports a tiny model first
    python benchmarks/bench_serving_soak.py --export saved_models/translator/3 --reloads 20 --broken 10 \
        --label-moves 20

With `--in-process-loads N` it first loads and releases the version N times in one
process, as the server did before each version had a process of its own.

It copies one exported version into a base path of its own as version 1, starts
`python -m app.serve` on it (polling every 0.2 s, no wait between retries) and keeps
`--clients` threads sending requests of 1-3 sentences. Then, `--reloads` times, it exports
the next version the documented way (copied to `.tmp-N`, renamed to `N`) and waits until
that version is AVAILABLE and the previous one unloaded (in the worker that serves it, or
with a fresh worker where the old one held too much for unloaded versions); then it makes
`--broken` failed loads (a version whose saved_model.pb is garbage, retried
`--broken - 1` times). Then it serves the last two good versions (`specific`) labelled
stable and canary, with `--clients` more threads looping on each label, and `--label-moves`
times rewrites the model config file (which the server re-reads every 0.2 s) to swap the
labels, waiting until each label answers with its new version; their memory is compared
with that of the two versions labelled, before the first move. The server is started on
that config file (`--model_config_file`) throughout. After the first load and after each
step it prints the resident memory of the server and of its worker processes together,
and at the end the requests that failed (a reload must fail none) and the growth against
the first load.
"""

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_serving import ServerFailed, export_tiny, post, start_server  # noqa: E402
from app.cli.flag_types import int_at_least  # noqa: E402
from app.serving.worker_process import resident_bytes  # noqa: E402

SENTENCES = ["A man rides a bike.", "Two dogs play in the snow.", "A woman reads a book on a bench."]


def tree_resident_bytes(pid):
    """Resident memory of `pid` and all its descendants, in bytes."""
    total, pending = 0, [pid]
    children = _children_by_parent()
    while pending:
        current = pending.pop()
        total += resident_bytes(current)
        pending.extend(children.get(current, []))
    return total


def _children_by_parent():
    children = {}
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        children.setdefault(parent, []).append(int(name))
    return children


def status(url, model):
    with urllib.request.urlopen(f"{url}/v1/models/{model}", timeout=30) as response:
        return {int(s["version"]): s for s in json.loads(response.read())["model_version_status"]}


def wait_for(condition, what, seconds=600):
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise ServerFailed(f"waited {seconds} s for {what}")
        time.sleep(0.2)


def place(export, base, version, broken=False):
    """Copies `export` in as `version`, the documented way: into .tmp-N, then renamed."""
    temporary = base / f".tmp-{version}"
    shutil.copytree(export, temporary)
    if broken:
        (temporary / "saved_model.pb").write_bytes(b"not a SavedModel")
    os.rename(temporary, base / str(version))


# Why versions run in processes of their own: one process loading a version and dropping
# it again, with every function it added removed from the eager context and malloc trimmed.
IN_PROCESS = """
import ctypes, gc, sys
from tensorflow.python.eager import context
from app.serving.models import LoadedVersion

def resident_gib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 2**20

print(f"in one process, before loading: {resident_gib():.2f} GiB", flush=True)
for load in range(1, int(sys.argv[2]) + 1):
    before = set(context.context().list_function_names())
    version = LoadedVersion(load, sys.argv[1])
    version.warm_up()
    del version
    gc.collect()
    for name in set(context.context().list_function_names()) - before:
        context.context().remove_function(name)
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    print(f"in one process, after load {load} and its release: {resident_gib():.2f} GiB", flush=True)
"""


def in_process_loads(export, loads):
    """Runs IN_PROCESS in a Python of its own; its lines go to standard output."""
    import subprocess

    subprocess.run([sys.executable, "-c", IN_PROCESS, export, str(loads)], cwd=ROOT, check=True,
                   env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT)})


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--export", help="one exported version directory (saved_model.pb or model.bin)")
    source.add_argument("--tiny", action="store_true", help="train and export the tests' tiny model first")
    parser.add_argument("--reloads", type=int_at_least(0), default=20, help="new versions to switch to (default 20)")
    parser.add_argument(
        "--broken", type=int_at_least(0), default=10, help="failed loads of a broken version (default 10)"
    )
    parser.add_argument(
        "--label-moves", type=int_at_least(0), default=20,
        help="config reloads that swap the labels stable and canary between two versions (default 20)",
    )
    parser.add_argument(
        "--clients", type=int_at_least(1), default=2, help="threads sending requests throughout (default 2)"
    )
    parser.add_argument("--server-flags", default="", help="more flags for python -m app.serve")
    parser.add_argument(
        "--in-process-loads", type=int_at_least(0), default=0,
        help="first load and release the version this many times in one process, as the server did before "
        "each version had a process of its own (default 0: not)",
    )
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="soak-"))
    export = args.export or str(Path(export_tiny(work)) / "1")
    if args.in_process_loads:
        in_process_loads(export, args.in_process_loads)
    base = work / "served"
    base.mkdir()
    place(export, base, 1)
    config = work / "models.config"
    write_config(config, base)
    flags = ["--model_config_file", str(config), "--model_config_file_poll_wait_seconds", "0.2",
             "--file_system_poll_wait_seconds", "0.2", "--load_retry_interval_micros", "0",
             "--max_num_load_retries", str(max(args.broken - 1, 0)), *args.server_flags.split()]
    log = open(work / "serve.log", "w")
    process, url = start_server(None, flags, log)
    stop, failures, answered = threading.Event(), [], [0]

    threads = []

    def client(path):
        while not stop.is_set():
            try:
                if len(post(url + path, {"instances": SENTENCES[: 1 + answered[0] % 3]})["predictions"]) < 1:
                    failures.append("no predictions")
                answered[0] += 1
            except (urllib.error.URLError, OSError, ValueError, KeyError) as error:
                failures.append(f"{path}: {error!r}")

    def start_clients(path="/v1/models/translator:predict"):
        """`--clients` more threads sending requests to `path` until the end."""
        for _ in range(args.clients):
            threads.append(threading.Thread(target=client, args=(path,), daemon=True))
            threads[-1].start()

    start_clients()
    try:
        time.sleep(2)
        first = tree_resident_bytes(process.pid)
        server = resident_bytes(process.pid)
        print(f"after the first load: {first / 2**30:.2f} GiB (server {server / 2**30:.2f} GiB)", flush=True)
        version = 1
        for _ in range(args.reloads):
            version += 1
            start = time.monotonic()
            place(export, base, version)
            wait_for(lambda v=version: status(url, "translator").get(v, {}).get("state") == "AVAILABLE",
                     f"version {version}")
            wait_for(lambda v=version: status(url, "translator").get(v - 1, {}).get("state") == "END",
                     f"version {version - 1} to be unloaded", 60)
            memory = tree_resident_bytes(process.pid)
            print(f"reload to version {version} in {time.monotonic() - start:.1f} s: {memory / 2**30:.2f} GiB "
                  f"({memory / first - 1:+.1%}), failed requests so far {len(failures)}", flush=True)
        version += 1
        if args.broken:
            place(export, base, version, broken=True)
            wait_for(lambda: status(url, "translator").get(version, {}).get("state") == "END"
                     and _failed_loads(work / "serve.log", version) >= args.broken, f"{args.broken} failed loads")
            memory = tree_resident_bytes(process.pid)
            print(f"after {args.broken} failed loads of version {version}: {memory / 2**30:.2f} GiB "
                  f"({memory / first - 1:+.1%})", flush=True)
        if args.label_moves:
            good = version - 1 if args.broken else version
            if good < 2:  # labels move between two versions
                place(export, base, good + 1)
                good += 1
            # Two versions served from here on: memory is compared with theirs, once labelled.
            served = Served(url, process, failures, start_clients)
            first = move_labels(args, served, config, base, (good - 1, good), first)
        stop.set()
        for thread in threads:
            thread.join(60)
        final = tree_resident_bytes(process.pid)
        print(f"answered {answered[0]} requests, failed {len(failures)}; memory {first / 2**30:.2f} -> "
              f"{final / 2**30:.2f} GiB ({final / first - 1:+.1%} against the first load of the same versions)")
        for failure in failures[:5]:
            print("  failed:", failure)
    finally:
        stop.set()
        process.terminate()
        process.wait(60)
        log.close()
    shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


def write_config(path, base, versions=None, labels=None):
    """The model config file of the served model: the newest version (TF Serving's default
    policy), or `versions` (specific) labelled as `labels` ({label: version})."""
    lines = ['model_config_list {', '  config {', '    name: "translator"', f'    base_path: "{base}"',
             '    model_platform: "tensorflow"']
    if versions:
        lines.append("    model_version_policy { specific { " + " ".join(f"versions: {v}" for v in versions) + " } }")
    for label, version in (labels or {}).items():
        lines.append(f'    version_labels {{ key: "{label}" value: {version} }}')
    temporary = Path(f"{path}.tmp")
    temporary.write_text("\n".join(lines + ["  }", "}", ""]), encoding="utf-8")
    os.replace(temporary, path)  # whole, as the server may read it any moment


def labelled_version(url, label, model="translator"):
    """The version `label` of `model` names, from its metadata (a status names every
    version, as TF Serving's does whatever the label)."""
    try:
        with urllib.request.urlopen(f"{url}/v1/models/{model}/labels/{label}/metadata", timeout=30) as response:
            return int(json.loads(response.read())["model_spec"]["version"])
    except urllib.error.HTTPError:
        return None


@dataclasses.dataclass(frozen=True)
class Served:
    """The server under soak: its URL and process, the failed requests so far, and
    `start_clients(path)`, which starts `--clients` more threads on `path`."""

    url: str
    process: object
    failures: list
    start_clients: object


def move_labels(args, served, config, base, versions, first):
    """Serves `versions` labelled stable and canary, with clients on each label, then swaps
    the labels `args.label_moves` times by rewriting the config file. Returns the memory
    of the two versions served, the measure of the moves' growth (`first`: one version's)."""
    url, process, failures = served.url, served.process, served.failures
    older, newer = versions
    labels = {"stable": older, "canary": newer}
    # The versions first, then their labels, as TF Serving takes them: a label may name only
    # a version already available.
    write_config(config, base, versions)
    wait_for(lambda: all(status(url, "translator").get(v, {}).get("state") == "AVAILABLE" for v in versions),
             "both versions")
    write_config(config, base, versions, labels)
    wait_for(lambda: all(labelled_version(url, label) == v for label, v in labels.items()), "the labels")
    time.sleep(2)
    labelled = tree_resident_bytes(process.pid)
    print(f"versions {older} and {newer} served, labelled stable and canary: {labelled / 2**30:.2f} GiB, "
          f"{labelled / first:.2f}x one version", flush=True)
    for label in labels:
        served.start_clients(f"/v1/models/translator/labels/{label}:predict")
    for move in range(1, args.label_moves + 1):
        labels = {"stable": labels["canary"], "canary": labels["stable"]}
        start = time.monotonic()
        write_config(config, base, versions, labels)
        wait_for(lambda: all(labelled_version(url, label) == v for label, v in labels.items()), f"label move {move}")
        memory = tree_resident_bytes(process.pid)
        print(f"label move {move} (stable -> {labels['stable']}, canary -> {labels['canary']}) in "
              f"{time.monotonic() - start:.1f} s: {memory / 2**30:.2f} GiB ({memory / labelled - 1:+.1%}), "
              f"failed requests so far {len(failures)}", flush=True)
    return labelled


def _failed_loads(log_path, version):
    with open(log_path, encoding="utf-8", errors="replace") as f:
        return sum(f"version {version} failed to load" in line for line in f)


if __name__ == "__main__":
    sys.exit(main())
