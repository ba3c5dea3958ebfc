"""`app.commands.train_plan`: parsed train.py flags -> the run's configurations
(`plan_run`, and the configurations it is made of), the flags themselves left as they were."""

import copy
import dataclasses
import os

import pytest

import train
from app.cli.flags import model_config_from_args
from app.commands.train_plan import (
    INHERITED_DATA_FLAGS, MODEL_FLAGS, NOT_GIVEN, device_config_from_args, given_flags, plan_train, resolved_flags,
    train_config_from_args,
)
from app.model.config import ModelConfig
from app.training.config import TrainConfig
from app.training.init_from import nearest_size, read_init_run
from app.training.run_plan import RunPlan
from app.training.schedule import resolve_warmup_steps
from data.config import DataConfig
from data.corpora import bundled_alignments


def planned(*flags):
    """`(plan, args)`: the plan of train.py's `flags`, after checking it left `args` as parsed."""
    args = train.parse_args(list(flags))
    before = copy.deepcopy(vars(args))
    plan = plan_train(args, device_config_from_args(args))
    assert vars(args) == before
    return plan, args


def resolved(*flags):
    """train.py's `flags` parsed, then decided as `plan_run` decides them for a run from
    scratch (`resolved_flags`): what the configuration builders take."""
    return resolved_flags(train.parse_args(list(flags)))


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
    bundled = bundled_alignments("multi30k", "en", "de")  # the tiny recipe's guided alignment
    assert plan.data_config == DataConfig(vocab_size=8000, batch_tokens=1000, alignments=bundled)
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
        alignments=bundled_alignments("multi30k", "en", "de"),  # a new run on Multi30k en-de: the recipe's
    )
    warmup = resolve_warmup_steps(None, 10)
    scratch, _ = planned("--train-steps", "10", "--model-dir", str(tmp_path / "other"), "--precision", "float32")
    assert plan.train_config == dataclasses.replace(
        scratch.train_config,
        learning_rate_scale=init.learning_rate_scale(warmup),
        label_smoothing=init.label_smoothing,
        # The guided head, the last layer's first, of the init run's model.
        guided_alignment_head=f"{init.model_config.num_layers - 1}:0",
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


def test_a_flag_the_init_run_may_set_parses_as_none_when_not_given():
    # "Given" is "not None" (given_flags): every flag that --init-from checks or inherits.
    read_by_init = {"size", "variant", "vocab_size", "subword_model", "lowercase", *MODEL_FLAGS, *INHERITED_DATA_FLAGS}
    assert given_flags(train.parse_args([])) & read_by_init == set()
    assert set(NOT_GIVEN) <= read_by_init


def test_what_the_flags_leave_open_is_decided_in_a_copy(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    args = train.parse_args(["--target-lang", "fr"])
    before = copy.deepcopy(vars(args))
    flags = resolved_flags(args)
    assert vars(args) == before
    decided = {dest: value for dest, value in vars(flags).items() if before[dest] != value}
    assert decided == {
        "size": "tiny", "source_lang": "en", "max_length": 256, "subword_model": "bpe", "lowercase": False,
        "batch_tokens": 2048, "model_dir": os.path.join("runs", "tiny-multi30k-en-fr"),
    }
    # The vocabulary is the model directory's run's, else the size's for the pair: plan_run reads it.
    assert flags.vocab_size is None
    planned_data = plan_train(args, device_config_from_args(args)).data_config
    assert planned_data == DataConfig(target_lang="fr", vocab_size=8000, batch_tokens=2048)


# The configurations the plan is made of.

def test_each_size_resolves_its_own_recipe_and_flags_override_it():

    tiny = train_config_from_args(resolved())
    assert (tiny.train_steps, tiny.learning_rate_scale, tiny.cooldown_fraction) == (16000, 1.0, 0.2)
    assert tiny.eval_every == 2000
    # Checkpoints close together at the end of a short run, for --average-last 10.
    assert (tiny.checkpoint_every, tiny.keep_checkpoints) == (250, 10)
    base = train_config_from_args(resolved("--size", "base"))
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
    overridden = train_config_from_args(resolved(*flags))
    assert (overridden.checkpoint_every, overridden.keep_checkpoints, overridden.learning_rate_scale) == (7, 3, 0.5)
    assert (overridden.cooldown_fraction, overridden.weight_decay, overridden.eval_every) == (0.0, 0.0, 0)
    assert (overridden.bidirectional_fraction, base.bidirectional_fraction) == (0.25, 0.0)


def test_each_size_names_the_checkpoints_export_averages_and_the_flag_overrides_it():

    def average_last(*flags):
        return train_config_from_args(resolved(*flags)).average_last

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

    def budget(*flags):
        return train_config_from_args(resolved(*flags)).time_budget_minutes

    assert budget() == 58.0  # tiny's 16,000 steps, ended early on a slow machine
    assert budget("--train-steps", "20000") is None
    assert budget("--epochs", "3") is None
    assert budget("--train-steps", "20000", "--time-budget", "90") == 90.0
    assert budget("--time-budget", "0") is None
    assert budget("--size", "base") is None
    with pytest.raises(SystemExit):  # argparse's: "argument --time-budget: must be a finite number of at least 0"
        budget("--time-budget", "-5")


def test_a_table3_row_varies_the_base_model_and_no_flag_may_contradict_it():

    def config(*flags):
        return model_config_from_args(resolved(*flags), vocab_size=100)

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

    def configs(*flags):
        args = resolved(*flags)
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

    def norm_first(*flags):
        return model_config_from_args(resolved(*flags), vocab_size=8000).norm_first

    assert norm_first() is True  # tiny: pre-norm
    assert norm_first("--no-norm-first") is False  # the paper's post-norm at tiny size
    assert norm_first("--size", "base") is False
    assert norm_first("--size", "base", "--norm-first") is True


def test_normalization_is_layer_norm_unless_scale_norm_is_asked_for(capsys):

    def normalization(*flags):
        return model_config_from_args(resolved(*flags), vocab_size=8000).normalization

    assert normalization() == "layer"
    assert normalization("--size", "base") == "layer"
    assert normalization("--normalization", "scale") == "scale"
    with pytest.raises(SystemExit):
        train.parse_args(["--normalization", "rms"])
    assert "argument --normalization: invalid choice: 'rms' (choose from" in capsys.readouterr().err


def test_attention_biases_follow_the_size_and_can_be_set_either_way():

    def attention_bias(*flags):
        return model_config_from_args(resolved(*flags), vocab_size=8000).attention_bias

    assert attention_bias() is True  # tiny: like the published Transformer-Tiny
    assert attention_bias("--no-attention-bias") is False
    assert attention_bias("--size", "base") is False  # the paper's W^Q, W^K, W^V and W^O have none
    assert attention_bias("--size", "small", "--attention-bias") is True


def test_the_three_dropouts_are_separate_flags_on_top_of_the_size():

    def dropouts(*flags):
        config = model_config_from_args(resolved(*flags), vocab_size=8000)
        return config.dropout, config.attention_dropout, config.inner_dropout


# Guided alignment: the tiny recipe's default where the corpus ships gold alignments.


def test_the_default_run_is_guided_by_the_alignments_multi30k_en_de_ships(tmp_path):
    from data.corpora import MULTI30K_DIR

    bundled = os.path.join(MULTI30K_DIR, "train.en-de.align.gz")
    plan, _ = planned("--model-dir", str(tmp_path / "run"))
    assert plan.data_config.alignments == bundled
    assert plan.train_config.guided and plan.train_config.guided_alignment_head == "3:0"
    # The other direction, another pair, another size and another corpus ship none.
    for flags in (["--source-lang", "de", "--target-lang", "en"], ["--target-lang", "fr"], ["--size", "small"],
                  ["--dataset", "files:a.en,a.de"]):
        plan, _ = planned("--model-dir", str(tmp_path / "other"), *flags)
        assert plan.data_config.alignments is None, flags
        assert not plan.train_config.guided, flags


def test_guided_alignment_none_turns_the_default_off_and_its_tuning_flags_are_then_refused(tmp_path):
    from app.cli.flag_types import FlagError

    plan, _ = planned("--model-dir", str(tmp_path / "run"), "--guided-alignment", "none")
    assert plan.data_config.alignments is None and not plan.train_config.guided
    plan, _ = planned("--model-dir", str(tmp_path / "run"), "--guided-alignment-weight", "0.1")
    assert plan.train_config.guided_alignment_weight == 0.1  # the recipe's alignments: tuning is allowed
    with pytest.raises(FlagError, match="--guided-alignment-weight tunes guided alignment training"):
        planned("--model-dir", str(tmp_path / "run"), "--guided-alignment", "none", "--guided-alignment-weight", "0.1")


def test_a_run_resumes_with_the_alignments_it_began_with(tmp_path):
    from app.model_dir.settings import save_settings

    model_dir = str(tmp_path / "run")
    os.makedirs(model_dir)
    before, _ = planned("--model-dir", model_dir, "--guided-alignment", "none")
    save_settings(model_dir, before.model_config, before.data_config, before.train_config)
    again, _ = planned("--model-dir", model_dir)
    assert again.data_config.alignments is None and not again.train_config.guided


def test_prepare_prepares_the_alignments_train_would_train_with():
    from app.commands.prepare import parse_args, plan_prepare
    from data.corpora import bundled_alignments

    assert plan_prepare(parse_args([])).data_config.alignments == bundled_alignments("multi30k", "en", "de")
    assert plan_prepare(parse_args(["--guided-alignment", "none"])).data_config.alignments is None
    assert plan_prepare(parse_args(["--size", "base"])).data_config.alignments is None
