"""benchmarks/bench_base_recipe.py: its flags and its held-out test set (a whole run takes
minutes even at its quick size: `--pairs 2000 --train-steps 20 --kill-at 10 ...`)."""

import pytest

from benchmarks.bench_base_recipe import parse_args, train_command, write_test_set


def test_the_kill_must_come_before_the_runs_end(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--train-steps", "20", "--kill-at", "20"])
    assert "--kill-at 20 must come before the run's end, --train-steps 20" in capsys.readouterr().err


def test_the_run_is_the_base_recipe_over_cpu_replicas_with_its_own_cadences():
    args = parse_args(["--pairs", "2000", "--train-steps", "300", "--kill-at", "150", "--vocab-size", "500"])
    command = train_command(args, "files:a,b", "/tmp/run")
    flags = dict(zip(command[2::2], command[3::2]))
    assert command[1] == "train.py" and flags["--size"] == "base" and flags["--cpu-replicas"] == "2"
    assert (flags["--steps-per-loop"], flags["--checkpoint-every"], flags["--eval-every"]) == ("10", "50", "100")
    assert (flags["--batch-tokens"], flags["--vocab-size"], flags["--keep-checkpoints"]) == ("1024", "500", "5")


def test_the_test_set_is_held_out_non_empty_and_within_length(tmp_path):
    paths = write_test_set(str(tmp_path / "cache"), str(tmp_path), 50)
    sources = open(paths["en"], encoding="utf-8").read().splitlines()
    targets = open(paths["de"], encoding="utf-8").read().splitlines()
    assert len(sources) == len(targets) == 50
    assert all(line.strip() and len(line.split()) < 60 for line in sources + targets)
