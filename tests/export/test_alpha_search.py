"""The length penalty chosen on validation (app/export/alpha_search.py) and export.py's use of it.

A fake translator whose translations per alpha are fixed pins the choice with BLEU worked
out by hand; the `model_dir` fixture (conftest.py) runs the whole export on a 2-value grid.
"""

import dataclasses
import json
import math
import os
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf

from app.decoding.translate import DecodingConfig
from app.export import alpha_search
from app.export.alpha_search import (
    AlphaSearch,
    choose_on_validation,
    sample_indices,
    search_alpha,
    validation_pairs,
)
from tests.conftest import SENTENCES

REFERENCES = ["the cat sat on the mat", "a dog runs in the park"]
SOURCES = ["s0", "s1"]


class FakeTranslator:
    """Translates by a table, `{alpha: [translation of each of SOURCES]}`, through the
    `serve_with_options` function search_alpha calls; records every call."""

    decoding = DecodingConfig(beam_size=4, alpha=0.6, max_extra_length=7)

    def __init__(self, table, sources=SOURCES):
        self.table = {alpha: dict(zip(sources, row)) for alpha, row in table.items()}
        self.calls = []  # (alpha, sources, max_extra_length per sentence)

    def serve_with_options(self, inputs, alpha, max_extra_length):
        alphas = set(alpha.numpy().tolist())
        assert len(alphas) == 1 and alpha.dtype == tf.float32 and alpha.shape == inputs.shape
        alpha = round(alphas.pop(), 4)  # float32: 0.2 arrives as 0.2000000030
        sources = [text.decode("utf-8") for text in inputs.numpy()]
        self.calls.append((alpha, sources, max_extra_length.numpy().tolist()))
        return {"translations": tf.constant([self.table[alpha][source] for source in sources])}


# Every n-gram of "the cat sat on the" is in "the cat sat on the mat": precisions 1, and
# 10 hypothesis words against 12 reference words give the brevity penalty exp(1 - 12/10).
SHORT = ["the cat sat on the", "a dog runs in the"]
SHORT_BLEU = round(100 * math.exp(1 - 12 / 10), 2)  # 81.87


def test_the_alpha_of_the_highest_bleu_is_chosen_and_of_equal_ones_the_smallest():
    assert SHORT_BLEU == 81.87
    table = {0.0: SHORT, 0.5: REFERENCES, 1.0: REFERENCES, 1.5: ["", ""]}
    translator = FakeTranslator(table)
    result = search_alpha(translator, SOURCES, REFERENCES, "en", lowercase=False, grid=(1.5, 1.0, 0.5, 0.0))
    assert result.grid == ((1.5, 0.0), (1.0, 100.0), (0.5, 100.0), (0.0, SHORT_BLEU))
    assert result.chosen == 0.5
    assert result.sentences == 2
    # Each alpha decodes every sentence once, at that alpha and the translator's max_extra_length.
    assert [alpha for alpha, _, _ in translator.calls] == [1.5, 1.0, 0.5, 0.0]
    for _, sources, extra in translator.calls:
        assert sorted(sources) == SOURCES and extra == [7, 7]
    assert result.signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    assert result.record() == {
        "split": "validation",
        "sentences": 2,
        "grid": [{"alpha": 1.5, "bleu": 0.0}, {"alpha": 1.0, "bleu": 100.0},
                 {"alpha": 0.5, "bleu": 100.0}, {"alpha": 0.0, "bleu": SHORT_BLEU}],
        "chosen": 0.5,
        "bleu_signature": result.signature,
    }
    assert result.summary() == (
        "alpha by validation BLEU (2 sentences): 1.5: 0.00 | 1: 100.00 | 0.5: 100.00 | 0: 81.87 -> 0.5"
    )


def test_each_alpha_s_bleu_is_logged_as_it_is_measured():
    lines, times = [], iter([0.0, 12.5, 12.5, 95.0])  # the clock at each alpha's start and end
    translator = FakeTranslator({0.0: SHORT, 1.0: REFERENCES})

    def log(line):
        lines.append((line, len(translator.calls)))  # with the decodes done when it was written

    search_alpha(translator, SOURCES, REFERENCES, "en", lowercase=False, grid=(0.0, 1.0), log=log,
                 clock=lambda: next(times))
    assert lines == [
        ("  alpha 0 (1/2): BLEU 81.87, decoded in 12.5 s", 1),
        ("  alpha 1 (2/2): BLEU 100.00, decoded in 1:22", 2),
    ]


