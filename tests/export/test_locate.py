"""`saved_model_version`: the export base or one version, as the commands take it."""

import os

import pytest

from app.export.locate import ExportNotFound, saved_model_version


def _version(base, name, complete=True):
    path = os.path.join(base, name)
    os.makedirs(path)
    if complete:
        open(os.path.join(path, "saved_model.pb"), "wb").close()
    return path


def test_a_version_directory_is_itself(tmp_path):
    version = _version(tmp_path, "3")
    assert saved_model_version(version) == version


def test_a_base_gives_its_newest_complete_version(tmp_path):
    _version(tmp_path, "2")
    newest = _version(tmp_path, "10")  # by number, not by name
    _version(tmp_path, "11", complete=False)  # no saved_model.pb: not a SavedModel
    _version(tmp_path, ".tmp-export-12")  # export.py's temporary directory
    _version(tmp_path, "notes")
    assert saved_model_version(str(tmp_path)) == newest


def test_a_base_reads_versions_as_the_server_does(tmp_path):
    # One rule for the commands and the server (app.serving.models.version_directories):
    # "7" over "007", and no number past int64, which TF Serving cannot serve.
    _version(tmp_path, "007")
    plain = _version(tmp_path, "7")
    _version(tmp_path, str(2**63))
    assert saved_model_version(str(tmp_path)) == plain


@pytest.mark.parametrize("make", ["missing", "empty", "file"])
def test_no_export_is_named_with_what_to_do(tmp_path, make):
    path = tmp_path / "translator"
    if make == "empty":
        path.mkdir()
    elif make == "file":
        path.write_text("")
    with pytest.raises(ExportNotFound) as error:
        saved_model_version(str(path))
    message = str(error.value)
    assert str(path) in message
    assert ("is a file" in message) if make == "file" else ("no model exported under" in message)
    assert make == "file" or "run python export.py" in message
