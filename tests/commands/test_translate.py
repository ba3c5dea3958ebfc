"""python -m app.translate: files and pipes, line by line, from an export or a training run,
with n-best tables, scores and seeded sampling; bad flags exit 2 before TensorFlow loads.

The `model_dir` and `exported` fixtures (session-scoped) are in conftest.py.
"""

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tensorflow as tf

from app.commands.translate import format_output, main, read_lines, translate_lines

ROOT = Path(__file__).resolve().parents[2]
# Empty and blank lines between sentences of mixed lengths, an over-long one among them.
LINES = [
    "Two dogs play in the snow, and a child watches them from the door.",
    "",
    "A man rides a bike.",
    "   ",
    "A woman.",
    "Ein Mann 🚲 fährt Fahrrad — 東京 Москва",
    " ".join(["dog"] * 80),
    "A little girl in a pink dress is climbing the stairs of a wooden house.",
]
DECODED = [i for i, line in enumerate(LINES) if line.strip()]


@pytest.fixture(scope="module", autouse=True)
def _load_each_export_once():
    """`tf.saved_model.load` remembers what it loaded: each command run of these tests would
    otherwise load and restore the same export again, the slowest part of a short run."""
    loaded = {}
    load = tf.saved_model.load

    def load_once(path, *args, **kwargs):
        key = os.path.realpath(path)
        if key not in loaded:
            loaded[key] = load(path, *args, **kwargs)
        return loaded[key]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tf.saved_model, "load", load_once)
        yield


@pytest.fixture(scope="module")
def input_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("translate") / "input.en"
    path.write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
    return str(path)


def run(args, tmp_path, name="output.txt"):
    """Runs the command in this process with --output; returns the output's lines."""
    output = tmp_path / name
    assert main([*args, "--output", str(output)]) == 0
    return output.read_text(encoding="utf-8").split("\n")[:-1]


@pytest.fixture(scope="module")
def one_best(exported, input_file, tmp_path_factory):
    """The export's translations of LINES with their scores, by the command: `[(score, text)]`."""
    _, _, path, _ = exported
    args = ["--saved-model", path, "--input", input_file, "--batch-size", "2", "--scores"]
    lines = run(args, tmp_path_factory.mktemp("one_best"))
    return [tuple(line.split("\t")) if line else None for line in lines]


@pytest.mark.slow
def test_lines_come_back_in_order_as_the_translator_gives_them_one_by_one(exported, one_best):
    translator, _, _, _ = exported
    assert len(one_best) == len(LINES)
    for i, line in enumerate(LINES):
        if i not in DECODED:
            assert one_best[i] is None  # an empty line, not decoded
            continue
        expected = translator.serve(tf.constant([line]))
        score, text = one_best[i]
        assert text == expected["translations"][0].numpy().decode("utf-8")
        assert float(score) == pytest.approx(float(expected["scores"][0]), abs=2e-6)


@pytest.mark.slow
def test_a_training_run_and_its_export_give_the_same_lines(model_dir, input_file, one_best, tmp_path):
    lines = run(["--model-dir", model_dir, "--input", input_file, "--batch-size", "3"], tmp_path)
    assert lines == [entry[1] if entry else "" for entry in one_best]


@pytest.mark.slow
def test_nbest_rows_parse_and_rank_1_is_the_best(exported, input_file, one_best, tmp_path):
    _, _, path, _ = exported
    rows = [line.split("\t") for line in run(["--saved-model", path, "--input", input_file, "--nbest", "3"], tmp_path)]
    assert all(len(row) == 4 for row in rows)
    assert [int(row[0]) for row in rows] == [i + 1 for i in DECODED for _ in range(3)]
    assert [int(row[1]) for row in rows] == [1, 2, 3] * len(DECODED)
    for k, i in enumerate(DECODED):
        first = rows[3 * k]
        assert first[3] == one_best[i][1]
        # Other batches (of 64 here, of 2 there) may move the last digit.
        assert float(first[2]) == pytest.approx(float(one_best[i][0]), abs=2e-6)
        scores = [float(row[2]) for row in rows[3 * k : 3 * k + 3]]
        assert scores == sorted(scores, reverse=True)


@pytest.mark.slow
def test_stdin_to_stdout_with_only_translations_on_stdout(exported, one_best, monkeypatch, capsys):
    _, base, _, _ = exported
    # The export base: its newest version (the shared export's only one).
    text = "".join(line + "\n" for line in LINES)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode("utf-8"))))
    assert main(["--saved-model", base, "--batch-size", "4"]) == 0
    out, err = capsys.readouterr()
    assert out.split("\n")[:-1] == [entry[1] if entry else "" for entry in one_best]
    assert err == ""  # not a terminal: no progress bar


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_terminal_gets_a_progress_line_on_stderr(exported, input_file, tmp_path, monkeypatch):
    _, _, path, _ = exported
    monkeypatch.setattr(sys, "stderr", Terminal())
    run(["--saved-model", path, "--input", input_file, "--nbest", "2"], tmp_path)
    assert re.fullmatch(r"\rtranslating: 6 lines in [0-9.:]+( s)? - [0-9.,]+ lines/s\x1b\[K\n", sys.stderr.getvalue())


