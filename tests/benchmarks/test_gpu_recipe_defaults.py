"""benchmarks/gpu/train_jax.py's `Recipe` defaults are tiny's `train.py` defaults.

The GPU tool runs where TensorFlow is not installed, so it cannot import
`app.training.command.SIZE_DEFAULTS` and keeps its own copy of tiny's recipe. This test reads
that copy from the source (JAX need not be installed here) so the two cannot drift apart.
"""

import ast
import json
from pathlib import Path

from app.training.command import SIZE_DEFAULTS

TRAIN_JAX = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "train_jax.py"

# Recipe field -> SIZE_DEFAULTS["tiny"] key.
SAME_AS_TRAIN_PY = {
    "batch_tokens": "batch_tokens",
    "train_steps": "train_steps",
    "learning_rate_scale": "learning_rate_scale",
    "cooldown_fraction": "cooldown_fraction",
    "weight_decay": "weight_decay",
    "eval_every": "eval_every",
    "snapshot_every": "checkpoint_every",
}


def recipe_defaults():
    """{field: literal default} of the `Recipe` dataclass, read without importing JAX."""
    tree = ast.parse(TRAIN_JAX.read_text(encoding="utf-8"))
    (recipe,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Recipe"]
    return {
        field.target.id: ast.literal_eval(field.value)
        for field in recipe.body
        if isinstance(field, ast.AnnAssign) and isinstance(field.value, ast.Constant)
    }


def test_recipe_defaults_are_tinys_train_py_defaults():
    defaults = recipe_defaults()
    tiny = SIZE_DEFAULTS["tiny"]
    assert {field: defaults[field] for field in SAME_AS_TRAIN_PY} == {
        field: tiny[key] for field, key in SAME_AS_TRAIN_PY.items()
    }


def recipe_fields():
    """The names of the `Recipe` dataclass's fields, read without importing JAX."""
    tree = ast.parse(TRAIN_JAX.read_text(encoding="utf-8"))
    (recipe,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Recipe"]
    return {field.target.id for field in recipe.body if isinstance(field, ast.AnnAssign)}


def test_the_committed_recipes_files_name_only_recipe_fields():
    # benchmarks/gpu/recipes/ is what a session lent a GPU runs as it is: a field renamed
    # in Recipe must not leave a file that train_jax.py refuses after the machine started.
    files = sorted((TRAIN_JAX.parent / "recipes").glob("*.json"))
    assert files
    fields = recipe_fields()
    for path in files:
        recipes = json.loads(path.read_text(encoding="utf-8"))
        assert isinstance(recipes, list) and recipes, path.name
        for recipe in recipes:
            assert set(recipe) <= fields, (path.name, sorted(set(recipe) - fields))
            seeds = recipe.get("seeds", [])
            assert len(set(seeds)) == len(seeds), path.name
