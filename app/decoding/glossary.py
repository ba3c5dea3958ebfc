"""A translator's glossary: which target terms a sentence's translation must hold.

    glossary = read_glossary("terms.tsv")               # source term <TAB> target term
    glossary.terms("A mountain bike and a dog.")        # ["Mountainbike", "Hund"]
    glossary.constraints("A mountain bike and a dog.")  # "Mountainbike\tHund"

`constraints` is what the export's `constrained` signature takes for the sentence
(app/export/saved_model.py): the target phrases, separated by tabs ("" for none).

The file: UTF-8 text, one pair a line, the source term and the target term separated by
one tab. Blank lines and lines that start with "#" are skipped; any other line must hold
exactly two columns, both non-empty once their surrounding spaces are stripped, or the
glossary is refused with a `GlossaryError` naming the file, the line's number and its
text. A source term given twice with two different target terms is refused too, naming
both lines: which of them the translation must hold would be a guess.

The matching rule, what translators expect of a terminology tool. The page of the local
server (app/serving/static/index.html) implements it in JavaScript, and both are checked
on the same cases (tests/decoding/glossary_cases.json):

1. Case and spelling variants are ignored: the sentence and each source term are
   compared in their folded form (`fold`): Unicode NFKC (full-width letters, ligatures
   and the like as their plain forms), then case folding ("Straße" and "STRASSE" are one
   word, as are "ΟΔΟΣ" and "οδος"), then runs of white space as one space. (JavaScript
   has no case folding: the page folds each character as `toUpperCase().toLowerCase()`,
   but keeps a dotless i, makes a capital sharp s "ss", a final sigma a sigma and
   Cherokee its capitals, as `str.casefold` does; so the two agree on every code point.)
2. Whole words only: a term matches where it neither starts nor ends inside a word, so
   "bike" matches in "A bike." and "the bike's bell" but not in "bikes" or "motorbike".
   Word characters are letters, marks and digits (Unicode categories L, M and N);
   anything else (spaces, punctuation, hyphens, apostrophes) separates words. In scripts
   written without spaces between words (Han, Hiragana, Katakana, Thai, Lao, Khmer,
   Myanmar) every character may start or end a word, so "東京" matches in "東京に行く".
   An inflected form is another word: list it on a line of its own.
3. Longest source term first: where two terms' matches overlap, the longer one (in
   characters, folded; on a tie, the one on the earlier line) takes the place, so that
   "mountain bike" wins over "bike" in "a mountain bike", while "bike" still matches
   elsewhere in the same sentence.
4. Each target term at most once per sentence, in the order its first match appears in
   the sentence; a term the sentence holds twice is one constraint (the constrained
   search makes each phrase appear at least once).

Pure Python (standard library only): the commands read glossaries before TensorFlow
loads, and app.client uses this over REST without it.
"""

import dataclasses
import re
import unicodedata

from data.errors import DataError

# White space, as the page's JavaScript spells the same class: Python's \s, str.strip and
# JavaScript's \s and trim() each differ on a few control characters.
_SPACE = "[\t\n\v\f\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
WHITE_SPACE = re.compile(_SPACE + "+")
_AT_THE_ENDS = re.compile(f"^{_SPACE}+|{_SPACE}+$")

# Scripts written without spaces between words: (first, last) code points of each block.
UNSPACED = (
    (0x0E00, 0x0EFF),  # Thai, Lao
    (0x1000, 0x109F),  # Myanmar
    (0x1780, 0x17FF),  # Khmer
    (0x2E80, 0x2FDF),  # CJK radicals, Kangxi radicals
    (0x3005, 0x3007),  # 々 〆 〇
    (0x3021, 0x3029),  # Hangzhou numerals
    (0x3031, 0x3035),  # kana repeat marks
    (0x3038, 0x303C),
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x31F0, 0x31FF),  # Katakana phonetic extensions
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF66, 0xFF9F),  # half-width Katakana
    (0x20000, 0x3FFFF),  # CJK extensions B and on
)



class GlossaryError(DataError):
    """A glossary file that cannot be used; the message names the file, the line and its text."""


def fold(text):
    """`text` in the form the matching rule compares: NFKC, case-folded, NFKC again (case
    folding may leave a composable sequence), runs of white space as one space, and no
    space at either end."""
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    return WHITE_SPACE.sub(" ", folded).strip(" ")


def _strip(text):
    """`text` without white space (`WHITE_SPACE`) at either end."""
    return _AT_THE_ENDS.sub("", text)


