"""The --output file of translate, score and evaluate (app/cli/output_file.py): refused
before the work for what it would break, written whole or not at all after it."""

import os

import pytest

from app.cli.output_file import STDIN, output_file_problem, write_output


@pytest.fixture
def files(tmp_path):
    (tmp_path / "source.en").write_text("a\n", encoding="utf-8")
    (tmp_path / "folder").mkdir()
    return tmp_path


def test_a_path_that_cannot_take_the_output_is_named_with_what_is_wrong(files):
    read = {"--source": str(files / "source.en"), "--target": STDIN, "--reference": None}
    cases = {
        files / "folder": f"--output {files / 'folder'} is a directory; name a file to write the scores to",
        files / "missing" / "out": f"--output {files / 'missing' / 'out'}: its directory {files / 'missing'} "
        "does not exist",
        files / "source.en" / "out": f"--output {files / 'source.en' / 'out'}: its directory "
        f"{files / 'source.en'} is not a directory",
        files / "source.en": f"--output {files / 'source.en'} is the --source file; the scores would overwrite it",
    }
    for path, message in cases.items():
        assert output_file_problem(str(path), read, "the scores") == message
    # The same file by another name is the same file.
    os.symlink(files / "source.en", files / "link.en")
    assert "is the --source file" in output_file_problem(str(files / "link.en"), read, "the scores")


def test_a_new_file_or_one_beside_inputs_from_standard_input_is_fine(files, monkeypatch):
    read = {"--input": STDIN}
    assert output_file_problem(str(files / "out.de"), read, "the translations") is None
    (files / "out.de").write_text("an earlier file\n", encoding="utf-8")  # replaced, once written
    assert output_file_problem(str(files / "out.de"), read, "the translations") is None
    monkeypatch.chdir(files)
    assert output_file_problem("out.de", {"--input": "source.en"}, "the translations") is None  # no directory: .


def test_without_a_path_the_output_goes_to_standard_output_as_utf8(capsysbinary):
    assert write_output(None, "Ein Mann mit Hut.\nÜber die Straße.\n") == 0
    assert capsysbinary.readouterr().out == "Ein Mann mit Hut.\nÜber die Straße.\n".encode("utf-8")


def test_a_file_is_replaced_whole_and_a_write_that_fails_keeps_the_earlier_one(files, capsys):
    output = files / "out.de"
    output.write_text("an earlier file\n", encoding="utf-8")
    assert write_output(str(output), "Ein Mann.\nZwei Hunde.\n") == 0
    assert output.read_text(encoding="utf-8") == "Ein Mann.\nZwei Hunde.\n"
    # A directory put in the way while the work ran: the rename fails, and says why.
    assert write_output(str(files / "folder"), "Ein Mann.\n") == 1
    error = capsys.readouterr().err
    assert error.startswith(f"error: could not write --output {files / 'folder'}: [Errno 21] Is a directory")
    assert sorted(path.name for path in files.iterdir()) == ["folder", "out.de", "source.en"]  # no partial file
    assert output.read_text(encoding="utf-8") == "Ein Mann.\nZwei Hunde.\n"


def test_another_output_file_is_named_by_its_flag_and_kept_off_one_not_yet_written(files, capsys):
    # app.translate's --alignments beside --output: neither file exists before the work.
    path = str(files / "out.align")
    assert output_file_problem(path, {"--output": path}, "the word alignments", flag="--alignments") == (
        f"--alignments {path} is the --output file; the word alignments would overwrite it"
    )
    assert output_file_problem(str(files / "folder"), {}, "the word alignments", flag="--alignments") == (
        f"--alignments {files / 'folder'} is a directory; name a file to write the word alignments to"
    )
    assert write_output(str(files / "folder"), "0-0\n", flag="--alignments") == 1
    assert capsys.readouterr().err.startswith(f"error: could not write --alignments {files / 'folder'}: ")
