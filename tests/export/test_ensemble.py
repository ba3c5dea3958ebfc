"""Ensembles of training runs (app/export/ensemble.py): loaded as one `Translator` whose
every signature decodes the ensemble, and refused where the runs cannot decode as one."""

import json
import os
import shutil

import pytest
import tensorflow as tf

from app.decoding.config import DecodingConfig
from app.decoding.ensemble import Ensemble
from app.export.ensemble import check_members, describe, load_ensemble, members_record
from app.export.saved_model import ExportError, load_trained
from app.model_dir.settings import load_settings
from data.tokenizer import MODEL_FILENAME


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


def test_an_ensembles_translator_holds_each_members_weights_and_decodes_them_as_one(model_dir):
    trained = load_ensemble([model_dir, model_dir], checkpoint="latest")
    single = load_trained(model_dir, checkpoint="latest")
    assert trained.weights == single.weights and [m.weights for m in trained.ensemble] == [single.weights]
    assert trained.ensemble[0].model is not trained.model  # loaded apart: each member its own variables
    assert describe([model_dir, model_dir], trained) == f"an ensemble of {model_dir} ({single.weights}), " \
        f"{model_dir} ({single.weights})"
    assert describe([model_dir], single) == single.weights
    assert members_record([model_dir, model_dir], trained) == [
        {"model_dir": os.path.abspath(model_dir), "weights": single.weights}
    ] * 2
    translator = trained.translator(DecodingConfig())
    assert isinstance(translator.transformer, Ensemble) and len(translator.transformer.members) == 2
    assert len(translator.output_kernel) == 2 and translator.output_kernel[0] is not translator.output_kernel[1]
    assert len(translator.model_variables) == 2 * len(single.model.weights)
    assert {id(v) for v in translator.model_variables} >= {id(w.value) for w in trained.ensemble[0].model.weights}
    # One model is decoded as ever: no ensemble in between.
    alone = single.translator(DecodingConfig())
    assert not isinstance(alone.transformer, Ensemble) and isinstance(alone.output_kernel, tf.Variable)