def test_a_lowercasing_model_is_chosen_for_by_lowercased_bleu():
    # "the cat sat on the mat" against "The cat sat on the mat", cased: n-gram matches 5/6,
    # 4/5, 3/4 and 2/3 (the first "the" never matches), so BLEU (1/3) ** (1/4).
    references = ["The cat sat on the mat"]
    table = {0.0: ["the cat sat on the mat"], 1.0: ["The cat sat on the"]}
    cased_bleu = round(100 * (1 / 3) ** 0.25, 2)  # 75.98
    short_bleu = round(100 * math.exp(1 - 6 / 5), 2)  # 81.87, as SHORT
    cased = search_alpha(FakeTranslator(table, ["s0"]), ["s0"], references, "en", lowercase=False, grid=(0.0, 1.0))
    assert cased.grid == ((0.0, cased_bleu), (1.0, short_bleu)) and cased.chosen == 1.0
    lowered = search_alpha(FakeTranslator(table, ["s0"]), ["s0"], references, "en", lowercase=True, grid=(0.0, 1.0))
    assert lowered.grid == ((0.0, 100.0), (1.0, short_bleu)) and lowered.chosen == 0.0
    assert "case:lc" in lowered.signature


def test_the_sample_of_a_large_split_is_evenly_spaced_and_fixed():
    assert sample_indices(10, 4) == [0, 2, 5, 7]
    assert sample_indices(3, 4) == [0, 1, 2]
    assert sample_indices(4, 4) == [0, 1, 2, 3]
    many = sample_indices(3003)  # WMT's newstest2014 en-de
    assert len(many) == alpha_search.MAX_SENTENCES == 1000
    assert many[:4] == [0, 3, 6, 9] and many[-1] == 2999  # 999 * 3003 // 1000
    assert len(set(many)) == 1000 and many == sorted(many)
    with pytest.raises(ValueError, match="at least one sentence, got a limit of 0"):
        sample_indices(10, 0)


def test_only_the_sampled_sentences_are_decoded_and_scored():
    sources = [f"s{i}" for i in range(10)]
    references = [f"reference {i} of ten" for i in range(10)]
    # Right only on the sampled sentences 0, 2, 5 and 7: BLEU 100 proves the references
    # scored are theirs too.
    table = {0.0: [references[i] if i in (0, 2, 5, 7) else "wrong" for i in range(10)]}
    translator = FakeTranslator(table, sources)
    result = search_alpha(translator, sources, references, "en", lowercase=False, grid=(0.0,), max_sentences=4)
    assert sorted(source for _, batch, _ in translator.calls for source in batch) == ["s0", "s2", "s5", "s7"]
    assert result.grid == ((0.0, 100.0),) and result.sentences == 4


def test_a_split_without_sentences_or_an_empty_grid_is_refused():
    translator = FakeTranslator({0.0: SHORT})
    with pytest.raises(ValueError, match="the grid of alphas is empty"):
        search_alpha(translator, SOURCES, REFERENCES, "en", lowercase=False, grid=())
    with pytest.raises(ValueError, match="no sentences to choose alpha on"):
        search_alpha(translator, [], [], "en", lowercase=False)
    with pytest.raises(ValueError, match="2 sources but 1 references"):
        search_alpha(translator, SOURCES, REFERENCES[:1], "en", lowercase=False)


def test_the_validation_split_is_read_as_app_evaluate_reads_it(model_dir):
    import app.evaluate
    from app.model_dir.settings import load_settings

    _, data_config, _ = load_settings(model_dir)
    sources, references = validation_pairs(data_config)
    args = app.evaluate.parse_args(["--model-dir", model_dir, "--split", "validation"])
    assert (sources, references) == app.evaluate.read_references(args, data_config)[:2]
    assert len(sources) == 20  # the fixture's validation file
    # Without validation files, the pairs held out of train.
    train_only = dataclasses.replace(data_config, dataset=",".join(data_config.dataset.split(",")[:2]))
    held = validation_pairs(train_only)
    assert held == app.evaluate.read_references(args, train_only)[:2] and len(held[0]) == 3  # 1% of 300


