"""Steering through the shared server (conftest.py's `tiny_server`): app.client's
--glossary, --constraints, --prefixes and --no-repeat-ngram-size over REST and gRPC, and
the page's glossary and prefix, each sent as the `constrained` signature; the page's
JavaScript glossary rule checked on the Python module's cases (glossary_cases.json).
"""

import json
import subprocess
import sys
import unicodedata
from pathlib import Path

import numpy as np
import pytest

from app.decoding.glossary import _joins, fold
from tests.serving.chromium import headless_chromium
from tests.tiny_run import ROOT

GLOSSARY_CASES = json.loads(
    (Path(__file__).parents[1] / "decoding" / "glossary_cases.json").read_text(encoding="utf-8")
)["cases"]

SOURCES = ["A man rides a bike.", "Two dogs play in the snow.", "A woman on a mountain bike."]
GLOSSARY = "bike\tFahrrad\nmountain bike\tMountainbike\nsnow\tSchnee\n"
PREFIXES = ["Ein Mann", "", ""]


@pytest.fixture(scope="module")
def steering_files(tmp_path_factory):
    directory = tmp_path_factory.mktemp("steering")
    (directory / "terms.tsv").write_text(GLOSSARY, encoding="utf-8")
    (directory / "prefixes.txt").write_text("".join(p + "\n" for p in PREFIXES), encoding="utf-8")
    return str(directory / "terms.tsv"), str(directory / "prefixes.txt")


@pytest.fixture(scope="module")
def expected(tiny_server, exported):
    """The server's constrained outputs for SOURCES steered as the files say, at the
    export's alpha and extra length (what its /page.json says), in TF Serving's columnar
    format: `{name: list}`. (That the signature steers as the in-memory search does:
    tests/export/test_constrained_signature.py.)"""
    n, decoding = len(SOURCES), exported[0].decoding
    status, body = tiny_server.predict({"signature_name": "constrained", "inputs": {
        "inputs": SOURCES, "prefixes": PREFIXES, "constraints": ["Fahrrad", "Schnee", "Mountainbike"],
        "no_repeat_ngram_size": [2] * n, "alpha": [decoding.alpha] * n,
        "max_extra_length": [decoding.max_extra_length] * n,
    }})
    assert status == 200, body
    assert body["outputs"]["constraints_met"] == [True] * n  # JSON true and false, as TF Serving writes bools
    return body["outputs"]


def client(*args, stdin=None):
    return subprocess.run(
        [sys.executable, "-m", "app.client", *args], cwd=ROOT, input=stdin, capture_output=True, text=True, timeout=300
    )


def test_the_client_sends_the_glossary_and_prefixes_over_rest(tiny_server, steering_files, expected):
    glossary, prefixes = steering_files
    result = client("--url", tiny_server.url, "--glossary", glossary, "--prefixes", prefixes,
                    "--no-repeat-ngram-size", "2", "--scores", stdin="".join(s + "\n" for s in SOURCES))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # every constraint met
    rows = [line.split("\t") for line in result.stdout.splitlines()]
    assert [text for _, text in rows] == expected["translations"]
    np.testing.assert_allclose([float(score) for score, _ in rows], expected["scores"], atol=1e-4)
    assert "Fahrrad" in rows[0][1] and "Mountainbike" in rows[2][1]


def test_the_client_over_grpc_prints_what_it_prints_over_rest(tiny_server, exported, steering_files, expected):
    glossary, prefixes = steering_files
    decoding = exported[0].decoding
    # No /page.json over gRPC: the export's settings are given.
    result = client("--grpc", tiny_server.grpc_address, "--glossary", glossary, "--prefixes", prefixes,
                    "--no-repeat-ngram-size", "2", "--alpha", str(decoding.alpha),
                    "--max-extra-length", str(decoding.max_extra_length), *SOURCES)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == expected["translations"]


def test_unmet_constraints_are_named_by_line_and_the_translation_printed(tiny_server, tmp_path):
    # The model has 48 positions: three 20-word phrases cannot all fit.
    long_phrase = " ".join(["Hund"] * 20)
    (tmp_path / "c.txt").write_text("\n" + "\t".join([long_phrase, "Fahrrad " + long_phrase, "Schnee " + long_phrase])
                                    + "\n", encoding="utf-8")
    result = client("--url", tiny_server.url, "--constraints", str(tmp_path / "c.txt"), "A man.", "A dog.")
    assert result.returncode == 0, result.stderr
    assert result.stderr == (
        "warning: line 2: no translation within the length limit holds every constraint; the best one found is "
        "printed\n"
    )
    assert len(result.stdout.splitlines()) == 2 and all(result.stdout.splitlines())


