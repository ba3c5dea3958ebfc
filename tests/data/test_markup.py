"""data/markup.py: inline HTML stripped from a line and put back around the aligned words.

The literal cases below are also in markup_cases.json, for the page's JavaScript port; a
test holds the file equal to them. After changing a case, write the file again with

    python -m tests.data.test_markup
"""

import collections
import html
import json
from html.parser import HTMLParser
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data.markup import ATOM, ELEMENT, EMPTY, VOID, Element, MarkupError, markup_text, restore, strip, translate_markup
from data.words import parse_pharaoh, words

CASES_FILE = Path(__file__).parent / "markup_cases.json"
ABOUT = (
    "Inline markup kept through translation (data/markup.py): the cases its Python is checked on "
    "(tests/data/test_markup.py, which holds this file equal to its table), shared with the page's JavaScript "
    "port. cases: `markup` stripped gives the plain `text`; restored "
    "into `translation` with `links` (Pharaoh: source word - target word) it gives `output`. errors: `markup` "
    "whose first line is `first_line` is refused at `line` and `column` (from 1, in code points) with `reason`."
)

CASES = [
    {"name": "nested and self-closing tags, attributes byte for byte, a tag inside a word",
     "markup": '<p>A <b>big <i>red</i></b> dog<br/> sat <img src="x.png" alt="a &amp; b"> on '
               '<a href="/m?a=1&amp;b=2">the mat</a>.</p>',
     "text": "A big red dog sat  on the mat.",
     "translation": "Ein großer roter Hund saß auf der Matte.",
     "links": "0-0 1-1 2-2 3-3 4-4 5-5 6-6 7-7",
     "output": '<p>Ein <b>großer <i>roter</i></b> Hund <br/>saß <img src="x.png" alt="a &amp; b">auf '
               '<a href="/m?a=1&amp;b=2">der Matte.</a></p>'},
    {"name": "a tag takes the hull of its words, over a gap",
     "markup": "He <b>gave up</b> smoking.", "text": "He gave up smoking.",
     "translation": "Er hörte mit dem Rauchen auf.", "links": "0-0 1-1 2-5 3-2 3-3 3-4",
     "output": "Er <b>hörte mit dem Rauchen auf.</b>"},
    {"name": "an element with no linked word stands empty at its anchor",
     "markup": "the <b>very</b> big dog", "text": "the very big dog",
     "translation": "der große Hund", "links": "0-0 2-1 3-2",
     "output": "der <b></b>große Hund"},
    {"name": "crossing siblings: the smaller first, the other keeps its leftmost free run",
     "markup": "I <b>do not</b> <i>know</i>", "text": "I do not know",
     "translation": "je ne sais pas", "links": "0-0 2-1 2-3 3-2",
     "output": "je <b>ne</b> <i>sais</i> pas"},
    {"name": "crossing siblings of one size: the earlier first",
     "markup": "<b>a b</b> <i>c d</i>", "text": "a b c d",
     "translation": "w x y z", "links": "0-0 1-2 2-1 3-3",
     "output": "<b>w x y</b> <i>z</i>"},
    {"name": "a child is laid out inside its parent",
     "markup": "<b>the <i>red</i> car</b>", "text": "the red car",
     "translation": "la voiture rouge", "links": "0-0 1-2 2-1",
     "output": "<b>la voiture <i>rouge</i></b>"},
    {"name": "a zero-width item whose anchor lies inside a sibling moves to its nearer edge",
     "markup": "<b>x y</b> z<br> w", "text": "x y z w",
     "translation": "X W Y Z", "links": "0-0 1-2 2-3 3-1",
     "output": "<br><b>X W Y</b> Z"},
    {"name": "no links at all: every tag at the end",
     "markup": "a <b>b</b><br> c", "text": "a b c",
     "translation": "x y", "links": "",
     "output": "x y<b></b><br>"},
    {"name": "a void element at the end",
     "markup": "Hello world<br>", "text": "Hello world",
     "translation": "Hallo Welt", "links": "0-0 1-1",
     "output": "Hallo Welt<br>"},
    {"name": "a tag inside a word takes the whole word",
     "markup": "un<u>der</u>line it", "text": "underline it",
     "translation": "unterstreiche es", "links": "0-0 1-1",
     "output": "<u>unterstreiche</u> es"},
    {"name": "entities decoded for translation and escaped again",
     "markup": "AT&amp;T is <b>big</b>", "text": "AT&T is big",
     "translation": "AT&T ist groß", "links": "0-0 1-1 2-2",
     "output": "AT&amp;T ist <b>groß</b>"},
    {"name": "code and script kept whole, untranslated, before the next word",
     "markup": "Run <code>ls <b>-l</b></code> now<script>if (a < b) {}</script>", "text": "Run  now",
     "translation": "Führe jetzt aus", "links": "0-0 0-2 1-1",
     "output": "Führe <code>ls <b>-l</b></code>jetzt <script>if (a < b) {}</script>aus"},
    {"name": "block elements and br separate words",
     "markup": "<p>One</p><p>two<br>three</p>", "text": "One two three",
     "translation": "Eins zwei drei", "links": "0-0 1-1 2-2",
     "output": "<p>Eins</p> <p>zwei <br>drei</p>"},
    {"name": "a comment, an empty element and a self-closing atom, each before the next word",
     "markup": "a<!-- note --> <span></span>b <x/>c", "text": "a b c",
     "translation": "A B C", "links": "0-0 1-1 2-2",
     "output": "A <!-- note --><span></span>B <x/>C"},
    {"name": "markup-free text: the translation as it is, its white space too",
     "markup": "A  man\u00a0rides.", "text": "A  man\u00a0rides.",
     "translation": " Ein  Mann fährt.\n", "links": "0-0 1-1 2-2",
     "output": " Ein  Mann fährt.\n"},
    {"name": "characters outside the Basic Multilingual Plane count one each (a JavaScript string counts two)",
     "markup": "🚴 <b>fast</b> 🍕<i>pizza</i> now", "text": "🚴 fast 🍕pizza now",
     "translation": "🚴 schnelle 🍕Pizza jetzt", "links": "0-0 1-1 2-2 3-3",
     "output": "🚴 <b>schnelle</b> <i>🍕Pizza</i> jetzt"},
    {"name": "entities: a legacy name without its semicolon, an escaped tag, an astral number, the longest name",
     "markup": "&copy 2024 &lt;b&gt; &#x1F6B4;&nbsp;<b>go</b> &notit; &amp", "text": "© 2024 <b> 🚴\u00a0go ¬it; &",
     "translation": "© 2024 <b> 🚴 los ¬it; &", "links": "0-0 1-1 2-2 3-3 4-4 5-5 6-6",
     "output": "© 2024 &lt;b&gt; 🚴 <b>los</b> ¬it; &amp;"},
    {"name": "void elements: a quoted > in an attribute, a <wbr> inside a word, <hr/> between words, one at the end",
     "markup": 'Press <input type="button" value="a > b"> or<wbr>not<hr/>ok <area shape=rect>',
     "text": "Press  ornot ok ", "translation": "Drücke jaodernein gut", "links": "0-0 1-1 2-2",
     "output": 'Drücke <input type="button" value="a > b"><wbr>jaodernein <hr/>gut<area shape=rect>'},
    {"name": "a reference that decodes to nothing (a control character) adds no text",
     "markup": "<b>&#1;</b>a&#1;b", "text": "ab", "translation": "xy", "links": "0-0",
     "output": "<b></b>xy"},
    {"name": "blank text: the markup as it is",
     "markup": "<br/> <!-- c --> <b> </b>", "text": "   ",
     "translation": "", "links": "",
     "output": "<br/> <!-- c --> <b> </b>"},
]

