"""Small requests beside large ones: how long a one-sentence request waits behind 64.

    python benchmarks/bench_serving_fairness.py --tiny
    python benchmarks/bench_serving_fairness.py --model_base_path saved_models/translator \
        --roots /path/to/older/checkout,.          # the same export behind two servers' code

For each checkout in `--roots` (default: this one) it starts that checkout's
`python -m app.serve` on the export, keeps `--large-clients` threads sending requests of
64 long sentences (about 1,000 characters each, the default --max_text_length) one after
another, and meanwhile one client sends `--small` one-sentence requests, one at a time.
It prints the small requests' p50 and p99 latency and the large requests' sentences per
second: with large requests served a batch at a time, a small one waits for about one
batch, not for a whole large request.
"""

import argparse
import concurrent.futures
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_serving import export_tiny, post, start_server  # noqa: E402

SMALL = "A man rides a bike."
# About 1,000 characters: sentences of a long document, joined.
LONG = " ".join(["Two dogs play in the snow while a child in a red coat watches them from the fence."] * 12)[:990]


def label(root):
    """The checkout's commit, and whether it has changes."""
    commit = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True)
    return commit.stdout.strip() + (" + working tree" if dirty.stdout.strip() else "")


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def measure(url, args):
    endpoint = f"{url}/v1/models/translator:predict"
    stop = threading.Event()
    large_sentences = [0]

    def large_client():
        while not stop.is_set():
            post(endpoint, {"instances": [f"{i}. {LONG}" for i in range(args.large_size)]})
            large_sentences[0] += args.large_size

    post(endpoint, {"instances": [SMALL]})  # warm
    with concurrent.futures.ThreadPoolExecutor(args.large_clients) as pool:
        started = time.perf_counter()
        running = [pool.submit(large_client) for _ in range(args.large_clients)]
        time.sleep(1.0)  # the large requests under way
        latencies = []
        for _ in range(args.small):
            begin = time.perf_counter()
            post(endpoint, {"instances": [SMALL]})
            latencies.append(time.perf_counter() - begin)
        stop.set()
        for future in running:
            future.result()
        wall = time.perf_counter() - started
    return latencies, large_sentences[0] / wall


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model_base_path", help="a base path of exported versions")
    source.add_argument("--tiny", action="store_true", help="train and export the tests' tiny model first")
    parser.add_argument("--roots", default=str(ROOT), help="checkouts whose server to measure, comma-separated")
    parser.add_argument("--small", type=int, default=30, help="one-sentence requests to time (default 30)")
    parser.add_argument("--large-clients", type=int, default=1, help="clients sending large requests (default 1)")
    parser.add_argument("--large-size", type=int, default=64, help="sentences per large request (default 64)")
    parser.add_argument("--server-flags", default="", help="more flags for python -m app.serve")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="fairness-"))
    base = args.model_base_path or export_tiny(work)
    print(f"{args.large_clients} client(s) sending {args.large_size} sentences of {len(LONG) + 4} characters, "
          f"one client timing {args.small} one-sentence requests")
    print("| server | small p50 | small p99 | large sentences/s |\n| --- | --- | --- | --- |")
    for root in args.roots.split(","):
        root = str(Path(root).resolve())
        with open(work / "serve.log", "w") as log:
            process, url = start_server(base, args.server_flags.split(), log, root=root)
            try:
                latencies, rate = measure(url, args)
            finally:
                process.terminate()
                process.wait(120)
        print(f"| {label(root)} | {percentile(latencies, 0.5):.2f} s | {percentile(latencies, 0.99):.2f} s "
              f"| {rate:.1f} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
