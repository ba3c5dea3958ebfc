"""app.evaluate: its flags, its inputs and what it prints (the metrics: tests/evaluation/)."""

import copy
import json
import re
import shutil

import pytest

from app.commands.evaluate import (
    EvaluationPlan,
    describe_overlong,
    output_language,
    overlong_sources,
    paper_bleu_label,
    parse_args,
    plan_evaluation,
    read_references,
    saved_model_data_config,
)
from app.decoding.config import DecodingConfig
from app.export.model_source import ModelSource
from app.runtime.threads import CpuThreads
from app.evaluation.metrics import score
from data.config import DataConfig
from data.errors import DataError

# Each export is loaded once per test process (conftest.py), however many tests load it.
pytestmark = pytest.mark.usefixtures("load_each_export_once")


@pytest.fixture(autouse=True)
def runs(tmp_path_factory, monkeypatch):
    """A working directory holding the model directories `x` and `d` the plans name: a plan
    checks that --model-dir is there."""
    work = tmp_path_factory.mktemp("work")
    monkeypatch.chdir(work)
    for name in ("x", "d"):
        (work / name).mkdir()


def planned(argv):
    """The `EvaluationPlan` of app.evaluate's flags `argv`, after checking that it left the
    parsed flags as they were."""
    args = parse_args(argv)
    before = copy.deepcopy(vars(args))
    plan = plan_evaluation(args)
    assert vars(args) == before
    return plan


