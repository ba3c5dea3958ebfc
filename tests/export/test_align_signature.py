"""The export's `align` signature: `serving_default`'s translations and scores, and Pharaoh
lines linking the words of each input to those of its translation, in the SavedModel that
TF Serving runs.

The shared tiny run (conftest.py's `model_dir` and `exported`) is trained for four steps:
its translations are repetitions, but every property below holds for any weights.
"""

import gzip
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from app.export.saved_model import graph_ops, unsupported_serving_ops
from data.words import parse_pharaoh, words

pytestmark = pytest.mark.usefixtures("load_each_export_once")

MULTI30K = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "data", "multi30k")
with gzip.open(os.path.join(MULTI30K, "test_2016_flickr.en.gz"), "rt", encoding="utf-8") as _file:
    FIVE = [next(_file).rstrip("\n") for _ in range(5)]
INPUTS = FIVE + [
    "A man 🚴 rides a bike.",  # byte-fallback pieces
    "Two  dogs\xa0play in the snow.",  # a double space and a no-break space
    " ".join(["dog"] * 80),  # longer than the model's 48 positions: cut
    "",
    "  ",
]


def signatures_of(exported):
    import tensorflow_text  # noqa: F401  (the SavedModel's tokenizer ops)

    return tf.saved_model.load(exported[2]).signatures


def texts(array):
    return [value.decode("utf-8") for value in array]


@pytest.fixture(scope="module")
def aligned(exported):
    """The loaded SavedModel's `align` and `serving_default` outputs for INPUTS (numpy)."""
    signatures = signatures_of(exported)
    inputs = tf.constant(INPUTS)
    align = {k: v.numpy() for k, v in signatures["align"](inputs=inputs).items()}
    default = {k: v.numpy() for k, v in signatures["serving_default"](inputs=inputs).items()}
    return align, default


@pytest.mark.slow
def test_align_translates_exactly_as_serving_default(aligned):
    align, default = aligned
    assert set(align) == {"translations", "scores", "alignments"}
    np.testing.assert_array_equal(align["translations"], default["translations"])
    np.testing.assert_allclose(align["scores"], default["scores"], rtol=0, atol=1e-6)


@pytest.mark.slow
def test_every_link_lies_within_both_word_counts_and_every_translation_word_has_one(aligned):
    align, _ = aligned
    for source, translation, line in zip(INPUTS, texts(align["translations"]), texts(align["alignments"])):
        source_words, target_words = len(words(source)), len(words(translation))
        links = parse_pharaoh(line, source_words, target_words)  # raises on a link out of range
        assert line == " ".join(f"{i}-{j}" for i, j in sorted(set(links))), line  # ordered, once each
        if source_words:
            assert {j for _, j in links} == set(range(target_words)), (source, translation, line)
        else:
            assert line == "", source
    assert texts(align["alignments"])[-2:] == ["", ""]
    assert all(texts(align["alignments"])[:-2])


@pytest.mark.slow
def test_the_saved_models_align_is_the_in_memory_translators(exported, aligned):
    translator = exported[0]
    align, _ = aligned
    in_memory = {k: v.numpy() for k, v in translator.serve_align(tf.constant(INPUTS)).items()}
    np.testing.assert_array_equal(align["translations"], in_memory["translations"])
    np.testing.assert_array_equal(align["alignments"], in_memory["alignments"])
    np.testing.assert_allclose(align["scores"], in_memory["scores"], rtol=0, atol=1e-5)
    # Given translations are aligned as align aligns its own.
    given = translator.align_targets(tf.constant(INPUTS), tf.constant(align["translations"]))
    np.testing.assert_array_equal(given["alignments"].numpy(), align["alignments"])


@pytest.mark.slow
def test_the_local_server_answers_align_over_rest_as_the_saved_model(tiny_server, aligned):
    align, _ = aligned
    predictions = []
    for start in range(0, len(INPUTS), 5):  # within the server's --max_instances
        status, body = tiny_server.predict({"signature_name": "align", "instances": INPUTS[start:start + 5]})
        assert status == 200, body
        predictions += body["predictions"]
    assert [prediction["alignments"] for prediction in predictions] == texts(align["alignments"])
    assert [prediction["translations"] for prediction in predictions] == texts(align["translations"])


def test_every_op_align_adds_is_one_tensorflow_serving_registers(exported):
    ops, _ = graph_ops(exported[2])
    added = {"SentencepieceTokenizeWithOffsetsOp", "UnicodeDecodeWithOffsets", "UpperBound", "Cumsum", "AsString",
             "StringJoin", "UnsortedSegmentJoin"}
    assert added <= ops
    assert unsupported_serving_ops(exported[2]) == set()


def exported_info(model_dir, tmp_path, monkeypatch, *flags):
    """export.py's export_info.json for `model_dir` with `flags`, the stand-in translator
    (tests/stand_in.py) written in place of the graph: what is tested is the record."""
    import export
    from app.export import saved_model
    from tests.stand_in import StandInTranslator

    real_export = saved_model.export
    monkeypatch.setattr(saved_model, "export", lambda translator, *a, **k: real_export(StandInTranslator(), *a, **k))
    output = tmp_path / "out"
    assert export.main(["--model-dir", model_dir, "--output", str(output), "--alpha", "0.6", *flags]) == 0
    (version,) = os.listdir(output)
    return json.loads((output / version / "export_info.json").read_text(encoding="utf-8"))


def test_export_info_records_the_head_align_reads_resolved(model_dir, tmp_path, monkeypatch):
    # The tiny run has one decoder layer of two heads: the default is layer 0's mean.
    assert exported_info(model_dir, tmp_path / "default", monkeypatch)["alignment_head"] == "0:mean"
    assert exported_info(model_dir, tmp_path / "given", monkeypatch, "--alignment-head=-1:1")[
        "alignment_head"] == "0:1"


@pytest.mark.parametrize(
    "flags, code, message",
    [
        (["--alignment-head", "0:2"], 1, "error: alignment head 0:2: the model's layers have 2 heads, 0 to 1"),
        (["--alignment-head", "1:mean"], 1, "error: alignment head 1:mean: the model has 1 decoder layer, 0 to 0"),
        (["--alignment-head", "last"], 2, "argument --alignment-head: alignment head 'last': not LAYER:HEAD"),
    ],
)
def test_a_head_the_model_lacks_is_refused_by_name_before_any_export(model_dir, tmp_path, capsys, flags, code,
                                                                     message):
    import export

    try:
        got = export.main(["--model-dir", model_dir, "--output", str(tmp_path / "out"), "--alpha", "0.6", *flags])
    except SystemExit as exited:  # argparse's refusal, before TensorFlow loads
        got = exited.code
    assert got == code
    assert message in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "out")