# Sampling.


def sample(args, tmp_path, name, seed="1", extra=()):
    return run([*args, "--sampling-temperature", "3", "--seed", seed, *extra], tmp_path, name)


def assert_same_samples(lines, expected):
    """`score <TAB> translation` lines: the same translations, the same scores to 1e-6."""
    assert [line.split("\t")[1:] for line in lines] == [line.split("\t")[1:] for line in expected]
    for i in DECODED:
        assert float(lines[i].split("\t")[0]) == pytest.approx(float(expected[i].split("\t")[0]), rel=1e-6)


@pytest.mark.slow
def test_sampling_with_top_k_1_is_greedy_decoding(exported, model_dir, input_file, tmp_path):
    _, _, path, _ = exported
    sampled = run(["--saved-model", path, "--input", input_file, "--sampling-topk", "1"], tmp_path, "sampled")
    # A beam of 1 with no length penalty is greedy decoding (tests/decoding/test_decoding.py).
    greedy = run(["--model-dir", model_dir, "--input", input_file, "--beam-size", "1", "--alpha", "0"], tmp_path)
    assert sampled == greedy
    assert len(sampled) == len(LINES) and all(sampled[i] for i in DECODED)
    assert sorted(os.listdir(tmp_path)) == ["output.txt", "sampled"]  # written whole: no temporary file left


@pytest.mark.slow
def test_sampling_is_reproducible_and_the_export_samples_as_the_training_run(exported, model_dir, input_file, tmp_path):
    _, _, path, _ = exported
    saved = ["--saved-model", path, "--input", input_file, "--scores"]
    first = sample(saved, tmp_path, "first")
    assert sample(saved, tmp_path, "again") == first
    # A line draws the same in other batches: its seed is its own (the scores, sums of
    # many log-probabilities, may move in their last digits).
    assert_same_samples(sample([*saved, "--batch-size", "3"], tmp_path, "batches of 3"), first)
    assert_same_samples(sample(["--model-dir", model_dir, "--input", input_file, "--scores"], tmp_path, "run"), first)
    other = sample(saved, tmp_path, "other", seed="2")
    assert [i for i in DECODED if other[i] == first[i]] == []
    assert [i for i in range(len(LINES)) if i not in DECODED and (other[i], first[i]) != ("", "")] == []


def test_the_sample_signature_takes_one_setting_per_instance(exported):
    # Row by row, so TF Serving's row format carries them and a batch may mix them.
    _, _, path, _ = exported
    signature = tf.saved_model.load(path).signatures["sample"]
    inputs = dict(
        inputs=tf.constant(["A man rides a bike.", "A woman."]), seed=tf.constant([5, 6], tf.int64),
        top_k=tf.constant([1, 0]), top_p=tf.constant([1.0, 0.9]), temperature=tf.constant([1.0, 2.0]),
        max_extra_length=tf.constant([4, 9]),
    )
    both = signature(**inputs)
    for row in range(2):
        alone = signature(**{name: value[row : row + 1] for name, value in inputs.items()})
        assert alone["translations"][0] == both["translations"][row]
    with pytest.raises(tf.errors.InvalidArgumentError, match="top_p must be in"):
        signature(**{**inputs, "top_p": tf.constant([1.0, 1.5])})


# Flags.