ERRORS = [
    {"name": "never closed", "markup": "abc <b>def", "first_line": 1,
     "line": 1, "column": 5, "reason": "<b> opened at 1:5 is never closed"},
    {"name": "the first of several never closed", "markup": "<b>a <i>b", "first_line": 1,
     "line": 1, "column": 1, "reason": "<b> opened at 1:1 is never closed"},
    {"name": "closes nothing", "markup": "<b>a</b></i>", "first_line": 1,
     "line": 1, "column": 9, "reason": "</i> at 1:9 closes nothing"},
    {"name": "tags cross", "markup": "<b>ab <i>cd</b></i>", "first_line": 1,
     "line": 1, "column": 12, "reason": "</b> at 1:12 while <i> (opened at 1:7) is open: tags cross"},
    {"name": "tags cross inside code", "markup": "<code><b>x</code></b>", "first_line": 1,
     "line": 1, "column": 11, "reason": "</code> at 1:11 while <b> (opened at 1:7) is open: tags cross"},
    {"name": "a closing tag of a void element", "markup": "ab</br>", "first_line": 1,
     "line": 1, "column": 3, "reason": "</br> at 1:3: br is a void element and has no closing tag"},
    {"name": "an unterminated tag", "markup": 'a <b class="x>y', "first_line": 1,
     "line": 1, "column": 3, "reason": "unterminated tag"},
    {"name": "an unterminated closing tag", "markup": "<b>x</b", "first_line": 1,
     "line": 1, "column": 5, "reason": "unterminated tag"},
    {"name": "an unterminated comment", "markup": "a <!-- b", "first_line": 1,
     "line": 1, "column": 3, "reason": "unterminated comment"},
    {"name": "a script never closed", "markup": "x <script>if (a < b)", "first_line": 1,
     "line": 1, "column": 3, "reason": "<script> opened at 1:3 is never closed"},
    {"name": "a doctype", "markup": "<!DOCTYPE html><p>x</p>", "first_line": 1,
     "line": 1, "column": 1, "reason": "<!DOCTYPE> is not inline markup"},
    {"name": "a processing instruction", "markup": "x <?php echo 1; ?>", "first_line": 1,
     "line": 1, "column": 3, "reason": "<?…?> is not inline markup"},
    {"name": "CDATA", "markup": "a <![CDATA[b]]>", "first_line": 1,
     "line": 1, "column": 3, "reason": "<![CDATA[…]]> is not inline markup"},
    {"name": "another declaration", "markup": "a <!x>", "first_line": 1,
     "line": 1, "column": 3, "reason": "<!…> is not inline markup"},
    {"name": "</ without a name", "markup": "a </ b>", "first_line": 1,
     "line": 1, "column": 3, "reason": "</ is not followed by a tag name"},
    {"name": "lines counted from first_line", "markup": "one\ntwo <i>three\nfour", "first_line": 3,
     "line": 4, "column": 5, "reason": "<i> opened at 4:5 is never closed"},
    {"name": "columns in code points", "markup": "größer 🚴 <b>x", "first_line": 1,
     "line": 1, "column": 10, "reason": "<b> opened at 1:10 is never closed"},
    {"name": "columns in code points on a later line", "markup": "🚴\n🚴🚴 </i>", "first_line": 1,
     "line": 2, "column": 4, "reason": "</i> at 2:4 closes nothing"},
    {"name": "an unterminated tag after an astral character", "markup": "🍕<b title='x>", "first_line": 1,
     "line": 1, "column": 2, "reason": "unterminated tag"},
]

