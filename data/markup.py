"""Inline HTML markup kept through translation: stripped from a line, put back around aligned words.

    stripped = strip('A <b>big</b> dog.')                    # stripped.text == 'A big dog.'
    restore(stripped, 'Ein großer Hund.', [(0, 0), (1, 1), (2, 2)])   # 'Ein <b>großer</b> Hund.'
    markup_text('Ein <b>gro&szlig;er</b> Hund.')             # 'Ein großer Hund.'
    translate_markup(['A <b>big</b> dog.'], align)           # align: the export's `align` signature

The model translates plain text; a translator's line may hold inline markup. `strip` reads
the markup, refusing what is not well-formed (`MarkupError`, naming the line, the column and
the reason: from malformed input no output could hold every tag exactly once), and keeps
each tag's text as written, so that attributes pass through byte for byte. `restore` puts
the tags back into the translation around the target words that the `align` signature links
to the words each tag enclosed. Whatever the links, the output is well-formed, holds every
tag of the input exactly once, and its plain text (`markup_text`) is the translation.

**The scanner.** Text; `<name attributes>`, `</name>` and `<name .../>` (a quoted value may
hold `>`); `<!-- comments -->`. A `<` followed by anything but a letter, `/`, `!` or `?` is
text. Tag names compare case-insensitively. A start tag is self-closing when it ends in
`/>` outside an attribute value.

**What a tag becomes** (`Element.kind`):

- `element`: a paired tag with words inside. Its `span` is the interval of the source words
  that overlap its text, so a tag inside a word takes the whole word
  (`un<u>der</u>line` comes back as `<u>...</u>` around the word's translation).
- `empty`: a paired tag with no words inside.
- `void`: HTML's void elements (`VOID_NAMES`: `<br>`, `<img ...>`), with or without `/`.
- `atom`: any other `<x/>`, a comment, `<script>` and `<style>` with their raw text, and the
  elements Bergamot leaves untranslated (`UNTRANSLATED`: `<code>...</code>` and the like),
  each kept whole, with all it holds.

Every kind but `element` is zero-width: it stands at a source boundary, `position`, before
word `position` (the first word that starts at or after it, or the word holding it).

**Refused** (`MarkupError`): a tag never closed, a closing tag that closes nothing or
crosses another (`<b><i></b>`), a closing tag of a void element, an unterminated tag or
comment, `</` without a name, and what is not inline markup: `<!DOCTYPE>`, `<?...?>`, CDATA.

**The plain text.** Entities are decoded (`html.unescape`); atoms add no text; `<br>`, `<hr>`
and the tags of block elements (`BREAKS`) count as one space where non-white-space stands on
both sides, so `a<br>b` is two words. Words are `data.words`' words. `markup_text` is this one
definition, for input and output alike.

**Putting tags back** (`restore`). The elements form a tree whose root is the whole text;
each node is laid out inside the target interval its parent gave it:

1. An `element` child wants the hull of the target words (inside the parent's interval)
   linked to any of its source words: a tag cannot be split and still appear once, so a gap
   is filled. A child without such words becomes zero-width.
2. Siblings are made disjoint, the smallest wanted interval first (ties: source order): each
   takes, inside its hull, the run of still-free words holding the most of its linked words
   (then the longest, then the leftmost), cut down to the hull of those words. Two siblings
   whose spans cross both keep words; no sibling nests in another. No such run: zero-width.
3. A zero-width child at source boundary s (an `element`: the start of its span) stands at
   `anchor(s)`: before the first target word linked to source word s, s+1, ...; else after
   the last one linked to s-1, s-2, ...; else at the parent's end. Clipped to the parent's
   interval; a place strictly inside a sibling moves to the sibling's nearer edge (its start
   on a tie).

The output keeps the translation's white space outside every tag (as Bergamot does), and a
zero-width item sticks to the word after it. The translation's words are escaped
(`html.escape(word, quote=False)`).

The cases of tests/data/markup_cases.json are shared with a JavaScript port (the translation
page's `markup.js`), whose columns must count code points, not UTF-16 units. Standard
library only (and `data.words`), so that clients without TensorFlow can use it.
"""

import bisect
import dataclasses
import html
import re

from data.errors import DataError
from data.words import WHITE_SPACE, parse_pharaoh, word_spans, words

ELEMENT, EMPTY, VOID, ATOM = "element", "empty", "void", "atom"

