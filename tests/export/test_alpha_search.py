"""The length penalty chosen on validation (app/export/alpha_search.py) and export.py's use of it.

A fake translator whose translations per alpha are fixed pins the choice with BLEU worked
out by hand and p-values counted from the bootstrap's draw (as tests/evaluation/test_significance.py
counts them); a fake clock pins the speeds. The `model_dir` fixture (conftest.py) runs the
whole export on a 2-value grid.
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

from app.decoding.config import DecodingConfig
from app.evaluation.significance import RESAMPLES, SEED
from app.export import alpha_search
from app.export.alpha_search import (
    AlphaScore,
    AlphaSearch,
    choose,
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


def ticking(*seconds):
    """A clock for search_alpha: each alpha's decode takes the next of `seconds`."""
    times = iter(np.cumsum([0.0] + [t for duration in seconds for t in (duration, 0.0)]).tolist())
    return lambda: next(times)


def test_of_equal_bleu_the_smallest_alpha_is_the_best_and_a_worse_one_is_not_chosen():
    assert SHORT_BLEU == 81.87
    table = {0.0: SHORT, 0.5: REFERENCES, 1.0: REFERENCES, 1.5: ["", ""]}
    translator = FakeTranslator(table)
    result = search_alpha(
        translator, SOURCES, REFERENCES, "en", lowercase=False, grid=(1.5, 1.0, 0.5, 0.0), clock=ticking(1, 2, 4, 8)
    )
    # 1.0 ties 0.5 on every resample (the same translations); SHORT and the empty
    # translations score below 100 on every resample of these two sentences.
    assert result.grid == (
        AlphaScore(1.5, 0.0, 0.0, 2.0),
        AlphaScore(1.0, 100.0, 1.0, 1.0),
        AlphaScore(0.5, 100.0, 1.0, 0.5),
        AlphaScore(0.0, SHORT_BLEU, 0.0, 0.2),
    )
    assert result.best == 0.5 and result.chosen == 0.5
    assert result.sentences == 2
    # One sentence traces the function first; then each alpha decodes every sentence once,
    # at that alpha and the translator's max_extra_length.
    assert translator.calls[0] == (1.5, ["s0"], [7])
    assert [alpha for alpha, _, _ in translator.calls[1:]] == [1.5, 1.0, 0.5, 0.0]
    for _, sources, extra in translator.calls[1:]:
        assert sorted(sources) == SOURCES and extra == [7, 7]
    assert result.signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    assert result.record() == {
        "split": "validation",
        "sentences": 2,
        "batch_size": 64,
        "grid": [
            {"alpha": 1.5, "bleu": 0.0, "p_value": 0.0, "sentences_per_second": 2.0},
            {"alpha": 1.0, "bleu": 100.0, "p_value": 1.0, "sentences_per_second": 1.0},
            {"alpha": 0.5, "bleu": 100.0, "p_value": 1.0, "sentences_per_second": 0.5},
            {"alpha": 0.0, "bleu": SHORT_BLEU, "p_value": 0.0, "sentences_per_second": 0.2},
        ],
        "best": 0.5,
        "chosen": 0.5,
        "rule": "the smallest alpha whose BLEU is not significantly below the best alpha's (paired bootstrap)",
        "confidence": 0.95,
        "resamples": 1000,
        "seed": 12345,
        "bleu_signature": result.signature,
    }
    assert result.summary().splitlines() == [
        "alpha by validation BLEU (2 sentences), each against the best by paired bootstrap (1,000 resamples):",
        "  alpha 1.5: BLEU 0.00, p 0.000 (significantly below), 2.0 sentences/s",
        "  alpha 1: BLEU 100.00, p 1.000, 1.0 sentences/s",
        "  alpha 0.5: BLEU 100.00, the best, 0.5 sentences/s",
        "  alpha 0: BLEU 81.87, p 0.000 (significantly below), 0.2 sentences/s",
        "-> 0.5: the smallest alpha not significantly below 0.5's BLEU at 95% confidence",
    ]


# Ten sentences for the choice rule: the best alpha translates them all as the references
# do, so another alpha scores below it exactly in the resamples that draw one of the
# sentences it gets wrong.
TEN_SOURCES = [f"s{i}" for i in range(10)]
TEN_REFERENCES = [f"sentence number {i} of the ten in this fixture" for i in range(10)]


def wrong_on(indices):
    return ["nothing like it" if i in indices else reference for i, reference in enumerate(TEN_REFERENCES)]


def share_drawing_none_of(indices):
    draws = np.random.default_rng(SEED).choice(10, size=(RESAMPLES, 10), replace=True)
    return float(np.mean(~np.isin(draws, list(indices)).any(axis=1)))


