"""`python train.py` as a user runs it, in a fresh process: dry runs, flags, and starts that fail."""

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_train(*args):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.run(
        [sys.executable, "train.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def test_dry_run_prints_the_base_configuration_and_parameter_count():
    result = run_train("--size", "base", "--vocab-size", "37000", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "  d_model: 512" in result.stdout
    # 63.0M against the paper's 65M: embeddings 18.9M, encoder 18.9M, decoder 25.2M.
    assert "parameters: 63045632" in result.stdout.splitlines()


def test_dry_run_of_the_default_shows_tiny_with_its_own_batch():
    result = run_train("--dry-run")
    assert result.returncode == 0, result.stderr
    assert "  d_model: 128" in result.stdout
    # Tiny's batch (app/training/recipes.py), not the paper's 25,000 tokens.
    assert "batches: 2,048 tokens per batch over 1 replica(s)" in result.stdout


def test_dry_run_says_which_epochs_train_both_ways():
    result = run_train("--dry-run", "--bidirectional-fraction", "0.33")
    assert result.returncode == 0, result.stderr
    # 509 batches an epoch both ways; 0.33 of 16,000 steps holds 10 such epochs.
    assert (
        "bidirectional training: the first 10 epochs train (5,090 steps, 32% of the run) "
        "on en->de and de->en together, the rest on en->de"
    ) in result.stdout.splitlines()


def test_dry_run_with_a_bad_override_names_the_value_and_fails():
    result = run_train("--num-heads", "3", "--dry-run")
    assert result.returncode != 0
    assert "d_model=128 is not divisible by num_heads=3" in result.stderr


def test_each_size_resolves_its_own_recipe_and_flags_override_it():
    import train
    from app.commands.train_plan import resolved_flags, train_config_from_args

    tiny = train_config_from_args(resolved_flags(train.parse_args([])))
    assert (tiny.train_steps, tiny.learning_rate_scale, tiny.cooldown_fraction) == (16000, 1.0, 0.2)
    assert tiny.eval_every == 2000
    # Checkpoints close together at the end of a short run, for --average-last 10.
    assert (tiny.checkpoint_every, tiny.keep_checkpoints) == (250, 10)
    base = train_config_from_args(resolved_flags(train.parse_args(["--size", "base"])))
    assert (base.train_steps, base.learning_rate_scale, base.checkpoint_every, base.keep_checkpoints) == (
        100_000, 1.0, 1000, 5)
    assert base.cooldown_fraction == 0.0  # the paper's schedule to the end
    assert base.eval_every == 1000
    assert tiny.weight_decay == 0.2  # AdamW on Multi30k (docs/lab-notebook/2026-11-21-en-de-what-was-tried.md)
    assert base.weight_decay == 0.0  # the paper's Adam
    flags = [
        "--checkpoint-every",
        "7",
        "--keep-checkpoints",
        "3",
        "--learning-rate-scale",
        "0.5",
        "--cooldown-fraction",
        "0",
    ]
    flags += ["--weight-decay", "0", "--eval-every", "0", "--bidirectional-fraction", "0.25"]
    overridden = train_config_from_args(resolved_flags(train.parse_args(flags)))
    assert (overridden.checkpoint_every, overridden.keep_checkpoints, overridden.learning_rate_scale) == (7, 3, 0.5)
    assert (overridden.cooldown_fraction, overridden.weight_decay, overridden.eval_every) == (0.0, 0.0, 0)
    assert (overridden.bidirectional_fraction, base.bidirectional_fraction) == (0.25, 0.0)


def test_each_size_names_the_checkpoints_export_averages_and_the_flag_overrides_it():
    import train
    from app.commands.train_plan import resolved_flags, train_config_from_args

    def average_last(*flags):
        return train_config_from_args(resolved_flags(train.parse_args(list(flags)))).average_last

    assert (average_last("--size", "base"), average_last("--size", "big")) == (5, 20)  # the paper's
    # tiny: its last 10 checkpoints, the cooldown's; small: the best by validation BLEU.
    assert (average_last(), average_last("--size", "small")) == (10, None)
    assert average_last("--average-last", "0") is None
    assert average_last("--size", "small", "--average-last", "10") == 10
    assert average_last("--size", "base", "--average-last", "0") is None
    # Fewer kept checkpoints shrink the size's choice; a choice asked for must fit.
    assert average_last("--size", "big", "--keep-checkpoints", "3") == 3
    assert average_last("--keep-checkpoints", "4") == 4
    with pytest.raises(ValueError, match=r"average_last must be between 1 and keep_checkpoints \(3\), got 4"):
        average_last("--keep-checkpoints", "3", "--average-last", "4")


def test_the_default_length_comes_with_a_time_budget_and_a_length_asked_for_without():

    import train
    from app.commands.train_plan import resolved_flags, train_config_from_args

    def budget(*flags):
        return train_config_from_args(resolved_flags(train.parse_args(list(flags)))).time_budget_minutes

    assert budget() == 58.0  # tiny's 16,000 steps, ended early on a slow machine
    assert budget("--train-steps", "20000") is None
    assert budget("--epochs", "3") is None
    assert budget("--train-steps", "20000", "--time-budget", "90") == 90.0
    assert budget("--time-budget", "0") is None
    assert budget("--size", "base") is None
    with pytest.raises(SystemExit):  # argparse's: "argument --time-budget: must be a finite number of at least 0"
        budget("--time-budget", "-5")


def test_a_table3_row_varies_the_base_model_and_no_flag_may_contradict_it():
    import train
    from app.cli.flags import model_config_from_args
    from app.commands.train_plan import resolved_flags

    def config(*flags):
        return model_config_from_args(resolved_flags(train.parse_args(list(flags))), vocab_size=100)

    assert config("--size", "base", "--variant", "E").positional == "learned"
    c4 = config("--size", "base", "--variant", "C4")
    assert (c4.d_model, c4.key_dim) == (256, 32)
    # A flag that agrees with the row, or sets what the row leaves alone, is taken.
    agreed = config("--size", "base", "--variant", "E", "--positional", "learned", "--dropout", "0.3")
    assert (agreed.positional, agreed.dropout) == ("learned", 0.3)
    with pytest.raises(ValueError) as error:
        config("--variant", "C4")  # tiny, by default
    assert str(error.value) == (
        "--variant C4 is a row of the paper's Table 3, which varies the base model (--d-model 256 --key-dim 32 "
        "on base); give --size base, or set the knobs for tiny with their own flags"
    )
    with pytest.raises(ValueError) as error:
        config("--size", "base", "--variant", "E", "--positional", "sinusoidal")
    assert str(error.value) == (
        "--positional sinusoidal contradicts --variant E (--positional learned); "
        "leave it out, or give the knobs without --variant"
    )


def test_label_smoothing_is_a_training_setting_that_table3_row_d_varies():
    import train
    from app.cli.flags import model_config_from_args
    from app.model.config import ModelConfig
    from app.commands.train_plan import resolved_flags, train_config_from_args

    def configs(*flags):
        args = resolved_flags(train.parse_args(list(flags)))
        return model_config_from_args(args, vocab_size=100), train_config_from_args(args).label_smoothing

    base = ModelConfig.from_size("base", vocab_size=100)
    assert configs("--size", "base") == (base, 0.1)  # the paper's, the recipe's
    assert configs()[1] == 0.1
    assert configs("--size", "base", "--variant", "D3") == (base, 0.0)  # the model as base's
    assert configs("--size", "base", "--variant", "D4") == (base, 0.2)
    assert configs("--size", "base", "--variant", "D4", "--label-smoothing", "0.2") == (base, 0.2)
    assert configs("--label-smoothing", "0.3")[1] == 0.3
    with pytest.raises(ValueError) as error:
        configs("--size", "base", "--variant", "D3", "--label-smoothing", "0.1")
    assert str(error.value) == (
        "--label-smoothing 0.1 contradicts --variant D3 (--label-smoothing 0.0); "
        "leave it out, or give the knobs without --variant"
    )
    with pytest.raises(ValueError, match=r"label_smoothing must be in \[0, 1\), got 1.0"):
        configs("--label-smoothing", "1")


def test_norm_placement_can_be_set_either_way_whatever_the_size_default():
    import train
    from app.cli.flags import model_config_from_args
    from app.commands.train_plan import resolved_flags

    def norm_first(*flags):
        return model_config_from_args(resolved_flags(train.parse_args(list(flags))), vocab_size=8000).norm_first

    assert norm_first() is True  # tiny: pre-norm
    assert norm_first("--no-norm-first") is False  # the paper's post-norm at tiny size
    assert norm_first("--size", "base") is False
    assert norm_first("--size", "base", "--norm-first") is True


def test_normalization_is_layer_norm_unless_scale_norm_is_asked_for(capsys):
    import train
    from app.cli.flags import model_config_from_args
    from app.commands.train_plan import resolved_flags

    def normalization(*flags):
        return model_config_from_args(resolved_flags(train.parse_args(list(flags))), vocab_size=8000).normalization

    assert normalization() == "layer"
    assert normalization("--size", "base") == "layer"
    assert normalization("--normalization", "scale") == "scale"
    with pytest.raises(SystemExit):
        train.parse_args(["--normalization", "rms"])
    assert "argument --normalization: invalid choice: 'rms' (choose from" in capsys.readouterr().err


def test_attention_biases_follow_the_size_and_can_be_set_either_way():
    import train
    from app.cli.flags import model_config_from_args
    from app.commands.train_plan import resolved_flags

    def attention_bias(*flags):
        return model_config_from_args(resolved_flags(train.parse_args(list(flags))), vocab_size=8000).attention_bias

    assert attention_bias() is True  # tiny: like the published Transformer-Tiny
    assert attention_bias("--no-attention-bias") is False
    assert attention_bias("--size", "base") is False  # the paper's W^Q, W^K, W^V and W^O have none
    assert attention_bias("--size", "small", "--attention-bias") is True


def test_the_three_dropouts_are_separate_flags_on_top_of_the_size():
    import train
    from app.cli.flags import model_config_from_args
    from app.commands.train_plan import resolved_flags

    def dropouts(*flags):
        config = model_config_from_args(resolved_flags(train.parse_args(list(flags))), vocab_size=8000)
        return config.dropout, config.attention_dropout, config.inner_dropout

    assert dropouts() == (0.2, 0.0, 0.0)  # tiny: P_drop 0.2, nothing on the weights or the ReLU
    assert dropouts("--inner-dropout", "0.1") == (0.2, 0.0, 0.1)
    assert dropouts("--attention-dropout", "0.1", "--dropout", "0.3") == (0.3, 0.1, 0.0)
    with pytest.raises(ValueError, match="inner_dropout must be in \\[0, 1\\), got 1.5"):
        dropouts("--inner-dropout", "1.5")


def test_thread_flags_size_tensorflows_pools_before_it_starts():
    result = run_train("--intra-op-threads", "1", "--inter-op-threads", "2", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "CPU threads: 1 per op, 2 ops at once" in result.stdout.splitlines()


def test_a_negative_thread_count_names_the_flag_and_fails():
    result = run_train("--intra-op-threads", "-1", "--dry-run")
    assert result.returncode == 2  # argparse's, before TensorFlow loads
    assert "error: argument --intra-op-threads: must be at least 0, got -1" in result.stderr


@pytest.mark.parametrize("flags", [["--max-positions", "16"], ["--max-length", "300"]])
def test_a_max_length_past_the_models_positions_is_refused_before_anything_is_written(flags, tmp_path):
    model_dir = tmp_path / "run"
    result = run_train(*flags, "--model-dir", str(model_dir))
    assert result.returncode == 1
    want = {"--max-positions": "--max-length 256 is longer than the model's 16 positions",
            "--max-length": "--max-length 300 is longer than the model's 256 positions"}[flags[0]]
    assert f"error: {want} (--max-positions): sentences that long could not be encoded" in result.stderr
    assert not model_dir.exists()


def test_a_dry_run_leaves_no_vocabulary_behind(tmp_path):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "TMPDIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "train.py", "--dry-run", "--model-dir", str(tmp_path / "run")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "batches: 2,048 tokens per batch" in result.stdout  # the data was prepared
    assert list(tmp_path.iterdir()) == []


def test_a_first_start_whose_data_fails_leaves_no_model_directory(tmp_path):
    source, target = tmp_path / "train.en", tmp_path / "train.de"
    source.write_text("a cat\nthe dog\n", encoding="utf-8")
    target.write_text("eine Katze\n", encoding="utf-8")
    model_dir = tmp_path / "run"
    result = run_train("--dataset", f"files:{source},{target}", "--model-dir", str(model_dir))
    assert result.returncode == 1
    assert f"{source} has 2 lines but {target} has 1" in result.stderr
    assert not model_dir.exists()


def test_a_directory_given_as_a_data_file_is_named_as_one(tmp_path):
    (tmp_path / "corpus").mkdir()
    target = tmp_path / "train.de"
    target.write_text("eine Katze\n", encoding="utf-8")
    result = run_train("--dataset", f"files:{tmp_path / 'corpus'},{target}", "--dry-run")
    assert result.returncode == 1
    assert f"error: {tmp_path / 'corpus'} is a directory, not a text file" in result.stderr


def test_a_failed_start_leaves_an_existing_model_directory_as_it_was(tmp_path):
    model_dir = tmp_path / "run"
    model_dir.mkdir()
    (model_dir / "notes.txt").write_text("mine", encoding="utf-8")
    result = run_train("--dataset", f"files:{tmp_path / 'missing.en'},{tmp_path / 'missing.de'}",
                       "--model-dir", str(model_dir))
    assert result.returncode == 1
    assert f"file not found: {tmp_path / 'missing.en'}" in result.stderr
    assert sorted(p.name for p in model_dir.iterdir()) == ["notes.txt"]


def test_a_vocabulary_too_small_for_the_corpus_characters_is_named_without_a_traceback(tmp_path):
    # 100 pairs whose source side has 300 distinct characters (CJK), more than 300 pieces hold.
    source, target = tmp_path / "train.zh", tmp_path / "train.en"
    source.write_text("".join("".join(chr(0x4E00 + 3 * i + k) for k in range(3)) + "\n" for i in range(100)))
    target.write_text("".join(f"sentence {i}\n" for i in range(100)))
    model_dir = tmp_path / "run"
    result = run_train("--dataset", f"files:{source},{target}", "--source-lang", "zh", "--target-lang", "en",
                       "--vocab-size", "300", "--model-dir", str(model_dir))
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        "error: vocab_size 300 is too small for the training text: the characters that make up 99.95% of it "
        "each need a piece, 573 pieces with the reserved and byte pieces; use a vocab_size of at least 573"
    )
    assert not model_dir.exists()


def test_a_second_run_in_a_model_directory_in_use_is_refused_before_writing_to_it(tmp_path):
    source, target = tmp_path / "train.en", tmp_path / "train.de"
    source.write_text("a cat\nthe dog\n", encoding="utf-8")
    target.write_text("eine Katze\nder Hund\n", encoding="utf-8")
    model_dir = tmp_path / "run"
    model_dir.mkdir()
    first_run = os.open(model_dir, os.O_RDONLY)
    fcntl.flock(first_run, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what the first run holds while it trains
    try:
        result = run_train(
            "--dataset", f"files:{source},{target}", "--train-steps", "1", "--model-dir", str(model_dir)
        )
    finally:
        os.close(first_run)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: another training run is using {model_dir}; wait for it to end, or give another --model-dir"
    )
    assert list(model_dir.iterdir()) == []


def test_a_model_directory_that_cannot_be_made_is_named_without_a_traceback(tmp_path):
    (tmp_path / "notes.txt").write_text("mine", encoding="utf-8")
    result = run_train("--train-steps", "1", "--model-dir", str(tmp_path / "notes.txt" / "run"))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: [Errno 20] Not a directory: '{tmp_path / 'notes.txt' / 'run'}'"
    )


def test_resuming_on_another_replica_count_says_how_the_epoch_goes_on(tmp_path):
    from tests.training.test_multi_worker import TINY, write_corpus

    flags = ["--dataset", write_corpus(tmp_path), *TINY, "--model-dir", str(tmp_path / "run")]
    first = run_train(*flags, "--train-steps", "2", "--cpu-replicas", "2")
    assert first.returncode == 0, first.stderr[-3000:]
    resumed = run_train(*flags, "--train-steps", "3", "--cpu-replicas", "1")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (
        "resuming with changed training settings: replicas: 2 -> 1, train_steps: 2 -> 3\n"
        "the step count and --batch-tokens carry on, but a batch's rows are a multiple of the replicas: the rest "
        "of the current epoch is cut into other batches than its first part (some of its pairs are trained on "
        "twice, others not at all)\n"
    ) in resumed.stdout
    assert "done: step 3" in resumed.stdout


def test_a_run_with_other_data_is_refused_before_its_data_is_read(tmp_path):
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
    result = run_train("--dataset", dataset, "--target-lang", "de", "--vocab-size", "600",
                       "--model-dir", str(model_dir))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: {model_dir} holds a run with another data configuration (target_lang: 'fr' -> 'de'); "
        "use another --model-dir"
    )
    assert (model_dir / "settings.json").read_bytes() == settings
    # The same run resumed passes that check and fails only on its data.
    result = run_train("--dataset", dataset, "--target-lang", "fr", "--vocab-size", "600",
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
