"""Data at WMT scale: preparation time, peak memory and input rate, today's pipeline against the streaming one.

    python benchmarks/bench_data_scale.py                                  # 1M, 4.5M, 36M pairs (+ Multi30k)
    python benchmarks/bench_data_scale.py --pairs 1M --baseline-up-to 1M --keep
    python benchmarks/bench_data_scale.py --pairs 2000 --baseline-up-to 0 --train-steps 0 --read-seconds 1

Writes synthetic en-de corpora of Multi30k sentences with a WMT-like length distribution
(`write_corpus`: 1-3 sentences a line, a few lines joined far past max_length, a few empty
pairs) into --cache-dir, once: a later run reuses them. Then, for Multi30k (the reference
row) and each size, and for two pipelines: the working tree's, and today's (a `git worktree`
of --baseline-revision, run only up to --baseline-up-to pairs; above it the table says
"not run" or, where the growth measured would exceed this machine's memory, "does not fit"),
it measures in fresh processes:

- the preparation: `python -m app.prepare` where the tree has it, else `prepare_data` in
  a child process (today's pipeline prepares in memory), its wall time, its CPU time and the
  train split's tokens (source + target, markers included) per CPU second: tokens/s per core;
- the peak memory of the preparation and of a short training run (`python train.py --size
  tiny --train-steps N --time-budget 0 --no-bleu`), each the larger of the biggest process's
  peak RSS (os.wait4) and the sum of PSS over the command's process tree, sampled every
  0.2 s (worker pools), with the anonymous part of that sum in parentheses (the rest is
  mostly memory-mapped files: page cache); and the growth per pair against the Multi30k row
  of the same pipeline;
- the input pipeline alone (`train_batches`, no model) for --read-seconds after a warm-up:
  non-padding target tokens per CPU second of the reading process, against the rate that 8
  GPUs need at the base model's measured step speed (`TARGET_TOKENS_PER_GPU`, from
  docs/results.md): how many such cores that rate takes.

The machine's load (1-minute average, sampled while a row's commands ran) is printed with
every row: on a shared machine the times depend on it. What it made (corpora, model
directories with shards, the worktree) is removed at the end unless --keep; corpora it found
in the cache stay.
"""

import argparse
import dataclasses
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from app.cli.flag_types import float_at_least, int_at_least, name_list  # noqa: E402

MULTI30K_DIR = os.path.join(ROOT, "data", "multi30k")
MULTI30K_TRAIN_PAIRS = 29_000
# Non-padding target tokens per second of the base model's training step on one H100 in
# mixed bfloat16 (docs/results.md, benchmarks/gpu/train_jax.py time-base).
TARGET_TOKENS_PER_GPU = 573_000
GPUS = 8

# --- The synthetic corpus -------------------------------------------------------------
# Lines per chunk: each chunk draws from its own generator seeded by (seed, chunk), so a
# corpus is the same whatever else is written, and a smaller one is a prefix of a larger one.
CHUNK_PAIRS = 1 << 16
# Sentences per line: mostly one, as in WMT14's news and Europarl lines; Multi30k's short
# captions joined 1-3 at a time give lines about as long as WMT14's on average.
JOIN_COUNTS = (1, 2, 3)
JOIN_PROBABILITIES = (0.45, 0.35, 0.20)
# A few very long lines (crawled paragraphs): 12-40 sentences, around and far past the
# default max_length of 256 ids, which the preparation must drop and count.
LONG_FRACTION = 0.002
LONG_SENTENCES = (12, 40)
# A few pairs with an empty side (source, target or both), which it must drop and count.
EMPTY_FRACTION = 0.001
# For the disk check: bytes of text per pair (both sides), with room to spare.
BYTES_PER_PAIR_ESTIMATE = 300
# Shards of token ids, both sides, for the disk check (int32 ids at ~35 ids a side).
SHARD_BYTES_PER_PAIR_ESTIMATE = 300
SOURCE_LANG, TARGET_LANG = "en", "de"
PIPELINES = ("tree", "baseline")
# Tiny's vocabulary, given to every command: the preparation, the reader and training must agree
# on it, or the streaming pipeline would prepare again.
VOCAB_SIZE = 8000


