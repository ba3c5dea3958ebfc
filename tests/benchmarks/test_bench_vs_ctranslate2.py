"""benchmarks/bench_vs_ctranslate2.py: its flags, and a tiny run of all three engines."""

import re

import pytest

pytest.importorskip("ctranslate2")


@pytest.mark.parametrize("flags, message", [
    (
        ["--engines", "savedmodel,onnx"],
        "--engines 'savedmodel,onnx': expected some of savedmodel, savedmodel-one-search, ctranslate2-float32",
    ),
    (["--reference", "ref.de"], "--reference goes with --file"),
    (["--batch-sizes", "0,32"], "argument --batch-sizes: each must be at least 1, got 0"),
    (["--split", "train"], "argument --split: invalid choice: 'train'"),
    (["--threads", "0"], "argument --threads: each must be at least 1, got 0"),
    (["--rounds", "0"], "argument --rounds: must be at least 1, got 0"),
    (["--chunk-sentences", "0"], "argument --chunk-sentences: must be at least 1, got 0"),
])
def test_a_bad_flag_is_refused_by_name(flags, message, capsys):
    from benchmarks.bench_vs_ctranslate2 import parse_args

    with pytest.raises(SystemExit):
        parse_args(flags)
    assert message in capsys.readouterr().err


def test_the_defaults_are_the_issues_comparison():
    from benchmarks.bench_vs_ctranslate2 import ENGINES, parse_args

    args = parse_args([])
    assert (args.split, args.batch_sizes, args.beam_size, args.alpha, args.threads, args.rounds) == (
        "test_2016_flickr", [1, 32], 4, 0.6, [1, 2], 3
    )
    assert args.engines == list(ENGINES)


@pytest.mark.slow
def test_a_tiny_run_times_every_engine_in_its_own_process_and_scores_it(model_dir, capsys):
    # Four engines in four processes, two of them loading TensorFlow: under a minute. The
    # script's own part (the exports, the table) runs here: its workers are the processes
    # the claim is about, and a process of its own would import TensorFlow once more.
    from benchmarks.bench_vs_ctranslate2 import main

    flags = [
        "--model-dir", model_dir, "--split", "validation", "--sentences", "3",
        "--batch-sizes", "2", "--threads", "1", "--alpha", "0", "--rounds", "1", "--one-thread-per-op",
    ]
    assert main(flags) == 0
    out = capsys.readouterr().out
    # engine, threads 1, batch 2, sent/s, tokens/s, ratio, its range, sacreBLEU
    row = r"^(savedmodel(?:-one-search)?|ctranslate2-\w+) +1 +2 +[\d.]+ +[\d,]+ +([\d.]+)x +[\d.]+-[\d.]+ +([\d.]+)"
    rows = {match[0]: match[1:] for match in re.findall(row, out, flags=re.M)}
    assert set(rows) == {"savedmodel", "savedmodel-one-search", "ctranslate2-float32", "ctranslate2-int8"}, out
    assert rows["ctranslate2-float32"][0] == "1.00"
    # With alpha 0 both float32 engines translate alike, so they score alike; and the
    # export's two searches (one sentence each at batch 2) translate as one search does.
    assert rows["savedmodel"][1] == rows["ctranslate2-float32"][1] == rows["savedmodel-one-search"][1]
    assert (
        "3 sentences (validation), beam 4, alpha 0.0, 1 threads per engine (the SavedModel: one per op, that many "
        "ops at once), each in its own process, 1 rounds"
    ) in out


def test_chunks_are_whole_batches_of_about_the_asked_size():
    from benchmarks.bench_vs_ctranslate2 import chunk_bounds

    assert chunk_bounds(10, 1, 4) == [(0, 4), (4, 8), (8, 10)]
    assert chunk_bounds(100, 32, 64) == [(0, 64), (64, 100)]
    assert chunk_bounds(100, 32, 10) == [(0, 32), (32, 64), (64, 96), (96, 100)]


def test_engines_take_turns_chunk_by_chunk_in_alternating_order(monkeypatch):
    import benchmarks.bench_vs_ctranslate2 as bench

    turns = []

    class FakeWorker:
        def __init__(self, engine, *rest):
            self.engine = engine
            self.process = type("Done", (), {"poll": lambda self: 0})()
            self.stderr = type("Closed", (), {"close": lambda self: None})()

        def time_chunk(self, first, last):
            turns.append((self.engine, first, last))
            return float(len(turns))

        def translations(self):
            return [self.engine]

    monkeypatch.setattr(bench, "Worker", FakeWorker)
    args = bench.parse_args(["--rounds", "2", "--chunk-sentences", "2", "--engines", "savedmodel,ctranslate2-float32"])
    paths = {"savedmodel": "sm", "ctranslate2-float32": "ct2"}
    seconds, translations = bench.time_by_turns(args.engines, paths, ["a", "b", "c"], 1, 1, args, "")
    assert turns == [
        ("savedmodel", 0, 2), ("ctranslate2-float32", 0, 2), ("ctranslate2-float32", 2, 3), ("savedmodel", 2, 3),
    ] * 2
    # Each round's seconds are the sum of its chunks'.
    assert seconds == {"savedmodel": [1.0 + 4.0, 5.0 + 8.0], "ctranslate2-float32": [2.0 + 3.0, 6.0 + 7.0]}
    assert translations == {"savedmodel": ["savedmodel"], "ctranslate2-float32": ["ctranslate2-float32"]}
