"""app/training/recipes.py: the one table of sizes, what train.py trains by default, TensorFlow-free."""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.model.config import SIZES, ModelConfig
from app.training.recipes import RECIPES, Recipe, recipe_for

ROOT = Path(__file__).resolve().parents[2]

# Recipe field -> the TrainConfig field a run without flags takes it as.
TRAIN_CONFIG_FIELDS = {
    "train_steps": "train_steps",
    "learning_rate_scale": "learning_rate_scale",
    "cooldown_fraction": "cooldown_fraction",
    "weight_decay": "weight_decay",
    "checkpoint_every": "checkpoint_every",
    "keep_checkpoints": "keep_checkpoints",
    "average_last": "average_last",
    "eval_every": "eval_every",
    "time_budget_minutes": "time_budget_minutes",
}


def test_the_sizes_are_tiny_small_base_big_in_that_order_with_a_recipe_for_each_model():
    assert list(RECIPES) == list(SIZES) == ["tiny", "small", "base", "big"]


def test_every_field_of_a_recipe_reaches_train_py_or_its_model():
    fields = {field.name for field in dataclasses.fields(Recipe)}
    assert fields == set(TRAIN_CONFIG_FIELDS) | {"model", "batch_tokens"}


@pytest.mark.parametrize("size", list(RECIPES))
def test_train_py_without_flags_trains_the_sizes_recipe(size):
    import train
    from app.training.command import train_config_from_args

    recipe = RECIPES[size]
    config = train_config_from_args(train.parse_args(["--size", size]))
    assert {field: getattr(config, field) for field in TRAIN_CONFIG_FIELDS.values()} == {
        config_field: getattr(recipe, field) for field, config_field in TRAIN_CONFIG_FIELDS.items()
    }
    assert config.epochs is None


@pytest.mark.parametrize("size", list(RECIPES))
def test_the_size_flag_builds_the_recipes_model(size):
    import train
    from app.cli.flags import model_config_from_args

    args = train.parse_args(["--size", size])
    assert model_config_from_args(args, vocab_size=8000) == RECIPES[size].model


def test_a_recipe_cannot_be_changed_after_it_is_made():
    tiny = recipe_for("tiny")
    with pytest.raises(dataclasses.FrozenInstanceError):
        tiny.batch_tokens = 4096
    with pytest.raises(dataclasses.FrozenInstanceError):
        tiny.model.dropout = 0.3


def test_an_unknown_size_names_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown model size 'huge'; known sizes: tiny, small, base, big"):
        recipe_for("huge")
    with pytest.raises(ValueError, match=r"unknown model size 'huge'; known sizes: tiny, small, base, big"):
        ModelConfig.from_size("huge")


def test_the_recipes_and_the_special_tokens_import_without_tensorflow():
    # benchmarks/gpu/train_jax.py reads them on machines without TensorFlow.
    script = (
        "import json, sys\n"
        "import app.training.recipes, app.model.config, data.special_tokens\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'jax'))))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []
