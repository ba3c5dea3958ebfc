"""Whole documents: paragraphs split into sentences, translated, and written back a paragraph a line.

    blocks = read_blocks(lines)                        # [Paragraph(1, "P1 a.\\nP1 b"), Blank(), ...]
    results = translate_blocks(blocks, "en", align)    # [(translation, pharaoh)], one per paragraph
    output = write_blocks(blocks, [translation for translation, _ in results])

A document is paragraphs separated by blank lines. A paragraph's lines are hard-wrapped text
of one paragraph, so they are read as one text; its sentences are what the model translates,
since it was trained on sentences; and its translation is written as one line. Every blank
line comes out as an empty line where it stood, leading and trailing ones too, so the output
has a line for each paragraph and each blank line of the input.

`align(sentences) -> [(translation, pharaoh)]` translates and aligns a list of sentences (the
export's `align` signature, or a fake in tests). `translate_blocks` calls it once with the
sentences of every paragraph, so that the caller batches them by length across the document.
A paragraph's translation is its sentences' translations joined by one space, and its Pharaoh
line the union of theirs, each sentence's links shifted by the words of the sentences before
it (words as `data/words.py` counts them), so that the links index the paragraph and its
translation. There are no links across sentences.

**Why sentencex** (Wikimedia's splitter; `split_sentences` states the rule once): it is
maintained, MIT, a Rust core without dependencies that splits about 300 languages through
fallback chains, and it needs no download, so a fresh install and a server without network
split the same way; a port to the translation page can run the same core compiled to
WebAssembly (sentencex-wasm). pysbd has had no release since 2021 and knows 22 languages;
NLTK's punkt needs NLTK and a data download; spaCy's sentence splitting needs a model per
language.

**Out of scope**: target languages written without spaces between words (zh, ja, th). The
joiner puts one space between sentences, and a word is a run of non-White_Space characters,
which is not a word in those scripts.

**Markup** (`translate_blocks(..., markup="html")`, `--document --markup html`): each
paragraph is stripped of its tags (`data/markup.py`; malformed markup is refused, naming the
file's line, before anything is translated), the edges of its block elements and its `<br>`s
end sentences too (`split_sentences`'s `breaks`), and the tags are put back over the whole
paragraph, from the union of its sentences' links: a tag that spans sentences encloses the
hull of its words' translations across them, one element as in the input.
"""

from dataclasses import dataclass

from data.markup import restore, strip
from data.words import WHITE_SPACE, format_pharaoh, parse_pharaoh, word_spans, words


@dataclass(frozen=True)
class Paragraph:
    """A run of non-blank lines of a document.

    Attributes:
        first_line: the number of its first line in the document, from 1 (errors name it).
        text: its lines, each without its line ending, joined by "\\n".
    """

    first_line: int
    text: str


@dataclass(frozen=True)
class Blank:
    """A blank line of a document (empty, or White_Space only): written back as an empty line."""


def read_blocks(lines):
    """A document's lines as `[Paragraph or Blank]`, in order.

    Args:
        lines: the document's lines, each with or without its line ending (a file, or
            `text.splitlines()`).

    Returns:
        One `Paragraph` per run of non-blank lines and one `Blank` per blank line.
    """
    blocks, paragraph, first_line = [], [], 0
    for number, line in enumerate(lines, start=1):
        line = line.rstrip("\r\n")
        if line.strip(WHITE_SPACE):
            first_line = first_line if paragraph else number
            paragraph.append(line)
            continue
        if paragraph:
            blocks.append(Paragraph(first_line, "\n".join(paragraph)))
            paragraph = []
        blocks.append(Blank())
    if paragraph:
        blocks.append(Paragraph(first_line, "\n".join(paragraph)))
    return blocks


