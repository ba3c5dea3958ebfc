"""`python train.py` as a user runs it: dry runs, flags, and starts that fail.

Most run the command's `main(argv)` in this process (`train_here`), from the repository
root as a user would; what sets process-wide state (TensorFlow's CPU thread pools, CPU
replicas) runs `python train.py` in a fresh process (`run_train`). What the flags plan,
without running anything, is in test_train_plan.py.
"""

import fcntl
import multiprocessing.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from app.commands.train import main

ROOT = Path(__file__).resolve().parents[2]


def run_train(*args):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.run(
        [sys.executable, "train.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.fixture
def train_here(capsys, monkeypatch):
    """`train_here(*args)`: what `run_train(*args)` returns (exit code, stdout, stderr), of
    the command run in this process, from the repository root."""
    monkeypatch.chdir(ROOT)

    def run(*args):
        capsys.readouterr()  # what came before
        try:
            code = main(list(args))
        except SystemExit as exited:  # argparse's refusal
            code = exited.code
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(["train.py", *args], code, out, err)

    return run


@pytest.mark.slow
def test_dry_run_prints_the_base_configuration_and_parameter_count(train_here):
    result = train_here("--size", "base", "--vocab-size", "37000", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "  d_model: 512" in result.stdout
    # 63.0M against the paper's 65M: embeddings 18.9M, encoder 18.9M, decoder 25.2M.
    assert "parameters: 63045632" in result.stdout.splitlines()


@pytest.mark.slow
def test_dry_run_of_the_default_shows_tiny_with_its_own_batch(train_here):
    result = train_here("--dry-run")
    assert result.returncode == 0, result.stderr
    assert "  d_model: 128" in result.stdout
    # Tiny's batch (app/training/recipes.py), not the paper's 25,000 tokens.
    assert "batches: 2,048 tokens per batch over 1 replica(s)" in result.stdout


@pytest.mark.slow
def test_dry_run_says_which_epochs_train_both_ways(train_here):
    result = train_here("--dry-run", "--bidirectional-fraction", "0.33")
    assert result.returncode == 0, result.stderr
    # 509 batches an epoch both ways; 0.33 of 16,000 steps holds 10 such epochs.
    assert (
        "bidirectional training: the first 10 epochs train (5,090 steps, 32% of the run) "
        "on en->de and de->en together, the rest on en->de"
    ) in result.stdout.splitlines()


def test_dry_run_with_a_bad_override_names_the_value_and_fails(train_here):
    result = train_here("--num-heads", "3", "--dry-run")
    assert result.returncode != 0
    assert "d_model=128 is not divisible by num_heads=3" in result.stderr


@pytest.fixture(scope="module")
def runs_on_two_replicas_then_one(tmp_path_factory):
    """`(first, resumed)`: `python train.py` for 2 steps on 2 CPU replicas, then resumed for a
    third on 1, both with `--intra-op-threads 1 --inter-op-threads 2`. Each sets process-wide
    state (the replicas, TensorFlow's thread pools), so each is a fresh process; the two tests
    that read them share them, as each start costs about 4 s of CPU before it trains."""
    from tests.training.test_multi_worker import TINY, write_corpus

    directory = tmp_path_factory.mktemp("replicas")
    flags = ["--dataset", write_corpus(directory), *TINY, "--model-dir", str(directory / "run"),
             "--intra-op-threads", "1", "--inter-op-threads", "2"]
    first = run_train(*flags, "--train-steps", "2", "--cpu-replicas", "2")
    assert first.returncode == 0, first.stderr[-3000:]
    return first, run_train(*flags, "--train-steps", "3", "--cpu-replicas", "1")


@pytest.mark.slow
def test_thread_flags_size_tensorflows_pools_before_it_starts(runs_on_two_replicas_then_one):
    for result in runs_on_two_replicas_then_one:
        assert result.returncode == 0, result.stderr[-3000:]
        assert "CPU threads: 1 per op, 2 ops at once" in result.stdout.splitlines()


def test_a_negative_thread_count_names_the_flag_and_fails(train_here):
    result = train_here("--intra-op-threads", "-1", "--dry-run")
    assert result.returncode == 2  # argparse's, before TensorFlow loads (tests/cli/test_commands.py)
    assert "error: argument --intra-op-threads: must be at least 0, got -1" in result.stderr


@pytest.mark.parametrize("flags", [["--max-positions", "16"], ["--max-length", "300"]])
def test_a_max_length_past_the_models_positions_is_refused_before_anything_is_written(flags, tmp_path, train_here):
    model_dir = tmp_path / "run"
    result = train_here(*flags, "--model-dir", str(model_dir))
    assert result.returncode == 1
    want = {"--max-positions": "--max-length 256 is longer than the model's 16 positions",
            "--max-length": "--max-length 300 is longer than the model's 256 positions"}[flags[0]]
    assert f"error: {want} (--max-positions): sentences that long could not be encoded" in result.stderr
    assert not model_dir.exists()


@pytest.mark.slow
def test_a_dry_run_leaves_no_vocabulary_behind(tmp_path, monkeypatch, train_here):
    # Every scratch directory goes to tmp_path. multiprocessing's own, made once per process
    # and kept until it ends, is made before.
    multiprocessing.util.get_temp_dir()
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = train_here("--dry-run", "--model-dir", str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr
    assert "batches: 2,048 tokens per batch" in result.stdout  # the data was prepared
    assert list(tmp_path.iterdir()) == []


def test_a_first_start_whose_data_fails_leaves_no_model_directory(tmp_path, train_here):
    source, target = tmp_path / "train.en", tmp_path / "train.de"
    source.write_text("a cat\nthe dog\n", encoding="utf-8")
    target.write_text("eine Katze\n", encoding="utf-8")
    model_dir = tmp_path / "run"
    result = train_here("--dataset", f"files:{source},{target}", "--model-dir", str(model_dir))
    assert result.returncode == 1
    assert f"{source} has 2 lines but {target} has 1" in result.stderr
    assert not model_dir.exists()


def test_a_directory_given_as_a_data_file_is_named_as_one(tmp_path, train_here):
    (tmp_path / "corpus").mkdir()
    target = tmp_path / "train.de"
    target.write_text("eine Katze\n", encoding="utf-8")
    result = train_here("--dataset", f"files:{tmp_path / 'corpus'},{target}", "--dry-run")
    assert result.returncode == 1
    assert f"error: {tmp_path / 'corpus'} is a directory, not a text file" in result.stderr


def test_a_failed_start_leaves_an_existing_model_directory_as_it_was(tmp_path, train_here):
    model_dir = tmp_path / "run"
    model_dir.mkdir()
    (model_dir / "notes.txt").write_text("mine", encoding="utf-8")
    result = train_here("--dataset", f"files:{tmp_path / 'missing.en'},{tmp_path / 'missing.de'}",
                       "--model-dir", str(model_dir))
    assert result.returncode == 1
    assert f"file not found: {tmp_path / 'missing.en'}" in result.stderr
    assert sorted(p.name for p in model_dir.iterdir()) == ["notes.txt"]


def test_a_vocabulary_too_small_for_the_corpus_characters_is_named_without_a_traceback(tmp_path, train_here):
    # 100 pairs whose source side has 300 distinct characters (CJK), more than 300 pieces hold.
    source, target = tmp_path / "train.zh", tmp_path / "train.en"
    source.write_text("".join("".join(chr(0x4E00 + 3 * i + k) for k in range(3)) + "\n" for i in range(100)))
    target.write_text("".join(f"sentence {i}\n" for i in range(100)))
    model_dir = tmp_path / "run"
    result = train_here("--dataset", f"files:{source},{target}", "--source-lang", "zh", "--target-lang", "en",
                       "--vocab-size", "300", "--model-dir", str(model_dir))
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        "error: vocab_size 300 is too small for the training text: the characters that make up 99.95% of it "
        "each need a piece, 573 pieces with the reserved and byte pieces; use a vocab_size of at least 573"
    )
    assert not model_dir.exists()


def test_a_second_run_in_a_model_directory_in_use_is_refused_before_writing_to_it(tmp_path, train_here):
    source, target = tmp_path / "train.en", tmp_path / "train.de"
    source.write_text("a cat\nthe dog\n", encoding="utf-8")
    target.write_text("eine Katze\nder Hund\n", encoding="utf-8")
    model_dir = tmp_path / "run"
    model_dir.mkdir()
    first_run = os.open(model_dir, os.O_RDONLY)
    fcntl.flock(first_run, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what the first run holds while it trains
    try:
        result = train_here(
            "--dataset", f"files:{source},{target}", "--train-steps", "1", "--model-dir", str(model_dir)
        )
    finally:
        os.close(first_run)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: another training run is using {model_dir}; wait for it to end, or give another --model-dir"
    )
    assert list(model_dir.iterdir()) == []


def test_a_model_directory_that_cannot_be_made_is_named_without_a_traceback(tmp_path, train_here):
    (tmp_path / "notes.txt").write_text("mine", encoding="utf-8")
    result = train_here("--train-steps", "1", "--model-dir", str(tmp_path / "notes.txt" / "run"))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: [Errno 20] Not a directory: '{tmp_path / 'notes.txt' / 'run'}'"
    )


@pytest.mark.slow
def test_resuming_on_another_replica_count_says_how_the_epoch_goes_on(runs_on_two_replicas_then_one):
    _, resumed = runs_on_two_replicas_then_one
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (
        "resuming with changed training settings: replicas: 2 -> 1, train_steps: 2 -> 3\n"
        "the step count and --batch-tokens carry on, but a batch's rows are a multiple of the replicas: the rest "
        "of the current epoch is cut into other batches than its first part (some of its pairs are trained on "
        "twice, others not at all)\n"
    ) in resumed.stdout
    assert "done: step 3" in resumed.stdout


def test_a_run_with_other_data_is_refused_before_its_data_is_read(tmp_path, train_here):
    # Reading and tokenizing a corpus takes minutes on WMT: a model directory holding a
    # run with another language pair is refused first (here the files do not even exist).
    import train
    from app.cli.flags import data_config_from_args, model_config_from_args
    from app.commands.train_plan import resolved_flags, train_config_from_args
    from app.model_dir.settings import save_settings

    model_dir = tmp_path / "run"
    model_dir.mkdir()
    dataset = f"files:{tmp_path / 'missing.en'},{tmp_path / 'missing.xx'}"
    earlier = resolved_flags(train.parse_args(["--dataset", dataset, "--target-lang", "fr", "--vocab-size", "600"]))
    assert earlier.batch_tokens == 2048
    # The tokenizer held fewer pieces than asked: that size is what settings.json keeps.
    save_settings(str(model_dir), model_config_from_args(earlier, vocab_size=512), data_config_from_args(earlier),
                  train_config_from_args(earlier), log=lambda line: None)
    settings = (model_dir / "settings.json").read_bytes()
    result = train_here("--dataset", dataset, "--target-lang", "de", "--vocab-size", "600",
                       "--model-dir", str(model_dir))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: {model_dir} holds a run with another data configuration (target_lang: 'fr' -> 'de'); "
        "use another --model-dir"
    )
    assert (model_dir / "settings.json").read_bytes() == settings
    # The same run resumed passes that check and fails only on its data.
    result = train_here("--dataset", dataset, "--target-lang", "fr", "--vocab-size", "600",
                       "--model-dir", str(model_dir))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == f"error: file not found: {tmp_path / 'missing.en'}"


def test_a_tfds_corpus_out_of_reach_fails_at_once_and_leaves_no_model_directory(tmp_path, monkeypatch, capsys):
    # In this process, so that no real download can start: the hosts are said unreachable.
    import tensorflow_datasets as tfds

    import data.corpora
    from app.commands.train import main

    monkeypatch.setattr(data.corpora, "unreachable_hosts", lambda urls: ["www.statmt.org:80"])
    monkeypatch.setattr(tfds.core.DatasetBuilder, "is_prepared", lambda self: False)
    model_dir = tmp_path / "run"
    assert main(["--dataset", "tfds:wmt14_translate/de-en", "--model-dir", str(model_dir)]) == 1
    error = capsys.readouterr().err
    assert "error: wmt14_translate/de-en is not prepared under " in error
    assert "cannot reach www.statmt.org:80 to download it (5 file(s): http://data.statmt.org/wmt19/" in error
    assert error.rstrip().endswith("or give the text as --dataset files:TRAIN_SRC,TRAIN_TGT,VALID_SRC,VALID_TGT")
    assert not model_dir.exists()