def test_a_smaller_alpha_within_noise_of_the_best_is_chosen_and_one_below_it_is_not():
    # The case: the best is the top of the grid, 1.6, but 0.6 (wrong on one sentence
    # of ten) is within noise of it; 0 (wrong on four) is significantly below.
    table = {0.0: wrong_on({0, 3, 6, 8}), 0.6: wrong_on({5}), 1.6: TEN_REFERENCES}
    result = search_alpha(
        FakeTranslator(table, TEN_SOURCES), TEN_SOURCES, TEN_REFERENCES, "en", lowercase=False, grid=(0.0, 0.6, 1.6)
    )
    p_values = [entry.p_value for entry in result.grid]
    assert p_values == [share_drawing_none_of({0, 3, 6, 8}), share_drawing_none_of({5}), 1.0]
    assert p_values[0] <= 0.05 < 0.3 < p_values[1]  # about 0.6 ** 10 and 0.9 ** 10
    assert [entry.bleu for entry in result.grid][2] == 100.0 > result.grid[1].bleu > result.grid[0].bleu
    assert result.best == 1.6 and result.chosen == 0.6
    assert result.summary().splitlines()[-1] == (
        "-> 0.6: the smallest alpha not significantly below 1.6's BLEU at 95% confidence"
    )


def test_the_best_alpha_is_chosen_where_every_smaller_one_is_significantly_below_it():
    table = {0.0: wrong_on(set(range(10))), 0.6: wrong_on({1, 4, 7}), 1.6: TEN_REFERENCES}
    result = search_alpha(
        FakeTranslator(table, TEN_SOURCES), TEN_SOURCES, TEN_REFERENCES, "en", lowercase=False, grid=(0.0, 0.6, 1.6)
    )
    assert [entry.p_value for entry in result.grid] == [0.0, share_drawing_none_of({1, 4, 7}), 1.0]
    assert result.grid[1].p_value <= 0.05  # about 0.7 ** 10 = 0.028
    assert result.best == 1.6 and result.chosen == 1.6


def test_the_rule_takes_the_smallest_alpha_not_significantly_below_at_the_confidence():
    p_values = {0.0: 0.01, 0.2: 0.05, 0.4: 0.051, 0.6: 0.4, 1.6: 1.0}
    assert choose(p_values) == 0.4
    assert choose(p_values, confidence=0.9) == 0.6
    assert choose({1.6: 1.0}) == 1.6


def test_each_alpha_s_bleu_is_logged_as_it_is_measured():
    lines = []
    translator = FakeTranslator({0.0: SHORT, 1.0: REFERENCES})

    def log(line):
        lines.append((line, len(translator.calls)))  # with the decodes done when it was written

    search_alpha(
        translator, SOURCES, REFERENCES, "en", lowercase=False, grid=(0.0, 1.0), log=log, clock=ticking(12.5, 82.5)
    )
    assert lines == [  # after the decode of one sentence that traces the function
        ("  alpha 0 (1/2): BLEU 81.87, 0.2 sentences/s (decoded in 12.5 s)", 2),
        ("  alpha 1 (2/2): BLEU 100.00, 0.0 sentences/s (decoded in 1:22)", 3),
    ]


def test_a_lowercasing_model_is_chosen_for_by_lowercased_bleu():
    # "the cat sat on the mat" against "The cat sat on the mat", cased: n-gram matches 5/6,
    # 4/5, 3/4 and 2/3 (the first "the" never matches), so BLEU (1/3) ** (1/4).
    references = ["The cat sat on the mat"]
    table = {0.0: ["the cat sat on the mat"], 1.0: ["The cat sat on the"]}
    cased_bleu = round(100 * (1 / 3) ** 0.25, 2)  # 75.98
    short_bleu = round(100 * math.exp(1 - 6 / 5), 2)  # 81.87, as SHORT
    cased = search_alpha(FakeTranslator(table, ["s0"]), ["s0"], references, "en", lowercase=False, grid=(0.0, 1.0))
    assert [(e.alpha, e.bleu, e.p_value) for e in cased.grid] == [(0.0, cased_bleu, 0.0), (1.0, short_bleu, 1.0)]
    assert cased.chosen == 1.0
    lowered = search_alpha(FakeTranslator(table, ["s0"]), ["s0"], references, "en", lowercase=True, grid=(0.0, 1.0))
    assert [(e.alpha, e.bleu, e.p_value) for e in lowered.grid] == [(0.0, 100.0, 1.0), (1.0, short_bleu, 0.0)]
    assert lowered.chosen == 0.0
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
    assert translator.calls[0][1] == ["s0"]  # the trace
    assert sorted(source for _, batch, _ in translator.calls[1:] for source in batch) == ["s0", "s2", "s5", "s7"]
    assert [(e.alpha, e.bleu) for e in result.grid] == [(0.0, 100.0)] and result.sentences == 4


