"""python -m app.translate steered: --constraints, --prefixes, --glossary and
--no-repeat-ngram-size, through the export's constrained signature (or, with
--model-dir, the in-memory search), files checked against the input before decoding.

The shared tiny run (conftest.py's `model_dir` and `exported`) is trained for four steps:
unforced it writes "er" again and again, so every phrase below is one it would not write.
"""

import types

import pytest
import tensorflow as tf

from app.cli.steering import SentenceSteering, SteeringFlags, read_steering
from app.commands import translate
from app.commands.translate import SteeredLines, format_output, main, translate_lines
from app.decoding.constrained_beam_search import MAX_PHRASES
from app.decoding.glossary import parse_glossary
from app.export.export_info import ExportedDecoding

pytestmark = pytest.mark.usefixtures("load_each_export_once")

LINES = ["A man rides a bike.", "", "Two dogs play in the snow.", "A woman."]
GLOSSARY = "# source\ttarget\nbike\tFahrrad\nsnow\tSchnee\ndogs\tHunde\n"
# The alpha the export records: not DecodingConfig's, so that a test sees which one is sent.
ALPHA = 1.0


def write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def read(path):
    return open(path, encoding="utf-8").read().split("\n")[:-1]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The input, a glossary, and constraints and prefixes files aligned with it."""
    directory = tmp_path_factory.mktemp("steering")
    (directory / "terms.tsv").write_text(GLOSSARY, encoding="utf-8")
    return types.SimpleNamespace(
        input=write(directory / "input.en", LINES),
        glossary=str(directory / "terms.tsv"),
        constraints=write(directory / "constraints.txt", ["Fahrrad", "Hund", "", "Mann\tFrau"]),
        prefixes=write(directory / "prefixes.txt", ["Ein Mann fährt", "Zwei", "", ""]),
    )


@pytest.fixture(scope="module")
def saved_model(exported, model_dir, tmp_path_factory):
    """A copy of the shared export with the export_info.json export.py writes beside it,
    recording `ALPHA` (the alpha search's choice, say), which the constrained signature
    then gets; its path. The SavedModel itself is loaded once per process (conftest.py's
    `load_each_export_once`)."""
    import json
    import shutil

    from app.export.saved_model import export_metadata

    path = tmp_path_factory.mktemp("export") / "1"
    shutil.copytree(exported[2], path)
    info = export_metadata(model_dir, "weights", exported[0].decoding)
    (path / "export_info.json").write_text(json.dumps({**info, "alpha": ALPHA}))
    return str(path)


def run(args, tmp_path, capsys, name="output.txt"):
    """The command in this process with --output: `(its output's lines, its standard error)`."""
    output = tmp_path / name
    assert main([*args, "--output", str(output)]) == 0
    return output.read_text(encoding="utf-8").split("\n")[:-1], capsys.readouterr().err


def normalized(translator, text):
    """`text` as the tokenizer spells it: what a forced phrase or prefix detokenizes to."""
    tokenizer = translator.tokenizer
    return tokenizer.detokenize(tokenizer.tokenize(tf.constant([text])).to_tensor()).numpy()[0].decode()


def recording(monkeypatch):
    """Every call of the constrained signature from here on, its inputs as Python lists."""
    calls = []
    make = translate._constrained_decoder

    def spying(constrained, *rest):
        def call(**inputs):
            calls.append({name: [v.decode() if isinstance(v, bytes) else v for v in value.numpy().tolist()]
                          for name, value in inputs.items()})
            return constrained(**inputs)

        return make(call, *rest)

    monkeypatch.setattr(translate, "_constrained_decoder", spying)
    return calls


def fake_signature(calls, unmet=()):
    """A stand-in for the constrained signature: records its inputs (as Python lists) in
    `calls` and answers "<input>" for each, constraints_met false for the inputs in `unmet`."""

    def constrained(**inputs):
        calls.append({name: [v.decode() if isinstance(v, bytes) else v for v in value.numpy().tolist()]
                      for name, value in inputs.items()})
        texts = calls[-1]["inputs"]
        return {
            "translations": tf.constant([f"<{text}>" for text in texts]),
            "scores": tf.zeros([len(texts)]),
            "constraints_met": tf.constant([text not in unmet for text in texts]),
        }

    return constrained


def test_glossary_terms_and_file_constraints_are_what_the_signature_gets(files):
    flags = SteeringFlags(files.constraints, files.prefixes, files.glossary, no_repeat_ngram_size=2)
    steered = SteeredLines(read_steering(flags, LINES, "--input input.en", MAX_PHRASES))
    calls = []
    decode = translate._constrained_decoder(fake_signature(calls), steered, 1.5, 7)
    results = translate_lines(decode, LINES, 2)
    glossary = parse_glossary(GLOSSARY)
    assert [glossary.constraints(line) for line in LINES] == ["Fahrrad", "", "Hunde\tSchnee", ""]
    sent = {text: (prefix, constraints) for call in calls
            for text, prefix, constraints in zip(call["inputs"], call["prefixes"], call["constraints"])}
    # The file's phrases first, then the glossary's terms, each phrase once; line 2 is empty,
    # not decoded, whatever its prefix says.
    assert sent == {
        LINES[0]: ("Ein Mann fährt", "Fahrrad"),
        LINES[2]: ("", "Hunde\tSchnee"),
        LINES[3]: ("", "Mann\tFrau"),
    }
    assert [(call["no_repeat_ngram_size"], call["alpha"], call["max_extra_length"]) for call in calls] == [
        ([2, 2], [1.5, 1.5], [7, 7]), ([2], [1.5], [7])
    ]
    assert format_output(results) == f"<{LINES[0]}>\n\n<{LINES[2]}>\n<{LINES[3]}>\n"


def test_lines_whose_constraints_were_not_met_are_named_in_order():
    steered = SteeredLines([SentenceSteering(constraints="x")] * 5)
    decode = translate._constrained_decoder(fake_signature([], unmet={"e", "b"}), steered, 0.6, 50)
    results = translate_lines(decode, ["a", "b", "c", "d", "e"], 2)
    assert [hypotheses[0][0] for hypotheses in results] == ["<a>", "<b>", "<c>", "<d>", "<e>"]  # written all the same
    assert steered.warnings() == [
        f"warning: line {n}: no translation within the length limit holds every constraint; the best one found is "
        "written" for n in (2, 5)
    ]


@pytest.mark.slow
def test_steered_translations_end_to_end(exported, saved_model, files, tmp_path, capsys, monkeypatch):
    translator = exported[0]
    calls = recording(monkeypatch)
    # Line 5: three 20-word phrases, which the model's 48 positions cannot all hold.
    long_phrase = " ".join(["Hund"] * 20)
    impossible = "\t".join([long_phrase, "Fahrrad " + long_phrase, "Schnee " + long_phrase])
    source = write(tmp_path / "input.en", [*LINES, "A dog."])
    constraints = write(tmp_path / "constraints.txt", [*read(files.constraints), impossible])
    prefixes = write(tmp_path / "prefixes.txt", [*read(files.prefixes), ""])
    args = ["--saved-model", saved_model, "--input", source, "--constraints", constraints, "--prefixes", prefixes,
            "--glossary", files.glossary]
    lines, err = run(args, tmp_path, capsys)
    assert err == (
        "warning: line 5: no translation within the length limit holds every constraint; the best one found is "
        "written\n"
    )
    assert lines[1] == "" and lines[4]  # an empty line stays empty; an unmet line is written all the same
    assert lines[0].startswith(normalized(translator, "Ein Mann fährt")) and "Fahrrad" in lines[0]
    assert "Hunde" in lines[2] and "Schnee" in lines[2]
    assert "Mann" in lines[3] and "Frau" in lines[3]
    unsteered, _ = run(["--saved-model", saved_model, "--input", source], tmp_path, capsys, "plain.txt")
    assert not any(word in unsteered[0] for word in ("Fahrrad", "Ein Mann fährt"))
    # What the signature got: the export's recorded alpha and extra length, and per line
    # the file's phrases, then the glossary's terms.
    glossary = parse_glossary(GLOSSARY)
    sent = {text: phrases for call in calls for text, phrases in zip(call["inputs"], call["constraints"])}
    assert sent == {
        LINES[0]: "Fahrrad", LINES[2]: glossary.constraints(LINES[2]), LINES[3]: "Mann\tFrau", "A dog.": impossible,
    }
    assert {(alpha, extra) for call in calls for alpha, extra in zip(call["alpha"], call["max_extra_length"])} == {
        (ALPHA, translator.decoding.max_extra_length)
    }


@pytest.mark.slow
def test_a_training_run_steers_as_its_export(saved_model, model_dir, files, tmp_path, capsys):
    # --model-dir runs the same search in memory, at its --beam-size (the export's here).
    args = ["--input", files.input, "--constraints", files.constraints, "--prefixes", files.prefixes,
            "--no-repeat-ngram-size", "3", "--scores"]
    from_export, _ = run(["--saved-model", saved_model, *args], tmp_path, capsys)
    from_run, _ = run(["--model-dir", model_dir, "--alpha", str(ALPHA), *args], tmp_path, capsys, "from_run")
    assert [line.split("\t")[1:] for line in from_run] == [line.split("\t")[1:] for line in from_export]
    for got, want in zip(from_run, from_export):
        if want:
            assert float(got.split("\t")[0]) == pytest.approx(float(want.split("\t")[0]), rel=1e-5)


def test_a_misaligned_file_is_refused_naming_both_files_and_counts(saved_model, files, tmp_path, capsys):
    short = write(tmp_path / "short.txt", ["Fahrrad"])
    for flag in ("--constraints", "--prefixes"):
        with pytest.raises(SystemExit) as exit_:
            main(["--saved-model", saved_model, "--input", files.input, flag, short, "--output", str(tmp_path / "out")])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert f"{flag} {short} has 1 lines but --input {files.input} has 4" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--glossary", "G", "--sampling-topk", "5"], "--glossary steer beam search, not sampling"),
        (["--constraints", "C", "--no-repeat-ngram-size", "2", "--nbest", "2"],
         "--nbest: --constraints and --no-repeat-ngram-size give the best translation of each line only"),
        (["--prefixes", "P", "--beam-size", "1"], "--beam-size 1 (greedy) cannot be steered by --prefixes"),
        (["--no-repeat-ngram-size", "-1"], "argument --no-repeat-ngram-size: must be at least 0, got -1"),
        (["--glossary", "/no/such.tsv"], "--glossary /no/such.tsv: no such file"),
        (["--prefixes", "/"], "--prefixes /: is a directory"),
    ],
)
def test_steering_flags_that_cannot_apply_exit_2_naming_them(saved_model, args, message, capsys):
    path = saved_model
    with pytest.raises(SystemExit) as exit_:
        main(["--saved-model", path, *args])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_an_n_gram_size_of_0_is_off_and_steers_nothing(exported):
    parser, args = translate.parse_args(["--saved-model", exported[2], "--no-repeat-ngram-size", "0", "--nbest", "2"])
    assert translate.plan_translation(args).steering is None


def test_every_steering_flag_says_its_default_in_help():
    parser = translate.build_parser()
    steering = [action for group in parser._action_groups if group.title.startswith("steering")
                for action in group._group_actions]
    assert [action.option_strings[0] for action in steering] == [
        "--constraints", "--prefixes", "--glossary", "--no-repeat-ngram-size"
    ]
    assert all("default" in action.help for action in steering)


def test_an_export_without_the_constrained_signature_or_its_alpha_is_refused(exported, files):
    _, args = translate.parse_args(["--saved-model", exported[2], "--glossary", files.glossary])
    plan = translate.plan_translation(args)
    older = types.SimpleNamespace(signatures={"serving_default": None})
    with pytest.raises(translate.FlagError, match="--glossary: .* was exported before steering existed "
                       r"\(no constrained signature\); export it again, or give --model-dir"):
        translate._saved_model_constrained(plan, older, ExportedDecoding(0.6, 50, 4), SteeredLines([]))
    unrecorded = types.SimpleNamespace(signatures={"constrained": None})
    with pytest.raises(translate.FlagError, match="export_info.json does not record the alpha it was exported with, "
                       "which the constrained signature needs; give --alpha"):
        translate._saved_model_constrained(plan, unrecorded, ExportedDecoding(None, 50, None), SteeredLines([]))


def test_too_many_phrases_for_a_line_are_refused_before_decoding(saved_model, tmp_path, capsys):
    source = write(tmp_path / "input.en", ["A dog.", "A cat."])
    constraints = write(tmp_path / "c.txt", ["", "\t".join(f"Wort{i}" for i in range(MAX_PHRASES + 1))])
    with pytest.raises(SystemExit):
        main(["--saved-model", saved_model, "--input", source, "--constraints", constraints])
    assert f"line 2: {MAX_PHRASES + 1} constraints; the search takes at most {MAX_PHRASES} a sentence" in (
        capsys.readouterr().err)