def _in(blocks, character):
    code = ord(character)
    return any(first <= code <= last for first, last in blocks)


def _joins(character):
    """Whether `character` continues a word with a neighbour that does too: a letter, mark
    or digit of a script written with spaces between words."""
    return unicodedata.category(character)[0] in "LMN" and not _in(UNSPACED, character)


def _at_word_edge(text, i):
    """Whether position `i` of `text` (between `text[i - 1]` and `text[i]`) is not inside a word."""
    return i == 0 or i == len(text) or not (_joins(text[i - 1]) and _joins(text[i]))


def whole_word_matches(text, term):
    """The start of each place where `term` occurs in `text` as whole words (both folded,
    `fold`), left to right; overlapping places included ("a a" twice in "a a a")."""
    starts = []
    start = text.find(term)
    while start != -1:
        if _at_word_edge(text, start) and _at_word_edge(text, start + len(term)):
            starts.append(start)
        start = text.find(term, start + 1)
    return starts


@dataclasses.dataclass(frozen=True)
class Entry:
    """One line of a glossary."""

    source: str  # as written, its surrounding spaces stripped
    target: str
    line: int  # its line number in the file, from 1
    folded: str  # `fold(source)`: what the matching rule compares


@dataclasses.dataclass(frozen=True)
class Glossary:
    """A glossary's entries, longest folded source term first (ties: the earlier line),
    the order in which they take their places in a sentence."""

    entries: tuple

    def terms(self, sentence):
        """The target terms whose source terms `sentence` holds, by the matching rule of
        this module's docstring: a list of distinct strings, in sentence order."""
        text = fold(sentence)
        taken = []  # (start, end, target) of each place taken
        for entry in self.entries:
            for start in whole_word_matches(text, entry.folded):
                end = start + len(entry.folded)
                if all(end <= other_start or other_end <= start for other_start, other_end, _ in taken):
                    taken.append((start, end, entry.target))
        terms = []
        for _, _, target in sorted(taken, key=lambda place: place[0]):
            if target not in terms:
                terms.append(target)
        return terms

    def constraints(self, sentence):
        """`terms(sentence)` as the `constrained` signature's string: separated by tabs."""
        return "\t".join(self.terms(sentence))


def parse_glossary(text, name="the glossary"):
    """The `Glossary` of a TSV's text; `name` (its path) is what errors call it.

    Raises:
        GlossaryError: a line that is neither skipped nor two non-empty columns, or a
            source term given again with another target term.
    """
    entries, seen = [], {}  # seen: folded source term -> its first entry
    for number, line in enumerate(text.removeprefix("\ufeff").split("\n"), start=1):
        line = line.removesuffix("\r")
        if not _strip(line) or line.startswith("#"):
            continue
        columns = [_strip(column) for column in line.split("\t")]
        if len(columns) != 2 or not all(columns) or not fold(columns[0]):
            raise GlossaryError(
                f"{name}, line {number}: {line!r} is not two non-empty columns separated by one tab "
                "(source term <TAB> target term)"
            )
        entry = Entry(source=columns[0], target=columns[1], line=number, folded=fold(columns[0]))
        first = seen.setdefault(entry.folded, entry)
        if first is entry:
            entries.append(entry)
        elif first.target != entry.target:
            raise GlossaryError(
                f"{name}, line {number}: {line!r} gives the source term {entry.source!r} another target term "
                f"than line {first.line} ({first.target!r}); keep one of them"
            )
    return Glossary(tuple(sorted(entries, key=lambda entry: (-len(entry.folded), entry.line))))


def read_glossary(path):
    """`parse_glossary` of the UTF-8 file at `path`.

    Raises:
        GlossaryError: as `parse_glossary`, or bytes that are not UTF-8 (naming the line).
        OSError: the file cannot be read.
    """
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise GlossaryError(f"{path}, line {line}: not UTF-8 text ({error.reason})") from None
    return parse_glossary(text, path)


def split_phrases(constraints):
    """The phrases of a constraints string (separated by tabs), each stripped, the empty
    ones left out: what the `constrained` signature makes of it."""
    return [_strip(phrase) for phrase in constraints.split("\t") if _strip(phrase)]


def joined_phrases(*groups):
    """One constraints string of the phrases of `groups` (each a list of phrases), in
    order, each distinct phrase once: a file's constraints and a glossary's terms for
    the same line, say."""
    phrases = []
    for group in groups:
        for phrase in group:
            phrase = _strip(phrase)
            if phrase and phrase not in phrases:
                phrases.append(phrase)
    return "\t".join(phrases)