def _run_with_dataset(model_dir, tmp_path, dataset):
    """A copy of `model_dir` whose settings.json names `dataset`."""
    copy = tmp_path / "run"
    shutil.copytree(model_dir, copy)
    settings = json.loads((copy / "settings.json").read_text(encoding="utf-8"))
    settings["data"]["dataset"] = dataset
    (copy / "settings.json").write_text(json.dumps(settings), encoding="utf-8")
    return str(copy)


def test_without_a_readable_validation_split_the_paper_s_alpha_is_used_and_said_so(model_dir, tmp_path):
    missing = tmp_path / "gone.en"
    run = _run_with_dataset(model_dir, tmp_path, f"files:{missing},{tmp_path / 'gone.de'}")
    lines = []
    translator = FakeTranslator({})
    record = choose_on_validation(translator, run, log=lines.append)
    assert len(lines) == 1 and lines[0].startswith("no validation split to choose alpha on (")
    assert str(missing) in lines[0] and lines[0].endswith("): using the paper's 0.6")
    assert record["chosen"] == 0.6 and record["split"] is None and record["grid"] == []
    assert str(missing) in record["skipped"]
    assert translator.calls == []


def test_one_traced_function_decodes_every_alpha_as_app_evaluate_scores(model_dir, capsys):
    import app.evaluate
    from app.export.saved_model import load_translator

    translator, _ = load_translator(model_dir)
    lines = []
    record = choose_on_validation(translator, model_dir, log=lines.append, grid=(0.0, 1.5))
    assert translator.serve_with_options.experimental_get_tracing_count() == 1
    assert lines[0] == "choosing alpha on validation: 2 values x 20 sentences, beam 4"
    # One line per alpha as it is measured, then the summary.
    assert [re.sub(r"(\d+\.\d s|\d+:\d\d)$", "S", line) for line in lines[1:3]] == [
        f"  alpha 0 (1/2): BLEU {record['grid'][0]['bleu']:.2f}, decoded in S",
        f"  alpha 1.5 (2/2): BLEU {record['grid'][1]['bleu']:.2f}, decoded in S",
    ]
    assert lines[3].startswith("alpha by validation BLEU (20 sentences): 0: ") and len(lines) == 4
    # The whole split (20 sentences) at alpha 1.5 scores as `python -m app.evaluate` scores it.
    assert app.evaluate.main(["--model-dir", model_dir, "--split", "validation", "--alpha", "1.5", "--json"]) == 0
    evaluated = json.loads(capsys.readouterr().out)
    assert record["grid"][1] == {"alpha": 1.5, "bleu": evaluated["bleu"]}


@pytest.fixture
def small_grid(monkeypatch):
    """export.py's search on 2 alphas and 8 of the fixture's 20 validation sentences."""
    monkeypatch.setattr(alpha_search, "ALPHA_GRID", (0.0, 1.5))
    monkeypatch.setattr(alpha_search, "MAX_SENTENCES", 8)


