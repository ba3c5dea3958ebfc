"""export.py: versioned, atomic SavedModels that translate raw strings like in-memory decoding.

The `model_dir` and `exported` fixtures (built once per run, shared with the serving tests)
are in conftest.py.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from app.export.saved_model import ExportError, export, load_translator, next_version, unsupported_serving_ops
from tests.conftest import SENTENCES
from tests.stand_in import StandInTranslator

ROOT = Path(__file__).resolve().parents[2]

# Each export is loaded once per test process (conftest.py), however many tests load it.
pytestmark = pytest.mark.usefixtures("load_each_export_once")


def test_export_writes_version_1_with_the_serving_signatures(exported):
    _, base, path, expected = exported
    assert path == os.path.join(base, "1")
    loaded = tf.saved_model.load(path)
    assert set(loaded.signatures) == {
        "serving_default", "nbest", "greedy", "translate_with_options", "sample", "score", "constrained", "align",
    }
    outputs = loaded.signatures["serving_default"].structured_outputs
    assert {k: (v.dtype, v.shape.as_list()) for k, v in outputs.items()} == {
        "translations": (tf.string, [None]),
        "scores": (tf.float32, [None]),
    }
    # Every input gets a translation: empty, whitespace-only, over-long, non-Latin.
    assert expected["translations"].shape == (len(SENTENCES),)
    assert np.all(np.isfinite(expected["scores"]))


FRESH_PROCESS = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  (TF-Text's ops, as TF Serving has them)

path, sentences = sys.argv[1], json.loads(sys.argv[2])
result = {}
serving = tf.saved_model.load(path).signatures["serving_default"]
out = serving(inputs=tf.constant(sentences))
result["v2"] = {"translations": [t.decode() for t in out["translations"].numpy()], "scores": out["scores"].numpy().tolist()}

# The way TF Serving loads it: tensor names from the signature, a TF1 session.
with tf.Graph().as_default(), tf.compat.v1.Session() as session:
    meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
    signature = meta.signature_def["serving_default"]
    fetched = session.run(
        {k: v.name for k, v in signature.outputs.items()},
        feed_dict={signature.inputs["inputs"].name: sentences},
    )
result["v1"] = {"translations": [t.decode() for t in fetched["translations"]], "scores": fetched["scores"].tolist()}
project = sorted(m for m in sys.modules if m.split(".")[0] in ("app", "layers", "data", "keras_hub"))
result["project_modules"] = project
print(json.dumps(result))
"""  # noqa: E501


@pytest.mark.slow
def test_a_fresh_process_without_project_code_translates_like_in_memory_decoding(exported):
    _, _, path, expected = exported
    result = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, path, json.dumps(SENTENCES)],
        cwd="/", env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["project_modules"] == []
    want = [t.decode() for t in expected["translations"]]
    for loader in ("v2", "v1"):
        assert report[loader]["translations"] == want, loader
        np.testing.assert_allclose(report[loader]["scores"], expected["scores"], rtol=1e-6, err_msg=loader)


