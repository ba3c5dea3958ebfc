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
    "steps_per_loop": "steps_per_loop",
    "label_smoothing": "label_smoothing",
}


def test_the_sizes_are_tiny_small_base_big_in_that_order_with_a_recipe_for_each_model():
    assert list(RECIPES) == list(SIZES) == ["tiny", "small", "base", "big"]


def test_every_field_of_a_recipe_reaches_train_py_or_its_model():
    fields = {field.name for field in dataclasses.fields(Recipe)}
    # guided_alignment reaches the data configuration as its alignments (tests/commands/
    # test_train_plan.py: the default run is guided by the alignments Multi30k en-de ships).
    assert fields == set(TRAIN_CONFIG_FIELDS) | {
        "model", "batch_tokens", "vocab_size", "vocab_size_by_pair", "guided_alignment"}


@pytest.mark.slow
@pytest.mark.parametrize("size", list(RECIPES))
def test_train_py_without_flags_trains_the_sizes_recipe(size):
    import train
    from app.commands.train_plan import train_config_from_args

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
        "import app.training.recipes, app.model.config, layers.special_tokens\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'jax'))))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []


# The vocabulary: the paper's for base and big, by language pair; Multi30k's for the others.


@pytest.mark.parametrize(
    "size, source_lang, target_lang, want",
    [
        ("tiny", "en", "de", 8000),
        ("tiny", "en", "fr", 8000),
        ("small", "en", "de", 8000),
        ("base", "en", "de", 37000),
        ("base", "de", "en", 37000),
        ("base", "en", "fr", 32000),
        ("base", "fr", "en", 32000),
        ("base", "en", "ro", 37000),
        ("big", "en", "de", 37000),
        ("big", "fr", "en", 32000),
        ("big", "de", "fr", 37000),
    ],
)
def test_each_size_and_language_pair_has_its_vocabulary_size(size, source_lang, target_lang, want):
    import train
    from app.commands.train_plan import resolved_flags, resolved_vocab_size
    from app.cli.flags import data_config_from_args

    assert recipe_for(size).vocab_size_for(source_lang, target_lang) == want
    args = train.parse_args(["--size", size, "--source-lang", source_lang, "--target-lang", target_lang])
    assert args.vocab_size is None
    args.vocab_size = resolved_vocab_size(resolved_flags(args), "no-such-model-dir")
    assert args.vocab_size == want
    # What settings.json records and --dry-run prints (app.commands.train.run).
    assert data_config_from_args(args).vocab_size == want


@pytest.mark.parametrize("size", list(RECIPES))
def test_an_explicit_vocab_size_wins_over_the_recipe_and_the_run(size, tmp_path):
    import train
    from app.commands.train_plan import resolved_flags, resolved_vocab_size

    write_run_settings(tmp_path, vocab_size=8000)
    for model_dir in ("no-such-model-dir", str(tmp_path)):
        args = train.parse_args(["--size", size, "--target-lang", "fr", "--vocab-size", "16000"])
        assert resolved_vocab_size(resolved_flags(args), model_dir) == 16000


def test_a_run_resumes_with_its_own_vocabulary_size_not_todays_default(tmp_path):
    import train
    from app.commands.train_plan import resolved_flags, resolved_vocab_size

    write_run_settings(tmp_path, vocab_size=8000)  # a base run begun when 8,000 was every size's default
    assert resolved_vocab_size(resolved_flags(train.parse_args(["--size", "base"])), str(tmp_path)) == 8000
    assert resolved_vocab_size(resolved_flags(train.parse_args(["--size", "base"])), str(tmp_path / "another")) == 37000


def test_an_unreadable_settings_file_is_named_when_the_vocabulary_is_resolved(tmp_path):
    import train
    from app.commands.train_plan import resolved_flags, resolved_vocab_size

    (tmp_path / "settings.json").write_text("{not json")
    with pytest.raises(ValueError, match="settings.json is not valid JSON"):
        resolved_vocab_size(resolved_flags(train.parse_args(["--size", "base"])), str(tmp_path))


def write_run_settings(model_dir, vocab_size):
    """settings.json of a base run on Multi30k en-de with this vocabulary size."""
    from app.model_dir.settings import save_settings
    from app.training.config import TrainConfig
    from data.config import DataConfig

    model, data = ModelConfig.from_size("base", vocab_size=vocab_size), DataConfig(vocab_size=vocab_size)
    save_settings(str(model_dir), model, data, TrainConfig(train_steps=100), log=lambda *_: None)


def test_a_dry_run_shows_the_resolved_vocabulary_size(tmp_path, monkeypatch, capsys):
    """`python train.py --size base --target-lang fr --dry-run` asks for the paper's en-fr
    vocabulary (a small corpus gives fewer pieces: the model then has the tokenizer's).

    The command's `main` runs in this process, from the repository root, as
    tests/commands/test_train.py runs its dry runs: a fresh process is not what is tested, and
    would cost about 4 s of CPU to start TensorFlow."""
    from app.commands.train import main
    from tests.tiny_run import write_multi30k_slice

    files = write_multi30k_slice(tmp_path, train=300, validation=20, target_lang="fr")
    flags = ["--size", "base", "--num-layers", "1", "--d-model", "32", "--d-ff", "64", "--num-heads", "2"]
    monkeypatch.chdir(ROOT)
    code = main([*flags, "--dataset", "files:" + ",".join(files), "--target-lang", "fr",
                 "--model-dir", str(tmp_path / "run"), "--dry-run"])
    out, err = capsys.readouterr()
    assert code == 0, err[-3000:]
    assert "  vocab_size: 32000" in out.splitlines()