def test_an_export_without_alpha_decodes_by_default_with_the_one_chosen_on_validation(
    model_dir, tmp_path, small_grid, capsys
):
    import export

    assert export.main(["--model-dir", model_dir, "--output", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out.splitlines()
    path = tmp_path / "out" / "1"
    info = json.loads((path / "export_info.json").read_text(encoding="utf-8"))
    search = info["alpha_search"]
    assert search["split"] == "validation" and search["sentences"] == 8
    assert [entry["alpha"] for entry in search["grid"]] == [0.0, 1.5]
    best = max(entry["bleu"] for entry in search["grid"])
    assert search["chosen"] == min(entry["alpha"] for entry in search["grid"] if entry["bleu"] == best)
    assert info["alpha"] == search["chosen"]
    assert printed[0] == f"loading the weights of {model_dir}"
    printed = printed[1:]
    assert printed[0] == "choosing alpha on validation: 2 values x 8 sentences, beam 4"
    assert [line.split(":")[0] for line in printed[1:3]] == ["  alpha 0 (1/2)", "  alpha 1.5 (2/2)"]
    assert printed[3] == AlphaSearch(
        8, tuple((e["alpha"], e["bleu"]) for e in search["grid"]), search["chosen"], ""
    ).summary()
    # What else takes the time, then the result.
    assert printed[4] == f"writing the SavedModel to {path}: tracing its signatures, then saving"
    assert re.fullmatch(r"checking that TensorFlow Serving registers every op of the graph \(written in \d+\.\d s\)",
                        printed[5])
    assert re.fullmatch(rf"exported \S+ to {re.escape(str(path))} in (\d+\.\d s|\d+:\d\d)", printed[6])

    loaded = tf.saved_model.load(str(path))
    inputs = tf.constant(SENTENCES)
    n = len(SENTENCES)

    def with_options(alpha):
        return loaded.signatures["translate_with_options"](
            inputs=inputs, alpha=tf.fill([n], alpha), max_extra_length=tf.fill([n], 50)
        )

    default = loaded.signatures["serving_default"](inputs=inputs)
    chosen = with_options(search["chosen"])
    np.testing.assert_array_equal(default["translations"].numpy(), chosen["translations"].numpy())
    np.testing.assert_array_equal(default["scores"].numpy(), chosen["scores"].numpy())
    # The scores are normalized by length ** alpha: another alpha, the paper's included,
    # would have given other ones.
    assert not np.array_equal(default["scores"].numpy(), with_options(0.6)["scores"].numpy())


def test_an_export_with_alpha_records_no_search_and_runs_none(model_dir, tmp_path, monkeypatch):
    import export

    def no_search(*args, **kwargs):
        raise AssertionError("the search ran although --alpha was given")

    monkeypatch.setattr(alpha_search, "choose_on_validation", no_search)
    assert export.main(["--model-dir", model_dir, "--output", str(tmp_path / "out"), "--alpha", "0.6"]) == 0
    info = json.loads((tmp_path / "out" / "1" / "export_info.json").read_text(encoding="utf-8"))
    assert info["alpha"] == 0.6 and info["alpha_search"] is None


@pytest.mark.parametrize(
    "alpha, messages",
    [
        ("-1", ["error: argument --alpha: must be a finite number of at least 0, got -1"]),  # argparse's
        ("nan", ["error: argument --alpha: must be a finite number of at least 0, got nan"]),
        ("40.73", ["error: alpha must be at most 40.72 for a model of 48 positions", "; got 40.73"]),
    ],
)
def test_a_bad_alpha_is_refused_by_name_before_any_search(model_dir, tmp_path, monkeypatch, capsys, alpha, messages):
    import export

    def no_search(*args, **kwargs):
        raise AssertionError("the search ran although --alpha was given")

    monkeypatch.setattr(alpha_search, "choose_on_validation", no_search)
    try:
        code = export.main(["--model-dir", model_dir, "--output", str(tmp_path / "out"), "--alpha", alpha])
    except SystemExit as exited:  # argparse's refusal, before TensorFlow loads
        code = exited.code
    assert code == (1 if alpha == "40.73" else 2)
    error = capsys.readouterr().err
    assert all(message in error for message in messages), error
    assert not os.path.exists(tmp_path / "out")


def test_the_default_alpha_cannot_change_once_the_default_signature_is_traced(model_dir):
    from app.export.saved_model import load_translator

    translator, _ = load_translator(model_dir)
    translator.set_default_alpha(1.5)
    assert translator.decoding == DecodingConfig(4, 1.5, 50)
    with pytest.raises(ValueError, match="alpha must be a number >= 0, got nan"):
        translator.set_default_alpha(float("nan"))
    translator.serve_nbest.get_concrete_function()
    with pytest.raises(RuntimeError, match="^alpha 0.6 comes too late: serve_nbest already traced with alpha 1.5$"):
        translator.set_default_alpha(0.6)


def test_export_s_help_names_the_grid(capsys):
    import export

    # The help is written out, so that --help need not import TensorFlow.
    with pytest.raises(SystemExit):
        export.parse_args(["--help"])
    grid = alpha_search.ALPHA_GRID
    assert f"the best of {grid[0]}, {grid[1]}, ..., {grid[-1]} by BLEU" in " ".join(capsys.readouterr().out.split())
