"""python -m app.translate --markup html and --alignments FILE, through the export's align
signature: every tag of a line once in its translation, well-formed; malformed markup
refused before the model loads, naming its line and column; one Pharaoh line per line.

The shared tiny export (conftest.py's `exported`) is trained for four steps: its
translations are repetitions, but every property below holds for any weights.
"""

import re
import types

import pytest

from app.commands import translate
from app.commands.translate import main
from data.markup import markup_text, strip
from data.words import parse_pharaoh, words
from tests.data.test_markup import _TagChecker, assert_kept

pytestmark = pytest.mark.usefixtures("load_each_export_once")

# Nested, self-closing and void tags, attributes with entities (tests/data/test_markup.py's first case).
NESTED = (
    '<p>A <b>big <i>red</i></b> dog<br/> sat <img src="x.png" alt="a &amp; b"> on '
    '<a href="/m?a=1&amp;b=2">the mat</a>.</p>'
)
# Without & or <: --markup changes nothing.
PLAIN = [
    "A man rides a bike.",
    "Two dogs play in the snow, and a child watches them.",
    "A woman.",
    "Ein Mann 🚲 fährt Fahrrad — 東京 Москва",
    "Three people sit on a long bench in the park.",
]


def write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def read(path):
    return open(path, encoding="utf-8").read().split("\n")[:-1]


def run(args, tmp_path, name="output.txt"):
    """The command in this process with --output: its output's lines."""
    output = tmp_path / name
    assert main([*args, "--output", str(output)]) == 0
    return read(output)


@pytest.mark.slow
def test_nested_markup_comes_back_well_formed_with_every_tag_once(exported, tmp_path):
    path = exported[2]
    source = write(tmp_path / "input.html", [NESTED])
    (output,) = run(["--saved-model", path, "--input", source, "--markup", "html"], tmp_path)
    plain = write(tmp_path / "plain.en", [strip(NESTED).text])
    (translation,) = run(["--saved-model", path, "--input", plain], tmp_path, "plain.txt")
    assert _TagChecker(output).problems == [], output
    assert_kept(NESTED, translation, output)  # each tag once as written, and the translation's text


@pytest.mark.slow
def test_markup_free_lines_come_out_byte_for_byte_as_without_markup(exported, tmp_path, capsysbinary):
    source = write(tmp_path / "input.en", PLAIN)
    outputs = []
    for extra in ([], ["--markup", "html"]):
        assert main(["--saved-model", exported[2], "--input", source, "--batch-size", "2", *extra]) == 0
        outputs.append(capsysbinary.readouterr().out)
    assert outputs[0].count(b"\n") == len(PLAIN)
    assert outputs[1] == outputs[0]


@pytest.mark.slow
def test_alignments_give_one_pharaoh_line_per_line_within_both_word_counts(exported, tmp_path):
    lines = [NESTED, "", "A man rides a bike.", "<br>", "   ", "A <b>dog</b> runs."]
    source = write(tmp_path / "input.html", lines)
    alignments = tmp_path / "output.align"
    args = ["--saved-model", exported[2], "--input", source, "--alignments", str(alignments)]
    outputs = run([*args, "--markup", "html"], tmp_path)
    pharaohs = read(alignments)
    assert len(outputs) == len(pharaohs) == len(lines)
    assert outputs[1] == outputs[4] == "" and outputs[3] == "<br>"  # blank: empty; tags without words: as they are
    assert pharaohs[1] == pharaohs[3] == pharaohs[4] == ""
    for line, output, pharaoh in zip(lines, outputs, pharaohs):
        source_words, target_words = len(words(markup_text(line))), len(words(markup_text(output)))
        parse_pharaoh(pharaoh, source_words, target_words)  # raises on a link out of range
        assert bool(pharaoh) == bool(source_words and target_words), (line, output, pharaoh)
    # Without --markup, the same lines as text: the links count the words as written.
    outputs = run(args, tmp_path, "text.txt")
    pharaohs = read(alignments)
    assert len(outputs) == len(pharaohs) == len(lines)
    for line, output, pharaoh in zip(lines, outputs, pharaohs):
        parse_pharaoh(pharaoh, len(words(line)), len(words(output)))
        assert bool(pharaoh) == bool(line.strip() and output.strip()), (line, output, pharaoh)


def upper_aligner(sentences):
    """A stand-in for make_aligner's function: each sentence in capitals, scored by its length,
    its words linked to themselves."""
    return [(text.upper(), float(len(text)), " ".join(f"{i}-{i}" for i, _ in enumerate(words(text))))
            for text in sentences]


