"""Documents (data/documents.py): paragraphs and blank lines, the sentence rule, one `align` call.

The sentence rule's cases are in document_cases.json, for a JavaScript port to be checked on
too.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from data.documents import Blank, Paragraph, read_blocks, split_sentences, write_blocks
from data.words import words

ROOT = Path(__file__).parents[2]
CASES = json.loads((Path(__file__).parent / "document_cases.json").read_text(encoding="utf-8"))["cases"]
DOCUMENT = "P1 a.\nP1 b\n\nP2.\n\n\nP3 one. P3 two.\n"


def test_paragraphs_and_blank_lines_are_read_and_written_back_in_place():
    blocks = read_blocks(DOCUMENT.splitlines())
    assert blocks == [
        Paragraph(1, "P1 a.\nP1 b"), Blank(), Paragraph(4, "P2."), Blank(), Blank(), Paragraph(7, "P3 one. P3 two.")
    ]
    assert write_blocks(blocks, ["t1", "t2", "t3"]) == ["t1", "", "t2", "", "", "t3"]
    # Written with their own texts, the paragraphs give the document back.
    texts = [block.text for block in blocks if isinstance(block, Paragraph)]
    assert "\n".join(write_blocks(blocks, texts)) + "\n" == DOCUMENT
    assert read_blocks(DOCUMENT.splitlines(keepends=True)) == blocks


def test_leading_trailing_and_white_space_lines_are_blank_lines():
    blocks = read_blocks(["\n", " \t\xa0\r\n", "  A\r\n", "b \n", "\u3000\n"])
    assert blocks == [Blank(), Blank(), Paragraph(3, "  A\nb "), Blank()]
    assert write_blocks(blocks, iter(["t"])) == ["", "", "t", ""]
    assert read_blocks([]) == [] and write_blocks([], []) == []
    with pytest.raises(ValueError, match="2 texts for 1 paragraphs"):
        write_blocks(blocks, ["t", "u"])


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_sentences_are_split_as_the_shared_cases_say(case):
    text = case["text"]
    spans = split_sentences(text, case["language"], case["breaks"])
    assert spans == [tuple(span) for span in case["spans"]]
    assert [text[start:end] for start, end in spans] == case["sentences"]
    # Every word once, in order: what shifting the links by word counts relies on.
    assert [word for start, end in spans for word in words(text[start:end])] == words(text)


def test_segments_that_do_not_give_the_text_back_make_one_sentence(monkeypatch):
    sentencex = pytest.importorskip("sentencex")
    monkeypatch.setattr(sentencex, "segment", lambda language, text: ["Hi there. ", "Bye"])
    assert split_sentences(" Hi there. Bye now. ", "en") == [(1, 19)]


def test_a_break_inside_a_word_or_outside_the_text_is_refused():
    with pytest.raises(ValueError, match="break 2: inside the word 'abcd'"):
        split_sentences("abcd efg.", "en", [2])
    for offset in (-1, 10):
        with pytest.raises(ValueError, match=f"break {offset}: outside the text's 9 characters"):
            split_sentences("abcd efg.", "en", [offset])


def test_importing_the_module_loads_no_splitter():
    code = "import sys, data.documents; assert 'sentencex' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