# HTML's void elements: no content and no closing tag.
VOID_NAMES = frozenset("area base br col embed hr img input link meta source track wbr".split())
# Elements whose content is raw text up to their closing tag.
RAW_TEXT = frozenset({"script", "style"})
# Bergamot's ignored elements: kept whole, never translated.
UNTRANSLATED = frozenset("code kbd samp var math acronym dir".split())
# Block elements: their tags separate words, as a line break does.
BLOCKS = frozenset(
    "address article aside blockquote dd div dl dt figcaption figure footer h1 h2 h3 h4 h5 h6 header li "
    "main nav ol p pre section table tbody td tfoot th thead tr ul".split()
)
BREAKS = BLOCKS | {"br", "hr"}
# HTML's own white space, which ends a tag name and separates attributes.
_TAG_SPACE = " \t\n\f\r"
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


class MarkupError(DataError):
    """Markup that is not well-formed inline HTML, at `line` and `column` (from 1, in characters)."""

    def __init__(self, line, column, reason):
        super().__init__(f"line {line}, column {column}: {reason}")
        self.line, self.column, self.reason = line, column, reason


@dataclasses.dataclass(frozen=True)
class Element:
    """One tag, a pair of tags, or an item kept whole, as `strip` found it."""

    kind: str  # ELEMENT, EMPTY, VOID or ATOM
    open: str  # the opening tag as written; an atom's whole text
    close: str  # the closing tag as written; "" for a void element or an atom
    span: tuple  # (a, b): an `element`'s source words [a, b); (position, position) otherwise
    position: int  # the source boundary a zero-width item stands at: before word `position`
    parent: object  # the index in `Stripped.elements` of the element around it; None at the top
    line: int  # where the opening tag starts, from 1 (`strip`'s first_line)
    column: int


@dataclasses.dataclass(frozen=True)
class Stripped:
    """A line of markup, taken apart: what is translated and what goes back around it."""

    text: str  # the plain text: the line to translate
    words: tuple  # words(text)
    elements: tuple  # of Element, in the order their opening tags appear
    markup: str  # the line as given: restore's answer when the text has no words
    # Offsets in `text` of the tags of block elements, `<br>` and `<hr>` (`BREAKS`), in order:
    # where a document's sentences also end (data/documents.py). Never inside a word.
    breaks: tuple = ()


@dataclasses.dataclass(frozen=True)
class _Token:
    """One piece of markup as the scanner reads it."""

    kind: str  # "text", "open", "close" or "atom" (a comment, a script or a style, whole)
    text: str  # as written
    name: str  # the tag name, lowercased; "" for text and comments
    start: int  # its offset in the markup
    self_closing: bool = False


class _Places:
    """Lines and columns (from 1, in characters) of offsets in a markup string."""

    def __init__(self, markup, first_line):
        self.line_starts = [0] + [i + 1 for i, character in enumerate(markup) if character == "\n"]
        self.first_line = first_line

    def __call__(self, offset):
        index = bisect.bisect_right(self.line_starts, offset) - 1
        return self.first_line + index, offset - self.line_starts[index] + 1

    def error(self, offset, reason):
        return MarkupError(*self(offset), reason)

    def at(self, offset):
        """`L:C`, as messages name a place."""
        return "{}:{}".format(*self(offset))


def _past(markup, i, characters):
    """The first offset from `i` on whose character is not one of `characters` (or the end)."""
    while i < len(markup) and markup[i] in characters:
        i += 1
    return i


def _until(markup, i, stops):
    """The first offset from `i` on whose character is one of `stops` (or the end)."""
    while i < len(markup) and markup[i] not in stops:
        i += 1
    return i


def _tag_end(markup, i, places, start):
    """`(end, self_closing)` of the tag at `start` whose name ends at `i`: the offset after
    its `>`, and whether it ends in `/>` outside an attribute value (HTML's tokenizer, without
    its repairs: `<a href=/x/>` is not self-closing)."""
    while True:
        i = _past(markup, i, _TAG_SPACE)
        if i >= len(markup):
            raise places.error(start, "unterminated tag")
        if markup[i] == ">":
            return i + 1, False
        if markup.startswith("/>", i):
            return i + 2, True
        if markup[i] == "/":
            i += 1
            continue
        # An attribute: its name (whose first character may be "="), then perhaps "=" and a value.
        i = _past(markup, _until(markup, i + 1, _TAG_SPACE + "/>="), _TAG_SPACE)
        if i < len(markup) and markup[i] == "=":
            i = _past(markup, i + 1, _TAG_SPACE)
            if i < len(markup) and markup[i] in "\"'":
                i = markup.find(markup[i], i + 1) + 1
                if i == 0:
                    raise places.error(start, "unterminated tag")
            else:
                i = _until(markup, i, _TAG_SPACE + ">")