@pytest.mark.slow
def test_nbest_and_options_signatures_agree_with_the_default(exported):
    translator, _, _, expected = exported
    nbest = translator.serve_nbest(tf.constant(SENTENCES))
    assert nbest["translations"].shape == (len(SENTENCES), 4)
    np.testing.assert_array_equal(nbest["translations"][:, 0].numpy(), expected["translations"])
    scores = nbest["scores"].numpy()
    assert np.all(scores[:, :-1] >= scores[:, 1:])  # best first
    n = len(SENTENCES)
    options = translator.serve_with_options(tf.constant(SENTENCES), tf.fill([n], 0.6), tf.fill([n], 50))
    np.testing.assert_array_equal(options["translations"].numpy(), expected["translations"])
    # Settings per sentence: a mixed batch gives each sentence what it gets alone.
    settings = [(0.0, 3), (1.0, 50), (0.6, 7)]
    mixed = translator.serve_with_options(
        tf.constant(SENTENCES[:3]), tf.constant([a for a, _ in settings]), tf.constant([e for _, e in settings])
    )
    for i, (alpha, extra) in enumerate(settings):
        alone = translator.serve_with_options(
            tf.constant(SENTENCES[i : i + 1]), tf.constant([alpha]), tf.constant([extra])
        )
        assert mixed["translations"].numpy()[i] == alone["translations"].numpy()[0]
        np.testing.assert_allclose(mixed["scores"].numpy()[i], alone["scores"].numpy()[0], rtol=1e-5)
    with pytest.raises(tf.errors.InvalidArgumentError, match="alpha must not be negative"):
        translator.serve_with_options(tf.constant(SENTENCES[:1]), tf.constant([-1.0]), tf.constant([50]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="alpha must be finite"):
        translator.serve_with_options(tf.constant(SENTENCES[:2]), tf.constant([0.6, np.inf]), tf.constant([50, 50]))
    # Past the model's limit (48 positions) the longest outputs' length penalty overflows.
    past_the_limit = r"alpha must be at most 40\.72 for a model of 48 positions"
    with pytest.raises(tf.errors.InvalidArgumentError, match=past_the_limit):
        translator.serve_with_options(tf.constant(SENTENCES[:2]), tf.constant([0.6, 40.73]), tf.constant([50, 50]))
    # NaN is no negative number: it is named as what it is.
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"\[alpha must be finite, got\] \[nan\]"):
        translator.serve_with_options(tf.constant(SENTENCES[:1]), tf.constant([np.nan]), tf.constant([50]))
    # An empty batch is a batch: no outputs, in every signature.
    empty = tf.constant([], tf.string)
    for outputs in (translator.serve(empty), translator.serve_nbest(empty), translator.serve_greedy(empty)):
        assert outputs["translations"].shape[0] == 0 and outputs["scores"].shape[0] == 0


@pytest.mark.slow
def test_the_saved_model_refuses_inputs_that_are_not_one_per_sentence(exported):
    # A loaded signature, like TF Serving, does not check shapes itself: a [B, N] batch came
    # back as B * N translations, and a scalar alpha failed on "Invalid reduction dimension".
    import tensorflow_text  # noqa: F401  (the SavedModel's tokenizer ops)

    _, _, path, _ = exported
    signatures = tf.saved_model.load(path).signatures
    one, alpha, extra = tf.constant(["A dog."]), tf.constant([0.6]), tf.constant([5])
    cases = [
        ("serving_default", {"inputs": tf.constant("A dog.")}, "inputs []"),
        ("nbest", {"inputs": tf.constant([["A dog.", "A cat."]])}, "inputs [1,2]"),
        ("greedy", {"inputs": tf.constant([["A dog."], ["A cat."]])}, "inputs [2,1]"),
        ("translate_with_options", {"inputs": one, "alpha": tf.constant(0.6), "max_extra_length": extra}, "alpha []"),
        (
            "translate_with_options",
            {"inputs": one, "alpha": alpha, "max_extra_length": tf.constant([[5]])},
            "max_extra_length [1,1]",
        ),
    ]
    for signature, inputs, shape in cases:
        message = rf"Shape of tensor {re.escape(shape)} is not compatible with expected shape \[\?\]"
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            signatures[signature](**inputs)


def test_source_lengths_count_subwords_before_truncation_in_memory_and_in_the_saved_model(exported):
    translator, _, path, _ = exported
    tokenizer = translator.tokenizer
    want = [len(tokenizer.tokenize(tf.constant([s]))[0]) + 1 for s in SENTENCES]  # + the end token
    assert want[1] == want[2] == 1 and want[5] > 48  # empty, blank, and past the 48 positions
    got = translator.source_lengths(tf.constant(SENTENCES))
    assert got["lengths"].numpy().tolist() == want and int(got["limit"]) == 48
    # What the model reads: every sentence within the limit whole, the long one cut to it.
    read = tf.reduce_sum(tf.cast(translator.source_ids(tf.constant(SENTENCES)) != 0, tf.int32), axis=1)
    assert read.numpy().tolist() == [min(n, 48) for n in want]
    import tensorflow_text  # noqa: F401  (the SavedModel's tokenizer ops)

    loaded = tf.saved_model.load(path).source_lengths(tf.constant(SENTENCES))
    assert loaded["lengths"].numpy().tolist() == want and int(loaded["limit"]) == 48


# The numbering and the writing of versions do not depend on the graph: the stand-in
# translator (tests/stand_in.py) exports in a fraction of a second, the tiny model in 20 s.


