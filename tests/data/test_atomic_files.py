"""Tests for data/atomic_files.py: whole or not at all, permissions, no leftovers."""

import os
import stat

import pytest

from data.atomic_files import write_atomically


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_new_file_gets_a_new_files_permissions_and_its_directories(tmp_path):
    old_umask = os.umask(0o022)
    try:
        write_atomically(str(tmp_path / "run" / "settings.json"), '{"ü": 1}')
    finally:
        os.umask(old_umask)
    assert (tmp_path / "run" / "settings.json").read_bytes() == '{"ü": 1}'.encode("utf-8")
    # mkstemp's temporary file is 0600; the file others read (settings, records) is not.
    assert _mode(tmp_path / "run" / "settings.json") == 0o644
    assert os.listdir(tmp_path / "run") == ["settings.json"]


def test_a_replaced_file_keeps_its_permissions(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step": 1}\n{"step": 2}\n')
    os.chmod(path, 0o640)
    write_atomically(str(path), b'{"step": 1}\n')
    assert path.read_bytes() == b'{"step": 1}\n'
    assert _mode(path) == 0o640


def test_a_failed_write_leaves_the_earlier_file_and_nothing_beside_it(tmp_path):
    path = tmp_path / "out.de"
    path.write_text("Ein Mann.\n", encoding="utf-8")
    with pytest.raises(TypeError):
        write_atomically(str(path), ["not", "bytes"])
    taken = tmp_path / "taken"
    taken.mkdir()  # a directory where the file should go: the rename fails
    with pytest.raises(IsADirectoryError):
        write_atomically(str(taken), "Zwei Hunde.\n")
    assert path.read_text(encoding="utf-8") == "Ein Mann.\n"
    assert sorted(os.listdir(tmp_path)) == ["out.de", "taken"]
    assert os.listdir(taken) == []
