"""`python -m app.prepare`: its flags planned (`plan_prepare`), and the command run as a
user runs it, preparing what train.py then reads."""

import copy
import os

import pytest

from app.commands.prepare import PreparePlan, parse_args, plan_prepare
from data.config import DataConfig
from data.dataset import prepare_data
from data.errors import DataError
from tests.tiny_run import write_multi30k_slice


def test_the_plan_takes_the_sizes_vocabulary_and_train_pys_model_directory(tmp_path):
    args = parse_args(["--size", "base", "--target-lang", "fr", "--max-length", "100"])
    before = copy.deepcopy(vars(args))
    plan = plan_prepare(args)
    assert vars(args) == before
    # No --batch-tokens: the shards do not depend on it, and none is decided.
    assert plan == PreparePlan(
        data_config=DataConfig(target_lang="fr", vocab_size=32000, max_length=100),
        model_dir=os.path.join("runs", "base-multi30k-en-fr"),
        workers=None,
    )
    given = plan_prepare(parse_args([
        "--dataset", "files:a/b.x,c.y", "--vocab-size", "500", "--batch-tokens", "300", "--lowercase",
        "--subword-model", "unigram", "--workers", "3",
    ]))
    assert given == PreparePlan(
        data_config=DataConfig(
            dataset="files:a/b.x,c.y", vocab_size=500, batch_tokens=300, lowercase=True, subword_model="unigram",
        ),
        model_dir=os.path.join("runs", "tiny-files-a_b.x-en-de"),
        workers=3,
    )
    with pytest.raises(DataError, match="batch_tokens 200 cannot hold one row of max_length 256"):
        plan_prepare(parse_args(["--batch-tokens", "200"]))


def test_the_command_prepares_byte_for_byte_what_train_py_prepares(tmp_path, capsys):
    from app.commands import prepare

    spec = "files:" + ",".join(write_multi30k_slice(tmp_path, train=200, validation=20))
    argv = ["--dataset", spec, "--vocab-size", "400", "--max-length", "48", "--workers", "1"]
    assert prepare.main([*argv, "--model-dir", str(tmp_path / "prepared")]) == 0
    # What train.py prepares for the same data flags, at any batch size.
    prepare_data(DataConfig(dataset=spec, vocab_size=400, max_length=48, batch_tokens=1000),
                 str(tmp_path / "trained"), workers=1, log=lambda *_: None)

    def files(directory):
        return {
            os.path.relpath(os.path.join(parent, name), directory): open(os.path.join(parent, name), "rb").read()
            for parent, _, names in os.walk(directory) for name in names
        }

    prepared, trained = files(tmp_path / "prepared"), files(tmp_path / "trained")
    assert sorted(prepared) == sorted(trained) and len(prepared) > 3
    assert prepared == trained


def test_the_prepare_command_prepares_what_train_py_then_reads(tmp_path, capsys):
    from app.commands import prepare

    spec = "files:" + ",".join(write_multi30k_slice(tmp_path, train=200, validation=20))
    model_dir = str(tmp_path / "run")
    argv = ["--dataset", spec, "--vocab-size", "400", "--max-length", "48", "--model-dir", model_dir, "--workers", "1"]
    assert prepare.main(argv) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == (
        f"next: python train.py --model-dir {model_dir} --dataset {spec} --vocab-size 400 --max-length 48"
    )
    assert sorted(os.listdir(os.path.join(model_dir, "data"))) == ["train", "validation"]
    lines = []
    config = DataConfig(dataset=spec, vocab_size=400, max_length=48, batch_tokens=2048)
    prepare_data(config, model_dir, log=lines.append)
    assert lines == []  # train.py's preparation finds it done.
    with pytest.raises(SystemExit) as exited:  # refused by argparse, before TensorFlow loads
        prepare.main(argv[:-2] + ["--workers", "0"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith("error: argument --workers: must be at least 1, got 0")


def test_the_prepare_command_takes_the_sizes_vocabulary_so_train_py_of_that_size_accepts_it(tmp_path, monkeypatch):
    """Without --vocab-size, the vocabulary is the one train.py --size would ask for."""
    import data.dataset
    from app.commands import prepare

    sizes = []

    def record(config, model_dir, **kwargs):
        sizes.append(config.vocab_size)
        raise DataError("stopped before reading")

    monkeypatch.setattr(data.dataset, "prepare_shards", record)
    for size, target in (("tiny", "de"), ("base", "de"), ("base", "fr"), ("big", "de")):
        assert prepare.main(["--size", size, "--target-lang", target, "--model-dir", str(tmp_path / size)]) == 1
    assert prepare.main(["--size", "base", "--vocab-size", "500", "--model-dir", str(tmp_path / "x")]) == 1
    assert sizes == [8000, 37000, 32000, 37000, 500]
