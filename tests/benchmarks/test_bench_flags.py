"""The benchmarks' count, size and list flags fail when parsed: a usage error (status 2) that
names the flag and the bad value, before a model is built or data prepared."""

import importlib

import pytest

SIZES = "known: tiny, small, base, big"

CASES = {
    "bench_decoding": [
        (["--repeats", "0"], "argument --repeats: must be at least 1, got 0"),
        (["--source-length", "0"], "argument --source-length: must be at least 1, got 0"),
        (["--batch-sizes", "1,0"], "argument --batch-sizes: each must be at least 1, got 0"),
        (["--batch-sizes", "1,"], "argument --batch-sizes: expected comma-separated whole numbers, got '1,'"),
        (["--sizes", "tiny,tny"], f"argument --sizes: unknown size(s) 'tny'; {SIZES}"),
        (["--beam-size", "0"], "argument --beam-size: must be at least 1, got 0"),
        (["--alpha", "-1"], "argument --alpha: must be a finite number of at least 0, got -1"),
        (["--vocab-size", "4"], "argument --vocab-size: must be at least 5, got 4"),
        (["--max-extra-length", "-1"], "argument --max-extra-length: must be at least 0, got -1"),
    ],
    "bench_vs_keras_hub_decoding": [
        (["--sizes", "tny"], f"argument --sizes: unknown size(s) 'tny'; {SIZES}"),
        (["--batch-sizes", "0"], "argument --batch-sizes: each must be at least 1, got 0"),
        (["--repeats", "0"], "argument --repeats: must be at least 1, got 0"),
        (["--beam-size", "0"], "argument --beam-size: must be at least 1, got 0"),
        (["--alpha", "inf"], "argument --alpha: must be a finite number of at least 0, got inf"),
    ],
    "bench_vs_keras_hub_training": [
        (["--sizes", "tny"], f"argument --sizes: unknown size(s) 'tny'; {SIZES}"),
        (["--steps", "0"], "argument --steps: must be at least 1, got 0"),
        (["--warmup-steps", "1"], "argument --warmup-steps: must be at least 2, got 1"),
        (["--rounds", "0"], "argument --rounds: must be at least 1, got 0"),
        (["--steps", "3", "--rounds", "4"], "--steps 3 is fewer than --rounds 4: each round times at least one step"),
        (["--batch-tokens", "0"], "argument --batch-tokens: must be at least 1, got 0"),
        (["--batch-tokens", "100"], "argument --batch-tokens: batch_tokens 100 cannot hold one row of max_length 256"),
    ],
    "bench_step_parts": [
        (["--tokens", "0"], "argument --tokens: must be at least 1, got 0"),
        (["--tokens", "33"], "--tokens must be a multiple of 32 (rows of 32 tokens), got 33"),
        (["--vocab", "1"], "argument --vocab: must be at least 2, got 1"),
        (["--d-model", "0"], "argument --d-model: must be at least 1, got 0"),
        (["--d-ff", "0"], "argument --d-ff: must be at least 1, got 0"),
        (["--iterations", "0"], "argument --iterations: must be at least 1, got 0"),
        (["--repeats", "0"], "argument --repeats: must be at least 1, got 0"),
    ],
    "bench_data_pipeline": [
        (["--batch-tokens", "0"], "argument --batch-tokens: must be at least 1, got 0"),
        (["--batch-tokens", "200"], "argument --batch-tokens: batch_tokens 200 cannot hold one row of max_length 256"),
        (["--epochs", "-1"], "argument --epochs: must be at least 0, got -1"),
    ],
}


@pytest.mark.parametrize(
    "script, flags, message",
    [(script, flags, message) for script, cases in CASES.items() for flags, message in cases],
)
def test_a_bad_flag_is_a_usage_error_naming_it(script, flags, message, capsys):
    module = importlib.import_module(f"benchmarks.{script}")
    with pytest.raises(SystemExit) as exit:
        module.parse_args(flags)
    assert exit.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(f": error: {message}")


@pytest.mark.parametrize("script", list(CASES))
def test_the_defaults_parse(script):
    importlib.import_module(f"benchmarks.{script}").parse_args([])


def test_lists_are_parsed_into_their_items():
    from benchmarks import bench_decoding

    args = bench_decoding.parse_args(["--sizes", "tiny,base", "--batch-sizes", "1,8,32"])
    assert (args.sizes, args.batch_sizes) == (["tiny", "base"], [1, 8, 32])