def _ascii_lower(text):
    """`text` with ASCII capitals made small, and nothing else changed: how HTML compares tag names."""
    return text.translate(_ASCII_LOWER)


def _is_letter(character):
    """Whether `character` is an ASCII letter: what may start a tag name."""
    return character.isascii() and character.isalpha()


def _name_end(markup, i):
    """The offset where the tag name that starts at `i` ends."""
    return _until(markup, i, _TAG_SPACE + "/>")


def _raw_text_end(markup, name, start, places):
    """The offset after the closing tag of a `<script>` or `<style>` whose opening tag ends
    at `start`; None when there is none."""
    closing = re.compile("</" + name + "(?=[" + _TAG_SPACE + "/>]|$)", re.ASCII | re.IGNORECASE)
    found = closing.search(markup, start)
    if found is None:
        return None
    return _tag_end(markup, found.end(), places, found.start())[0]


def _declaration(markup, i, places):
    """The error for a `<!` that opens no comment, or for a `<?`."""
    if markup.startswith("<?", i):
        return places.error(i, "<?…?> is not inline markup")
    if _ascii_lower(markup[i + 2 : i + 9]) == "doctype":
        return places.error(i, "<!DOCTYPE> is not inline markup")
    if markup.startswith("<![CDATA[", i):
        return places.error(i, "<![CDATA[…]]> is not inline markup")
    return places.error(i, "<!…> is not inline markup")


def _tokens(markup, places):
    """The `_Token`s of `markup`, in order.

    Raises:
        MarkupError: an unterminated tag or comment, a declaration, a processing instruction,
            `</` without a name, a `<script>` or `<style>` never closed.
    """
    i, text_start, n = 0, 0, len(markup)
    while i < n:
        i = markup.find("<", i)
        if i == -1:
            break
        following = markup[i + 1 : i + 2]
        closing = following == "/"
        if not (_is_letter(following) or following in ("/", "!", "?")):
            i += 1
            continue
        if i > text_start:
            yield _Token("text", markup[text_start:i], "", text_start)
        if markup.startswith("<!--", i):
            end = markup.find("-->", i + 4)
            if end == -1:
                raise places.error(i, "unterminated comment")
            yield _Token("atom", markup[i : end + 3], "", i)
            i = end + 3
        elif following in ("!", "?"):
            raise _declaration(markup, i, places)
        elif closing and not _is_letter(markup[i + 2 : i + 3]):
            raise places.error(i, "</ is not followed by a tag name")
        else:
            name_start = i + 2 if closing else i + 1
            name_end = _name_end(markup, name_start)
            name = _ascii_lower(markup[name_start:name_end])
            end, self_closing = _tag_end(markup, name_end, places, i)
            if not closing and not self_closing and name in RAW_TEXT:
                end = _raw_text_end(markup, name, end, places)
                if end is None:
                    raise places.error(i, f"<{markup[name_start:name_end]}> opened at {places.at(i)} is never closed")
                yield _Token("atom", markup[i:end], name, i)
            else:
                yield _Token("close" if closing else "open", markup[i:end], name, i, self_closing)
            i = end
        text_start = i
    if text_start < n:
        yield _Token("text", markup[text_start:], "", text_start)


@dataclasses.dataclass
class _Item:
    """An element as `strip` reads it: its end and closing tag come later."""

    kind: str
    open: str
    plain_start: int  # its offsets in the plain text
    plain_end: int
    parent: object  # the index of the item around it, or None
    start: int  # its offset in the markup
    close: str = ""


@dataclasses.dataclass(frozen=True)
class _Open:
    """An opening tag whose closing tag is still to come."""

    token: _Token
    written_name: str  # its name as written, for messages
    item: object  # its index in the items; None inside an UNTRANSLATED element, or for one