VOID_NAMES = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class _TagChecker(HTMLParser):
    """Python's own HTML tokenizer, with a stack: whether markup is well-formed, and its tags as written."""

    def __init__(self, markup):
        super().__init__(convert_charrefs=True)
        self.markup, self.stack, self.problems, self.tags = markup, [], [], collections.Counter()
        self.line_starts = [0] + [i + 1 for i, character in enumerate(markup) if character == "\n"]
        self.feed(markup)
        self.close()
        self.problems += [f"<{name}> never closed" for name in self.stack]

    def handle_starttag(self, tag, attrs):
        self.tags[self.get_starttag_text()] += 1
        if tag not in VOID_NAMES:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags[self.get_starttag_text()] += 1

    def handle_endtag(self, tag):
        line, column = self.getpos()
        start = self.line_starts[line - 1] + column
        self.tags[self.markup[start : self.markup.index(">", start) + 1]] += 1
        if not self.stack or self.stack.pop() != tag:
            self.problems.append(f"</{tag}> at {line}:{column + 1} closes no open tag")

    def handle_comment(self, data):
        self.tags[f"<!--{data}-->"] += 1

    def handle_decl(self, decl):
        self.problems.append(f"declaration {decl!r}")

    def unknown_decl(self, data):
        self.problems.append(f"declaration {data!r}")

    def handle_pi(self, data):
        self.problems.append(f"processing instruction {data!r}")


def assert_kept(markup, translation, output):
    """The guarantees of `restore`: well-formed, every tag once as written, the translation's text."""
    checked = _TagChecker(output)
    assert checked.problems == [], output
    assert checked.tags == _TagChecker(markup).tags, output
    tags = collections.Counter((element.open, element.close) for element in strip(output).elements)
    assert tags == collections.Counter((element.open, element.close) for element in strip(markup).elements)
    assert markup_text(output) == translation


@pytest.mark.parametrize("case", CASES, ids=lambda case: case["name"])
def test_the_literal_cases_restore_to_their_written_output(case):
    stripped = strip(case["markup"])
    assert stripped.text == case["text"]
    links = parse_pharaoh(case["links"], len(stripped.words), len(words(case["translation"])))
    output = restore(stripped, case["translation"], links)
    assert output == case["output"]
    if stripped.words:
        assert_kept(case["markup"], case["translation"], output)