def read_multi30k_sentences(lang: str) -> List[str]:
    """Multi30k train's sentences in `lang`, stripped: 29,000 strings, aligned across languages."""
    with gzip.open(os.path.join(MULTI30K_DIR, f"train.{lang}.gz"), "rt", encoding="utf-8") as file:
        return [line.strip() for line in file]


@dataclasses.dataclass(frozen=True)
class ChunkPlan:
    """Which sentences make each line of one chunk; both sides are built from the same plan,
    so line i of the source translates line i of the target."""

    sentences: np.ndarray  # int64 [pairs, 3]: sentence indices, the first `counts[i]` used
    counts: np.ndarray  # int64 [pairs]: sentences joined on line i (1-3, or 12-40 if long)
    long_sentences: np.ndarray  # int64 [pairs, 40]: sentence indices of the long lines
    empty: np.ndarray  # int64 [pairs]: -1 none, 0 empty source, 1 empty target, 2 both


def plan_chunk(seed: int, chunk: int, num_sentences: int) -> ChunkPlan:
    """The plan of chunk `chunk` (CHUNK_PAIRS lines) of the corpus of `seed`."""
    rng = np.random.default_rng([seed, chunk])
    counts = rng.choice(JOIN_COUNTS, size=CHUNK_PAIRS, p=JOIN_PROBABILITIES)
    sentences = rng.integers(0, num_sentences, size=(CHUNK_PAIRS, max(JOIN_COUNTS)))
    is_long = rng.random(CHUNK_PAIRS) < LONG_FRACTION
    long_counts = rng.integers(LONG_SENTENCES[0], LONG_SENTENCES[1] + 1, size=CHUNK_PAIRS)
    counts = np.where(is_long, long_counts, counts)
    long_sentences = np.zeros((CHUNK_PAIRS, LONG_SENTENCES[1]), dtype=np.int64)
    long_sentences[is_long] = rng.integers(0, num_sentences, size=(int(is_long.sum()), LONG_SENTENCES[1]))
    is_empty = rng.random(CHUNK_PAIRS) < EMPTY_FRACTION
    empty = np.where(is_empty, rng.integers(0, 3, size=CHUNK_PAIRS), -1)
    return ChunkPlan(sentences=sentences, counts=counts, long_sentences=long_sentences, empty=empty)


def chunk_lines(plan: ChunkPlan, sentences: Sequence[str], side: int) -> List[str]:
    """One side's lines of a chunk (side 0 source, 1 target), without line ends."""
    table = np.asarray(sentences, dtype=object)
    lines = np.empty(len(plan.counts), dtype=object)
    # Joined per count, in C loops: a Python loop per line would take minutes at 36M pairs.
    for count in JOIN_COUNTS:
        rows = plan.counts == count
        columns = [table[plan.sentences[rows, k]] for k in range(count)]
        lines[rows] = list(map(" ".join, zip(*columns))) if count > 1 else columns[0]
    for row in np.flatnonzero(plan.counts > max(JOIN_COUNTS)):
        lines[row] = " ".join(table[plan.long_sentences[row, : plan.counts[row]]])
    lines[(plan.empty == side) | (plan.empty == 2)] = ""
    return lines.tolist()


def corpus_name(pairs: int, seed: int) -> str:
    return f"pairs-{pairs}-seed-{seed}"