class _Stripper:
    """`strip`'s state as it reads the tokens: the plain text so far, the open tags, the items found."""

    def __init__(self, markup, places):
        self.markup, self.places = markup, places
        self.plain, self.length, self.last = [], 0, ""  # the plain text's pieces, its length, its last character
        self.pending_break = False  # a break element since the last character, which is not white space
        self.stack = []  # _Open, outermost first
        self.items = []  # _Item, in the order their opening tags appear
        self.untranslated = None  # the _Open of the UNTRANSLATED element being kept whole
        self.breaks = []  # the plain text's length at each break tag

    def add_text(self, raw):
        text = html.unescape(raw)
        # A reference that html.unescape drops (`&#1;`, a control character) leaves no text.
        if self.untranslated or not text:
            return
        if self.pending_break and text[0] not in WHITE_SPACE:
            text = " " + text
        self.pending_break = False
        self.plain.append(text)
        self.length += len(text)
        self.last = text[-1]

    def note_break(self, name):
        if self.untranslated or name not in BREAKS:
            return
        # At a word's end the text that follows is kept apart by a space (`add_text`), so
        # the offset never falls inside a word.
        self.breaks.append(self.length)
        if self.last and self.last not in WHITE_SPACE:
            self.pending_break = True

    def add_item(self, kind, text, start):
        """Adds an item found at the current place of the plain text; returns its index."""
        if self.untranslated:
            return None
        parent = self.stack[-1].item if self.stack else None
        self.items.append(_Item(kind, text, self.length, self.length, parent, start))
        return len(self.items) - 1

    def open(self, token):
        written = token.text[1 : _name_end(token.text, 1)]
        if not self.untranslated and token.name in UNTRANSLATED:
            self.untranslated = _Open(token, written, None)
            self.stack.append(self.untranslated)
        else:
            self.stack.append(_Open(token, written, self.add_item(ELEMENT, token.text, token.start)))

    def close(self, token):
        written = token.text[2 : _name_end(token.text, 2)]
        at = self.places.at(token.start)
        if token.name in VOID_NAMES:
            reason = f"</{written}> at {at}: {token.name} is a void element and has no closing tag"
            raise self.places.error(token.start, reason)
        if not any(opened.token.name == token.name for opened in self.stack):
            raise self.places.error(token.start, f"</{written}> at {at} closes nothing")
        top = self.stack.pop()
        if top.token.name != token.name:
            opened_at = self.places.at(top.token.start)
            reason = f"</{written}> at {at} while <{top.written_name}> (opened at {opened_at}) is open: tags cross"
            raise self.places.error(token.start, reason)
        if top.item is not None:
            self.items[top.item].close = token.text
            self.items[top.item].plain_end = self.length
        elif top is self.untranslated:
            self.untranslated = None
            self.add_item(ATOM, self.markup[top.token.start : token.start + len(token.text)], top.token.start)

    def read(self, token):
        if token.kind == "text":
            self.add_text(token.text)
            return
        if token.kind == "atom":
            self.add_item(ATOM, token.text, token.start)
            return
        self.note_break(token.name)
        if token.kind == "close":
            self.close(token)
        elif token.name in VOID_NAMES:
            self.add_item(VOID, token.text, token.start)
        elif token.self_closing:
            self.add_item(ATOM, token.text, token.start)
        else:
            self.open(token)

    def finish(self):
        if self.stack:
            first = self.stack[0]
            at = self.places.at(first.token.start)
            raise self.places.error(first.token.start, f"<{first.written_name}> opened at {at} is never closed")


def strip(markup, first_line=1):
    """The `Stripped` line of `markup`: its plain text and words, and its elements.

    Args:
        markup: one line (or paragraph) of inline HTML.
        first_line: the line number of its first line, for errors (a paragraph of a file).

    Raises:
        MarkupError: `markup` is not well-formed, naming the line, the column and the reason.
    """
    places = _Places(markup, first_line)
    stripper = _Stripper(markup, places)
    for token in _tokens(markup, places):
        stripper.read(token)
    stripper.finish()
    text = "".join(stripper.plain)
    spans = word_spans(text)
    ends, starts = [end for _, end in spans], [start for start, _ in spans]
    elements = []
    for item in stripper.items:
        first = bisect.bisect_right(ends, item.plain_start)  # the words that end at or before it
        after = bisect.bisect_left(starts, item.plain_end)  # the words that start before its end
        kind = item.kind
        if kind == ELEMENT and not (item.plain_end > item.plain_start and after > first):
            kind = EMPTY
        line, column = places(item.start)
        elements.append(Element(
            kind=kind, open=item.open, close=item.close, span=(first, after) if kind == ELEMENT else (first, first),
            position=first, parent=item.parent, line=line, column=column,
        ))
    return Stripped(
        text=text, words=tuple(text[a:b] for a, b in spans), elements=tuple(elements), markup=markup,
        breaks=tuple(sorted(set(stripper.breaks))),
    )