def a_saved_model(directory, **info):
    """`directory` as plan_evaluation finds a SavedModel version (a saved_model.pb, here
    empty), with an export_info.json of `info`, if any; its path."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "saved_model.pb").write_bytes(b"")
    if info:
        (directory / "export_info.json").write_text(json.dumps(info))
    return str(directory)


def test_the_paper_bleu_is_printed_under_a_name_that_says_what_was_done():
    assert paper_bleu_label("de") == "paper BLEU (tokenized, compounds split)"
    assert paper_bleu_label("fr") == "paper BLEU (tokenized)"
    result = score(["Der Wein-Keller ist groß."], ["Der Wein-Keller ist groß."], "de")
    assert (result["bleu_paper"], result["bleu"]) == (100.0, 100.0)


def test_named_splits_and_their_aliases():
    config = DataConfig()
    sources, references, description = read_references(
        planned(["--model-dir", "x", "--split", "test_2016_flickr"]), config
    )
    assert len(sources) == len(references) == 1000
    assert description == "multi30k test_2016_flickr en->de"
    with pytest.raises(DataError, match="multi30k has no split 'bogus'; it has test, train, validation"):
        read_references(planned(["--model-dir", "x", "--split", "bogus"]), config)


def test_newstest2014_is_the_test_split_of_tfds_wmt14(monkeypatch, tmp_path):
    # Read through TFDS's own stream of wmt14_translate/de-en's "test" (newstest2014),
    # here mocked: no download.
    tfds = pytest.importorskip("tensorflow_datasets")
    import data.corpora

    monkeypatch.setattr(data.corpora, "unreachable_hosts", lambda urls: [])
    asked = []
    as_dataset = tfds.core.DatasetBuilder.as_dataset

    def recording(self, *args, **kwargs):
        asked.append((self.name, self.builder_config.name, kwargs.get("split")))
        return as_dataset(self, *args, **kwargs)

    monkeypatch.setattr(tfds.core.DatasetBuilder, "as_dataset", recording)
    config = DataConfig(dataset="tfds:wmt14_translate/de-en", source_lang="en", target_lang="de")
    dataset = ["--dataset", "tfds:wmt14_translate/de-en", "--split", "test"]
    plan = planned(["--saved-model", a_saved_model(tmp_path), *dataset])
    with tfds.testing.mock_data(num_examples=6, policy=tfds.testing.MockPolicy.USE_CODE):
        sources, references, description = read_references(plan, config)
    assert asked == [("wmt14_translate", "de-en", "test")]
    assert description == "tfds:wmt14_translate/de-en test en->de"
    assert 0 < len(sources) == len(references) <= 6


def test_source_and_reference_files_must_align(tmp_path):
    (tmp_path / "s").write_text("a\nb\n", encoding="utf-8")
    (tmp_path / "r").write_text("a\n", encoding="utf-8")
    plan = planned(["--model-dir", "x", "--source", str(tmp_path / "s"), "--reference", str(tmp_path / "r")])
    with pytest.raises(DataError, match="2 .* 1|1 .* 2"):
        read_references(plan, None)


def test_empty_source_and_reference_files_are_refused_by_name_before_the_model_loads(
    model_dir, tmp_path, capsys, monkeypatch
):
    import app.commands.evaluate

    monkeypatch.setattr(app.commands.evaluate, "make_translate_fn", lambda *_: pytest.fail("the model loaded"))
    (tmp_path / "s").write_text("", encoding="utf-8")
    (tmp_path / "r").write_text("", encoding="utf-8")
    # Was a TensorFlow InvalidArgumentError traceback, once the model had loaded.
    assert app.commands.evaluate.main(["--model-dir", model_dir, "--source", str(tmp_path / "s"),
                              "--reference", str(tmp_path / "r")]) == 1
    assert capsys.readouterr().err.strip() == (
        f"error: {tmp_path / 's'} and {tmp_path / 'r'} have no lines: there is nothing to score"
    )


@pytest.mark.parametrize("source, reference, bad", [("a\n\nc\n", "x\ny\nz\n", "s"), ("a\nb\n", "x\n \n", "r")])
def test_an_empty_line_in_source_or_reference_names_the_file_and_line(tmp_path, source, reference, bad):
    (tmp_path / "s").write_text(source, encoding="utf-8")
    (tmp_path / "r").write_text(reference, encoding="utf-8")
    plan = planned(["--model-dir", "x", "--source", str(tmp_path / "s"), "--reference", str(tmp_path / "r")])
    with pytest.raises(DataError, match=f"line 2 of {tmp_path / bad} is empty"):
        read_references(plan, None)


def test_a_saved_model_scored_on_files_takes_its_output_language_from_export_info(tmp_path):
    files = ["--source", "s.en", "--reference", "r.fr"]
    (tmp_path / "export_info.json").write_text(json.dumps({"target_lang": "fr", "lowercase": True}))
    assert output_language(planned(["--saved-model", a_saved_model(tmp_path), *files]), None) == ("fr", True)
    flagged = planned(["--saved-model", a_saved_model(tmp_path), *files, "--target-lang", "de"])
    assert output_language(flagged, None) == ("de", True)
    (tmp_path / "export_info.json").unlink()  # an export older than export_info.json
    assert output_language(planned(["--saved-model", a_saved_model(tmp_path), *files]), None) == (None, None)
    # With a data config (a model directory, or a split) that config decides.
    config = DataConfig(source_lang="en", target_lang="de")
    assert output_language(planned(["--model-dir", "x", *files]), config) == ("de", False)


def test_a_saved_model_names_its_data_in_export_info_and_flags_override_it(tmp_path):
    (tmp_path / "export_info.json").write_text(
        json.dumps({"dataset": "multi30k", "source_lang": "en", "target_lang": "fr"})
    )
    config = saved_model_data_config(planned(["--saved-model", a_saved_model(tmp_path), "--split", "test_2016_flickr"]))
    assert (config.dataset, config.source_lang, config.target_lang) == ("multi30k", "en", "fr")
    assert config.lowercase is False  # Exports from before --lowercase: cased.
    sources, references, description = read_references(
        planned(["--saved-model", a_saved_model(tmp_path), "--split", "test"]), config
    )
    assert description == "multi30k test en->fr" and len(sources) == len(references) == 1000
    flagged = saved_model_data_config(planned(["--saved-model", a_saved_model(tmp_path), "--target-lang", "de"]))
    assert flagged.target_lang == "de"
    (tmp_path / "export_info.json").write_text(
        json.dumps({"dataset": "multi30k", "source_lang": "en", "target_lang": "de", "lowercase": True})
    )
    plan = planned(["--saved-model", a_saved_model(tmp_path), "--split", "test"])
    assert saved_model_data_config(plan).lowercase is True


def test_a_saved_model_without_data_names_the_flags_it_needs(tmp_path):
    (tmp_path / "export_info.json").write_text(json.dumps({"weights": "ckpt-9"}))
    plan = planned(["--saved-model", a_saved_model(tmp_path), "--split", "test", "--dataset", "multi30k"])
    with pytest.raises(DataError, match="give --source-lang, --target-lang for --split"):
        saved_model_data_config(plan)
    (tmp_path / "export_info.json").write_text("{not json")
    with pytest.raises(DataError, match="export_info.json is not valid JSON"):
        saved_model_data_config(plan)
    (tmp_path / "export_info.json").write_text("[1, 2]")
    with pytest.raises(DataError) as refused:
        saved_model_data_config(plan)
    path = tmp_path / "export_info.json"
    assert str(refused.value) == f"{path} must hold a JSON object (as export.py writes it), not an array"


def test_a_saved_model_path_that_is_no_saved_model_is_refused_before_anything_loads(tmp_path, capsys):
    from app.commands.evaluate import main

    base = tmp_path / "translator"
    for version in ("1", "2", "10", ".tmp-11-99"):  # a hidden .tmp-* is an export in progress
        (base / version).mkdir(parents=True)
    (tmp_path / "s").write_text("a\n", encoding="utf-8")
    (tmp_path / "r").write_text("b\n", encoding="utf-8")
    files = ["--source", str(tmp_path / "s"), "--reference", str(tmp_path / "r")]
    empty = "yet: run python export.py (it holds no saved_model.pb and no numbered version directory with one)"

    def refused(*argv):
        """The error line of app.evaluate `argv`, which exits 2 as argparse does."""
        with pytest.raises(SystemExit) as exited:
            main(list(argv))
        assert exited.value.code == 2
        return capsys.readouterr().err.strip().splitlines()[-1].split(" error: ", 1)[1]

    for data in (["--split", "test"], files):
        assert refused("--saved-model", str(base), *data) == f"--saved-model: no model exported under {base} {empty}"
        assert refused("--saved-model", str(tmp_path / "missing"), *data) == (
            f"--saved-model: no model exported under {tmp_path / 'missing'} yet: run python export.py "
            "(no such directory)"
        )
    assert refused("--saved-model", str(base / "1"), *files) == (
        f"--saved-model: no model exported under {base / '1'} {empty}"
    )
    assert refused("--saved-model", str(tmp_path / "s"), *files) == (
        f"--saved-model: {tmp_path / 's'} is a file, not an export directory"
    )
    missing = tmp_path / "missing"
    assert refused("--model-dir", str(missing), *files) == f"--model-dir {missing}: no such directory"


@pytest.mark.slow
def test_a_saved_model_is_scored_at_the_alpha_it_was_exported_with_unless_one_is_given(exported, tmp_path, capsys):
    from app.commands.evaluate import main

    _, _, path, _ = exported
    saved_model = tmp_path / "1"
    shutil.copytree(path, saved_model)
    (tmp_path / "src").write_text("A man rides a bike.\n", encoding="utf-8")
    (tmp_path / "ref").write_text("Ein Mann fährt Fahrrad.\n", encoding="utf-8")
    files = ["--source", str(tmp_path / "src"), "--reference", str(tmp_path / "ref"), "--json"]
    info = {"source_lang": "en", "target_lang": "de"}
    for recorded, flags, used in ((1.2, [], 1.2), (1.2, ["--alpha", "0.6"], 0.6), (None, [], 0.6)):
        written = dict(info, alpha=recorded) if recorded is not None else info
        (saved_model / "export_info.json").write_text(json.dumps(written))
        assert main(["--saved-model", str(saved_model), *files, *flags]) == 0
        assert json.loads(capsys.readouterr().out)["alpha"] == used
    # The base, as the server takes it: its newest version, 1 (its export_info.json says 0.6).
    (tmp_path / "0").mkdir()
    assert main(["--saved-model", str(tmp_path), *files]) == 0
    assert json.loads(capsys.readouterr().out)["weights"] == str(saved_model)


@pytest.mark.slow
def test_a_saved_model_scored_on_files_writes_what_it_serves_and_splits_its_own_language(
    exported, tmp_path, capsys
):
    from app.commands.evaluate import main
    from tests.conftest import SENTENCES

    _, _, path, served = exported
    saved_model = tmp_path / "1"
    shutil.copytree(path, saved_model)
    (saved_model / "export_info.json").write_text(json.dumps({"source_lang": "en", "target_lang": "de"}))
    rows = [i for i, sentence in enumerate(SENTENCES) if sentence.strip()]
    (tmp_path / "src").write_text("".join(SENTENCES[i] + "\n" for i in rows), encoding="utf-8")
    (tmp_path / "ref").write_text("Ein Mann fährt Fahrrad.\n" * len(rows), encoding="utf-8")
    output = tmp_path / "out.de"
    output.write_text("an earlier file\n", encoding="utf-8")

    argv = ["--saved-model", str(saved_model), "--source", str(tmp_path / "src"),
            "--reference", str(tmp_path / "ref"), "--output", str(output), "--json", "--batch-size", "2"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert "tok:moses-de(" in result["bleu_moses_lowercase_signature"]
    assert result["sentences"] == len(rows) and result["lowercase_model"] is None
    # Decoded in batches of 2 sorted by length, written back in input order, exactly as served.
    assert output.read_text(encoding="utf-8").splitlines() == [served["translations"][i].decode() for i in rows]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1", "out.de", "ref", "src"]  # no .partial left


def test_an_output_path_that_cannot_be_written_is_refused_before_the_model_loads(
    model_dir, tmp_path, capsys, monkeypatch
):
    import app.commands.evaluate

    monkeypatch.setattr(app.commands.evaluate, "make_translate_fn", lambda *_: pytest.fail("the model loaded"))
    (tmp_path / "s").write_text("a\n", encoding="utf-8")
    (tmp_path / "r").write_text("b\n", encoding="utf-8")
    files = ["--model-dir", model_dir, "--source", str(tmp_path / "s"), "--reference", str(tmp_path / "r")]
    missing, folder, reference = tmp_path / "missing" / "out.de", tmp_path, tmp_path / "r"
    for output, message in (
        (missing, f"--output {missing}: its directory {tmp_path / 'missing'} does not exist"),
        (tmp_path / "s" / "out.de", f"--output {tmp_path / 's' / 'out.de'}: its directory {tmp_path / 's'} "
         "is not a directory"),
        (folder, f"--output {folder} is a directory; name a file to write the translations to"),
        (reference, f"--output {reference} is the --reference file; the translations would overwrite it"),
    ):
        assert app.commands.evaluate.main([*files, "--output", str(output)]) == 1
        assert capsys.readouterr().err.strip() == f"error: {message}"
    assert reference.read_text(encoding="utf-8") == "b\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r", "s"]


@pytest.mark.parametrize(
    "flags, message",
    [(["--alpha", "-1"], "argument --alpha: must be a finite number of at least 0, got -1"),
     (["--max-extra-length", "0"], "argument --max-extra-length: must be at least 1, got 0")],
)
def test_bad_decoding_options_are_refused_by_name_before_any_model_loads(tmp_path, capsys, flags, message):
    from app.commands.evaluate import main

    for weights in (["--saved-model", str(tmp_path)], ["--model-dir", str(tmp_path)]):
        with pytest.raises(SystemExit) as exited:
            main([*weights, *flags])
        assert exited.value.code == 2
        assert capsys.readouterr().err.splitlines()[-1].endswith(f"error: {message}")


@pytest.mark.parametrize(
    "flag, value, message",
    [("--batch-size", "0", "must be at least 1, got 0"), ("--batch-size", "-2", "must be at least 1, got -2"),
     ("--limit", "0", "must be at least 1, got 0"), ("--limit", "-1", "must be at least 1, got -1"),
     ("--limit", "ten", "expected a whole number, got 'ten'")],
)
def test_batch_size_and_limit_are_refused_by_name_unless_positive(capsys, flag, value, message):
    # --limit -1 dropped the last line and --limit 0 scored them all; --batch-size 0 failed
    # with a traceback once the model had loaded.
    with pytest.raises(SystemExit) as exited:
        parse_args(["--model-dir", "x", flag, value])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(f"error: argument {flag}: {message}")


FILES = ["--source", "s.en", "--reference", "r.de"]


@pytest.mark.parametrize(
    "flags, message",
    [(["--saved-model", "m", "--checkpoint", "best"],
      "--checkpoint applies to --model-dir only; a SavedModel holds the weights it was exported with"),
     (["--saved-model", "m", "--average-last", "0"],
      "--average-last applies to --model-dir only; a SavedModel holds the weights it was exported with"),
     (["--saved-model", "m", "--beam-size", "4"],
      "--beam-size applies to --model-dir only; a SavedModel decodes with the beam size it was exported with "
      "(its export_info.json says which)"),
     (["--model-dir", "d", "--source-lang", "fr", "--target-lang", "en"],
      "--source-lang applies to --saved-model only; a model directory's settings.json names its languages"),
     (["--model-dir", "d", *FILES, "--target-lang", "en"],
      "--target-lang applies to --saved-model only; a model directory's settings.json names its languages"),
     (["--model-dir", "d", *FILES, "--split", "validation"],
      "give --split or --source/--reference, not both: each chooses the data to score"),
     (["--saved-model", "m", *FILES, "--dataset", "multi30k"],
      "--dataset applies to --split only, not to --source/--reference files"),
     (["--saved-model", "m", *FILES, "--source-lang", "en"],
      "--source-lang applies to --split only, not to --source/--reference files"),
     (["--saved-model", "m", "--test-set", "wmt14/full", "--split", "test"],
      "give --test-set or --split, not both: each chooses the data to score"),
     (["--model-dir", "d", "--test-set", "wmt14/full", *FILES],
      "give --test-set or --source/--reference, not both: each chooses the data to score"),
     (["--saved-model", "m", "--test-set", "wmt14/full", "--dataset", "multi30k"],
      "give --test-set or --dataset, not both: each chooses the data to score"),
     (["--model-dir", "d", "--source", "s.en"], "--source and --reference go together"),
     (["--saved-model", "m", "--reference", "r.de"], "--source and --reference go together")],
)
def test_flags_that_cannot_apply_are_refused_by_name_not_ignored(capsys, flags, message):
    with pytest.raises(SystemExit) as exited:
        parse_args(flags)
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(f"error: {message}")


def test_the_flags_that_do_apply_are_taken_and_defaults_filled_in(tmp_path):
    decoding = ["--alpha", "1.0", "--max-extra-length", "9"]
    export = a_saved_model(tmp_path / "export" / "3", alpha=1.4)
    saved = planned(["--saved-model", str(tmp_path / "export"), *FILES, "--target-lang", "de", *decoding])
    # The newest version of the base; the beam size unused by a SavedModel, but DecodingConfig checks it.
    assert saved == EvaluationPlan(
        model=ModelSource(saved_model=export), split=None, dataset=None,
        source_lang=None, target_lang="de", source="s.en", reference="r.de", test_set=None,
        decoding=DecodingConfig(4, 1.0, 9),
        batch_size=64, limit=None, output=None, json=False, threads=CpuThreads(decoding=True),
    )
    split = planned(["--saved-model", export, "--dataset", "multi30k", "--source-lang", "en", "--target-lang", "de"])
    assert (split.split, split.dataset, split.decoding) == ("validation", "multi30k", DecodingConfig(4, 1.4, 50))
    run = planned(["--model-dir", "d", "--checkpoint", "best", "--beam-size", "1", "--split", "test"])
    assert run == EvaluationPlan(
        model=ModelSource(model_dir="d", checkpoint="best"), split="test", dataset=None,
        source_lang=None, target_lang=None, source=None, reference=None, test_set=None,
        decoding=DecodingConfig(1, 0.6, 50),
        batch_size=64, limit=None, output=None, json=False, threads=CpuThreads(decoding=True),
    )
    other = planned(["--model-dir", "d", "--average-last", "3", "--limit", "7", "--batch-size", "8", "--json",
                     "--output", "out.de"])
    assert (other.model.average_last, other.limit, other.batch_size, other.json, other.output) == (
        3, 7, 8, True, "out.de"
    )
    assert (other.split, other.decoding) == ("validation", DecodingConfig())
    test_set = planned(["--saved-model", export, "--test-set", "wmt14/full", "--source-lang", "en"])
    assert (test_set.test_set, test_set.split, test_set.source_lang) == ("wmt14/full", None, "en")


def test_sources_longer_than_the_model_reads_are_found_and_named():
    def measure(sentences):
        return [len(s.split()) + 1 for s in sentences], 4  # words as subwords, 4 positions

    assert overlong_sources(measure, ["a b c", "a b c d", "a b", "a b c d e f"]) == ([(2, 5), (4, 7)], 4)
    assert overlong_sources(measure, ["a", "b c"]) == ([], 4)
    assert overlong_sources(None, ["a b c d e f"]) == ([], None)  # an export without source_lengths
    assert describe_overlong([(2, 5), (4, 7)], 4) == (
        "warning: 2 source sentence(s) have more than the 3 subwords the model reads (its 4 positions, "
        "one for the end token); only their first 3 were translated, as the exported model does: "
        "line 2 (4 subwords), line 4 (6 subwords)"
    )
    many = [(n, 10) for n in range(1, 9)]
    assert describe_overlong(many, 4).endswith("line 5 (9 subwords) and 3 more")


@pytest.mark.slow
def test_a_saved_model_scored_on_files_warns_of_sources_it_cut_and_lists_them(exported, tmp_path, capsys):
    from app.commands.evaluate import main

    _, _, path, _ = exported
    sources = ["A man rides a bike.", " ".join(["dog"] * 80), "Two dogs play."]  # the model has 48 positions
    (tmp_path / "src").write_text("".join(s + "\n" for s in sources), encoding="utf-8")
    (tmp_path / "ref").write_text("Ein Mann fährt Fahrrad.\n" * 3, encoding="utf-8")
    argv = ["--saved-model", path, "--source", str(tmp_path / "src"), "--reference", str(tmp_path / "ref"), "--json"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["truncated_sources"] == [2]
    warning, decoding = captured.err.strip().splitlines()
    assert warning.startswith("warning: 1 source sentence(s) have more than the 47 subwords the model reads")
    assert re.search(r"exported model does: line 2 \(\d+ subwords\)$", warning)
    # The progress of decoding, on stderr (stdout holds the JSON): not a terminal, so its closing line only.
    assert re.fullmatch(r"decoding: 3 sentences in [0-9.:]+( s)? - [0-9.,]+ sentences/s", decoding)


def test_an_alpha_past_a_saved_models_limit_is_refused_by_name_before_decoding(exported, model_dir, tmp_path, capsys):
    # The limit of a model of 48 positions; the SavedModel would refuse it only in its
    # graph, with an assertion's traceback, and the model directory alike at the first trace.
    from app.commands.evaluate import main

    _, _, path, _ = exported
    (tmp_path / "src").write_text("A man rides a bike.\n", encoding="utf-8")
    (tmp_path / "ref").write_text("Ein Mann fährt Fahrrad.\n", encoding="utf-8")
    files = ["--source", str(tmp_path / "src"), "--reference", str(tmp_path / "ref")]
    for weights in (["--saved-model", path], ["--model-dir", model_dir]):
        assert main([*weights, *files, "--alpha", "41"]) == 1
        assert capsys.readouterr().err.strip() == (
            "error: alpha must be at most 40.72 for a model of 48 positions: beyond it the length penalty "
            "((5 + length) / 6) ** alpha of its longest outputs overflows float32; got 41"
        )



def test_a_sacrebleu_test_set_is_scored_in_the_models_pair_from_the_cache_offline(
    exported, monkeypatch, tmp_path, capsys
):
    from app.commands.evaluate import main
    from app.evaluation.metrics import paper_bleu
    from tests.sacrebleu_cache import SAMPLE_REFERENCES, cache_in, place_sample_archive

    _, _, path, _ = exported
    saved_model = tmp_path / "1"
    shutil.copytree(path, saved_model)
    (saved_model / "export_info.json").write_text(json.dumps({"source_lang": "en", "target_lang": "de"}))
    place_sample_archive(monkeypatch, cache_in(monkeypatch, tmp_path / "sacrebleu"))
    output = tmp_path / "newstest2014.de"
    argv = ["--saved-model", str(saved_model), "--test-set", "wmt14/full", "--json", "--output", str(output)]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["data"], result["sentences"]) == ("sacreBLEU test set wmt14/full en-de", 3)
    translations = output.read_text(encoding="utf-8").splitlines()
    assert result["bleu_paper"] == round(paper_bleu(translations, SAMPLE_REFERENCES, "de")[0], 2)
    assert result["bleu"] == score(translations, SAMPLE_REFERENCES, "de")["bleu"]


def test_a_test_set_not_in_the_cache_offline_is_refused_in_seconds_before_the_model_loads(
    monkeypatch, tmp_path, capsys
):
    import time

    from app.commands.evaluate import main
    from tests.sacrebleu_cache import cache_in

    cache_in(monkeypatch, tmp_path / "sacrebleu", name="wmt14")
    saved_model = a_saved_model(tmp_path / "1", source_lang="en", target_lang="de")
    started = time.monotonic()
    assert main(["--saved-model", saved_model, "--test-set", "wmt14"]) == 1
    assert time.monotonic() - started < 10
    err = capsys.readouterr().err.splitlines()
    # sacreBLEU's wmt14 is not the paper's newstest2014: said before anything else.
    assert err[0] == (
        "note: sacreBLEU's wmt14 is newstest2014 filtered (2,737 sentences for en-de); "
        "the paper scored the full set: --test-set wmt14/full"
    )
    archive = tmp_path / "sacrebleu" / "wmt14" / "raw" / "wmt14.test-filtered.tgz"
    assert err[-1].startswith(
        "error: could not download sacreBLEU's test set wmt14 from https://statmt.org/wmt14/test-filtered.tgz "
    ) and f"place it at {archive} " in err[-1]
