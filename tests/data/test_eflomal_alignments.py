"""data/eflomal_alignments.py: grow-diag-final-and on hand-worked grids, and eflomal on a
generated corpus (skipped where eflomal is not installed: requirements-alignment.txt)."""

import sys

import numpy as np
import pytest

from data.eflomal_alignments import align_corpus, grow_diag_final_and
from data.errors import DataError
from data.words import parse_pharaoh


def test_grow_diag_adds_union_links_beside_taken_ones_whose_one_word_is_free():
    # Source word i down, target word j across; F forward, R reverse, B both.
    #        j=0 j=1 j=2 j=3
    #   i=0   B   .   .   .
    #   i=1   .   B   F   .
    #   i=2   .   .   R   .
    #   i=3   .   .   .   B
    # The intersection is the three B. Sweeping from (1, 1): (1, 2) is its side neighbour
    # and target word 2 is free, so it is added; (2, 2), its diagonal, has source word 2
    # free, so it is added too. Nothing is left for final-and.
    forward = {(0, 0), (1, 1), (1, 2), (3, 3)}
    reverse = {(0, 0), (1, 1), (2, 2), (3, 3)}
    assert grow_diag_final_and(forward, reverse, 4, 4) == {(0, 0), (1, 1), (1, 2), (2, 2), (3, 3)}


def test_final_and_adds_only_links_whose_two_words_are_both_free():
    #        j=0 j=1 j=2 j=3
    #   i=0   B   .   .   .
    #   i=1   .   B   .   .
    #   i=2   .   .   .   R
    #   i=3   .   .   F   R
    # (2, 3), (3, 2) and (3, 3) neighbour no B (and (2, 2) is in neither direction), so
    # grow-diag adds nothing. Final-and takes the forward (3, 2): words 3 and 2 are free.
    # Then the reverse (2, 3): words 2 and 3 are free. (3, 3) is not taken: both of its
    # words are linked by then (grow-diag-final, without "and", would take it).
    forward = {(0, 0), (1, 1), (3, 2)}
    reverse = {(0, 0), (1, 1), (2, 3), (3, 3)}
    assert grow_diag_final_and(forward, reverse, 4, 4) == {(0, 0), (1, 1), (3, 2), (2, 3)}


def test_a_union_link_whose_words_are_both_linked_is_not_grown_into():
    #        j=0 j=1 j=2 j=3
    #   i=0   B   .   .   F
    #   i=1   .   R   .   .
    #   i=2   .   B   .   .
    #   i=3   .   .   F   R
    # From (0, 0): its diagonal (1, 1) (source word 1 free). From (2, 1): its diagonal
    # (3, 2) (source word 3 free). From (3, 2): its side (3, 3) (target word 3 free). (0, 3)
    # neighbours nothing taken, and by final-and both its words are linked.
    forward = {(0, 0), (2, 1), (3, 2), (0, 3)}
    reverse = {(0, 0), (1, 1), (2, 1), (3, 3)}
    assert grow_diag_final_and(forward, reverse, 4, 4) == {(0, 0), (1, 1), (2, 1), (3, 2), (3, 3)}


def test_without_eflomal_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "eflomal", None)  # import eflomal raises ImportError
    with pytest.raises(DataError, match="pip install -r requirements-alignment.txt"):
        align_corpus(["a b"], ["A B"])


def test_pairs_without_words_get_empty_lines_without_running_eflomal(monkeypatch):
    monkeypatch.setitem(sys.modules, "eflomal", object())  # would fail if it were called
    assert align_corpus(["", "a"], ["A", " \xa0"]) == ["", ""]


def test_eflomal_aligns_copied_sentences_on_the_diagonal():
    pytest.importorskip("eflomal", reason="eflomal is optional: pip install -r requirements-alignment.txt")
    rng = np.random.default_rng(0)
    vocabulary = [f"w{k}" for k in range(40)]
    sources = [" ".join(rng.choice(vocabulary, size=rng.integers(3, 11))) for _ in range(200)]
    targets = [" ".join("T" + word for word in sentence.split()) for sentence in sources]
    sources[7], targets[7] = "", "T"  # a pair without source words: an empty line
    lines = align_corpus(sources, targets, log=lambda *_: None)
    assert len(lines) == len(sources) and lines[7] == ""
    diagonal = total = 0
    for source, target, line in zip(sources, targets, lines):
        links = parse_pharaoh(line, len(source.split()), len(target.split()))  # raises out of bounds
        diagonal += sum(i == j for i, j in links)
        total += len(links)
    assert total > 0 and diagonal / total >= 0.9
