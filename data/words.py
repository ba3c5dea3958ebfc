"""Words, as word alignments, markup and documents count them, and Pharaoh-format links.

    words("Ein  Mann\xa0fährt.")             # ['Ein', 'Mann', 'fährt.']
    word_spans("Ein  Mann")                  # [(0, 3), (5, 9)]
    piece_words(" lead", [1, 1, 3], [1, 3, 5])   # [0, 0, 0]: each subword piece's word
    parse_pharaoh("0-0 1-2", 2, 3)           # [(0, 0), (1, 2)]
    format_pharaoh([(1, 2), (0, 0), (0, 0)]) # '0-0 1-2'
    word_start_table(model_proto)            # bool [V]: the pieces that start a word ("▁...")

A **word** is a maximal run of characters that are not Unicode White_Space: the words
that fast_align, eflomal and Moses read in a tokenized line, and the ones the `align`
signature links. `str.split()` is nearly that, but it also splits at the information
separators U+001C-U+001F, which are not White_Space; so this module has its own constant,
and a graph that finds words reads the same one (`WHITE_SPACE_CODE_POINTS`).

Pharaoh format: `i-j` pairs separated by single spaces, i a source word's index and j a
target word's, both from 0. No TensorFlow here, so that servers and clients without it
can use the module.
"""

import bisect
import re

# Unicode's White_Space property (PropList.txt), every code point of it.
WHITE_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
WHITE_SPACE_CODE_POINTS = tuple(ord(character) for character in WHITE_SPACE)
# sentencepiece's mark of a piece that starts a word (it stands for the white space before it).
WORD_MARKER = "\u2581"
_WORD = re.compile("[^" + re.escape(WHITE_SPACE) + "]+")


def word_spans(text):
    """`[(start, end)]`: each word's character offsets in `text`, in order."""
    return [match.span() for match in _WORD.finditer(text)]


def words(text):
    """The words of `text`, in order: runs of characters that are not White_Space."""
    return _WORD.findall(text)


def piece_words(text, begins, ends):
    """Each subword piece's word: the index of the word of `text` that holds the piece's
    last byte (`end - 1`), or its first (`begin`) where the piece has no width, as byte-
    fallback pieces before a character's last byte have. White space belongs to the word
    after it, so a lone word marker `▁` is the next word's; -1 where there is no word
    after it (white space at the end).

    The Python twin of the graph's `data.tokenizer.piece_words`, which the align signature
    runs; tests/data/test_words.py holds the two equal.

    Args:
        text: the text the pieces were cut from (lowercased first for a lowercasing model).
        begins, ends: each piece's UTF-8 byte offsets in `text`, as sentencepiece's
            `encode(..., return_type="proto")` and TF-Text's `tokenize_with_offsets` give them.

    Returns:
        A list of ints, one per piece.
    """
    starts, word_of_character = [], []  # each character's first byte; its word
    offset, count, after_space = 0, 0, True
    for character in text:
        space = character in WHITE_SPACE
        if not space and after_space:
            count += 1
        starts.append(offset)
        word_of_character.append(count if space else count - 1)
        offset += len(character.encode("utf-8"))
        after_space = space
    result = []
    for begin, end in zip(begins, ends):
        byte = end - 1 if end > begin else begin
        character = bisect.bisect_right(starts, byte) - 1
        word = word_of_character[character] if character >= 0 else -1
        result.append(word if word < count else -1)
    return result


def parse_pharaoh(line, source_words, target_words):
    """`[(i, j)]` from one Pharaoh line, in its order, checked against the word counts.

    Raises:
        ValueError naming the bad link: not `i-j` of two non-negative integers, or an index
        outside `source_words` / `target_words`.
    """
    links = []
    for link in line.split():
        source, dash, target = link.partition("-")
        if not dash or not source.isdigit() or not target.isdigit() or not source.isascii() or not target.isascii():
            raise ValueError(f"link {link!r}: not i-j, two word indices from 0")
        i, j = int(source), int(target)
        if i >= source_words:
            raise ValueError(f"link {link}: the source has {source_words} words")
        if j >= target_words:
            raise ValueError(f"link {link}: the target has {target_words} words")
        links.append((i, j))
    return links


def format_pharaoh(links):
    """One Pharaoh line: the distinct `(i, j)` pairs of `links`, by i and then j."""
    return " ".join(f"{i}-{j}" for i, j in sorted(set(links)))


def word_start_table(model_proto):
    """bool `[V]`: which pieces of a sentencepiece vocabulary start a word, those that
    begin with `WORD_MARKER` (a lone "▁" before byte pieces too); never the reserved ids."""
    import numpy as np
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_proto=model_proto)
    pieces = (processor.id_to_piece(index) for index in range(processor.get_piece_size()))
    return np.fromiter((piece.startswith(WORD_MARKER) for piece in pieces), bool, processor.get_piece_size())