@pytest.mark.parametrize(
    "args, message",
    [
        (["--nbest", "0"], "argument --nbest: must be at least 1, got 0"),
        (["--nbest", "5", "--beam-size", "4"], "--nbest 5 asks for more translations than --beam-size 4"),
        (["--batch-size", "0"], "argument --batch-size: must be at least 1"),
        (["--sampling-topp", "0"], r"argument --sampling-topp: must be in \(0, 1\], got 0"),
        (["--sampling-topp", "1.5"], r"argument --sampling-topp: must be in \(0, 1\], got 1.5"),
        (["--sampling-topk", "-1"], "argument --sampling-topk: must be at least 0, got -1"),
        (["--sampling-temperature", "0"], "argument --sampling-temperature: must be a finite number > 0, got 0"),
        (["--sampling-temperature", "nan"], "argument --sampling-temperature: must be a finite number > 0"),
        (["--seed", "-3", "--sampling-topk", "5"], "argument --seed: must be at least 0"),
        (["--sampling-topk", "5", "--nbest", "2"], "--nbest applies to beam search, not to sampling"),
        (["--sampling-topp", "0.9", "--beam-size", "2"], "--beam-size applies to beam search, not to sampling"),
        (["--seed", "3"], "--seed applies to sampling only"),
        (["--nbest", "2", "--scores"], "--scores: the --nbest table holds the scores already"),
        (["--checkpoint", "best"], "--checkpoint applies to --model-dir only"),
        (["--nbest", "2", "--alpha", "1"], "--alpha cannot apply with --nbest to a SavedModel"),
        (["--input", "/no/such/file"], "--input /no/such/file: no such file"),
        (["--input", "/"], "--input /: is a directory; give the file of sentences to translate"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(exported, args, message, capsys):
    _, _, path, _ = exported
    with pytest.raises(SystemExit) as exit_:
        main(["--saved-model", path, *args])
    assert exit_.value.code == 2
    assert re.search(message, capsys.readouterr().err)


def test_a_missing_export_and_an_output_over_the_input_exit_2(input_file, tmp_path, capsys):
    for args, message in (
        (["--saved-model", str(tmp_path / "none")], "--saved-model: no model exported under"),
        (["--model-dir", "/no/such/run"], "--model-dir /no/such/run: no such directory"),
        (["--model-dir", str(tmp_path), "--input", input_file, "--output", input_file], "is the --input file"),
        (["--model-dir", str(tmp_path), "--output", str(tmp_path)], "is a directory"),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(args)
        assert exit_.value.code == 2
        assert message in capsys.readouterr().err


def test_a_beam_size_the_export_lacks_names_both(exported, input_file, capsys):
    _, _, path, _ = exported
    with pytest.raises(SystemExit) as exit_:
        main(["--saved-model", path, "--input", input_file, "--beam-size", "3"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--beam-size 3" in err and "exported with beam size 4" in err


def test_bad_flags_are_refused_before_tensorflow_is_imported():
    code = (
        "import sys\nfrom app.commands.translate import main\n"
        "try:\n    main(['--nbest', '0'])\nexcept SystemExit as e:\n"
        "    print(e.code, 'tensorflow' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert result.stdout == "2 False\n"
    assert "--nbest" in result.stderr


# The parts.


def test_lines_are_read_without_their_line_breaks(tmp_path, monkeypatch):
    path = tmp_path / "in.txt"
    path.write_bytes(b"one\r\n\ntwo \nlast")
    assert read_lines(str(path)) == ["one", "", "two ", "last"]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("a\n\u2028b\n".encode("utf-8"))))
    assert read_lines("-") == ["a", "\u2028b"]  # only \n ends a line, as for wc -l
    path.write_bytes(b"ok\n\xff\n")
    with pytest.raises(ValueError, match="is not UTF-8 text \\(line 2"):
        read_lines(str(path))


def test_output_formats():
    results = [[("Ein Hund.", -0.5), ("Ein\tHund", -1.25)], [], [("Zwei\nHunde.", -2.0), ("Hunde.", -3.0)]]
    assert format_output(results) == "Ein Hund.\n\nZwei Hunde.\n"
    assert format_output(results, scores=True) == "-0.500000\tEin Hund.\n\n-2.000000\tZwei Hunde.\n"
    assert format_output(results, nbest=2) == (
        "1\t1\t-0.500000\tEin Hund.\n1\t2\t-1.250000\tEin Hund\n3\t1\t-2.000000\tZwei Hunde.\n3\t2\t-3.000000\tHunde.\n"
    )


def test_batches_are_sorted_by_length_and_restored_to_input_order():
    lines = ["ccc", "", "a", "bb", " ", "dddd"]
    batches, progress = [], []

    def decode(sentences, numbers):
        batches.append((sentences, numbers))
        return [[(sentence.upper(), 0.0)] for sentence in sentences]

    results = translate_lines(decode, lines, 2, progress.append)
    assert batches == [(["a", "bb"], [3, 4]), (["ccc", "dddd"], [1, 6])]
    assert [r[0][0] if r else None for r in results] == ["CCC", None, "A", "BB", None, "DDDD"]
    assert progress == [2, 4]


@pytest.mark.slow
def test_thread_flags_size_tensorflows_pools_and_change_no_translation(exported, input_file, one_best):
    # A process of its own: TensorFlow's pools are made once per process, at its first op.
    _, _, path, _ = exported
    command = [
        sys.executable, "-m", "app.translate", "--saved-model", path, "--input", input_file,
        "--intra-op-threads", "1", "--inter-op-threads", "1",
    ]
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "CPU threads: 1 per op, 1 ops at once" in completed.stderr
    assert completed.stdout.split("\n")[:-1] == [entry[1] if entry else "" for entry in one_best]


def test_a_negative_thread_count_is_refused_by_name(capsys):
    with pytest.raises(SystemExit):
        main(["--intra-op-threads", "-1"])
    assert "argument --intra-op-threads" in capsys.readouterr().err