def test_a_split_without_sentences_or_an_empty_grid_is_refused():
    translator = FakeTranslator({0.0: SHORT})
    with pytest.raises(ValueError, match="the grid of alphas is empty"):
        search_alpha(translator, SOURCES, REFERENCES, "en", lowercase=False, grid=())
    with pytest.raises(ValueError, match=r"the grid of alphas repeats a value: \(0.0, 0.5, 0.0\)"):
        search_alpha(translator, SOURCES, REFERENCES, "en", lowercase=False, grid=(0, 0.5, 0))
    with pytest.raises(ValueError, match="no sentences to choose alpha on"):
        search_alpha(translator, [], [], "en", lowercase=False)
    with pytest.raises(ValueError, match="2 sources but 1 references"):
        search_alpha(translator, SOURCES, REFERENCES[:1], "en", lowercase=False)


def test_the_validation_split_is_read_as_app_evaluate_reads_it(model_dir):
    import app.commands.evaluate
    from app.model_dir.settings import load_settings

    _, data_config, _ = load_settings(model_dir)
    sources, references = validation_pairs(data_config)
    args = app.commands.evaluate.parse_args(["--model-dir", model_dir, "--split", "validation"])
    assert (sources, references) == app.commands.evaluate.read_references(args, data_config)[:2]
    assert len(sources) == 20  # the fixture's validation file
    # Without validation files, the pairs held out of train.
    train_only = dataclasses.replace(data_config, dataset=",".join(data_config.dataset.split(",")[:2]))
    held = validation_pairs(train_only)
    assert held == app.commands.evaluate.read_references(args, train_only)[:2] and len(held[0]) == 3  # 1% of 300


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


@pytest.mark.slow
def test_one_traced_function_decodes_every_alpha_as_app_evaluate_scores(model_dir, capsys):
    import app.commands.evaluate
    from app.export.saved_model import load_translator

    translator, _ = load_translator(model_dir)
    lines = []
    record = choose_on_validation(translator, model_dir, log=lines.append, grid=(0.0, 1.5))
    assert translator.serve_with_options.experimental_get_tracing_count() == 1
    assert lines[0] == "choosing alpha on validation: 2 values x 20 sentences, beam 4"
    # One line per alpha as it is measured, then the summary.
    for line, entry, number in zip(lines[1:3], record["grid"], (1, 2)):
        speed = entry["sentences_per_second"]
        assert re.fullmatch(
            rf"  alpha {entry['alpha']:g} \({number}/2\): BLEU {entry['bleu']:.2f}, {speed:.1f} sentences/s "
            r"\(decoded in (\d+\.\d s|\d+:\d\d)\)",
            line,
        ), line
        assert speed > 0
    summary = lines[3].splitlines()
    assert summary[0].startswith("alpha by validation BLEU (20 sentences), each against the best") and len(lines) == 4
    assert len(summary) == 4 and summary[-1].startswith(f"-> {record['chosen']:g}: the smallest alpha")
    # The whole split (20 sentences) at alpha 1.5 scores as `python -m app.evaluate` scores it.
    flags = ["--model-dir", model_dir, "--split", "validation", "--alpha", "1.5", "--json"]
    assert app.commands.evaluate.main(flags) == 0
    evaluated = json.loads(capsys.readouterr().out)
    assert record["grid"][1]["alpha"] == 1.5 and record["grid"][1]["bleu"] == evaluated["bleu"]


@pytest.fixture
def small_grid(monkeypatch):
    """export.py's search on 2 alphas and 8 of the fixture's 20 validation sentences."""
    monkeypatch.setattr(alpha_search, "ALPHA_GRID", (0.0, 1.5))
    monkeypatch.setattr(alpha_search, "MAX_SENTENCES", 8)


