"""benchmarks/bench_alignment.py: AER, the tags it draws and puts back, the proxy and its
cache, its flags, and a tiny run."""

import gzip
import importlib.util
import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.bench_alignment import (
    aer, aligned_words, draw_tag, enclosed_words, heads, links_of, made_proxy, parse_args, placement,
    read_proxy_file, tag_candidates, tagged, tags_of, well_formed, word_iou,
)
from data.markup import strip
from data.words import words

ROOT = Path(__file__).resolve().parents[2]


def test_aer_is_one_minus_twice_the_shared_links_over_both_counts_summed_over_the_corpus():
    assert aer([{(0, 0), (1, 1)}], [{(0, 0), (1, 2)}]) == 0.5  # 1 - 2 * 1 / (2 + 2)
    # Summed over the corpus, not averaged per sentence: 1 - 2 * 2 / (1 + 3 + 1 + 1).
    assert aer([{(0, 0)}, {(0, 0), (1, 1), (2, 2)}], [{(0, 0)}, {(0, 0)}]) == pytest.approx(1 / 3)
    assert aer([{(0, 0), (1, 1)}], [{(0, 0), (1, 1)}]) == 0.0
    assert aer([{(0, 1)}], [{(1, 0)}]) == 1.0
    assert aer([set()], [{(0, 0)}]) == 1.0
    assert aer([set(), set()], [set(), set()]) == 0.0  # no link on either side: nothing wrong
    with pytest.raises(ValueError, match="1 predicted sentences against 2 reference ones"):
        aer([set()], [set(), set()])


def test_links_of_a_pharaoh_line():
    assert links_of("0-0 2-1 1-2") == {(0, 0), (2, 1), (1, 2)}
    assert links_of("") == set()


# Source word 4 has no link; the phrases of 1-3 words whose aligned target words are
# non-empty and contiguous.
LINKS = {(0, 0), (1, 2), (2, 3), (3, 1)}
CANDIDATES = [(0, 1), (1, 2), (1, 3), (1, 4), (2, 3), (3, 4), (3, 5)]


def test_tagged_phrases_are_one_to_three_words_whose_aligned_words_are_non_empty_and_contiguous():
    assert aligned_words(LINKS, (2, 4)) == [1, 3]  # a gap: (2, 4) is no candidate
    assert aligned_words(LINKS, (4, 5)) == []  # no link: (4, 5) is none either
    assert tag_candidates(LINKS, 5) == CANDIDATES
    assert tag_candidates(set(), 3) == []
    # Four words are never one phrase, even where their links are contiguous.
    assert tag_candidates({(0, 0), (1, 1), (2, 2), (3, 3)}, 4)[-1] == (3, 4)
    assert (0, 4) not in tag_candidates({(0, 0), (1, 1), (2, 2), (3, 3)}, 4)


def test_the_draw_is_random_seed_plus_index_over_the_candidates():
    for seed, index in ((1, 0), (1, 2), (7, 5)):
        assert draw_tag(LINKS, 5, seed, index) == random.Random(seed + index).choice(CANDIDATES)
    assert draw_tag(LINKS, 5, 1, 2) == draw_tag(LINKS, 5, 3, 0)  # only the sum counts
    assert len({draw_tag(LINKS, 5, 1, index) for index in range(30)}) > 3
    assert draw_tag(set(), 4, 1, 0) is None


def test_a_tagged_source_escapes_its_text_so_that_its_plain_text_is_the_source():
    source = "A man & a <dog>  runs."
    markup = tagged(source, (1, 3))
    assert markup == "A <b>man &amp;</b> a &lt;dog&gt;  runs."
    assert strip(markup).text == source
    assert tagged("Dogs run.", (0, 2)) == "<b>Dogs run.</b>"
    assert tags_of(markup) == {"<b>": 1, "</b>": 1}


def test_well_formed_needs_both_parsers_and_enclosed_words_are_counted_in_the_plain_text():
    assert well_formed("Ein <b>großer &amp; roter</b> Hund.")
    assert not well_formed("Ein <b>großer Hund.")
    assert not well_formed("Ein </b>großer<b> Hund.")
    assert enclosed_words("Ein <b>großer &amp; roter</b> Hund.") == (1, 4)
    assert enclosed_words("<b></b>Ein Hund.") == (0, 0)
    assert word_iou((1, 3), (2, 4)) == pytest.approx(1 / 3)
    assert word_iou((0, 0), (1, 2)) == 0.0
    assert word_iou((0, 0), (0, 0)) == 1.0


