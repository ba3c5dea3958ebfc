"""python -m app.score and the export's `score` signature: forced-decoding scores of given
translations, the same from a SavedModel and from a model directory, in the order of the
files; bad files and flags are refused before anything is written."""

import io
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from app.decoding.forced import forced_log_probs
from app.decoding.model_search import translate_ids
from app.commands.score import format_line, main, read_pairs
from tests.conftest import SENTENCES

# Each export is loaded once per test process (conftest.py), however many tests load it.
pytestmark = pytest.mark.usefixtures("load_each_export_once")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# One target per sentence of SENTENCES: ordinary, empty, whitespace-only, a copy, a short one,
# and one longer than the tiny model's 48 positions (its source, 80 words, is too).
TARGETS = [
    "Ein Mann fährt Fahrrad.",
    "",
    "   ",
    "Zwei Hunde spielen im Schnee, und ein Kind sieht zu.",
    "Ein Mann.",
    " ".join(["Hund"] * 70),
]
LIMIT = 48  # the tiny run's positions (tests/tiny_run.py)


@pytest.fixture(scope="module")
def signature_outputs(exported):
    """The exported `score` signature's outputs for SENTENCES and TARGETS, as NumPy arrays."""
    _, _, path, _ = exported
    loaded = tf.saved_model.load(path)
    outputs = loaded.signatures["score"](inputs=tf.constant(SENTENCES), targets=tf.constant(TARGETS))
    return {name: value.numpy() for name, value in outputs.items()}


@pytest.fixture
def files(tmp_path):
    source, target = tmp_path / "source.en", tmp_path / "target.de"
    source.write_text("".join(line + "\n" for line in SENTENCES), encoding="utf-8")
    target.write_text("".join(line + "\n" for line in TARGETS), encoding="utf-8")
    return str(source), str(target)


def parse(lines):
    """Output lines -> [(total, tokens, per-token values, the rest of the columns)]."""
    rows = []
    for line in lines:
        total, tokens, values, *rest = line.split("\t")
        rows.append((float(total), int(tokens), [float(v) for v in values.split()], [float(v) for v in rest]))
    return rows


def test_the_signature_equals_the_in_memory_scores(exported, signature_outputs):
    translator = exported[0]
    in_memory = translator.serve_score(tf.constant(SENTENCES), tf.constant(TARGETS))
    assert set(signature_outputs) == {"log_prob", "token_log_probs", "target_lengths", "truncated"}
    for name, value in in_memory.items():
        np.testing.assert_allclose(signature_outputs[name], value.numpy(), atol=1e-5, err_msg=name)
    lengths = signature_outputs["target_lengths"]
    token_log_probs = signature_outputs["token_log_probs"]
    assert token_log_probs.shape == (len(TARGETS), LIMIT) and token_log_probs.dtype == np.float32
    # Empty and whitespace-only targets are their end token alone; 70 "Hund"s fill the positions.
    assert lengths[1] == lengths[2] == 1 and lengths[5] == LIMIT
    np.testing.assert_array_equal(signature_outputs["truncated"], [False] * 5 + [True])
    for row, length in enumerate(lengths):
        assert np.all(token_log_probs[row, :length] < 0) and np.all(token_log_probs[row, length:] == 0)
    np.testing.assert_allclose(signature_outputs["log_prob"], token_log_probs.sum(axis=1), atol=1e-4)


def test_the_best_beam_at_alpha_0_of_the_trained_model_scores_its_forced_log_prob(exported):
    translator = exported[0]
    source_ids = translator.source_ids(tf.constant(SENTENCES[:5]))
    ids, scores = translate_ids(translator.transformer, source_ids, 4, 0.0, 10, translator.output_kernel)
    _, log_probs = forced_log_probs(translator.transformer, source_ids, ids[:, 0, :])
    np.testing.assert_allclose(log_probs, scores[:, 0], atol=1e-4)