@pytest.mark.slow
def test_an_export_without_alpha_decodes_by_default_with_the_one_chosen_on_validation(
    model_dir, tmp_path, small_grid, capsys, monkeypatch
):
    import export
    from app.export.saved_model import Translator
    from app.model_dir import checkpoints

    # The two signatures read below are the only ones written: what is tested is the alpha
    # their graphs hold, and the other four took about 15 s of CPU to trace and save
    # (tests/export/test_export.py checks that an export writes all six).
    monkeypatch.setattr(Translator, "signatures", lambda self: {
        "serving_default": self.serve, "translate_with_options": self.serve_with_options,
    })
    loads = []
    for name in ("average_checkpoints", "restore_weights"):
        monkeypatch.setattr(checkpoints, name, lambda *args, load=getattr(checkpoints, name): loads.append(load(*args)))
    assert export.main(["--model-dir", model_dir, "--output", str(tmp_path / "out")]) == 0
    assert len(loads) == 1  # the search and the export read the same weights, loaded (and averaged) once
    printed = capsys.readouterr().out.splitlines()
    path = tmp_path / "out" / "1"
    info = json.loads((path / "export_info.json").read_text(encoding="utf-8"))
    search = info["alpha_search"]
    assert search["split"] == "validation" and search["sentences"] == 8
    assert [entry["alpha"] for entry in search["grid"]] == [0.0, 1.5]
    best = max(entry["bleu"] for entry in search["grid"])
    assert search["best"] == min(entry["alpha"] for entry in search["grid"] if entry["bleu"] == best)
    assert search["chosen"] == min(entry["alpha"] for entry in search["grid"] if entry["p_value"] > 0.05)
    assert search["confidence"] == 0.95 and search["resamples"] == 1000
    assert all(entry["sentences_per_second"] > 0 for entry in search["grid"])
    assert info["alpha"] == search["chosen"]
    assert printed[0] == f"loading the weights of {model_dir}"
    printed = printed[1:]
    assert printed[0] == "choosing alpha on validation: 2 values x 8 sentences, beam 4"
    assert [line.split(":")[0] for line in printed[1:3]] == ["  alpha 0 (1/2)", "  alpha 1.5 (2/2)"]
    summary = AlphaSearch(
        8, tuple(AlphaScore(**entry) for entry in search["grid"]), search["best"], search["chosen"], ""
    ).summary()
    assert printed[3 : 3 + 4] == summary.splitlines()
    printed = printed[4:]
    # What else takes the time, then the result.
    assert printed[3] == f"writing the SavedModel to {path}: tracing its signatures, then saving"
    assert re.fullmatch(
        r"checking that TensorFlow Serving registers every op of the graph \(written in \d+\.\d s\)", printed[4]
    )
    assert re.fullmatch(rf"exported \S+ to {re.escape(str(path))} in (\d+\.\d s|\d+:\d\d)", printed[5])

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
    from app.export import saved_model
    from tests.stand_in import StandInTranslator

    def no_search(*args, **kwargs):
        raise AssertionError("the search ran although --alpha was given")

    monkeypatch.setattr(alpha_search, "choose_on_validation", no_search)
    # What is tested is the record export.py writes, not the graph: the stand-in translator
    # (tests/stand_in.py) is written in its place, in a fraction of the tiny model's 20 s.
    real_export = saved_model.export

    def export_stand_in(translator, *args, **kwargs):
        return real_export(StandInTranslator(), *args, **kwargs)

    monkeypatch.setattr(saved_model, "export", export_stand_in)
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


def test_the_alpha_chosen_makes_a_second_translator_of_the_same_weights(model_dir):
    """export.py searches with one translator and exports another, made with the alpha
    chosen: a translator's decoding is fixed when it is made, and the weights load once."""
    from app.export.saved_model import load_trained

    trained = load_trained(model_dir)
    searching, chosen = trained.translator(), trained.translator(DecodingConfig(4, 1.5, 50))
    assert (searching.decoding, chosen.decoding) == (DecodingConfig(), DecodingConfig(4, 1.5, 50))
    assert len(chosen.model_variables) == len(searching.model_variables) > 0
    assert all(ours is theirs for ours, theirs in zip(chosen.model_variables, searching.model_variables))
    with pytest.raises(dataclasses.FrozenInstanceError):
        chosen.decoding.alpha = 0.6
    with pytest.raises(ValueError, match="alpha must be finite, got nan"):
        dataclasses.replace(chosen.decoding, alpha=float("nan"))
    with pytest.raises(ValueError, match="^alpha must be at most 40.72 for a model of 48 positions"):
        trained.translator(DecodingConfig(alpha=40.73))


def test_export_s_help_names_the_grid(capsys):
    import export

    # The help is written out, so that --help need not import TensorFlow.
    with pytest.raises(SystemExit):
        export.parse_args(["--help"])
    grid = alpha_search.ALPHA_GRID
    printed = " ".join(capsys.readouterr().out.split())
    assert f"the smallest of {grid[0]}, {grid[1]}, ..., {grid[-1]} whose BLEU" in printed
