"""The preflight's estimate against the run it estimates: both made with the same flags,
the run timed start to finish.

    python benchmarks/bench_preflight_estimate.py                  # both cases below
    python benchmarks/bench_preflight_estimate.py --case readme    # the README's five-minute run only

Cases:
    readme   the README's five-minute run: tiny on Multi30k, 300 steps, one CPU,
             `--time-budget 0 --precision float32`
    base     `--size base` over 2 CPU replicas at `--batch-tokens 1024`, 300 steps, as
             benchmarks/bench_base_recipe.py trains it (1M synthetic pairs of WMT-like lengths)

For each: `python -m app.prepare` (not timed: the estimate is of a prepared corpus), then
`python -m app.preflight` with the run's flags (its estimate line read back), then
`python train.py` with the same flags, timed from its start to its exit. Prints each
case's estimate, its range, the run's wall time and their ratio.
"""

import argparse
import os
import re
import shutil
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.bench_data_scale import run_measured, write_corpus  # noqa: E402

README_RUN = ["--train-steps", "300", "--eval-every", "300", "--time-budget", "0", "--precision", "float32"]
BASE_RUN = [
    "--size", "base", "--cpu-replicas", "2", "--steps-per-loop", "10", "--batch-tokens", "1024", "--train-steps",
    "300", "--checkpoint-every", "50", "--keep-checkpoints", "5", "--log-every", "10", "--eval-every", "100",
    "--eval-sentences", "50", "--time-budget", "0", "--precision", "float32", "--seed", "1",
]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", choices=("readme", "base", "both"), default="both")
    parser.add_argument("--cache-dir", default=os.path.join(os.path.expanduser("~"), ".cache", "bench_data_scale"),
                        help="where the synthetic corpus is kept between runs")
    parser.add_argument("--work", default="/tmp/bench-preflight-estimate", help="model directories and logs")
    return parser.parse_args(argv)


def seconds_of(duration):
    """`app.training.rehearsal.format_duration`'s text back in seconds: "1 h 05 min", "7 min 30 s", "42 s"."""
    hours = re.fullmatch(r"(\d+) h (\d+) min", duration)
    if hours:
        return int(hours.group(1)) * 3600 + int(hours.group(2)) * 60
    minutes = re.fullmatch(r"(\d+) min (\d+) s", duration)
    if minutes:
        return int(minutes.group(1)) * 60 + int(minutes.group(2))
    return int(re.fullmatch(r"(\d+) s", duration).group(1))


def read_estimate(output):
    """`(seconds, low, high, the estimate line)` from the preflight's output."""
    line = next(text for text in output.splitlines() if text.startswith("estimate: "))
    found = re.match(r"estimate: (.+?) \((.+?) to (.+?)\) for", line)
    return (*(seconds_of(part) for part in found.groups()), line)


def run_case(name, flags, prepare_flags, work, say):
    model_dir = os.path.join(work, name)
    shutil.rmtree(model_dir, ignore_errors=True)
    where = ["--model-dir", model_dir]
    run_measured([sys.executable, "-m", "app.prepare", *prepare_flags, *where], ROOT,
                 os.path.join(work, f"{name}-prepare.log"))
    preflight = [sys.executable, "-m", "app.preflight", *flags, *where]
    measured = run_measured(preflight, ROOT, os.path.join(work, f"{name}-preflight.log"))
    estimate, low, high, line = read_estimate(measured.output)
    say(f"$ {' '.join(preflight[1:])}")
    say(f"  {line}")
    say(f"  the preflight itself: {measured.wall_s:.0f} s")
    train = [sys.executable, "train.py", *flags, *where]
    started = time.perf_counter()
    run_measured(train, ROOT, os.path.join(work, f"{name}-train.log"))
    wall = time.perf_counter() - started
    say(f"$ {' '.join(train[1:])}")
    say(f"{name}: estimate {estimate} s ({low} to {high} s), the run {wall:.0f} s start to finish: "
        f"estimate / run = {estimate / wall:.3f}; the run {'inside' if low <= wall <= high else 'outside'} the range")


def main(argv=None):
    args = parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    say = lambda line: print(line, flush=True)  # noqa: E731
    if args.case in ("readme", "both"):
        run_case("readme", README_RUN, [], args.work, say)
    if args.case in ("base", "both"):
        corpus = write_corpus(args.cache_dir, 1_000_000)
        dataset = ["--dataset", f"files:{corpus['en']},{corpus['de']}"]
        run_case("base", [*BASE_RUN, *dataset], ["--size", "base", *dataset], args.work, say)
    return 0


if __name__ == "__main__":
    sys.exit(main())