def test_a_second_export_gets_the_next_version_and_none_is_overwritten(exported, tmp_path):
    _, _, path, _ = exported
    base = tmp_path / "translator"
    shutil.copytree(path, base / "1")
    first = (base / "1" / "saved_model.pb").read_bytes()
    assert export(StandInTranslator(), str(base)) == os.path.join(base, "2")
    assert next_version(str(base)) == 3
    with pytest.raises(ExportError, match=r"translator/1 exists; versions are never overwritten"):
        export(StandInTranslator(), str(base), version=1)
    assert (base / "1" / "saved_model.pb").read_bytes() == first
    assert sorted(os.listdir(base)) == ["1", "2"]


def test_an_interrupted_export_leaves_no_version_behind(tmp_path, monkeypatch):
    written = []

    def crash(export_dir, *args, **kwargs):
        written.extend(os.listdir(export_dir))
        raise KeyboardInterrupt  # as if the user pressed Ctrl-C while it was writing

    monkeypatch.setattr("app.export.saved_model.unsupported_serving_ops", crash)
    with pytest.raises(KeyboardInterrupt):
        export(StandInTranslator(), str(tmp_path / "translator"))
    assert "saved_model.pb" in written  # interrupted with a whole SavedModel written
    assert os.listdir(tmp_path / "translator") == []


def test_the_save_traces_each_signature_once(exported, tmp_path):
    # A concrete function traced before tf.saved_model.save is traced again inside it (the
    # save's context is part of the cache key): the export hands over the tf.functions.
    assert all(isinstance(f, tf.types.experimental.GenericFunction) for f in exported[0].signatures().values())
    translator = StandInTranslator()
    export(translator, str(tmp_path / "translator"))
    assert translator.serve.experimental_get_tracing_count() == 1


@pytest.mark.slow
def test_checkpoint_averaging_needs_enough_checkpoints(model_dir):
    _, weights = load_translator(model_dir, average_last=3)
    assert weights == "average of ckpt-2, ckpt-3, ckpt-4"
    with pytest.raises(ExportError, match="--average-last 9 asks for more checkpoints than .* keeps \\(3\\)"):
        load_translator(model_dir, average_last=9)


@pytest.mark.slow
def test_a_checkpoint_is_named_by_its_path_or_its_name_and_a_missing_one_is_listed(model_dir):
    path = os.path.join(model_dir, "checkpoints", "ckpt-3")
    assert load_translator(model_dir, checkpoint=path)[1] == path
    _, by_name = load_translator(model_dir, checkpoint="ckpt-3")
    assert os.path.basename(by_name) == "ckpt-3" and os.path.exists(by_name + ".index")
    with pytest.raises(ExportError, match=r"no checkpoint 'ckpt-99': .* keeps \(ckpt-2, ckpt-3, ckpt-4\)"):
        load_translator(model_dir, checkpoint="ckpt-99")


