"""benchmarks/bench_vs_ctranslate2.py: its flags, and a tiny run of all three engines."""

import re
import subprocess
import sys

import pytest

from tests.tiny_run import ROOT

pytest.importorskip("ctranslate2")

SCRIPT = str(ROOT / "benchmarks" / "bench_vs_ctranslate2.py")


@pytest.mark.parametrize("flags, message", [
    (["--engines", "savedmodel,onnx"], "--engines 'savedmodel,onnx': expected some of savedmodel, ctranslate2-float32"),
    (["--reference", "ref.de"], "--reference goes with --file"),
    (["--batch-sizes", "0,32"], "argument --batch-sizes: each must be at least 1, got 0"),
    (["--split", "train"], "argument --split: invalid choice: 'train'"),
    (["--threads", "0"], "argument --threads: each must be at least 1, got 0"),
])
def test_a_bad_flag_is_refused_by_name(flags, message, capsys):
    from benchmarks.bench_vs_ctranslate2 import parse_args

    with pytest.raises(SystemExit):
        parse_args(flags)
    assert message in capsys.readouterr().err


def test_the_defaults_are_the_issues_comparison():
    from benchmarks.bench_vs_ctranslate2 import ENGINES, parse_args

    args = parse_args([])
    assert (args.split, args.batch_sizes, args.beam_size, args.alpha, args.threads) == (
        "test_2016_flickr", [1, 32], 4, 0.6, [1, 2]
    )
    assert args.engines == list(ENGINES)


def test_a_tiny_run_times_every_engine_in_its_own_process_and_scores_it(model_dir):
    # Three engines in three processes, one of them loading TensorFlow: about half a minute.
    command = [
        sys.executable, SCRIPT, "--model-dir", model_dir, "--split", "validation", "--sentences", "3",
        "--batch-sizes", "2", "--threads", "1", "--alpha", "0",
    ]
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    rows = {
        match[0]: match[1:]
        for match in re.findall(r"^(savedmodel|ctranslate2-\w+) +1 +2 +[\d.]+ +[\d.]+ +[\d,]+ +([\d.]+)x +([\d.]+)",
                                completed.stdout, flags=re.M)
    }
    assert set(rows) == {"savedmodel", "ctranslate2-float32", "ctranslate2-int8"}, completed.stdout
    assert rows["ctranslate2-float32"][0] == "1.00"
    # With alpha 0 both float32 engines translate alike, so they score alike.
    assert rows["savedmodel"][1] == rows["ctranslate2-float32"][1]
    assert "3 sentences (validation), beam 4, alpha 0.0, 1 threads per engine" in completed.stdout
