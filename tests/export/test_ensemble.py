"""Ensembles of training runs (app/export/ensemble.py): loaded as one `Translator` whose
every signature decodes the ensemble, refused where the runs cannot decode as one, and
an ensemble of two copies of the shared tiny run exported: it translates and scores as
the run's own export does, signature by signature."""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from app.decoding.config import DecodingConfig
from app.decoding.ensemble import Ensemble
from app.export.ctranslate2 import export_ctranslate2
from app.export.ensemble import check_members, describe, ensemble_metadata, load_ensemble
from app.export.saved_model import ExportError, load_trained
from app.model_dir.settings import load_settings
from data.tokenizer import MODEL_FILENAME
from tests.conftest import SENTENCES

# Each export is loaded once per test process (conftest.py), however many tests load it.
pytestmark = pytest.mark.usefixtures("load_each_export_once")

# A value per input name of every signature, so that a signature added later (with inputs
# named as these) is compared too; a new input name fails the comparison by name.
TARGETS = ["Ein Mann fährt Fahrrad.", "", "Hunde.", "Zwei Hunde spielen im Schnee.", "Ein Mann.", "Hund " * 60]
SIGNATURE_INPUTS = {
    "inputs": tf.constant(SENTENCES),
    "targets": tf.constant(TARGETS),
    "alpha": tf.constant([0.6, 0.0, 1.0, 0.6, 0.2, 0.6]),
    "max_extra_length": tf.constant([50, 5, 50, 3, 50, 50]),
    "seed": tf.constant([1, 2, 3, 4, 5, 6], tf.int64),
    "top_k": tf.constant([0, 5, 0, 10, 1, 0]),
    "top_p": tf.constant([1.0, 1.0, 0.9, 0.5, 1.0, 1.0]),
    "temperature": tf.constant([1.0, 0.5, 1.0, 2.0, 1.0, 1.0]),
    "prefixes": tf.constant(["", "Ein", "", "", "", ""]),
    "constraints": tf.constant(["", "", "Hund", "", "", ""]),
    "no_repeat_ngram_size": tf.constant([0, 0, 0, 2, 0, 0]),
}


def copy_run(model_dir, directory):
    """What `check_members` reads of a run (settings.json and the vocabulary), copied."""
    os.makedirs(directory)
    for name in ("settings.json", MODEL_FILENAME):
        shutil.copy(os.path.join(model_dir, name), directory)
    return str(directory)


def edit_settings(run, section, **changes):
    path = os.path.join(run, "settings.json")
    with open(path, encoding="utf-8") as f:
        settings = json.load(f)
    settings[section].update(changes)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(settings, f)


def test_runs_with_another_subword_model_are_refused_naming_both(model_dir, tmp_path):
    other = copy_run(model_dir, tmp_path / "other")
    with open(os.path.join(other, MODEL_FILENAME), "ab") as f:
        f.write(b"\0")  # one byte more: another file, however alike
    with pytest.raises(ExportError) as refused:
        load_ensemble([model_dir, other])
    assert str(refused.value) == (
        f"{model_dir} and {other} cannot decode as one ensemble: their subword models differ "
        f"({os.path.join(model_dir, MODEL_FILENAME)} and {os.path.join(other, MODEL_FILENAME)} are not the same "
        "file), and an ensemble reads and writes one"
    )


def test_runs_lowercased_otherwise_or_of_another_vocabulary_size_are_refused_naming_it(model_dir, tmp_path):
    lowercased = copy_run(model_dir, tmp_path / "lowercased")
    edit_settings(lowercased, "data", lowercase=True)
    with pytest.raises(ExportError, match=(
        f"^{model_dir} and {lowercased} cannot decode as one ensemble: lowercase is False in {model_dir} and "
        f"True in {lowercased} \\(train.py --lowercase\\): the members must read the same text$"
    )):
        check_members([model_dir, model_dir, lowercased])
    wider = copy_run(model_dir, tmp_path / "wider")
    size = load_settings(model_dir)[0].vocab_size
    edit_settings(wider, "model", vocab_size=size + 1)
    with pytest.raises(ExportError, match=f"their vocabularies have {size} and {size + 1} tokens"):
        check_members([model_dir, wider])
    check_members([model_dir, copy_run(model_dir, tmp_path / "same")])  # a copy: the same in every way