def write_corpus(directory: str, pairs: int, seed: int = 0) -> Dict[str, str]:
    """Writes `pairs` synthetic en-de pairs as DIRECTORY/train.en and train.de, streamed a
    chunk at a time, unless they are there already.

    The two files appear together or not at all: they are written into a hidden
    temporary directory, renamed into place when complete; leftovers of an interrupted run
    are removed first.

    Returns:
        {"en": path, "de": path}.
    """
    target = os.path.join(directory, corpus_name(pairs, seed))
    paths = {lang: os.path.join(target, f"train.{lang}") for lang in (SOURCE_LANG, TARGET_LANG)}
    if os.path.isdir(target):
        return paths
    os.makedirs(directory, exist_ok=True)
    prefix = f".{corpus_name(pairs, seed)}."
    for name in os.listdir(directory):
        if name.startswith(prefix) and name.endswith(".partial"):
            shutil.rmtree(os.path.join(directory, name), ignore_errors=True)
    temporary = tempfile.mkdtemp(dir=directory, prefix=prefix, suffix=".partial")
    try:
        sides = [read_multi30k_sentences(SOURCE_LANG), read_multi30k_sentences(TARGET_LANG)]
        files = [open(os.path.join(temporary, os.path.basename(paths[lang])), "w", encoding="utf-8")
                 for lang in (SOURCE_LANG, TARGET_LANG)]
        try:
            for chunk in range(-(-pairs // CHUNK_PAIRS)):
                plan = plan_chunk(seed, chunk, len(sides[0]))
                lines_left = pairs - chunk * CHUNK_PAIRS
                for side, file in enumerate(files):
                    lines = chunk_lines(plan, sides[side], side)[:lines_left]
                    file.write("\n".join(lines) + "\n")
            for file in files:
                file.flush()
                os.fsync(file.fileno())
        finally:
            for file in files:
                file.close()
        os.chmod(temporary, 0o755)  # mkdtemp's 0700 would hide the corpus from other users.
        os.rename(temporary, target)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    return paths


def check_free_disk(directory: str, needed: int) -> None:
    """Exits naming the directory and both amounts when less than `needed` bytes are free."""
    os.makedirs(directory, exist_ok=True)
    free = shutil.disk_usage(directory).free
    if free < needed:
        raise SystemExit(
            f"bench_data_scale: not enough free disk in {directory}: the corpora and shards need about "
            f"{needed / 1e9:.1f} GB, {free / 1e9:.1f} GB are free; free some, pick another --cache-dir, "
            "or ask for fewer --pairs"
        )


# --- Measuring a command ----------------------------------------------------------------
@dataclasses.dataclass
class Measured:
    """What one finished command cost."""

    wall_s: float
    cpu_s: float  # user + system, its waited-for children included
    max_rss: int  # bytes: the peak RSS of its largest process (os.wait4)
    tree_pss: int  # bytes: the largest sampled sum of PSS over its process tree
    tree_anonymous: int  # bytes: the largest sampled sum of anonymous PSS over it (0: unknown)
    loads: List[float]  # 1-minute load averages sampled while it ran
    output: str

    @property
    def peak(self) -> int:
        return max(self.max_rss, self.tree_pss)


def _children_of() -> Dict[int, List[int]]:
    children: Dict[int, List[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as file:
                stat = file.read()
        except OSError:
            continue
        # The command name, in parentheses, may hold spaces: fields count from its end.
        parent = int(stat[stat.rindex(b")") + 2:].split()[1])
        children.setdefault(parent, []).append(int(name))
    return children


def _tree_memory(pid: int) -> Tuple[int, int]:
    """Bytes over `pid` and its descendants: (the sum of PSS, RSS where PSS is unreadable;
    the sum of anonymous PSS, 0 where unreadable).

    The two differ by file-backed pages, such as memory-mapped shards once read: page cache
    the kernel can drop, so a corpus that grows them costs less than it seems.
    """
    children, total, anonymous, stack = _children_of(), 0, 0, [pid]
    while stack:
        process = stack.pop()
        stack.extend(children.get(process, ()))
        try:
            with open(f"/proc/{process}/smaps_rollup") as file:
                fields = dict(line.split(":", 1) for line in file if ":" in line)
            total += int(fields["Pss"].split()[0]) * 1024
            anonymous += int(fields.get("Pss_Anon", "0").split()[0]) * 1024
        except (OSError, KeyError, ValueError):
            try:
                with open(f"/proc/{process}/statm") as file:
                    total += int(file.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            except OSError:
                pass
    return total, anonymous


def run_measured(command: List[str], cwd: str, log_path: str) -> Measured:
    """Runs `command` in `cwd`, output to `log_path`, and measures it; exits with the log's
    tail if it fails."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    # Unbuffered, so that a long preparation's progress lines can be followed in its log.
    env.update(TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")
    with open(log_path, "w") as log:
        start = time.perf_counter()
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
        peak, loads, done = [0, 0], [], threading.Event()

        def sample():
            while not done.wait(0.2):
                peak[:] = map(max, peak, _tree_memory(process.pid))
                loads.append(os.getloadavg()[0])

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
        done.set()
        sampler.join()
        process.returncode = os.waitstatus_to_exitcode(status)
    with open(log_path) as log:
        output = log.read()
    if process.returncode != 0:
        tail = "\n".join(output.splitlines()[-30:])
        raise SystemExit(f"bench_data_scale: {' '.join(command)} (in {cwd}) exited {process.returncode}:\n{tail}")
    return Measured(
        wall_s=wall,
        cpu_s=usage.ru_utime + usage.ru_stime,
        max_rss=usage.ru_maxrss * 1024,
        tree_pss=peak[0],
        tree_anonymous=peak[1],
        loads=loads or [os.getloadavg()[0]],
        output=output,
    )


# Run in a fresh process with the revision's root as the working directory, so that `data`
# is that revision's. Prepares (or loads what is prepared) and reads batches alone.
_CHILD = r"""
import json, os, resource, sys, time
sys.path.insert(0, os.getcwd())
import numpy as np
from data import DataConfig, prepare_data
args = json.loads(sys.argv[1])

def cpu(who):
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime

def train_token_count(data):
    lengths = getattr(data, "train_lengths", None)
    if callable(lengths):
        source, target = lengths()
    else:
        source, target = data.tokens["train"].lengths()
    return int(np.sum(source, dtype=np.int64) + np.sum(target, dtype=np.int64)), len(source)

config = DataConfig(dataset=args["dataset"], batch_tokens=args["batch_tokens"], vocab_size=args["vocab_size"])
cpu_start, start = cpu(resource.RUSAGE_SELF) + cpu(resource.RUSAGE_CHILDREN), time.perf_counter()
data = prepare_data(config, args["model_dir"])
result = {
    "prepare_wall_s": time.perf_counter() - start,
    "prepare_cpu_s": cpu(resource.RUSAGE_SELF) + cpu(resource.RUSAGE_CHILDREN) - cpu_start,
    "prepare_max_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
}
result["tokens"], result["train_pairs"] = train_token_count(data)
epoch, batches = 0, iter(data.train_batches(0, seed=0))

def next_batch():
    global epoch, batches
    try:
        return next(batches)
    except StopIteration:
        epoch += 1
        batches = iter(data.train_batches(epoch, seed=0))
        return next(batches)

for _ in range(args["warmup_batches"]):
    next_batch()
count = target_tokens = source_tokens = 0
cpu_start, start = cpu(resource.RUSAGE_SELF), time.perf_counter()
while time.perf_counter() - start < args["read_seconds"]:
    source, target = next_batch()
    target_tokens += int(np.count_nonzero(target.numpy()))
    source_tokens += int(np.count_nonzero(source.numpy()))
    count += 1
result.update(
    read_wall_s=time.perf_counter() - start, read_cpu_s=cpu(resource.RUSAGE_SELF) - cpu_start,
    read_batches=count, read_target_tokens=target_tokens, read_source_tokens=source_tokens,
)
# Freed here, not while the interpreter finalizes: an older revision's pipeline has no
# exit hook, and its iterator would hang the exit (data/pipeline.py).
del batches
print("RESULT " + json.dumps(result))
"""


def child_result(measured: Measured) -> dict:
    lines = [line for line in measured.output.splitlines() if line.startswith("RESULT ")]
    return json.loads(lines[-1].removeprefix("RESULT "))


# --- One row: one corpus, one pipeline --------------------------------------------------
@dataclasses.dataclass
class Row:
    """One corpus under one pipeline; None where not measured."""

    corpus: str  # "multi30k" or "synthetic" (`write_corpus`)
    pairs: int  # pairs in the train file(s), empty and held-out ones included
    pipeline: str  # e.g. "working tree" or "0da3aed"
    note: Optional[str] = None  # "not run (...)" / "does not fit (...)" instead of figures
    prepare_wall_s: Optional[float] = None
    prepare_cpu_s: Optional[float] = None
    tokens: Optional[int] = None  # train split, source + target, markers included
    prepare_peak: Optional[int] = None  # bytes
    train_peak: Optional[int] = None  # bytes
    # Bytes of those peaks' anonymous memory (sampled; the rest is mostly mapped files).
    prepare_anonymous: Optional[int] = None
    train_anonymous: Optional[int] = None
    read_target_tokens_per_cpu_s: Optional[float] = None
    loads: List[float] = dataclasses.field(default_factory=list)


def row_slug(row: Row) -> str:
    """The name of the row's model directory and logs."""
    return re.sub(r"[^A-Za-z0-9]+", "-", f"{row.pipeline}-{row.corpus}-{row.pairs}").strip("-")


def measure_row(row: Row, revision_root: str, dataset: str, work: str, args) -> Row:
    """Fills `row` with the preparation, the read rate and the training run of `dataset`
    under the code at `revision_root`."""
    slug = row_slug(row)
    model_dir = os.path.join(work, slug)
    child_args = dict(dataset=dataset, model_dir=model_dir, batch_tokens=args.batch_tokens, vocab_size=VOCAB_SIZE,
                      read_seconds=args.read_seconds, warmup_batches=args.warmup_batches)
    child = [sys.executable, "-c", _CHILD, json.dumps(child_args)]
    if os.path.exists(os.path.join(revision_root, "app", "prepare.py")):
        command = [sys.executable, "-m", "app.prepare", "--dataset", dataset, "--model-dir", model_dir,
                   "--batch-tokens", str(args.batch_tokens), "--vocab-size", str(VOCAB_SIZE)]
        if args.workers:
            command += ["--workers", str(args.workers)]
        prepared = run_measured(command, revision_root, os.path.join(work, f"{slug}.prepare.log"))
        row.prepare_wall_s, row.prepare_cpu_s, row.prepare_peak = prepared.wall_s, prepared.cpu_s, prepared.peak
        row.prepare_anonymous = prepared.tree_anonymous or None
        row.loads += prepared.loads
        read = run_measured(child, revision_root, os.path.join(work, f"{slug}.read.log"))
        result = child_result(read)
    else:
        # Today's pipeline prepares in memory, in the process that reads: the child's figures.
        read = run_measured(child, revision_root, os.path.join(work, f"{slug}.read.log"))
        result = child_result(read)
        row.prepare_wall_s, row.prepare_cpu_s = result["prepare_wall_s"], result["prepare_cpu_s"]
        row.prepare_peak = result["prepare_max_rss"]
    row.loads += read.loads
    row.tokens = result["tokens"]
    if args.read_seconds > 0 and result["read_cpu_s"] > 0:
        row.read_target_tokens_per_cpu_s = result["read_target_tokens"] / result["read_cpu_s"]
    if args.train_steps > 0:
        command = [sys.executable, "train.py", "--size", "tiny", "--dataset", dataset, "--source-lang",
                   SOURCE_LANG, "--target-lang", TARGET_LANG, "--train-steps", str(args.train_steps),
                   "--vocab-size", str(VOCAB_SIZE), "--time-budget", "0", "--no-bleu", "--model-dir", model_dir]
        trained = run_measured(command, revision_root, os.path.join(work, f"{slug}.train.log"))
        row.train_peak = trained.peak
        row.train_anonymous = trained.tree_anonymous or None
        row.loads += trained.loads
    return row


# --- The table --------------------------------------------------------------------------
HEADERS = (
    "corpus", "pipeline", "prepare wall", "prepare CPU", "prepare tokens/s/core", "prepare peak",
    "training peak", "growth/pair prepare, training", "read target tokens/s/core",
    f"cores for {GPUS} GPUs", "load",
)


def _gb(value, anonymous=None):
    if value is None:
        return "-"
    return f"{value / 1e9:.2f} GB" + ("" if anonymous is None else f" ({anonymous / 1e9:.2f} anonymous)")


def _growth(value, reference, pairs, reference_pairs):
    if value is None or reference is None or pairs == reference_pairs:
        return "-"
    return f"{(value - reference) / (pairs - reference_pairs):,.0f} B"


def table_lines(rows: Sequence[Row]) -> List[str]:
    """The rows as a Markdown table; growth per pair is against the multi30k row of the same pipeline."""
    reference = {row.pipeline: row for row in rows if row.corpus == "multi30k" and row.note is None}
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + " --- |" * len(HEADERS)]
    for row in rows:
        name = f"multi30k ({row.pairs:,} pairs)" if row.corpus == "multi30k" else f"{row.pairs:,} pairs"
        if row.note is not None:
            cells = [name, row.pipeline, row.note] + ["-"] * (len(HEADERS) - 3)
        else:
            base = reference.get(row.pipeline)
            growth = ", ".join(
                _growth(getattr(row, field), base and getattr(base, field), row.pairs, base and base.pairs)
                for field in ("prepare_peak", "train_peak")
            )
            rate = row.read_target_tokens_per_cpu_s
            cells = [
                name,
                row.pipeline,
                f"{row.prepare_wall_s:,.1f} s",
                f"{row.prepare_cpu_s:,.1f} s",
                f"{row.tokens / row.prepare_cpu_s:,.0f}" if row.prepare_cpu_s else "-",
                _gb(row.prepare_peak, row.prepare_anonymous),
                _gb(row.train_peak, row.train_anonymous),
                growth if growth != "-, -" else "-",
                "-" if rate is None else f"{rate:,.0f}",
                "-" if rate is None else f"{GPUS * TARGET_TOKENS_PER_GPU / rate:.2f}",
                f"{np.mean(row.loads):.1f}" if row.loads else "-",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def not_run_note(pairs: int, rows: Sequence[Row], pipeline: str, memory: Optional[int] = None) -> str:
    """Why `pipeline` has no figures at `pairs`: the training peak that its growth between
    its smallest and largest measured rows predicts, and whether that fits `memory` bytes
    (default: this machine's)."""
    measured = sorted((row for row in rows if row.pipeline == pipeline and row.note is None and row.train_peak),
                      key=lambda row: row.pairs)
    if len(measured) < 2:
        return "not run"
    low, high = measured[0], measured[-1]
    per_pair = (high.train_peak - low.train_peak) / (high.pairs - low.pairs)
    estimate = high.train_peak + per_pair * (pairs - high.pairs)
    if memory is None:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if estimate > memory:
        return f"does not fit (about {estimate / 1e9:.0f} GB, {memory / 1e9:.0f} GB here)"
    return f"not run (about {estimate / 1e9:.1f} GB)"


# --- The command --------------------------------------------------------------------------
def pair_counts(text: str) -> List[int]:
    """The type of --pairs: comma-separated counts such as 2000, 100k, 4.5M (at least 100 each)."""
    counts = []
    for item in text.split(","):
        match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKM]?)", item.strip())
        value = None
        if match:
            value = float(match.group(1)) * {"": 1, "k": 1e3, "K": 1e3, "M": 1e6}[match.group(2)]
        if value is None or value != int(value):
            raise argparse.ArgumentTypeError(f"expected comma-separated counts like 2000, 100k, 4.5M; got {item!r}")
        if value < 100:
            raise argparse.ArgumentTypeError(f"each must be at least 100 pairs, got {item}")
        counts.append(int(value))
    return counts


def pair_count_or_zero(text: str) -> int:
    return 0 if text.strip() == "0" else pair_counts(text)[0]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=pair_counts, default="1M,4.5M,36M", help="corpus sizes")
    parser.add_argument("--seed", type=int_at_least(0), default=0, help="the corpora's seed")
    parser.add_argument("--cache-dir", default=os.path.join(os.path.expanduser("~"), ".cache", "bench_data_scale"),
                        help="where corpora are written once and reused, and the runs' model directories")
    parser.add_argument("--baseline-revision", default="0da3aed", help="today's pipeline: a git revision")
    parser.add_argument("--baseline-up-to", type=pair_count_or_zero, default="1M",
                        help="run the baseline only up to this many pairs (0: not at all, not on Multi30k either)")
    parser.add_argument("--pipelines", type=name_list(PIPELINES, "pipeline"), default="tree,baseline",
                        help="tree: the working tree's pipeline; baseline: --baseline-revision's")
    parser.add_argument("--no-multi30k", action="store_true", help="leave out the Multi30k reference rows")
    parser.add_argument("--batch-tokens", type=int_at_least(256), default=25000,
                        help="tokens per batch while reading (the base model's)")
    parser.add_argument("--read-seconds", type=float_at_least(0), default=20.0, help="time to read batches")
    parser.add_argument("--warmup-batches", type=int_at_least(0), default=20, help="batches read before timing")
    parser.add_argument("--train-steps", type=int_at_least(0), default=10, help="steps of the training run (0: none)")
    parser.add_argument("--workers", type=int_at_least(1), default=None, help="app.prepare --workers")
    parser.add_argument("--keep", action="store_true", help="keep the corpora and model directories made")
    parser.add_argument("--corpora-only", action="store_true", help="write the corpora, measure nothing")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    cache = os.path.abspath(args.cache_dir)
    missing = [pairs for pairs in args.pairs if not os.path.isdir(os.path.join(cache, corpus_name(pairs, args.seed)))]
    shards = 0 if args.corpora_only else sum(args.pairs) * SHARD_BYTES_PER_PAIR_ESTIMATE
    check_free_disk(cache, sum(missing) * BYTES_PER_PAIR_ESTIMATE + shards)

    corpora = {}
    for pairs in args.pairs:
        start = time.perf_counter()
        corpora[pairs] = write_corpus(cache, pairs, args.seed)
        if pairs in missing:
            size = sum(os.path.getsize(path) for path in corpora[pairs].values())
            print(f"wrote {pairs:,} pairs ({size / 1e9:.2f} GB) in {time.perf_counter() - start:.0f} s: "
                  f"{os.path.dirname(corpora[pairs]['en'])}", flush=True)
    if args.corpora_only:
        return

    work = tempfile.mkdtemp(dir=cache, prefix="runs-")
    # A vocabulary cache of this run's own (the streaming pipeline keeps one), so that every
    # preparation trains its vocabulary, as a first one does, and none is left in ~/.cache.
    os.environ["TRANSFORMER_VOCAB_CACHE"] = os.path.join(work, "vocabularies")
    baseline = None
    try:
        if "baseline" in args.pipelines and args.baseline_up_to > 0:
            baseline = os.path.join(work, "baseline")
            subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", baseline, args.baseline_revision],
                           check=True, capture_output=True)
        pipelines = [("working tree", ROOT, None)] if "tree" in args.pipelines else []
        if baseline:
            pipelines.append((args.baseline_revision, baseline, args.baseline_up_to))
        print(f"{os.cpu_count()} cores; reading at {args.batch_tokens} tokens a batch for {args.read_seconds:g} s; "
              f"training tiny for {args.train_steps} steps", flush=True)

        rows = []
        sizes = ([("multi30k", MULTI30K_TRAIN_PAIRS, "multi30k")] if not args.no_multi30k else []) + [
            ("synthetic", pairs, f"files:{corpora[pairs]['en']},{corpora[pairs]['de']}") for pairs in args.pairs
        ]
        for corpus, pairs, dataset in sizes:
            for name, root, up_to in pipelines:
                row = Row(corpus=corpus, pairs=pairs, pipeline=name)
                if up_to is not None and corpus != "multi30k" and pairs > up_to:
                    row.note = not_run_note(pairs, rows, name)
                else:
                    measure_row(row, root, dataset, work, args)
                    if not args.keep:
                        shutil.rmtree(os.path.join(work, row_slug(row)), ignore_errors=True)
                rows.append(row)
                # Each row as soon as it is measured: a long run cut short keeps what it measured.
                print(f"measured {json.dumps(dataclasses.asdict(row))}", flush=True)
        print("\n".join(table_lines(rows)))
    finally:
        if baseline:
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", baseline], capture_output=True)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
            for pairs in missing:
                shutil.rmtree(os.path.join(cache, corpus_name(pairs, args.seed)), ignore_errors=True)
        else:
            print(f"kept: {work}")


if __name__ == "__main__":
    main()