def markup_text(markup):
    """The plain text of `markup` (`strip(markup).text`): the one definition, for input and output.

    Raises:
        MarkupError: as `strip`.
    """
    return strip(markup).text


class _Layout:
    """Where `restore` puts each element of a line in its translation: an interval of target
    words, `[lo, hi)`, or a place between them for a zero-width one."""

    def __init__(self, stripped, links, target_words):
        self.elements = stripped.elements
        self.targets = [[] for _ in stripped.words]  # per source word: its linked target words, sorted
        for i, j in sorted(set(links)):
            self.targets[i].append(j)
        self.children = {None: []}
        for index, element in enumerate(self.elements):
            self.children.setdefault(index, [])
            self.children[element.parent].append(index)
        self.interval = {}  # element -> (lo, hi), for the elements that hold words
        self.place = {}  # element -> q, for the zero-width ones
        self.lay_out(None, 0, target_words)

    def anchor(self, source, hi):
        """The target place of source boundary `source`: before the first target word linked
        to a word after it, else after the last one linked to a word before it, else `hi`."""
        for targets in self.targets[source:]:
            if targets:
                return targets[0]
        for targets in reversed(self.targets[:source]):
            if targets:
                return targets[-1] + 1
        return hi

    def lay_out(self, node, lo, hi):
        """Places the children of `node` inside `[lo, hi)`, then their children inside them."""
        self.take_words(node, lo, hi)
        siblings = [self.interval[child] for child in self.children[node] if child in self.interval]
        for child in self.children[node]:
            if child not in self.interval:
                anchor = min(max(self.anchor(self.elements[child].position, hi), lo), hi)
                self.place[child] = _outside(siblings, anchor)
        for child in self.children[node]:
            if child in self.interval:
                self.lay_out(child, *self.interval[child])
            else:
                self.lay_out(child, self.place[child], self.place[child])

    def take_words(self, node, lo, hi):
        """Gives the `element` children of `node` disjoint intervals inside `[lo, hi)`: the
        smallest hull of linked words first (ties: source order), each the best free run
        inside its hull (`_best_interval`). A child that gets none is left zero-width."""
        wanting = []  # (size of the hull, child, its linked target words in [lo, hi), sorted)
        for child in self.children[node]:
            element = self.elements[child]
            if element.kind == ELEMENT:
                linked = sorted({j for i in range(*element.span) for j in self.targets[i] if lo <= j < hi})
                if linked:
                    wanting.append((linked[-1] + 1 - linked[0], child, linked))
        free = [True] * (hi - lo)  # free[j - lo]: whether target word j is still free
        for _, child, linked in sorted(wanting):
            interval = _best_interval(free, lo, linked)
            if interval:
                self.interval[child] = interval
                for j in range(*interval):
                    free[j - lo] = False


def _best_interval(free, lo, linked):
    """Inside the hull of `linked` (sorted target words), the run of free words holding the
    most of them, then the longest once cut to the hull of those it holds, then the leftmost;
    so cut. None when no free run holds any."""
    best, best_score = None, None
    for run_start, run_end in _free_runs(free, lo, linked[0], linked[-1] + 1):
        held = [j for j in linked if run_start <= j < run_end]
        if held:
            score = (len(held), held[-1] + 1 - held[0], -held[0])
            if best_score is None or score > best_score:
                best, best_score = (held[0], held[-1] + 1), score
    return best


def _free_runs(free, lo, start, end):
    """The maximal runs `(a, b)` of free target words inside `[start, end)`; `free[j - lo]` says whether j is."""
    runs, run_start = [], None
    for j in range(start, end + 1):
        if j < end and free[j - lo]:
            run_start = j if run_start is None else run_start
        elif run_start is not None:
            runs.append((run_start, j))
            run_start = None
    return runs