@pytest.mark.slow
def test_the_command_gives_the_same_lines_from_the_model_dir_and_the_saved_model(
    model_dir, exported, signature_outputs, files, tmp_path, capsys
):
    # About 20 s: it loads a model directory (weights averaged, the signature traced) and
    # a SavedModel, the two paths it compares.
    source, target = files
    _, _, path, _ = exported
    from_dir, from_export = tmp_path / "dir.tsv", tmp_path / "export.tsv"
    # Batches of 2 over length-sorted pairs: the lines must still come back in file order.
    flags = ["--source", source, "--target", target, "--batch-size", "2", "--normalize"]
    assert main(["--model-dir", model_dir, *flags, "--output", str(from_dir)]) == 0
    assert "warning: 1 pair(s) longer than the model's positions were scored cut to fit (lines 6)" in (
        capsys.readouterr().err
    )
    assert main(["--saved-model", path, *flags]) == 0  # to stdout
    export_lines = capsys.readouterr().out.splitlines()
    from_export.write_text("".join(line + "\n" for line in export_lines))
    dir_rows, export_rows = (parse(p.read_text().splitlines()) for p in (from_dir, from_export))
    assert len(dir_rows) == len(export_rows) == len(SENTENCES)
    for row, (mine, theirs) in enumerate(zip(dir_rows, export_rows)):
        length = int(signature_outputs["target_lengths"][row])
        assert mine[1] == theirs[1] == len(mine[2]) == len(theirs[2]) == length
        np.testing.assert_allclose(mine[0], theirs[0], atol=2e-4)
        np.testing.assert_allclose(mine[2], theirs[2], atol=2e-5)
        # The whole batch in file order, through the signature, gives the same numbers.
        np.testing.assert_allclose(theirs[0], signature_outputs["log_prob"][row], atol=2e-4)
        np.testing.assert_allclose(theirs[2], signature_outputs["token_log_probs"][row, :length], atol=2e-5)
        np.testing.assert_allclose(theirs[3], [theirs[0] / length], atol=2e-6)


def test_a_line_is_total_tokens_per_token_values_and_the_mean_with_normalize():
    assert format_line(-1.5, [-1.0, -0.5]) == "-1.500000\t2\t-1.000000 -0.500000"
    assert format_line(-1.5, [-1.0, -0.5], normalize=True) == "-1.500000\t2\t-1.000000 -0.500000\t-0.750000"


def stdin_of(data):
    return io.TextIOWrapper(io.BytesIO(data))


def test_the_target_from_standard_input_reads_as_the_file(files):
    source, target = files
    with open(target, "rb") as f:
        data = f.read()
    expected = read_pairs(source, target)
    assert read_pairs(source, "-", stdin_of(data)) == expected
    # Windows line ends and no final newline read alike.
    assert read_pairs(source, "-", stdin_of(data.replace(b"\n", b"\r\n").rstrip(b"\r\n"))) == expected


def test_files_of_different_lengths_are_refused_naming_both_and_nothing_is_written(files, tmp_path, capsys):
    source, target = files
    with open(target, "a", encoding="utf-8") as f:
        f.write("eine Zeile zu viel\n")
    output = tmp_path / "scores.tsv"
    assert main(["--model-dir", str(tmp_path), "--source", source, "--target", target, "--output", str(output)]) == 1
    assert capsys.readouterr().err == (
        f"error: --source {source} has 6 lines but --target {target} has 7; "
        "line N of one must translate line N of the other\n"
    )
    assert sorted(os.listdir(tmp_path)) == ["source.en", "target.de"]  # no output, no temporary file


def test_standard_input_of_another_length_is_named_as_such(files, capsys):
    source, _ = files
    with pytest.raises(Exception, match=r"- \(standard input\) has 2"):
        read_pairs(source, "-", stdin_of(b"eins\nzwei\n"))


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--source", "missing.en"], "--source: file not found: missing.en"),
        (["--target", "missing.de"], "--target: file not found: missing.de"),
        (["--source", "-", "--target", "-"], "--source and --target cannot both read standard input (-)"),
        (["--batch-size", "0"], "argument --batch-size: must be at least 1, got 0"),
        (["--checkpoint", "best"], "--checkpoint applies to --model-dir only"),
        (["--saved-model", "nowhere"], "--saved-model: no model exported under nowhere yet"),
        (["--model-dir", "nowhere"], "--model-dir nowhere: no such directory"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(files, exported, tmp_path, capsys, flags, message):
    source, target = files
    defaults = {"--saved-model": exported[2], "--source": source, "--target": target}
    if "--model-dir" in flags:
        del defaults["--saved-model"]
    given = dict(zip(flags[::2], flags[1::2]))
    argv = [item for flag, value in {**defaults, **given}.items() for item in (flag, value)]
    output = tmp_path / "scores.tsv"
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--output", str(output)])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
    assert not output.exists()


def test_without_a_model_flag_it_reads_the_default_export(files, monkeypatch, capsys):
    monkeypatch.chdir(os.path.dirname(files[0]))
    with pytest.raises(SystemExit) as exit_:
        main(["--source", files[0], "--target", files[1]])
    assert exit_.value.code == 2
    assert "--saved-model: no model exported under saved_models/translator yet" in capsys.readouterr().err


def test_flags_are_checked_before_tensorflow_is_imported(tmp_path):
    code = (
        "import sys\n"
        "from app.commands.score import main\n"
        "try:\n"
        "    main(['--model-dir', '.', '--source', 'missing.en', '--target', 'missing.de'])\n"
        "except SystemExit as exit_:\n"
        "    print(exit_.code, 'tensorflow' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.stdout == "2 False\n", result.stderr
    assert "--source: file not found: missing.en" in result.stderr
