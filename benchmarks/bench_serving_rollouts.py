"""Canary rollouts of one model of three, as TF Serving takes them: loads, memory, failures, time.

    python benchmarks/bench_serving_rollouts.py --tiny                  # exports a tiny model first
    python benchmarks/bench_serving_rollouts.py --export saved_models/translator/3 --rollouts 20

It serves one exported version as three models (en-de, en-fr, de-en) from a model config
file that `python -m app.serve` re-applies every 0.2 s, with a client thread on each model
and one on en-de's `stable` label throughout. Then, `--rollouts` times, it rolls en-de out
to a new version in the steps docs/serving.md gives (TF Serving takes a label only for a
version already loaded): the version's directory appears (copied to .tmp-N, renamed to N);
the config serves N-1 and N; once N is AVAILABLE, `canary` -> N; then `stable` -> N; then
N alone. For each rollout it prints how many versions the server loaded (its log's "is
loading" lines, and the versions a fresh worker took, if one did), the memory of the server
and its worker after it, and the seconds from the directory appearing to `canary` answering
with N; at the end the requests that failed (goal: 0) and the memory against the first.
"""

import argparse
import re
import sys
import tempfile
import threading
import time
import urllib.error
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_serving import export_tiny, post, start_server  # noqa: E402
from benchmarks.bench_serving_soak import (  # noqa: E402
    labelled_version, place, status, tree_resident_bytes, wait_for)
from app.cli.flag_types import int_at_least  # noqa: E402

MODELS = ("en-de", "en-fr", "de-en")
ROLLED = "en-de"


def write_config(path, bases, versions, labels):
    """The config of the three models: `ROLLED` serving `versions` (specific) labelled as
    `labels` ({label: version}), the others their newest version."""
    lines = ["model_config_list {"]
    for name in MODELS:
        lines += ["  config {", f'    name: "{name}"', f'    base_path: "{bases[name]}"',
                  '    model_platform: "tensorflow"']
        if name == ROLLED:
            lines.append("    model_version_policy { specific { " + " ".join(f"versions: {v}" for v in versions)
                         + " } }")
            lines += [f'    version_labels {{ key: "{label}" value: {version} }}' for label, version in labels.items()]
        lines.append("  }")
    temporary = Path(f"{path}.tmp")
    temporary.write_text("\n".join(lines + ["}", ""]), encoding="utf-8")
    temporary.replace(path)  # whole: the server may read it any moment


def log_counts(log_path):
    """(versions loaded, versions a fresh worker took) so far, from the server's log."""
    with open(log_path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    moved = sum(int(n) for n in re.findall(r"moving (\d+) versions to a fresh worker", text))
    return text.count(" is loading"), moved


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--export", help="one exported version directory (saved_model.pb or model.bin)")
    source.add_argument("--tiny", action="store_true", help="train and export the tests' tiny model first")
    parser.add_argument("--rollouts", type=int_at_least(1), default=20, help="canary rollouts of en-de (default 20)")
    parser.add_argument("--server-flags", default="", help="more flags for python -m app.serve")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="rollouts-"))
    export = args.export or str(Path(export_tiny(work)) / "1")
    bases = {name: work / name for name in MODELS}
    for base in bases.values():
        base.mkdir()
        place(export, base, 1)
    config = work / "models.config"
    write_config(config, bases, [1], {})
    flags = ["--model_config_file", str(config), "--model_config_file_poll_wait_seconds", "0.2",
             "--file_system_poll_wait_seconds", "0.2", *args.server_flags.split()]
    log_path = work / "serve.log"
    log = open(log_path, "w")
    process, url = start_server(None, flags, log)
    stop, failures, answered = threading.Event(), [], [0]

    def client(path):
        while not stop.is_set():
            try:
                post(url + path, {"instances": ["A man rides a bike."]})
                answered[0] += 1
            except (urllib.error.URLError, OSError, ValueError, KeyError) as error:
                failures.append(f"{path}: {error!r}")
            time.sleep(0.02)

    try:
        write_config(config, bases, [1], {"stable": 1})
        wait_for(lambda: labelled_version(url, "stable", ROLLED) == 1, "stable -> 1")
        paths = [f"/v1/models/{name}:predict" for name in MODELS] + [f"/v1/models/{ROLLED}/labels/stable:predict"]
        clients = [threading.Thread(target=client, args=(path,), daemon=True) for path in paths]
        for thread in clients:
            thread.start()
        time.sleep(2)
        first = tree_resident_bytes(process.pid)
        print(f"three models served, one version each: {first / 2**30:.2f} GiB (server and worker)", flush=True)
        times = []
        for version in range(2, args.rollouts + 2):
            loads_before, moved_before = log_counts(log_path)
            started = time.monotonic()
            place(export, bases[ROLLED], version)
            old = version - 1
            write_config(config, bases, [old, version], {"stable": old})
            wait_for(lambda v=version: status(url, ROLLED).get(v, {}).get("state") == "AVAILABLE", f"version {version}")
            write_config(config, bases, [old, version], {"stable": old, "canary": version})
            wait_for(lambda v=version: labelled_version(url, "canary", ROLLED) == v, f"canary -> {version}")
            to_canary = time.monotonic() - started
            times.append(to_canary)
            write_config(config, bases, [old, version], {"stable": version, "canary": version})
            wait_for(lambda v=version: labelled_version(url, "stable", ROLLED) == v, f"stable -> {version}")
            write_config(config, bases, [version], {"stable": version})
            wait_for(lambda v=old: status(url, ROLLED).get(v, {}).get("state") == "END", f"version {old} unloaded")
            time.sleep(0.5)
            loads, moved = log_counts(log_path)
            memory = tree_resident_bytes(process.pid)
            print(f"rollout to version {version}: {loads - loads_before} load(s), {moved - moved_before} moved to a "
                  f"fresh worker; {to_canary:.1f} s from its directory to canary answering; "
                  f"{memory / 2**30:.2f} GiB ({memory / first - 1:+.1%}); failed requests so far {len(failures)}",
                  flush=True)
        stop.set()
        for thread in clients:
            thread.join(60)
        last = tree_resident_bytes(process.pid)
    finally:
        stop.set()
        process.terminate()
        process.wait(60)
        log.close()
    for failure in failures[:10]:
        print(f"  failed: {failure}")
    print(f"answered {answered[0]} requests, failed {len(failures)}; directory to canary "
          f"{min(times):.1f}-{max(times):.1f} s (median {sorted(times)[len(times) // 2]:.1f}); memory "
          f"{first / 2**30:.2f} -> {last / 2**30:.2f} GiB ({last / first - 1:+.1%})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
