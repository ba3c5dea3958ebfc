"""Words and Pharaoh links (data/words.py), and each subword piece's word, in Python and in
the graph (data/tokenizer.py), held equal."""

import gzip
import os
import unicodedata

import pytest
import sentencepiece

from data.words import WHITE_SPACE, format_pharaoh, parse_pharaoh, piece_words, word_spans, words

MULTI30K_DIR = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "data", "multi30k")


def test_white_space_is_unicodes_white_space_property():
    # Python's own split rule is White_Space plus the separators U+001C-U+001F.
    splitting = {chr(c) for c in range(0x110000) if chr(c).isspace()}
    assert set(WHITE_SPACE) == splitting - {"\x1c", "\x1d", "\x1e", "\x1f"}
    assert all(unicodedata.category(c) in ("Zs", "Zl", "Zp", "Cc") for c in WHITE_SPACE)


def test_words_split_at_every_white_space_character_and_nowhere_else():
    assert words("Ein  Mann\xa0fährt\u3000Rad.\n") == ["Ein", "Mann", "fährt", "Rad."]
    assert words("a\x1fb") == ["a\x1fb"]
    assert words("") == [] and words(" \t ") == []
    assert word_spans(" Ein  Mann") == [(1, 4), (6, 10)]


def test_pharaoh_lines_are_parsed_checked_and_written_in_order():
    assert parse_pharaoh("0-0 1-2  2-1", 3, 3) == [(0, 0), (1, 2), (2, 1)]
    assert parse_pharaoh("", 0, 0) == []
    assert format_pharaoh([(2, 1), (0, 0), (1, 2), (0, 0)]) == "0-0 1-2 2-1"
    with pytest.raises(ValueError, match="link 3-7: the target has 5 words"):
        parse_pharaoh("0-0 3-7", 4, 5)
    with pytest.raises(ValueError, match="link 4-0: the source has 4 words"):
        parse_pharaoh("4-0", 4, 5)
    for bad in ("a-1", "1-", "1", "-1-2", "1--2", "١-2"):
        with pytest.raises(ValueError, match="not i-j"):
            parse_pharaoh(bad, 9, 9)


def test_a_piece_belongs_to_the_word_of_its_last_byte_white_space_to_the_next_word():
    # "▁man" covers the space before "man"; "▁" alone (5, 6) is the space before the emoji.
    assert piece_words("A man 🚴", [0, 1, 5, 6, 6], [1, 5, 6, 6, 10]) == [0, 1, 2, 2, 2]
    # An empty piece belongs to the word of its first byte; white space at the end to none.
    assert piece_words("ab  ", [0, 1, 2, 3], [1, 1, 3, 4]) == [0, 0, -1, -1]
    assert piece_words("", [], []) == []
    assert piece_words("ä b", [0, 1, 2], [1, 2, 4]) == [0, 0, 1]  # a byte inside "ä" is its word's


# The graph against its Python twin, on a vocabulary of Multi30k: byte-fallback pieces of
# an emoji outside it, NFKC's no-break space, "¨" that NFKC turns into a space and a
# combining mark, two spaces, a leading space, a lowercased "İ" that becomes two
# characters, the information separator U+001F (no White_Space), a zero-width space that
# sentencepiece drops, and nothing at all.
TRICKY = [
    "A man 🚴 rides\xa0a bike.",
    "🚴x ok",
    "Ein  Mann\xa8x",
    " lead",
    "İstanbul",
    "a\x1fb \u200b x ",
    "",
]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from data.tokenizer import MODEL_FILENAME, SubwordTokenizer

    lines = []
    for name in ("train.en.gz", "train.de.gz"):
        with gzip.open(os.path.join(MULTI30K_DIR, name), "rt", encoding="utf-8") as file:
            lines += [line.rstrip("\n") for _, line in zip(range(1000), file)]
    path = str(tmp_path_factory.mktemp("vocab") / MODEL_FILENAME)
    return SubwordTokenizer.train(lines, 600, path, log=lambda line: None)


@pytest.mark.parametrize("lowercase", [False, True], ids=["cased", "lowercasing"])
def test_the_graphs_piece_words_equal_the_python_twins_on_tricky_strings(tokenizer, lowercase):
    import tensorflow as tf

    from data.tokenizer import SubwordTokenizer, lowercase_lines, piece_words as graph_piece_words, word_counts

    tokenizer = SubwordTokenizer(tokenizer.model_proto, lowercase=lowercase)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def in_graph(strings):
        ids, begins, ends = tokenizer.tokenize_with_offsets(strings)
        text = tokenizer.model_text(strings)
        return ids, begins, ends, graph_piece_words(text, begins, ends), word_counts(text), text

    ids, begins, ends, got, counts, texts = in_graph(tf.constant(TRICKY))
    assert ids.to_list() == tokenizer.tokenize(tf.constant(TRICKY)).to_list()  # the ids tokenize gives
    processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.model_proto)
    model_texts = lowercase_lines(TRICKY) if lowercase else TRICKY
    assert [text.decode() for text in texts.numpy()] == model_texts
    for row, text in enumerate(model_texts):
        pieces = processor.encode(text, return_type="proto").pieces
        # TF-Text's offsets are sentencepiece's own.
        assert list(zip(begins[row].numpy(), ends[row].numpy())) == [(p.begin, p.end) for p in pieces], text
        assert got[row].numpy().tolist() == piece_words(text, begins[row].numpy(), ends[row].numpy()), text
        assert counts[row] == len(words(text)) == len(words(TRICKY[row])), text
    # Pinned for this vocabulary: "▁A", "▁man", "▁" and four byte pieces of the emoji,
    # "▁r" "id" "es", "▁a" over the no-break space, "▁b" "ik" "e" ".".
    assert got[0].numpy().tolist() == [0, 1, 2, 2, 2, 2, 2, 3, 3, 3, 4, 5, 5, 5, 5]
    assert got[3].numpy().tolist() == [0, 0, 0]  # " lead": its "▁" is empty, at "l"
