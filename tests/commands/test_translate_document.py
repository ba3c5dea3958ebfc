"""python -m app.translate --document: paragraphs separated by blank lines, split into
sentences in the export's source language, each paragraph written as one line, its
sentences' translations joined by a space; with --markup html, a tag spanning sentences
kept whole; from a training run (--model-dir) as from its export.

The shared tiny export (conftest.py's `exported`) is trained for four steps: its
translations are repetitions, but every property below holds for any weights.
"""

import json
import shutil

import pytest

from app.commands import translate
from data.documents import Paragraph, read_blocks, split_sentences
from data.markup import markup_text, strip
from data.words import parse_pharaoh, words
from tests.commands.test_translate_markup import read, run
from tests.data.test_markup import _TagChecker

pytestmark = pytest.mark.usefixtures("load_each_export_once")

DOCUMENT = "P1 a.\nP1 b\n\nP2.\n\n\nP3 one. P3 two.\n"
# P3 with a <b> from its first sentence into its second.
MARKED = "P1 a.\nP1 b\n\nP2.\n\n\nP3 <b>one. P3</b> two.\n"


@pytest.fixture(scope="module")
def saved_model(exported, model_dir, tmp_path_factory):
    """A copy of the shared export with the export_info.json export.py writes beside it, which
    names the source language the sentences are split in; its path. The SavedModel itself is
    loaded once per process (conftest.py's `load_each_export_once`)."""
    from app.export.saved_model import export_metadata

    path = tmp_path_factory.mktemp("export") / "1"
    shutil.copytree(exported[2], path)
    (path / "export_info.json").write_text(json.dumps(export_metadata(model_dir, "weights", exported[0].decoding)))
    return str(path)


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def plain(saved_model, tmp_path_factory):
    """Each paragraph of DOCUMENT as the same export translates its sentences line by line,
    without --document: `[(sentences, translations)]`, one per paragraph."""
    directory = tmp_path_factory.mktemp("plain")
    source_lang = json.load(open(f"{saved_model}/export_info.json"))["source_lang"]
    # As data.documents reads a paragraph: its lines joined by spaces.
    texts = [block.text.replace("\n", " ") for block in read_blocks(DOCUMENT.split("\n")[:-1])
             if isinstance(block, Paragraph)]
    paragraphs = [[text[start:end] for start, end in split_sentences(text, source_lang)] for text in texts]
    sentences = [sentence for paragraph in paragraphs for sentence in paragraph]
    translations = iter(run(["--saved-model", saved_model, "--input", write(directory / "in.en", "\n".join(sentences))],
                            directory))
    return [(paragraph, [next(translations) for _ in paragraph]) for paragraph in paragraphs]


def joined(translations):
    """A paragraph's translation: its sentences', empty ones left out, joined by one space."""
    return " ".join(translation for translation in translations if translation)


@pytest.mark.slow
def test_each_paragraph_is_one_line_of_its_sentences_translations_and_blank_lines_stay(
    saved_model, plain, tmp_path
):
    assert [len(sentences) for sentences, _ in plain] == [1, 1, 2]  # P3's two sentences are split
    source = write(tmp_path / "input.en", DOCUMENT)
    alignments = tmp_path / "output.align"
    lines = run(["--saved-model", saved_model, "--input", source, "--document", "--alignments", str(alignments)],
                tmp_path)
    t1, t2, t3 = (joined(translations) for _, translations in plain)
    assert lines == [t1, "", t2, "", "", t3]
    pharaohs = read(alignments)
    assert [bool(line) for line in pharaohs] == [True, False, True, False, False, True]
    for (sentences, _), line, pharaoh in zip(plain, [t1, t2, t3], [pharaohs[0], pharaohs[2], pharaohs[5]]):
        links = parse_pharaoh(pharaoh, len(words(" ".join(sentences))), len(words(line)))
        assert {j for _, j in links} == set(range(len(words(line))))  # every translation word has a link


@pytest.mark.slow
def test_a_tag_spanning_two_sentences_comes_back_once_around_the_joint(saved_model, plain, tmp_path):
    source = write(tmp_path / "input.html", MARKED)
    lines = run(["--saved-model", saved_model, "--input", source, "--document", "--markup", "html"], tmp_path)
    assert len(lines) == 6 and lines[1] == lines[3] == lines[4] == ""
    assert lines[0] == joined(plain[0][1]) and lines[2] == joined(plain[1][1])
    line = lines[5]
    assert _TagChecker(line).problems == [], line
    assert line.count("<b>") == line.count("</b>") == 1, line
    assert [(element.open, element.close) for element in strip(line).elements] == [("<b>", "</b>")]
    assert markup_text(line) == joined(plain[2][1])


@pytest.mark.slow
def test_a_training_run_translates_a_document_as_its_export(saved_model, model_dir, tmp_path):
    source = write(tmp_path / "input.html", MARKED)
    args = ["--input", source, "--document", "--markup", "html", "--alignments"]
    from_export = run(["--saved-model", saved_model, *args, str(tmp_path / "export.align")], tmp_path, "export")
    from_run = run(["--model-dir", model_dir, *args, str(tmp_path / "run.align")], tmp_path, "run")
    assert from_run == from_export
    assert read(tmp_path / "run.align") == read(tmp_path / "export.align")


def test_an_export_that_does_not_name_its_source_language_splits_as_english(exported, tmp_path, monkeypatch, capsys):
    # A source without any sentence: nothing to decode.
    monkeypatch.setattr(translate, "make_aligner", lambda plan: lambda sentences: pytest.fail("decoded"))
    source = write(tmp_path / "input.en", "\n\n")
    assert run(["--saved-model", exported[2], "--input", source, "--document"], tmp_path) == ["", ""]
    assert capsys.readouterr().err == (
        f"note: {exported[2]} does not record its source language (export_info.json); sentences are split by the "
        "rules of 'en'\n"
    )