def test_each_line_gets_its_own_translation_score_and_links_whatever_the_batches(tmp_path):
    lines = ["A <b>dog</b> runs in the <i>snow</i>.", "", "<br/>", "Two  cats.", "   ", "A man."]
    _, args = translate.parse_args(["--model-dir", str(tmp_path), "--markup", "html", "--scores"])
    plan = translate.plan_translation(args)
    aligner = translate.Aligner(upper_aligner, batch_size=2)
    stripped = translate.checked_markup(plan, lines)
    results, pharaohs = translate.translate_aligned(plan, lines, aligner, stripped=stripped)
    # A tag without words comes back as it was, without a score; a tag inside a word takes the word.
    assert translate.format_output(results, scores=plan.scores).split("\n") == [
        "23.000000\tA <b>DOG</b> RUNS IN THE <i>SNOW.</i>", "", "<br/>", "10.000000\tTWO  CATS.", "",
        "6.000000\tA MAN.", "",
    ]
    assert pharaohs == ["0-0 1-1 2-2 3-3 4-4 5-5", "", "", "0-0 1-1", "", "0-0 1-1"]
    # Without --markup, the lines as text; a blank one is not sent.
    plan = translate.plan_translation(translate.parse_args(["--model-dir", str(tmp_path), "--alignments", "a"])[1])
    results, pharaohs = translate.translate_aligned(plan, lines, translate.Aligner(upper_aligner, batch_size=2))
    assert [hypotheses[0][0] if hypotheses else None for hypotheses in results] == [
        "A <B>DOG</B> RUNS IN THE <I>SNOW</I>.", None, "<BR/>", "TWO  CATS.", None, "A MAN."
    ]
    assert pharaohs == ["0-0 1-1 2-2 3-3 4-4 5-5", "", "0-0", "0-0 1-1", "", "0-0 1-1"]


def test_malformed_markup_exits_1_naming_its_line_and_column_before_the_model_loads(
    exported, tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(translate, "make_aligner", lambda plan: pytest.fail("the model loaded"))
    source = write(tmp_path / "input.html", ["A <b>dog</b>.", "A <i>cat.", "A bird."])
    output = tmp_path / "output.html"
    args = ["--saved-model", exported[2], "--input", source, "--markup", "html", "--output", str(output)]
    assert main([*args, "--alignments", str(tmp_path / "output.align")]) == 1
    err = capsys.readouterr().err
    assert err == f"error: --input {source}: line 2, column 3: <i> opened at 2:3 is never closed\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["input.html"]
    # In a document, the file's line too: the paragraph of lines 4-5 is read as one text.
    source = write(tmp_path / "input.html", ["A dog.", "", "", "A cat", "runs </b> away."])
    assert main([*args[:-2], "--document"]) == 1
    assert "line 5, column 6: </b> at 5:6 closes nothing" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--markup", "html", "--nbest", "2"],
         "--nbest cannot apply with --markup: the align signature gives the best translation of each line only"),
        (["--alignments", "A", "--sampling-topk", "5"],
         "sampling .--sampling-topk/-topp/-temperature. cannot apply with --alignments: the align signature runs"),
        (["--markup", "html", "--sampling-temperature", "2"], "sampling .* cannot apply with --markup"),
        (["--markup", "html", "--constraints", "C"], "--constraints cannot apply with --markup: the align signature"),
        (["--document", "--glossary", "G", "--no-repeat-ngram-size", "2"],
         "--glossary and --no-repeat-ngram-size cannot apply with --document"),
        (["--alignments", "A", "--prefixes", "P"], "--prefixes cannot apply with --alignments"),
        (["--markup", "html", "--document", "--beam-size", "1"],
         "--beam-size 1 .greedy. cannot apply with --markup and --document"),
        (["--alignments", "A", "--alpha", "1"], "--alpha cannot apply with --alignments to a SavedModel: its align "
         "signature decodes with the settings it was exported with"),
        (["--markup", "html", "--max-extra-length", "5"], "--max-extra-length cannot apply with --markup"),
        (["--document", "--scores"], "--scores cannot apply with --document"),
        (["--markup", "xml"], "argument --markup: invalid choice: 'xml'"),
    ],
)
def test_flags_the_align_signature_cannot_apply_exit_2_naming_them(exported, args, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--saved-model", exported[2], *args])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert re.search(message, err), err


def test_an_alignments_file_over_the_input_or_the_output_exits_2(exported, tmp_path, capsys):
    source = write(tmp_path / "input.en", ["A dog."])
    for args, message in (
        (["--alignments", source], f"--alignments {source} is the --input file; the word alignments would "
         "overwrite it"),
        (["--alignments", str(tmp_path / "out"), "--output", str(tmp_path / "out")],
         f"--alignments {tmp_path / 'out'} is the --output file"),
        (["--alignments", str(tmp_path)], f"--alignments {tmp_path} is a directory"),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(["--saved-model", exported[2], "--input", source, *args])
        assert exit_.value.code == 2
        assert message in capsys.readouterr().err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["input.en"]


def test_an_export_without_the_align_signature_is_refused_to_be_exported_again(exported, tmp_path, monkeypatch, capsys):
    older = types.SimpleNamespace(signatures={
        "serving_default": None,
        "nbest": types.SimpleNamespace(structured_outputs={"translations": types.SimpleNamespace(shape=(None, 4))}),
    })
    monkeypatch.setattr(translate.ModelSource, "load_saved_model", lambda self: older)
    source = write(tmp_path / "input.en", ["A dog."])
    with pytest.raises(SystemExit) as exit_:
        main(["--saved-model", exported[2], "--input", source, "--markup", "html", "--alignments", str(tmp_path / "a")])
    assert exit_.value.code == 2
    assert (f"--alignments and --markup: {exported[2]} was exported before word alignments existed (no align "
            "signature); export it again, or give --model-dir") in capsys.readouterr().err


def test_the_align_flags_say_their_defaults_in_help():
    parser = translate.build_parser()
    group = next(group for group in parser._action_groups if group.title.startswith("markup, documents"))
    assert [action.option_strings[0] for action in group._group_actions] == ["--alignments", "--markup", "--document"]
    assert all("default" in action.help for action in group._group_actions)
