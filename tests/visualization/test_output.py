"""app/visualization/output.py: where a picture may be written, checked before the work."""

import re

import pytest

from app.visualization.output import PicturesError, prepare_output


def test_the_directories_a_path_needs_are_made_and_the_wrong_kind_is_refused_by_name(tmp_path):
    prepare_output(str(tmp_path / "a" / "b"), "directory")
    prepare_output(str(tmp_path / "c" / "curves.png"), "file")
    assert (tmp_path / "a" / "b").is_dir() and (tmp_path / "c").is_dir()
    assert not (tmp_path / "c" / "curves.png").exists()
    prepare_output("curves.png", "file")  # in the working directory: nothing to make
    with pytest.raises(PicturesError, match=re.escape(f"--output {tmp_path} is a directory; name the PNG file")):
        prepare_output(str(tmp_path), "file")
    (tmp_path / "mine").write_text("mine")
    with pytest.raises(PicturesError, match=re.escape(f"--output {tmp_path / 'mine'} is a file; name a directory")):
        prepare_output(str(tmp_path / "mine"), "directory")
    under_a_file = tmp_path / "mine" / "c.png"
    with pytest.raises(PicturesError, match=re.escape(f"--output {under_a_file}: cannot create {tmp_path / 'mine'}")):
        prepare_output(str(under_a_file), "file")
    assert (tmp_path / "mine").read_text() == "mine"
