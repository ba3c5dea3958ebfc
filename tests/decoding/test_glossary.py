"""app/decoding/glossary.py: a glossary's file, and which target terms a sentence gets.

The matching rule's cases are in glossary_cases.json, which the page's JavaScript is
checked on too (tests/serving/test_serve.py), so that both apply one rule.
"""

import json
import sys
import unicodedata
from pathlib import Path

import pytest

from app.decoding.glossary import (
    GlossaryError, fold, joined_phrases, parse_glossary, read_glossary, split_phrases, whole_word_matches,
)

CASES = json.loads((Path(__file__).parent / "glossary_cases.json").read_text(encoding="utf-8"))["cases"]


@pytest.mark.parametrize("case", [c for c in CASES if "constraints" in c], ids=lambda case: case["name"])
def test_the_shared_cases_get_their_constraints(case):
    assert parse_glossary(case["glossary"]).constraints(case["sentence"]) == case["constraints"]


@pytest.mark.parametrize("case", [c for c in CASES if "error_line" in c], ids=lambda case: case["name"])
def test_a_malformed_line_is_refused_naming_the_file_the_line_and_its_text(case):
    with pytest.raises(GlossaryError) as error:
        parse_glossary(case["glossary"], "terms.tsv")
    line = case["glossary"].split("\n")[case["error_line"] - 1]
    assert str(error.value).startswith(f"terms.tsv, line {case['error_line']}: {line!r} ")


def test_the_messages_say_what_a_line_must_be():
    with pytest.raises(GlossaryError, match=r"^g.tsv, line 1: 'dog' is not two non-empty columns separated by one "
                       r"tab \(source term <TAB> target term\)$"):
        parse_glossary("dog", "g.tsv")
    with pytest.raises(GlossaryError, match=r"^g.tsv, line 2: 'BANK\\tUfer' gives the source term 'BANK' another "
                       r"target term than line 1 \('Bank'\); keep one of them$"):
        parse_glossary("bank\tBank\nBANK\tUfer", "g.tsv")


def test_a_file_is_read_as_utf8_and_bad_bytes_are_named(tmp_path):
    path = tmp_path / "terms.tsv"
    path.write_bytes("# terms\nbike\tFahrrad\r\nStraße\tstreet\n".encode("utf-8"))
    glossary = read_glossary(str(path))
    assert [(entry.source, entry.target, entry.line) for entry in glossary.entries] == [
        ("Straße", "street", 3), ("bike", "Fahrrad", 2),  # longest folded source first: "strasse"
    ]
    path.write_bytes(b"bike\tFahrrad\ncaf\xe9\tCaf\xe9\n")
    with pytest.raises(GlossaryError, match=r"terms.tsv, line 2: not UTF-8 text \(invalid continuation byte\)$"):
        read_glossary(str(path))
    with pytest.raises(FileNotFoundError):
        read_glossary(str(tmp_path / "none.tsv"))


def test_fold_is_nfkc_casefold_nfkc_with_white_space_collapsed():
    assert fold("  Ｍountain\u3000\u00a0BIKE\t") == "mountain bike"
    assert fold("ǰ") == "ǰ" == unicodedata.normalize("NFC", "j\u030c")  # casefold decomposes it
    assert fold("İstanbul") == "i\u0307stanbul"


def test_matches_are_at_word_edges_and_may_overlap():
    assert whole_word_matches("a a a", "a a") == [0, 2]
    assert whole_word_matches("bikes bike", "bike") == [6]
    assert whole_word_matches("ねこねこ", "ねこ") == [0, 2]


def _casefold_as_the_page_does(character):
    """The page's JavaScript `fold`, one character at a time, in Python: Python's `upper`
    and `lower` apply the same full mappings as JavaScript's (SpecialCasing.txt without
    its conditions), so this says whether the page's exceptions are complete."""
    code = ord(character)
    if character in "ıẞ":
        return {"ı": "ı", "ẞ": "ss"}[character]
    if 0x13A0 <= code <= 0x13F5 or 0x13F8 <= code <= 0x13FD or 0xAB70 <= code <= 0xABBF:
        return character.upper()  # Cherokee folds to its capitals
    return character.upper().lower()


def test_the_pages_case_folding_equals_casefold_on_every_code_point():
    differ = []
    for code in range(sys.maxunicode + 1):
        character = chr(code)
        if unicodedata.category(character) in ("Cn", "Cs", "Co"):  # unassigned, surrogates, private use
            continue
        nfkc = unicodedata.normalize("NFKC", character)
        page = unicodedata.normalize("NFKC", "".join(map(_casefold_as_the_page_does, nfkc)).replace("ς", "σ"))
        if page != unicodedata.normalize("NFKC", nfkc.casefold()):
            differ.append(hex(code))
    assert differ == []


def test_phrases_are_split_and_joined_as_the_signature_reads_them():
    assert split_phrases(" Hund\t\tSchnee \t ") == ["Hund", "Schnee"]
    assert split_phrases("") == []
    assert joined_phrases(["Hund", " Katze "], [], ["Katze", "Schnee"]) == "Hund\tKatze\tSchnee"
    assert joined_phrases() == ""
