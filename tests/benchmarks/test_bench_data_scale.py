"""benchmarks/bench_data_scale.py: the synthetic corpus (deterministic, aligned, a prefix of
any larger one), its flags, the table, and one run end to end on 2,000 pairs."""

import os
import re
import subprocess
import sys

import pytest

from benchmarks import bench_data_scale as bench

SENTENCES = {lang: bench.read_multi30k_sentences(lang) for lang in ("en", "de")}


def read(path):
    with open(path, encoding="utf-8") as file:
        return file.read()


def expected_line(plan, row, lang):
    """Line `row` built one by one from the plan: the reference for the vectorized writer."""
    side = 0 if lang == "en" else 1
    if plan.empty[row] in (side, 2):
        return ""
    count = plan.counts[row]
    indices = plan.sentences[row, :count] if count <= 3 else plan.long_sentences[row, :count]
    return " ".join(SENTENCES[lang][index] for index in indices)


def test_the_corpus_is_aligned_and_the_same_for_a_seed(tmp_path):
    paths = bench.write_corpus(str(tmp_path / "a"), 2000, seed=0)
    assert paths == {lang: str(tmp_path / "a" / "pairs-2000-seed-0" / f"train.{lang}") for lang in ("en", "de")}
    plan = bench.plan_chunk(0, 0, len(SENTENCES["en"]))
    for lang, path in paths.items():
        assert read(path) == "".join(expected_line(plan, row, lang) + "\n" for row in range(2000))
    # Written again, with this seed: the same bytes; a smaller corpus is its first lines.
    again = bench.write_corpus(str(tmp_path / "b"), 2000, seed=0)
    smaller = bench.write_corpus(str(tmp_path / "c"), 1000, seed=0)
    other_seed = bench.write_corpus(str(tmp_path / "d"), 2000, seed=1)
    for lang in ("en", "de"):
        assert read(again[lang]) == read(paths[lang])
        assert read(smaller[lang]).splitlines() == read(paths[lang]).splitlines()[:1000]
        assert read(other_seed[lang]) != read(paths[lang])
    # No temporary directory is left beside the corpus.
    assert os.listdir(tmp_path / "a") == ["pairs-2000-seed-0"]


def test_the_corpus_spans_a_chunk_boundary_without_a_seam(tmp_path):
    pairs = bench.CHUNK_PAIRS + 3
    paths = bench.write_corpus(str(tmp_path), pairs, seed=0)
    second = bench.plan_chunk(0, 1, len(SENTENCES["en"]))
    lines = read(paths["de"]).splitlines()
    assert len(lines) == pairs
    assert lines[-3:] == [expected_line(second, row, "de") for row in range(3)]


def test_a_chunk_mixes_lengths_like_wmt_with_long_and_empty_pairs():
    plan = bench.plan_chunk(0, 0, len(SENTENCES["en"]))
    counts = plan.counts.tolist()
    assert [counts.count(k) for k in (1, 2, 3)] == [29442, 22964, 12993]
    long_counts = [count for count in counts if count > 3]
    assert (len(long_counts), min(long_counts), max(long_counts)) == (137, 12, 40)
    empty = plan.empty.tolist()
    assert [empty.count(kind) for kind in (0, 1, 2)] == [33, 35, 27]


def test_an_existing_corpus_is_reused_and_an_interrupted_one_removed(tmp_path):
    leftover = tmp_path / ".pairs-2000-seed-0.x.partial"
    leftover.mkdir()
    paths = bench.write_corpus(str(tmp_path), 2000, seed=0)
    assert not leftover.exists()
    written = os.path.getmtime(paths["en"])
    assert bench.write_corpus(str(tmp_path), 2000, seed=0) == paths
    assert os.path.getmtime(paths["en"]) == written


def test_too_little_disk_fails_naming_both_amounts(tmp_path):
    with pytest.raises(SystemExit, match=r"not enough free disk in .*: the corpora and shards need about "
                                         r"1000000\.0 GB, [0-9.]+ GB are free"):
        bench.check_free_disk(str(tmp_path), 10**15)


@pytest.mark.parametrize("flags, message", [
    (["--pairs", "1M,4.5x"], "argument --pairs: expected comma-separated counts like 2000, 100k, 4.5M; got '4.5x'"),
    (["--pairs", "1.5k,50"], "argument --pairs: each must be at least 100 pairs, got 50"),
    (["--pairs", "0.1k5"], "argument --pairs: expected comma-separated counts like 2000, 100k, 4.5M; got '0.1k5'"),
    (["--pipelines", "tree,old"], "argument --pipelines: unknown pipeline(s) 'old'; known: tree, baseline"),
    (["--batch-tokens", "100"], "argument --batch-tokens: must be at least 256, got 100"),
])
def test_a_bad_flag_is_a_usage_error_naming_it(flags, message, capsys):
    with pytest.raises(SystemExit) as exit:
        bench.parse_args(flags)
    assert exit.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(f": error: {message}")