@pytest.mark.slow
def test_with_no_choice_given_the_run_s_settings_pick_the_checkpoints_to_average(model_dir, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(model_dir, run)

    def set_run_average(k):
        settings = json.loads((run / "settings.json").read_text())
        settings["train"]["average_last"] = k
        (run / "settings.json").write_text(json.dumps(settings))

    def weights(**choice):
        return load_translator(str(run), **choice)[1]

    best = weights(checkpoint="best")
    assert weights() == best  # the fixture's run names no K (TrainConfig's default)
    set_run_average(2)
    averaged, averaged_weights = load_translator(str(run))
    assert averaged_weights == "average of ckpt-3, ckpt-4"
    explicit, _ = load_translator(str(run), average_last=2)
    for mine, theirs in zip(averaged.model_variables, explicit.model_variables, strict=True):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
    # An explicit choice wins over the run's.
    assert weights(checkpoint="best") == best
    assert weights(average_last=0) == best
    assert weights(average_last=3) == "average of ckpt-2, ckpt-3, ckpt-4"
    # A run that kept fewer than it names (its time budget ended it early) averages those.
    set_run_average(5)
    assert weights() == "average of ckpt-2, ckpt-3, ckpt-4"
    # Of one checkpoint, the checkpoint itself: its weights, described by its path.
    newest, newest_weights = load_translator(str(run), average_last=1)
    assert newest_weights == str(run / "checkpoints" / "ckpt-4")
    latest, _ = load_translator(str(run), checkpoint="latest")
    for mine, theirs in zip(newest.model_variables, latest.model_variables, strict=True):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
    with pytest.raises(ExportError, match="got -2"):
        weights(average_last=-2)
    with pytest.raises(ExportError, match=r"--checkpoint \(latest\) or --average-last \(2\), not both"):
        weights(checkpoint="latest", average_last=2)


def test_the_op_check_rejects_python_and_xla_ops(tmp_path):
    class Bad(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
        def python(self, x):
            return tf.py_function(lambda v: v * 2, [x], tf.float32)

        @tf.function(input_signature=[tf.TensorSpec([4], tf.float32)])
        def xla(self, x):
            from tensorflow.compiler.tf2xla.python.xla import dynamic_update_slice

            return dynamic_update_slice(x, tf.ones([1]), [1])

    module = Bad()
    tf.saved_model.save(
        module,
        str(tmp_path),
        signatures={"a": module.python.get_concrete_function(), "b": module.xla.get_concrete_function()},
    )
    assert unsupported_serving_ops(str(tmp_path)) == {"EagerPyFunc", "XlaDynamicUpdateSlice"}


def test_export_command_reports_a_missing_model_dir(tmp_path, capsys):
    # In this process: the script's exit status is checked by the subprocess cases below,
    # and a subprocess that loads TensorFlow costs about 5 s of CPU.
    import export as export_script

    assert export_script.main(["--model-dir", str(tmp_path / "nope"), "--output", str(tmp_path / "out")]) == 1
    assert f"error: --model-dir {tmp_path / 'nope'}: no such directory" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_export_command_refuses_a_file_as_its_output_before_loading(model_dir, tmp_path, capsys, monkeypatch):
    import export as export_script
    from app.export import saved_model

    def no_loading(*args, **kwargs):
        raise AssertionError("the weights were loaded before the output was checked")

    monkeypatch.setattr(saved_model, "load_trained", no_loading)
    output = tmp_path / "out"
    output.write_text("mine", encoding="utf-8")
    assert export_script.main(["--model-dir", model_dir, "--output", str(output)]) == 1
    error = capsys.readouterr().err
    assert f"error: {output} is a file, not a directory of versions; give another --output" in error
    assert output.read_text(encoding="utf-8") == "mine"


def test_a_checkpoint_whose_files_are_gone_is_named(model_dir, tmp_path):
    from app.model_dir.checkpoints import CheckpointError, checkpoint_paths

    copy = tmp_path / "run"
    shutil.copytree(model_dir, copy)
    older = checkpoint_paths(str(copy))[-2]
    for data_file in copy.glob(f"checkpoints/{os.path.basename(older)}.data-*"):
        data_file.unlink()
    with pytest.raises(CheckpointError, match=f"^checkpoint {older} cannot be read .*missing or damaged$"):
        load_translator(str(copy), average_last=2)


@pytest.mark.slow
@pytest.mark.parametrize(
    "flags, message",
    [
        (["--model-name", "../elsewhere"], "argument --model-name: '../elsewhere' is not a model name"),
        (["--name", "en/de"], "argument --name: 'en/de' is not a model name"),  # its name before
        (["--alpha", "-1"], "argument --alpha: must be a finite number of at least 0, got -1"),
        (["--alpha", "40.73"], "alpha must be at most 40.72 for a model of 48 positions"),
        (["--parallel-searches", "0"], "argument --parallel-searches: must be at least 1, got 0"),
    ],
)
def test_export_command_refuses_a_bad_name_or_decoding_before_writing(model_dir, tmp_path, flags, message):
    result = subprocess.run(
        [sys.executable, str(ROOT / "export.py"), "--model-dir", model_dir, *flags],
        cwd=tmp_path, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == (1 if flags[1] == "40.73" else 2)  # 2: argparse refused it, before TensorFlow
    assert message in result.stderr
    assert list(tmp_path.iterdir()) == []  # no saved_models/ made, nothing outside it


def test_export_info_names_the_weights_decoding_and_data_of_the_run(model_dir):
    from app.decoding.config import DecodingConfig
    from app.export.saved_model import export_metadata
    from app.model_dir.settings import load_settings

    _, data_config, _ = load_settings(model_dir)
    info = export_metadata(model_dir, "ckpt-4", DecodingConfig(4, 0.6, 50, 3))
    assert info == {
        "model_dir": os.path.abspath(model_dir), "weights": "ckpt-4", "beam_size": 4, "alpha": 0.6,
        "max_extra_length": 50, "parallel_searches": 3, "dataset": data_config.dataset,
        "source_lang": data_config.source_lang, "target_lang": data_config.target_lang, "lowercase": False,
    }