def write_blocks(blocks, texts):
    """The output lines, without line endings: `texts[k]` for the k-th paragraph, "" for a blank.

    Raises:
        ValueError when `texts` does not hold one text per paragraph.
    """
    texts = list(texts)
    paragraphs = sum(isinstance(block, Paragraph) for block in blocks)
    if len(texts) != paragraphs:
        raise ValueError(f"{len(texts)} texts for {paragraphs} paragraphs")
    texts = iter(texts)
    return ["" if isinstance(block, Blank) else next(texts) for block in blocks]


def split_sentences(text, language, breaks=()):
    """The sentences of `text` as `[(start, end)]` character offsets, in order.

    The one rule (a port to the translation page follows it step by step, checked on
    tests/data/document_cases.json):

    1. sentencex's segments of `text` in `language` (an ISO 639 code; sentencex falls back
       to a related language or to English). If they do not concatenate to `text`, the text
       is one segment.
    2. Each segment is stripped of White_Space; segments left empty are dropped.
    3. A boundary with no White_Space at it is dropped: nothing splits inside a word
       (sentencex splits `happens.Next`).
    4. A segment of one word joins the next one, or the previous one if it is the last:
       sentencex splits abbreviations and ordinals off (French `M. | Dupont est arrivé.`,
       `1. | Go home.`). Counted on the segments of step 3, so a run of one-word segments
       joins the next longer one, and a one-word sentence joins its neighbour.
    5. Each offset in `breaks` also ends a sentence (block elements' edges, with markup);
       the pieces are stripped again.

    The sentences thus hold every word of `text` once, in order: their word counts add up to
    the text's, which is what shifting their alignments by those counts relies on.

    Args:
        text: one paragraph (no newlines needed; any White_Space separates).
        language: the source language's code, as sentencex takes it ("en", "de", "fr").
        breaks: character offsets in `[0, len(text)]`, none strictly inside a word.

    Raises:
        ValueError naming a break outside the text or inside a word.
    """
    # Imported here: reading and writing blocks, and importing this module (as the
    # commands do for --help), need no splitter.
    import sentencex

    breaks = _checked_breaks(text, breaks)
    segments = list(sentencex.segment(language, text))
    if "".join(segments) != text:
        segments = [text]
    spans = _whole_words(text, segments)
    spans = _one_words_joined(text, spans)
    return [piece for start, end in spans for piece in _broken(text, start, end, breaks)]


def _checked_breaks(text, breaks):
    """`breaks` sorted and distinct, each checked to lie in the text and at no word's inside."""
    breaks = sorted(set(breaks))
    for offset in breaks:
        if not 0 <= offset <= len(text):
            raise ValueError(f"break {offset}: outside the text's {len(text)} characters")
        inside = [text[start:end] for start, end in word_spans(text) if start < offset < end]
        if inside:
            raise ValueError(f"break {offset}: inside the word {inside[0]!r}")
    return breaks


def _whole_words(text, segments):
    """Steps 2 and 3: the segments' spans stripped, blank ones dropped, those that touch joined."""
    spans, start = [], 0
    for segment in segments:
        span = _stripped(text, start, start + len(segment))
        start += len(segment)
        if span and spans and span[0] == spans[-1][1]:  # No White_Space between: one word spans both.
            spans[-1] = (spans[-1][0], span[1])
        elif span:
            spans.append(span)
    return spans


def _one_words_joined(text, spans):
    """Step 4: the boundary after each one-word span dropped, and before a last one-word span."""
    one_word = [len(words(text[start:end])) == 1 for start, end in spans]
    ends = [not single for single in one_word[:-1]] + [True]  # Whether a sentence ends with span k.
    if len(spans) > 1 and one_word[-1]:
        ends[-2] = False
    sentences, first = [], None
    for (start, end), ends_here in zip(spans, ends):
        first = start if first is None else first
        if ends_here:
            sentences.append((first, end))
            first = None
    return sentences


def _broken(text, start, end, breaks):
    """Step 5: the sentence `text[start:end]` cut at the breaks inside it, each piece stripped."""
    inner = [offset for offset in breaks if start < offset < end]
    pieces = (_stripped(text, lo, hi) for lo, hi in zip([start] + inner, inner + [end]))
    return [piece for piece in pieces if piece]