def _outside(intervals, q):
    """`q`, moved to the nearer edge of the interval it lies strictly inside (the start on a tie)."""
    for lo, hi in intervals:
        if lo < q < hi:
            return lo if q - lo <= hi - q else hi
    return q


def _check_links(links, source_words, target_words):
    for i, j in links:
        if not 0 <= i < source_words:
            raise ValueError(f"link {i}-{j}: the source has {source_words} words")
        if not 0 <= j < target_words:
            raise ValueError(f"link {i}-{j}: the target has {target_words} words")


def restore(stripped, translation, links):
    """The translation of a stripped line with the line's tags put back, as HTML.

    Args:
        stripped: `strip`'s answer for the line.
        translation: the translation of `stripped.text`.
        links: `(i, j)` pairs: source word i (of `stripped.words`) is linked to target word j
            (of `data.words.words(translation)`); the `align` signature's Pharaoh line, parsed.

    Returns:
        The translation, its words escaped and its white space as it is, with every element
        of `stripped` placed by the rules of this module's docstring; `stripped.markup` as it
        is when the stripped line has no words.

    Raises:
        ValueError: a link outside the source's or the translation's words.
    """
    if not stripped.words:
        return stripped.markup
    spans = word_spans(translation)
    _check_links(links, len(stripped.words), len(spans))
    layout = _Layout(stripped, links, len(spans))
    pieces = [translation[: spans[0][0]] if spans else translation]
    _render(layout, translation, spans, None, (0, len(spans)), pieces)
    pieces.append(translation[spans[-1][1] :] if spans else "")
    return "".join(pieces)


def _render(layout, translation, spans, node, interval, pieces):
    """Appends to `pieces` the target words `interval` = `[lo, hi)` with the children of `node`
    around them: the white space before each word but the first, then the zero-width children
    at that place (in source order), then the word, or a child starting there, whole."""
    lo, hi = interval
    at = {}  # q -> the zero-width children there, in source order
    starting = {}  # q -> the child whose interval starts there
    for child in layout.children[node]:
        if child in layout.interval:
            starting[layout.interval[child][0]] = child
        else:
            at.setdefault(layout.place[child], []).append(child)
    q = lo
    while True:
        if lo < q < hi:
            pieces.append(translation[spans[q - 1][1] : spans[q][0]])
        for child in at.get(q, ()):
            _render_element(layout, translation, spans, child, (q, q), pieces)
        if q == hi:
            return
        if q in starting:
            child = starting[q]
            _render_element(layout, translation, spans, child, layout.interval[child], pieces)
            q = layout.interval[child][1]
        else:
            pieces.append(html.escape(translation[spans[q][0] : spans[q][1]], quote=False))
            q += 1


def _render_element(layout, translation, spans, child, interval, pieces):
    element = layout.elements[child]
    pieces.append(element.open)
    if element.kind in (ELEMENT, EMPTY):
        _render(layout, translation, spans, child, interval, pieces)
    pieces.append(element.close)


def translate_markup(texts, align):
    """The translations of lines of markup, each with its tags put back (`restore`).

    Every text is stripped before anything is translated, so that malformed markup fails
    before any request. The texts are numbered as the lines of one file (text k starts on
    the line after text k - 1 ends), so that an error names the file's line. The plain texts
    that have words go to `align` in one call; a text without words comes back as it is.

    Args:
        texts: lines of inline HTML.
        align: `align(list of plain texts) -> [(translation, Pharaoh line)]`, one pair per
            text, in order: the export's `align` signature, over REST or gRPC.

    Raises:
        MarkupError: a text is not well-formed (before `align` is called).
        ValueError: `align` answered another number of texts, or a link out of range.
    """
    stripped, line = [], 1
    for text in texts:
        stripped.append(strip(text, first_line=line))
        line += text.count("\n") + 1
    plain = [item.text for item in stripped if item.words]
    answers = list(align(plain)) if plain else []
    if len(answers) != len(plain):
        raise ValueError(f"align answered {len(answers)} translations for {len(plain)} texts")
    answers = iter(answers)
    outputs = []
    for item in stripped:
        if not item.words:
            outputs.append(item.markup)
            continue
        translation, pharaoh = next(answers)
        links = parse_pharaoh(pharaoh, len(item.words), len(words(translation)))
        outputs.append(restore(item, translation, links))
    return outputs