def test_placement_puts_the_tag_back_into_the_reference_by_the_links():
    stripped = [strip(tagged("A big red dog.", (1, 3))), strip(tagged("A cat.", (0, 1)))]
    references = ["Ein großer roter Hund.", "Eine Katze."]
    wanted = [(1, 3), (0, 1)]
    # Exact for the first; the second's tag lands on "Katze." only: IoU 0.
    exact, iou = placement(stripped, references, wanted, ["0-0 1-1 2-2 3-3", "0-1 1-0"])
    assert (exact, iou) == (0.5, 0.5)
    # A hull: "big" -> 1, "red" -> 3 fills the gap, IoU 2 / 3.
    exact, iou = placement(stripped[:1], references[:1], wanted[:1], ["0-0 1-1 2-3 3-2"])
    assert (exact, iou) == (0.0, pytest.approx(2 / 3))


def test_heads_are_every_layer_s_heads_then_its_mean():
    class Config:
        num_layers, num_heads = 2, 3

    assert heads(Config) == [(0, 0), (0, 1), (0, 2), (0, None), (1, 0), (1, 1), (1, 2), (1, None)]


def test_a_proxy_file_has_one_checked_line_per_validation_then_test_pair(tmp_path):
    sides = {"validation": (["A dog.", "A cat runs."], ["Ein Hund.", "Eine Katze rennt."]),
             "test_2016_flickr": (["Two men."], ["Zwei Männer."])}
    path = tmp_path / "proxy.txt"
    path.write_text("0-0 1-1\n0-0 1-1 2-2\n1-1\n", encoding="utf-8")
    assert read_proxy_file(str(path), sides) == {
        "validation": ["0-0 1-1", "0-0 1-1 2-2"], "test_2016_flickr": ["1-1"],
    }
    path.write_text("0-0\n0-0\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="2 lines, but validation and test_2016_flickr have 3 pairs"):
        read_proxy_file(str(path), sides)
    path.write_text("0-0\n0-0\n1-2\n", encoding="utf-8")
    with pytest.raises(SystemExit, match=r"proxy\.txt:3: link 1-2: the target has 2 words"):
        read_proxy_file(str(path), sides)


def _multi30k(split, lang, count):
    stem = {"train": "train", "validation": "val", "test_2016_flickr": "test_2016_flickr"}[split]
    with gzip.open(ROOT / "data" / "multi30k" / f"{stem}.{lang}.gz", "rt", encoding="utf-8") as f:
        return [f.readline().rstrip("\n") for _ in range(count)]


@pytest.mark.skipif(importlib.util.find_spec("eflomal") is None, reason="eflomal is not installed")
def test_the_proxy_is_made_by_eflomal_once_and_read_again_while_its_key_holds(tmp_path):
    splits = {split: (_multi30k(split, "en", n), _multi30k(split, "de", n))
              for split, n in (("train", 40), ("validation", 6), ("test_2016_flickr", 5))}
    cache = str(tmp_path / "cache" / "proxy.json")
    key = {"corpus_sha256": "abc", "eflomal": "2.0.0"}
    made = made_proxy(cache, key, splits, log=lambda line: None)
    assert made["made_now"] and made["pairs"] == 51
    for split in ("validation", "test_2016_flickr"):
        sources, references = splits[split]
        assert len(made[split]) == len(sources)
        for line, source, reference in zip(made[split], sources, references):
            links = links_of(line)
            assert links  # every pair has words on both sides
            assert all(i < len(words(source)) and j < len(words(reference)) for i, j in links)
    assert made["links"] >= sum(len(made[split]) for split in ("validation", "test_2016_flickr"))
    again = made_proxy(cache, key, splits, log=lambda line: None)
    assert not again["made_now"]
    assert {k: again[k] for k in ("validation", "test_2016_flickr")} == {
        k: made[k] for k in ("validation", "test_2016_flickr")
    }
    # Another corpus: made again, and the cache says so.
    lines = []
    remade = made_proxy(cache, {**key, "corpus_sha256": "def"}, splits, log=lines.append)
    assert remade["made_now"] and "was made from another corpus or eflomal; making it again" in lines[0]
    assert json.loads(Path(cache).read_text())["key"]["corpus_sha256"] == "def"


@pytest.mark.parametrize("flags, message", [
    (["--rounds", "0"], "argument --rounds: must be at least 1, got 0"),
    (["--sentences", "0"], "argument --sentences: must be at least 1, got 0"),
    (["--batch-size", "-1"], "argument --batch-size: must be at least 1, got -1"),
    (["--chunk-sentences", "0"], "argument --chunk-sentences: must be at least 1, got 0"),
    (["--threads", "0"], "argument --threads: must be at least 1, got 0"),
    (["--proxy", "a", "--proxy-cache", "b"], "argument --proxy-cache: not allowed with argument --proxy"),
])
def test_a_bad_flag_is_refused_by_name(flags, message, capsys):
    with pytest.raises(SystemExit) as exit:
        parse_args(["--unguided", "runs/a", *flags])
    assert exit.value.code == 2
    assert message in capsys.readouterr().err


def test_the_unguided_run_is_required(capsys):
    with pytest.raises(SystemExit):
        parse_args([])
    assert "the following arguments are required: --unguided" in capsys.readouterr().err


@pytest.mark.slow
def test_each_head_of_the_one_pass_aligns_as_the_product_aligns_with_that_head(model_dir):
    # The benchmark's figure for a head is what `align` would give with that head.
    import tensorflow as tf

    from app.decoding.config import AlignmentHead
    from app.export.saved_model import load_trained
    from benchmarks.bench_alignment import all_heads_aligner

    sources, references = _multi30k("validation", "en", 4), _multi30k("validation", "de", 4)
    sources.append(" ".join(["dog"] * 60))  # longer than the model's positions on both sides
    references.append(" ".join(["Hund"] * 60))
    trained = load_trained(model_dir)
    translator = trained.translator()
    lines = all_heads_aligner(translator)(tf.constant(sources), tf.constant(references)).numpy()
    run_heads = heads(trained.config)
    assert len(lines) == len(run_heads) == 3  # one layer: heads 0, 1 and their mean
    for row, (layer, head) in zip(lines, run_heads):
        with_head = trained.translator(alignment_head=AlignmentHead(layer, head))
        expected = with_head.align_targets(tf.constant(sources), tf.constant(references))["alignments"].numpy()
        assert row.tolist() == expected.tolist(), (layer, head)


def _table_rows(text, header):
    """The rows of the markdown table whose header line starts with `header`."""
    lines = text.splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("| "):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


@pytest.mark.slow
def test_a_tiny_run_prints_every_table(exported, model_dir, tmp_path):
    # Its own process: it sets TensorFlow's thread pools, which a started runtime refuses.
    _, base, path, _ = exported
    proxy = tmp_path / "proxy.txt"
    with proxy.open("w", encoding="utf-8") as f:
        for split in ("val", "test_2016_flickr"):
            with gzip.open(ROOT / "data" / "multi30k" / f"{split}.en.gz", "rt", encoding="utf-8") as en, \
                    gzip.open(ROOT / "data" / "multi30k" / f"{split}.de.gz", "rt", encoding="utf-8") as de:
                for source, reference in zip(en, de):
                    f.write(" ".join(f"{k}-{k}" for k in range(min(len(words(source)), len(words(reference))))))
                    f.write("\n")
    command = [
        sys.executable, str(ROOT / "benchmarks" / "bench_alignment.py"), "--unguided", model_dir,
        "--guided", model_dir, "--saved-model", base, "--proxy", str(proxy), "--sentences", "6", "--rounds", "1",
        "--batch-size", "4", "--chunk-sentences", "3",
    ]
    run = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout
    assert "a proxy, not gold: no gold German-English alignments are available here" in out
    proxy_rows = _table_rows(out, "| proxy | pairs |")
    assert len(proxy_rows) == 1 and proxy_rows[0][1] == "2014"  # every validation and test pair
    # AER: one table per run, every layer x (heads + mean), one best on validation.
    aer_tables = [k for k, line in enumerate(out.splitlines()) if line.startswith("| layer | head |")]
    assert len(aer_tables) == 2
    rows = _table_rows(out, "| layer | head |")
    assert [(row[0], row[1]) for row in rows] == [("0", "0"), ("0", "1"), ("0", "mean")]
    assert sum("★" in row[4] for row in rows) == 1
    assert [row[4] for row in rows if "default" in row[4]] and rows[2][4].endswith("default")  # 0:mean
    assert re.search(r"best on validation: 0:(0|1|mean), test_2016_flickr AER \d+\.\d%", out)
    # BLEU: both runs (the same weights: p = 1) and the export, which decodes otherwise: no p.
    bleu = _table_rows(out, "| model | BLEU lc |")
    assert [row[0].split()[0] for row in bleu] == ["unguided", "guided", "export"]
    assert bleu[0][1:3] == bleu[1][1:3] and bleu[1][3] == "1.000" and bleu[2][3] == ""
    # Markup through align: every output well-formed, every tag once, the plain translation.
    markup = _table_rows(out, "| export | sentences |")
    assert len(markup) == 1 and int(markup[0][1]) > 0
    assert markup[0][2:] == ["100.0%", "100.0%", "100.0%"]
    assert re.search(r"Random\(1 \+ index\): \d+ of 6 sentences; \d+ without such a phrase", out)
    # Placement: the export's align_targets reads the run's default head, the one pass gives the same.
    placed = _table_rows(out, "| aligned by | head |")
    assert [row[0].split(",")[-1].strip() for row in placed[1:]] == ["default", "★", "default", "★"]
    assert placed[0][2:] == placed[1][2:]
    # Speed: both signatures.
    speed = _table_rows(out, "| signature | sentences/s |")
    assert [row[0] for row in speed] == ["serving_default", "align"] and speed[0][2].startswith("1.00x")