def test_sizes_parse_with_their_suffixes():
    args = bench.parse_args(["--pairs", "2000,100k,4.5M", "--baseline-up-to", "0"])
    assert (args.pairs, args.baseline_up_to) == ([2000, 100_000, 4_500_000], 0)
    assert bench.parse_args([]).pairs == [1_000_000, 4_500_000, 36_000_000]


def rows():
    tree = dict(pipeline="working tree", loads=[1.0, 2.0])
    return [
        bench.Row(corpus="multi30k", pairs=29_000, prepare_wall_s=10.0, prepare_cpu_s=8.0, tokens=2_000_000,
                  prepare_peak=800_000_000, train_peak=1_000_000_000, read_target_tokens_per_cpu_s=400_000.0,
                  **tree),
        bench.Row(corpus="synthetic", pairs=1_029_000, prepare_wall_s=100.0, prepare_cpu_s=160.0,
                  tokens=80_000_000, prepare_peak=820_000_000, train_peak=1_030_000_000, train_anonymous=604_000_000,
                  read_target_tokens_per_cpu_s=1_000_000.0, **tree),
        bench.Row(corpus="multi30k", pairs=29_000, pipeline="0da3aed", prepare_wall_s=9.0, prepare_cpu_s=9.0,
                  tokens=2_000_000, prepare_peak=900_000_000, train_peak=1_200_000_000, loads=[3.0]),
        bench.Row(corpus="synthetic", pairs=1_029_000, pipeline="0da3aed", prepare_wall_s=300.0,
                  prepare_cpu_s=250.0, tokens=80_000_000, prepare_peak=1_900_000_000, train_peak=2_300_000_000,
                  loads=[2.5]),
    ]


def test_the_table_gives_rates_growth_and_cores():
    table = rows() + [bench.Row(corpus="synthetic", pairs=36_000_000, pipeline="0da3aed", note="does not fit")]
    assert bench.table_lines(table) == [
        "| corpus | pipeline | prepare wall | prepare CPU | prepare tokens/s/core | prepare peak | training peak "
        "| growth/pair prepare, training | read target tokens/s/core | cores for 8 GPUs | load |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        "| multi30k (29,000 pairs) | working tree | 10.0 s | 8.0 s | 250,000 | 0.80 GB | 1.00 GB "
        "| - | 400,000 | 11.46 | 1.5 |",
        "| 1,029,000 pairs | working tree | 100.0 s | 160.0 s | 500,000 | 0.82 GB | 1.03 GB (0.60 anonymous) "
        "| 20 B, 30 B | 1,000,000 | 4.58 | 1.5 |",
        "| multi30k (29,000 pairs) | 0da3aed | 9.0 s | 9.0 s | 222,222 | 0.90 GB | 1.20 GB | - | - | - | 3.0 |",
        "| 1,029,000 pairs | 0da3aed | 300.0 s | 250.0 s | 320,000 | 1.90 GB | 2.30 GB "
        "| 1,000 B, 1,100 B | - | - | 2.5 |",
        "| 36,000,000 pairs | 0da3aed | does not fit | - | - | - | - | - | - | - | - |",
    ]


def test_a_size_not_run_says_what_its_growth_predicts():
    # 1,100 bytes a pair from 2.3 GB at 1,029,000 pairs: 6.1 GB at 4.5M, 40.8 GB at 36M.
    assert bench.not_run_note(4_500_000, rows(), "0da3aed", memory=24 * 10**9) == "not run (about 6.1 GB)"
    assert (bench.not_run_note(36_000_000, rows(), "0da3aed", memory=24 * 10**9)
            == "does not fit (about 41 GB, 24 GB here)")
    assert bench.not_run_note(36_000_000, rows()[:1], "working tree") == "not run"


@pytest.mark.slow
def test_a_run_end_to_end_prints_the_table_and_removes_what_it_made(tmp_path):
    # The working tree's pipeline on 2,000 pairs, without the training run and the baseline:
    # the only test that starts the preparation and reading processes.
    command = [sys.executable, os.path.join(bench.ROOT, "benchmarks", "bench_data_scale.py"), "--pairs", "2000",
               "--cache-dir", str(tmp_path), "--pipelines", "tree", "--no-multi30k", "--train-steps", "0",
               "--read-seconds", "0.5", "--warmup-batches", "1", "--batch-tokens", "1024"]
    output = subprocess.run(command, capture_output=True, text=True, check=True, timeout=300).stdout.splitlines()
    assert output[-3:-1] == bench.table_lines([])
    cells = [cell.strip() for cell in output[-1].strip("|").split("|")]
    assert cells[:2] == ["2,000 pairs", "working tree"]
    assert cells[6:8] == ["-", "-"]  # No training run, no Multi30k row to grow from.
    patterns = [r"[\d,]+\.\d s", r"[\d,]+\.\d s", r"[\d,]+", r"\d+\.\d\d GB \(\d+\.\d\d anonymous\)",
                r"[\d,]+", r"\d+\.\d\d", r"\d+\.\d"]
    assert [bool(re.fullmatch(p, c)) for p, c in zip(patterns, cells[2:6] + cells[8:])] == [True] * 7, cells
    assert os.listdir(tmp_path) == []