@pytest.mark.parametrize("case", ERRORS, ids=lambda case: case["name"])
def test_malformed_markup_is_refused_naming_the_line_the_column_and_the_reason(case):
    with pytest.raises(MarkupError) as error:
        strip(case["markup"], first_line=case["first_line"])
    assert (error.value.line, error.value.column, error.value.reason) == (case["line"], case["column"], case["reason"])
    assert str(error.value) == f"line {case['line']}, column {case['column']}: {case['reason']}"


def shared_cases():
    return {"about": ABOUT, "cases": CASES, "errors": ERRORS}


def write_shared_cases():
    """markup_cases.json: one case a line, so that a change reads as a one-line diff."""
    def listed(cases):
        return "[\n" + ",\n".join("  " + json.dumps(case, ensure_ascii=False) for case in cases) + "\n ]"

    CASES_FILE.write_text(
        f'{{\n "about": {json.dumps(ABOUT)},\n "cases": {listed(CASES)},\n "errors": {listed(ERRORS)}\n}}\n',
        encoding="utf-8",
    )


def test_the_shared_cases_file_holds_these_cases():
    assert json.loads(CASES_FILE.read_text(encoding="utf-8")) == shared_cases(), (
        "markup_cases.json is stale: python -m tests.data.test_markup"
    )


def test_strip_finds_each_kind_its_words_and_its_place():
    stripped = strip(CASES[0]["markup"])
    assert stripped.words == ("A", "big", "red", "dog", "sat", "on", "the", "mat.")
    assert [(e.kind, e.span, e.position, e.parent, e.line, e.column) for e in stripped.elements] == [
        (ELEMENT, (0, 8), 0, None, 1, 1),  # <p>
        (ELEMENT, (1, 3), 1, 0, 1, 6),  # <b>
        (ELEMENT, (2, 3), 2, 1, 1, 13),  # <i>
        (VOID, (4, 4), 4, 0, 1, 31),  # <br/>: before "sat"
        (VOID, (5, 5), 5, 0, 1, 41),  # <img>: before "on"
        (ELEMENT, (6, 8), 6, 0, 1, 78),  # <a>: "the mat." (the "." is inside the word)
    ]
    assert stripped.elements[5] == Element(
        kind=ELEMENT, open='<a href="/m?a=1&amp;b=2">', close="</a>", span=(6, 8), position=6, parent=0,
        line=1, column=78,
    )
    kinds = strip("a <B>b</b> <i> </i><code>c</code><x/><!-- d --><br>e<SCRIPT>f</scripT >").elements
    assert [(e.kind, e.open, e.close, e.position) for e in kinds] == [
        (ELEMENT, "<B>", "</b>", 1), (EMPTY, "<i>", "</i>", 2), (ATOM, "<code>c</code>", "", 2),
        (ATOM, "<x/>", "", 2), (ATOM, "<!-- d -->", "", 2), (VOID, "<br>", "", 2), (ATOM, "<SCRIPT>f</scripT >", "", 3),
    ]


def test_plain_text_decodes_entities_and_breaks_at_block_elements_only_between_words():
    assert markup_text("a<br>b<hr/>c<div>d</div>e") == "a b c d e"
    assert markup_text("a <br> b<p> c</p>") == "a  b c"
    assert markup_text("<p>a</p>") == "a"
    assert markup_text("a<b>b</b>c<img src=x>d") == "abcd"
    assert markup_text("x&lt;y &amp;&nbsp;1 < 2 <3 ") == "x<y &\xa01 < 2 <3 "
    assert markup_text('<a title="1 > 0" class=\'x\'>k</a> <b title=a>b>c</b>') == "k b>c"


def test_restore_refuses_a_link_outside_the_words():
    stripped = strip("a <b>b</b>")
    with pytest.raises(ValueError, match="link 2-0: the source has 2 words"):
        restore(stripped, "x y", [(2, 0)])
    with pytest.raises(ValueError, match="link 0-2: the target has 2 words"):
        restore(stripped, "x y", [(0, 2)])


def test_an_empty_translation_keeps_every_tag():
    output = restore(strip("<p>a <b>b <i>c</i></b><br></p>"), "", [])
    assert output == "<p><b><i></i></b><br></p>"