def test_a_checkpoint_path_names_one_runs_file_and_is_refused_for_an_ensemble(model_dir):
    path = os.path.join(model_dir, "ckpt-4")
    with pytest.raises(ExportError, match="names one run's file; for an ensemble give 'best', 'latest' or the name"):
        load_ensemble([model_dir, model_dir], checkpoint=path)


def test_an_ensembles_translator_holds_each_members_weights_and_decodes_them_as_one(model_dir, tmp_path):
    trained = load_ensemble([model_dir, model_dir], checkpoint="latest")
    single = load_trained(model_dir, checkpoint="latest")
    assert trained.weights == single.weights and [m.weights for m in trained.ensemble] == [single.weights]
    assert trained.ensemble[0].model is not trained.model  # loaded apart: each member its own variables
    assert describe([model_dir, model_dir], trained) == f"an ensemble of {model_dir} ({single.weights}), " \
        f"{model_dir} ({single.weights})"
    assert describe([model_dir], single) == single.weights
    assert ensemble_metadata([model_dir, model_dir], trained) == {
        "ensemble": [os.path.abspath(model_dir)] * 2, "ensemble_weights": [single.weights] * 2,
    }
    assert ensemble_metadata([model_dir], single) == {}
    translator = trained.translator(DecodingConfig())
    assert isinstance(translator.transformer, Ensemble) and len(translator.transformer.members) == 2
    assert len(translator.output_kernel) == 2 and translator.output_kernel[0] is not translator.output_kernel[1]
    assert len(translator.model_variables) == 2 * len(single.model.weights)
    assert {id(v) for v in translator.model_variables} >= {id(w.value) for w in trained.ensemble[0].model.weights}
    # CTranslate2 decodes one model: refused before anything is written.
    with pytest.raises(ExportError, match="a CTranslate2 model holds one model, not an ensemble"):
        export_ctranslate2(translator, str(tmp_path / "ctranslate2"))
    assert not (tmp_path / "ctranslate2").exists()
    # One model is decoded as ever: no ensemble in between.
    alone = single.translator(DecodingConfig())
    assert not isinstance(alone.transformer, Ensemble) and isinstance(alone.output_kernel, tf.Variable)


def outputs_of(signature):
    """A loaded signature's outputs for `SIGNATURE_INPUTS`, as numpy arrays."""
    _, inputs = signature.structured_input_signature
    missing = sorted(set(inputs) - set(SIGNATURE_INPUTS))
    assert not missing, f"give SIGNATURE_INPUTS a value for {missing}"
    return {name: value.numpy() for name, value in signature(**{k: SIGNATURE_INPUTS[k] for k in inputs}).items()}


@pytest.mark.slow
def test_an_export_of_two_copies_of_a_run_answers_every_signature_as_the_runs_own(model_dir, exported, tmp_path):
    from app.commands.export import ExportPlan, run_export
    from app.export.model_source import ModelSource

    _, _, single_path, _ = exported
    plan = ExportPlan(
        # One search per call: half the loops to trace of the shared export's two, with
        # the same translations (model_search.search_model), so the test takes half the time.
        model=ModelSource(model_dir=model_dir, ensemble=(model_dir,)), decoding=DecodingConfig(parallel_searches=1),
        choose_alpha=False,
        format="savedmodel", base=str(tmp_path / "translator"), version=None, model_name="translator",
    )
    path, weights = run_export(plan)
    single, ensemble = tf.saved_model.load(single_path), tf.saved_model.load(path)
    assert set(ensemble.signatures) == set(single.signatures)
    for name in sorted(single.signatures):
        expected, got = outputs_of(single.signatures[name]), outputs_of(ensemble.signatures[name])
        assert set(got) == set(expected), name
        for key, value in expected.items():
            if value.dtype.kind == "f":
                np.testing.assert_allclose(got[key], value, atol=1e-4, err_msg=f"{name}: {key}")
            else:
                np.testing.assert_array_equal(got[key], value, err_msg=f"{name}: {key}")
    # Each member's projection is its own variable in the SavedModel.
    assert len(ensemble.output_kernel) == 2
    with open(os.path.join(path, "export_info.json"), encoding="utf-8") as f:
        info = json.load(f)
    own_weights = load_trained(model_dir).weights
    assert weights == info["weights"] == f"an ensemble of {model_dir} ({own_weights}), {model_dir} ({own_weights})"
    assert (info["ensemble"], info["ensemble_weights"]) == ([os.path.abspath(model_dir)] * 2, [own_weights] * 2)
    assert info["model_dir"] == os.path.abspath(model_dir)
    assert info["alignment_head"] == "0:mean"  # the first member's