@pytest.mark.slow
def test_the_pages_glossary_rule_is_the_python_modules(tiny_server):
    with headless_chromium() as browser:
        page = browser.new_page()
        page.goto(tiny_server.url + "/")
        got = page.evaluate(
            """cases => cases.map(c => {
                try {
                    const glossary = parseGlossary(c.glossary);
                    return c.error_line ? "accepted" : glossaryConstraints(glossary, c.sentence);
                } catch (error) {
                    return error.line ? `line ${error.line}` : String(error);
                }
            })""",
            GLOSSARY_CASES,
        )
        want = [f"line {case['error_line']}" if "error_line" in case else case["constraints"]
                for case in GLOSSARY_CASES]
        assert dict(zip([case["name"] for case in GLOSSARY_CASES], got)) == dict(
            zip([case["name"] for case in GLOSSARY_CASES], want))
        # Its case folding and word characters, on every code point Python knows:
        # JavaScript has no casefold, and its Unicode tables are the browser's.
        # One string each way (a call per character would take half a minute), the
        # characters between separators that neither folding nor NFKC changes.
        characters = [chr(code) for code in range(2, sys.maxunicode + 1)  # "\x01" separates them
                      if unicodedata.category(chr(code)) not in ("Cn", "Cs", "Co")]
        text = "\x01".join(characters)
        folded, words = page.evaluate(
            "text => [fold(text).split('\\x01'), Array.from(text.split('\\x01'), c => joins(c) ? 1 : 0)]", text
        )
        want = fold(text).split("\x01")
        assert [c for c, f, g, w in zip(characters, folded, want, words) if f != g or w != _joins(c)] == []
        assert len(folded) == len(want) == len(characters)


@pytest.mark.slow
def test_the_page_sends_its_glossary_and_prefix_as_constrained_requests(tiny_server, exported):
    decoding = exported[0].decoding
    with headless_chromium() as browser:
        page = browser.new_page()
        bodies = []  # each predict request's JSON body, in order
        page.on("request", lambda r: bodies.append(r.post_data_json) if r.method == "POST" else None)
        page.goto(tiny_server.url + "/")
        page.wait_for_function("document.getElementById('version').textContent != ''", timeout=60_000)
        assert page.is_hidden("#glossary")  # folded away until asked for
        page.click("#steering summary")

        # A glossary: each sentence's constraints, computed in the page, and the prefix
        # for every sentence; the export's alpha and extra length from /page.json.
        page.fill("#source", "\n".join(SOURCES[1:]))
        page.fill("#glossary", GLOSSARY)
        page.click("#translate")
        page.wait_for_selector("#results:not([hidden]) tbody tr", timeout=120_000)
        settings = {"no_repeat_ngram_size": 0, "alpha": decoding.alpha,
                    "max_extra_length": decoding.max_extra_length}
        body = {"signature_name": "constrained", "instances": [
            {"inputs": SOURCES[1], "prefixes": "", "constraints": "Schnee", **settings},
            {"inputs": SOURCES[2], "prefixes": "", "constraints": "Mountainbike", **settings},
        ]}
        assert bodies == [body]
        status, reply = tiny_server.predict(body)
        assert status == 200, reply
        rows = page.query_selector_all("#results tbody tr")
        texts = [row.query_selector(".translation").text_content() for row in rows]
        assert texts == [prediction["translations"] for prediction in reply["predictions"]]
        assert [row.query_selector(".constraints").text_content() for row in rows] == ["Schnee", "Mountainbike"]
        assert page.query_selector_all("#results .unmet") == []

        # A prefix alone: constrained too, without constraints.
        bodies.clear()
        page.fill("#source", SOURCES[0])
        page.fill("#glossary", "")
        page.fill("#prefix", PREFIXES[0])
        page.click("#translate")
        page.wait_for_function("document.getElementById('status').textContent.includes('translated')",
                               timeout=120_000)
        assert bodies == [{"signature_name": "constrained", "instances": [
            {"inputs": SOURCES[0], "prefixes": PREFIXES[0], "constraints": "", "no_repeat_ngram_size": 0,
             "alpha": decoding.alpha, "max_extra_length": decoding.max_extra_length},
        ]}]

        # A constraint the length limit cannot hold: shown as not met.
        long_phrase = " ".join(["Hund"] * 20)
        page.fill("#prefix", "")
        page.fill("#glossary", f"man\t{long_phrase}\nA\tFahrrad {long_phrase}\nrides\tSchnee {long_phrase}")
        page.click("#translate")
        page.wait_for_selector("#results .unmet", timeout=120_000)
        assert page.text_content("#results .unmet").startswith("not met")
        assert page.text_content("#status").endswith("1 sentence's constraints could not all be met.")

        # A malformed glossary is refused, naming its line, before any request.
        bodies.clear()
        page.fill("#glossary", "bike\tFahrrad\nbikes")
        page.click("#translate")
        page.wait_for_selector("#status.error")
        assert page.text_content("#status") == (
            'Error: glossary, line 2: "bikes" is not two non-empty columns separated by one tab '
            "(source term <TAB> target term)"
        )
        assert bodies == []
