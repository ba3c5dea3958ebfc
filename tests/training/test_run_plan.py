"""`app.commands.train_plan.plan_run`: parsed train.py flags -> the run's configurations,
the flags themselves left as they were."""

import copy
import dataclasses
import os

import pytest

import train
from app.commands.train_plan import plan_run
from app.model.config import ModelConfig
from app.training.config import TrainConfig
from app.training.init_from import nearest_size, read_init_run
from app.training.run_plan import RunPlan
from app.training.schedule import resolve_warmup_steps
from data.config import DataConfig


def planned(*flags):
    """`(plan, args)`: the plan of train.py's `flags`, after checking it left `args` as parsed."""
    args = train.parse_args(list(flags))
    before = copy.deepcopy(vars(args))
    plan = plan_run(args)
    assert vars(args) == before
    return plan, args


def test_base_without_flags_takes_its_recipe_and_the_papers_vocabulary(tmp_path):
    model_dir = str(tmp_path / "run")
    plan, _ = planned("--size", "base", "--model-dir", model_dir, "--precision", "float32")
    assert plan == RunPlan(
        size="base",
        variant=None,
        model_dir=model_dir,
        model_config=ModelConfig.from_size("base", vocab_size=37000),
        data_config=DataConfig(vocab_size=37000, batch_tokens=25000),
        train_config=TrainConfig(
            label_smoothing=0.1, train_steps=100_000, steps_per_loop=10, checkpoint_every=1000, keep_checkpoints=5,
            average_last=5, eval_every=1000, precision="float32",
        ),
        init=None,
        dry_run=False,
        bleu=True,
        auto_precision=False,
    )


def test_the_default_model_dir_and_the_run_flags(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # runs/ is relative: an empty one here
    plan, _ = planned("--dry-run", "--no-bleu", "--precision", "float32", "--batch-tokens", "1000")
    assert plan.model_dir == os.path.join("runs", "tiny-multi30k-en-de")
    assert (plan.dry_run, plan.bleu, plan.auto_precision, plan.size) == (True, False, False, "tiny")
    assert plan.data_config == DataConfig(vocab_size=8000, batch_tokens=1000)
    assert plan.model_config == ModelConfig.from_size("tiny", vocab_size=8000)


def test_a_table3_row_of_label_smoothing_changes_the_training_not_the_model(tmp_path):
    base, _ = planned("--size", "base", "--model-dir", str(tmp_path / "a"), "--precision", "float32")
    d4, _ = planned(
        "--size", "base", "--variant", "D4", "--model-dir", str(tmp_path / "a"), "--precision", "float32"
    )
    assert d4 == dataclasses.replace(
        base, variant="D4", train_config=dataclasses.replace(base.train_config, label_smoothing=0.2)
    )
    c1, _ = planned("--size", "base", "--variant", "C1", "--model-dir", str(tmp_path / "a"), "--precision", "float32")
    assert (c1.model_config.num_layers, c1.train_config.label_smoothing) == (2, 0.1)


def test_init_from_takes_the_init_runs_model_vocabulary_size_and_label_smoothing(model_dir, tmp_path):
    new_dir = str(tmp_path / "fine-tuned")
    plan, args = planned(
        "--init-from", model_dir, "--model-dir", new_dir, "--train-steps", "10", "--precision", "float32"
    )
    init = read_init_run(model_dir)
    assert args.size is None and args.vocab_size is None  # as parsed: not given
    assert plan.init == init
    assert plan.size == nearest_size(init.model_config) == "tiny"
    assert plan.model_config == init.model_config
    assert plan.data_config == DataConfig(
        vocab_size=init.data_config.vocab_size, batch_tokens=2048, max_length=48,
    )
    warmup = resolve_warmup_steps(None, 10)
    scratch, _ = planned("--train-steps", "10", "--model-dir", str(tmp_path / "other"), "--precision", "float32")
    assert plan.train_config == dataclasses.replace(
        scratch.train_config,
        learning_rate_scale=init.learning_rate_scale(warmup),
        label_smoothing=init.label_smoothing,
    )
    given, _ = planned(
        "--init-from", model_dir, "--model-dir", new_dir, "--train-steps", "10", "--precision", "float32",
        "--label-smoothing", "0.3", "--learning-rate-scale", "0.5",
    )
    assert (given.train_config.label_smoothing, given.train_config.learning_rate_scale) == (0.3, 0.5)


def test_flags_that_cannot_make_a_run_are_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="--init-checkpoint best names the weights of --init-from: give both"):
        planned("--init-checkpoint", "best", "--model-dir", str(tmp_path / "a"))
    with pytest.raises(ValueError, match=r"--max-length 300 is longer than the model's 256 positions"):
        planned("--max-length", "300", "--model-dir", str(tmp_path / "a"), "--precision", "float32")
