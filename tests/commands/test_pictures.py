"""app.pictures, the command (app/commands/pictures.py): its flags' errors, its warnings,
and the pictures and curves it writes where --output says. What it calls, the attention
collected and drawn and the curves read and drawn: tests/visualization/."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from app.commands.pictures import main
from app.visualization.attention import ATTENTION_KINDS
from app.visualization.curves import curve_series, read_metrics
from tests.visualization.helpers import METRICS, png_size, write_lines

ROOT = Path(__file__).resolve().parents[2]


# Attention.


@pytest.mark.slow  # the tiny run's weights loaded and a sentence drawn: about 6 s on 2 cores
def test_the_command_writes_one_grid_per_kind_and_one_figure_per_layer(model_dir, tmp_path, capsys):
    output = tmp_path / "attention"
    argv = ["attention", "--model-dir", model_dir, "--sentence", "A man rides a bike.", "--output", str(output)]
    assert main(argv + ["--beam-size", "1", "--max-extra-length", "4", "--per-layer"]) == 0
    # The tiny run has one layer.
    expected = {f"{kind}.png" for kind in ATTENTION_KINDS} | {f"{kind}_layer_1.png" for kind in ATTENTION_KINDS}
    assert {p.name for p in output.iterdir()} == expected
    for path in output.iterdir():
        png_size(path)
    printed = capsys.readouterr().out
    assert "translation:" in printed and f"wrote {output / 'encoder_self_attention.png'}" in printed


def test_the_command_names_what_is_missing(tmp_path, capsys):
    assert main(["attention", "--model-dir", str(tmp_path), "--sentence", "x"]) == 1
    assert f"{tmp_path} is not a model directory" in capsys.readouterr().err


def test_an_empty_sentence_is_an_error_and_draws_nothing(model_dir, tmp_path, capsys):
    output = tmp_path / "attention"
    assert main(["attention", "--model-dir", model_dir, "--sentence", "  ", "--output", str(output)]) == 1
    assert "--sentence is empty ('  ')" in capsys.readouterr().err
    assert not output.exists()


def test_an_empty_target_and_an_output_that_is_a_file_are_errors_before_the_model_loads(model_dir, tmp_path, capsys):
    output = tmp_path / "attention"
    assert main(["attention", "--model-dir", model_dir, "--sentence", "A man.", "--target", "",
                 "--output", str(output)]) == 1
    assert "--target is empty ('')" in capsys.readouterr().err
    assert not output.exists()
    output.write_text("mine")
    assert main(["attention", "--model-dir", model_dir, "--sentence", "A man.", "--output", str(output)]) == 1
    assert f"error: --output {output} is a file; name a directory for the PNGs" in capsys.readouterr().err
    # A model directory that does not exist: named before anything else.
    assert main(["attention", "--model-dir", str(tmp_path / "nope"), "--sentence", "A man.",
                 "--output", str(output)]) == 1
    assert f"error: --model-dir {tmp_path / 'nope'}: no such directory" in capsys.readouterr().err
    assert output.read_text() == "mine"


@pytest.mark.slow  # two sentences translated and drawn: about 7 s on 2 cores
def test_an_overlong_sentence_or_target_is_drawn_cut_with_a_warning(model_dir, tmp_path, capsys):
    long_text = " ".join(["dog"] * 80)  # past the test model's 48 positions
    output = str(tmp_path / "attention")
    assert main(["attention", "--model-dir", model_dir, "--sentence", long_text, "--target", long_text,
                 "--output", output]) == 0
    err = capsys.readouterr().err
    assert re.search(r"warning: --sentence has \d+ subwords; the model reads its first 47", err), err
    assert re.search(r"warning: --target has \d+ subwords; the pictures show its first 47", err), err
    assert main(["attention", "--model-dir", model_dir, "--sentence", "A dog.", "--output", output]) == 0
    assert "warning" not in capsys.readouterr().err


def test_importing_the_module_does_not_import_matplotlib():
    code = "import sys, app.pictures; assert 'matplotlib' not in sys.modules, 'imported'"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


# Training curves.


def test_curves_of_a_real_training_run(model_dir, tmp_path):
    records = read_metrics(str(Path(model_dir) / "metrics.jsonl"))
    # The tiny run logs every step and evaluates loss only, at its end.
    assert set(curve_series(records)) == {"loss", "valid_loss", "learning_rate"}
    assert main(["curves", "--model-dir", model_dir, "--output", str(tmp_path / "curves.png")]) == 0
    png_size(tmp_path / "curves.png")


def test_curves_go_exactly_where_output_says_or_nowhere(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    write_lines(run / "metrics.jsonl", [json.dumps(r) for r in METRICS])
    no_suffix = tmp_path / "curves"
    assert main(["curves", "--model-dir", str(run), "--output", str(no_suffix)]) == 0
    assert capsys.readouterr().out == f"wrote {no_suffix}\n"
    png_size(no_suffix)  # written as named, a PNG, no ".png" appended
    assert main(["curves", "--model-dir", str(run), "--output", str(tmp_path)]) == 1
    assert f"error: --output {tmp_path} is a directory; name the PNG file to write" in capsys.readouterr().err
    under_a_file = no_suffix / "c.png"
    assert main(["curves", "--model-dir", str(run), "--output", str(under_a_file)]) == 1
    assert f"error: --output {under_a_file}: cannot create {no_suffix}" in capsys.readouterr().err


def test_missing_metrics_and_records_without_curves_are_errors(tmp_path, capsys):
    assert main(["curves", "--model-dir", str(tmp_path)]) == 1
    assert f"error: {tmp_path / 'metrics.jsonl'} not found" in capsys.readouterr().err
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "epoch": 0}) + "\n")
    assert main(["curves", "--model-dir", str(tmp_path)]) == 1
    assert "no curves to draw: the records have none of loss, valid_loss" in capsys.readouterr().err
