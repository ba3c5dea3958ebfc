"""benchmarks/gpu/train_jax.py's `Recipe` starts from tiny's recipe, and the committed recipe files fit it.

train_jax.py runs under JAX, which CI does not install: where JAX is missing, the test
imports it in a fresh process with Keras on TensorFlow and empty stand-ins for `jax` and
`jax.numpy` (nothing at its import calls them), and reads the `Recipe` it defines.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from app.training.recipes import RECIPES

ROOT = Path(__file__).resolve().parents[2]
RECIPES_FOLDER = ROOT / "benchmarks" / "gpu" / "recipes"

READ_RECIPE_SCRIPT = textwrap.dedent(
    """
    import dataclasses, importlib.util, json, sys, types
    if importlib.util.find_spec("jax") is None:
        import keras  # before the stand-ins: Keras looks for a real JAX as it loads
        jax = types.ModuleType("jax")
        jax.numpy = types.ModuleType("jax.numpy")
        sys.modules.update({"jax": jax, "jax.numpy": jax.numpy})
    sys.path.insert(0, "benchmarks/gpu")
    import train_jax
    print(json.dumps({field.name: field.default for field in dataclasses.fields(train_jax.Recipe)},
                     default=lambda value: "<no literal default>"))
    """
)

# train_jax Recipe field -> its source in tiny's Recipe (app/training/recipes.py).
FROM_TINY = {
    "batch_tokens": "batch_tokens",
    "train_steps": "train_steps",
    "learning_rate_scale": "learning_rate_scale",
    "cooldown_fraction": "cooldown_fraction",
    "weight_decay": "weight_decay",
    "eval_every": "eval_every",
    "snapshot_every": "checkpoint_every",
}


@pytest.fixture(scope="module")
def recipe_defaults():
    """{field: default} of train_jax.py's `Recipe`, as the imported module defines it."""
    env = {**os.environ, "KERAS_BACKEND": os.environ.get("KERAS_BACKEND", "tensorflow"), "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run(
        [sys.executable, "-c", READ_RECIPE_SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_recipe_defaults_are_tinys_recipe(recipe_defaults):
    tiny = RECIPES["tiny"]
    assert recipe_defaults["size"] == "tiny"
    assert {field: recipe_defaults[field] for field in FROM_TINY} == {
        field: getattr(tiny, source) for field, source in FROM_TINY.items()
    }
    # Model fields left unset take the size's own (ModelConfig.from_size).
    for field in ("dropout", "norm_first", "num_heads", "num_layers"):
        assert recipe_defaults[field] is None, field


def test_the_committed_recipes_files_name_only_recipe_fields(recipe_defaults):
    # benchmarks/gpu/recipes/ is what a session lent a GPU runs as it is: a field renamed
    # in Recipe must not leave a file that train_jax.py refuses after the machine started.
    files = sorted(RECIPES_FOLDER.glob("*.json"))
    assert files
    fields = set(recipe_defaults)
    for path in files:
        recipes = json.loads(path.read_text(encoding="utf-8"))
        assert isinstance(recipes, list) and recipes, path.name
        for recipe in recipes:
            assert set(recipe) <= fields, (path.name, sorted(set(recipe) - fields))
            seeds = recipe.get("seeds", [])
            assert len(set(seeds)) == len(seeds), path.name