def _stripped(text, start, end):
    """`(start, end)` of `text[start:end]` less its leading and trailing White_Space; None if blank."""
    found = word_spans(text[start:end])
    return (start + found[0][0], start + found[-1][1]) if found else None


def translate_blocks(blocks, language, align, markup=None):
    """Each paragraph's translation and Pharaoh line, its sentences translated by one `align` call.

    Args:
        blocks: `read_blocks`'s list.
        language: the source language's code, for `split_sentences`.
        align: `align(sentences) -> [(translation, pharaoh)]`, one pair per sentence, in order.
            Called once, with the sentences of every paragraph in document order; not called
            when there is no paragraph.
        markup: None for plain text, or "html": inline HTML kept through translation
            (`data.markup`); then the Pharaoh lines index the words of the paragraphs'
            plain text.

    Returns:
        `[(translation, pharaoh)]`, one per paragraph: the sentences' translations stripped and
        joined by one space (empty ones left out), with the paragraph's tags put back where
        there are any, and the union of their links, each shifted by the source and target
        words of the paragraph's sentences before it.

    Raises:
        MarkupError naming the line and column of malformed markup, before `align` is called.
        ValueError for another `markup`, when `align` returns another number of results than
        sentences, or links outside a sentence's or its translation's words (naming the
        sentence).
    """
    if markup not in (None, "html"):
        raise ValueError(f"markup={markup!r}: None or 'html'")
    texts = [block.text for block in blocks if isinstance(block, Paragraph)]
    if markup:
        first_lines = [block.first_line for block in blocks if isinstance(block, Paragraph)]
        stripped = [strip(text, first_line=line) for text, line in zip(texts, first_lines)]
        texts, breaks = [item.text for item in stripped], [item.breaks for item in stripped]
    else:
        breaks = [()] * len(texts)
    # A paragraph's hard-wrapped lines rejoin; one character for one keeps the offsets.
    plains = [text.replace("\n", " ") for text in texts]
    paragraphs = [
        [plain[s:e] for s, e in split_sentences(plain, language, paragraph_breaks)]
        for plain, paragraph_breaks in zip(plains, breaks)
    ]
    sentences = [sentence for paragraph in paragraphs for sentence in paragraph]
    results = list(align(sentences)) if sentences else []
    if len(results) != len(sentences):
        raise ValueError(f"align returned {len(results)} results for {len(sentences)} sentences")
    joined, position = [], 0
    for paragraph in paragraphs:
        joined.append(_joined(paragraph, results[position:position + len(paragraph)]))
        position += len(paragraph)
    if not markup:
        return joined
    return [_restored(item, translation, pharaoh) for item, (translation, pharaoh) in zip(stripped, joined)]


def _restored(stripped, translation, pharaoh):
    """A paragraph's `(translation with its tags put back, pharaoh)`; a paragraph without
    words comes back as it was."""
    if not stripped.words:
        return stripped.markup, pharaoh
    links = parse_pharaoh(pharaoh, len(stripped.words), len(words(translation)))
    return restore(stripped, translation, links), pharaoh


def _joined(sentences, results):
    """One paragraph's `(translation, pharaoh)` from its sentences and their `align` results."""
    translations, links, source_words, target_words = [], [], 0, 0
    for sentence, (translation, pharaoh) in zip(sentences, results):
        counts = len(words(sentence)), len(words(translation))
        try:
            sentence_links = parse_pharaoh(pharaoh, *counts)
        except ValueError as error:
            raise ValueError(f"align's links for {sentence!r} -> {translation!r}: {error}") from error
        links += [(i + source_words, j + target_words) for i, j in sentence_links]
        source_words, target_words = source_words + counts[0], target_words + counts[1]
        if translation.strip(WHITE_SPACE):
            translations.append(translation.strip(WHITE_SPACE))
    return " ".join(translations), format_pharaoh(links)