def reversing_align(calls):
    """A fake `align`: each text's words in reverse order, each linked to where it went."""
    def align(texts):
        calls.append(list(texts))
        answers = []
        for text in texts:
            count = len(words(text))
            links = " ".join(f"{i}-{count - 1 - i}" for i in range(count))
            answers.append((" ".join(reversed(words(text))), links))
        return answers

    return align


def test_translate_markup_sends_the_plain_texts_in_one_call_and_restores_each():
    calls = []
    texts = ["A <b>big</b> dog&amp;cat.", "<br/>", "", "Two <i>words</i>"]
    outputs = translate_markup(texts, reversing_align(calls))
    assert calls == [["A big dog&cat.", "Two words"]]
    assert outputs == ["dog&amp;cat. <b>big</b> A", "<br/>", "", "<i>words</i> Two"]
    calls.clear()
    assert translate_markup(["", " <br> "], reversing_align(calls)) == ["", " <br> "] and calls == []


def test_translate_markup_refuses_malformed_markup_before_any_request():
    calls = []
    with pytest.raises(MarkupError, match=r"^line 4, column 3: <b> opened at 4:3 is never closed$"):
        translate_markup(["a <i>b</i>", "c\nd", "x <b>y"], reversing_align(calls))
    assert calls == []
    with pytest.raises(ValueError, match="align answered 0 translations for 1 texts"):
        translate_markup(["a"], lambda texts: [])


# Random markup: words, entities and a lone "<" as text; paired, void, self-closing,
# raw-text and untranslated elements, comments; nested.
SOURCE_TEXT = st.lists(
    st.sampled_from(
        ["a", "big", "dog", "un", "der", "AT&amp;T", "x&lt;y", "&nbsp;", "&#1;", "café", "🚴", "1 < 2", " ", "  ", "\n"]
    ),
    max_size=4,
).map("".join)
PAIRED = [
    ("<b>", "</b>"), ("<I class='x > y'>", "</i>"), ('<a href="/m?a=1&amp;b=2">', "</a>"),
    ('<span\ntitle="t">', "</SPAN >"), ("<p>", "</p>"), ("<div id=d>", "</div>"), ("<li>", "</li>"),
    ("<code>", "</code>"), ("<kbd>", "</kbd>"),
]
ITEMS = st.sampled_from([
    "<br>", "<br/>", '<img src="x.png" alt="a &amp; b">', "<hr />", "<wbr>", "<!-- note -->", "<x/>",
    "<script>if (a < b) {}</script>", "<style>p > b {}</style>",
])
MARKUP = st.recursive(
    st.one_of(SOURCE_TEXT, ITEMS),
    lambda inner: st.one_of(
        st.lists(inner, min_size=2, max_size=4).map("".join),
        st.tuples(st.sampled_from(PAIRED), inner).map(lambda pair: pair[0][0] + pair[1] + pair[0][1]),
    ),
    max_leaves=16,
)
TARGET_WORD = st.sampled_from(["Ein", "großer", "Hund", "&", "<b>", "x<y", "&amp;", "3>2", "🚴"])
SEPARATOR = st.sampled_from([" ", " ", "  ", "\n", "\xa0"])


@st.composite
def translated_markup(draw):
    """`(markup, translation, links)`: random nested markup, a translation and links between their words."""
    markup = draw(MARKUP)
    source_words = len(strip(markup).words)
    target = draw(st.lists(TARGET_WORD, max_size=8))
    before = draw(st.lists(SEPARATOR, min_size=len(target), max_size=len(target)))  # before each word but the first
    body = "".join(word if k == 0 else before[k] + word for k, word in enumerate(target))
    translation = draw(st.sampled_from(["", " "])) + body + draw(st.sampled_from(["", " ", "\n"]))
    links = []
    if source_words and target:
        pair = st.tuples(st.integers(0, source_words - 1), st.integers(0, len(target) - 1))
        links = draw(st.lists(pair, max_size=2 * max(source_words, len(target))))
    return markup, translation, links


@settings(derandomize=True, max_examples=200, deadline=None)
@given(translated_markup())
def test_any_restored_line_is_well_formed_holds_every_tag_once_and_the_translations_text(case):
    markup, translation, links = case
    assert _TagChecker(markup).problems == []
    stripped = strip(markup)
    output = restore(stripped, translation, links)
    if not stripped.words:
        assert output == markup
        return
    assert_kept(markup, translation, output)
    if not stripped.elements and html.escape(translation, quote=False) == translation:
        assert output == translation


if __name__ == "__main__":
    write_shared_cases()
