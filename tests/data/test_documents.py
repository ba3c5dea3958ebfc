"""Documents (data/documents.py): paragraphs and blank lines, the sentence rule, one `align` call.

The sentence rule's cases are in document_cases.json, for a JavaScript port to be checked on
too; a fake `align` (the words copied, diagonal links) stands in for the model.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from data.markup import MarkupError
from data.documents import Blank, Paragraph, read_blocks, split_sentences, translate_blocks, write_blocks
from data.words import words

ROOT = Path(__file__).parents[2]
CASES = json.loads((Path(__file__).parent / "document_cases.json").read_text(encoding="utf-8"))["cases"]
DOCUMENT = "P1 a.\nP1 b\n\nP2.\n\n\nP3 one. P3 two.\n"


def copy_align(calls):
    """A fake `align` that writes each sentence's words in capitals, linked on the diagonal."""

    def align(sentences):
        calls.append(list(sentences))
        return [
            (" ".join(words(sentence.upper())), " ".join(f"{k}-{k}" for k in range(len(words(sentence)))))
            for sentence in sentences
        ]

    return align


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


def test_paragraphs_are_translated_in_one_call_and_their_links_shifted():
    blocks = read_blocks(DOCUMENT.splitlines())
    calls = []
    results = translate_blocks(blocks, "en", copy_align(calls))
    # "P1 a." ends no sentence (sentencex reads "a." as an abbreviation); the lines rejoin.
    assert calls == [["P1 a. P1 b", "P2.", "P3 one.", "P3 two."]]
    assert results == [("P1 A. P1 B", "0-0 1-1 2-2 3-3"), ("P2.", "0-0"), ("P3 ONE. P3 TWO.", "0-0 1-1 2-2 3-3")]
    assert write_blocks(blocks, [translation for translation, _ in results]) == [
        "P1 A. P1 B", "", "P2.", "", "", "P3 ONE. P3 TWO."
    ]


def test_source_and_target_words_shift_the_links_each_by_their_own_count():
    # Each translation has one word more than its sentence, linked from the last source word,
    # and the second one is blank: left out of the line, its links (none) shift nothing.
    replies = {"Wir kommen heute.": ("Nous venons aujourd'hui !", "0-0 1-1 2-2 2-3"), "Gut so.": (" ", ""),
               "Er geht jetzt.": ("Il part maintenant !", "0-0 1-1 2-2 2-3")}
    text = "Wir kommen heute. Gut so. Er geht\njetzt."
    blocks = [Blank(), Paragraph(2, text)]
    results = translate_blocks(blocks, "de", lambda sentences: [replies[sentence] for sentence in sentences])
    assert results == [("Nous venons aujourd'hui ! Il part maintenant !", "0-0 1-1 2-2 2-3 5-4 6-5 7-6 7-7")]


def test_align_is_not_called_without_paragraphs_and_its_results_are_checked():
    def never(sentences):
        raise AssertionError("align called")

    assert translate_blocks([Blank(), Blank()], "en", never) == []
    with pytest.raises(ValueError, match="align returned 1 results for 2 sentences"):
        translate_blocks([Paragraph(1, "One here. Two here.")], "en", lambda sentences: [("Eins hier.", "0-0")])
    with pytest.raises(ValueError, match=r"align's links for 'Two here.' -> 'Zwei.': link 0-1: the target has 1 words"):
        translate_blocks(
            [Paragraph(1, "One here. Two here.")], "en", lambda sentences: [("Eins hier.", "0-0"), ("Zwei.", "0-1")]
        )


def test_a_tag_that_spans_sentences_encloses_their_translations_across_the_joint():
    calls = []
    document = ["The cat sat. <b>The dog ran.", "A bird</b> flew &amp; sang.", "", "<br>"]
    results = translate_blocks(read_blocks(document), "en", copy_align(calls), markup="html")
    # The entity is decoded for translation; the paragraph's lines rejoin.
    assert calls == [["The cat sat.", "The dog ran.", "A bird flew & sang."]]
    assert [translation for translation, _ in results] == [
        "THE CAT SAT. <b>THE DOG RAN. A BIRD</b> FLEW &amp; SANG.",
        "<br>",  # no words: the paragraph as it was
    ]
    assert results[0][1] == " ".join(f"{k}-{k}" for k in range(11)) and results[1][1] == ""


def test_block_elements_and_line_breaks_end_sentences():
    calls = []
    paragraph = "<p>First part</p><p>second part<br>third part</p>"
    (translation, _), = translate_blocks([Paragraph(1, paragraph)], "en", copy_align(calls), markup="html")
    assert calls == [["First part", "second part", "third part"]]
    assert translation == "<p>FIRST PART</p> <p>SECOND PART <br>THIRD PART</p>"
    # Without markup the same text is one sentence (nothing ends it).
    calls.clear()
    translate_blocks([Paragraph(1, "First part second part")], "en", copy_align(calls))
    assert calls == [["First part second part"]]


def test_malformed_markup_names_its_file_line_before_anything_is_translated():
    calls = []
    with pytest.raises(MarkupError, match=r"^line 4, column 6: <b> opened at 4:6 is never closed$"):
        translate_blocks(read_blocks(["Fine.", "", "Also fine.", "Then <b>this."]), "en", copy_align(calls), "html")
    assert calls == []
    with pytest.raises(ValueError, match="markup='xml'"):
        translate_blocks([Paragraph(1, "x")], "en", copy_align(calls), markup="xml")