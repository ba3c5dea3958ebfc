"""benchmarks/bench_serving.py: bad flags fail before a server starts, and a server that fails
is named with the cause and a log that is still there to read."""

import os

import pytest

from benchmarks import bench_serving


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--modes", "batched"], "argument --modes: unknown mode(s) 'batched'; known: batching, unbatched"),
        (["--modes", "batching,"], "argument --modes: unknown mode(s) ''; known: batching, unbatched"),
        (["--clients", "0"], "argument --clients: each must be at least 1, got 0"),
        (["--clients", "1,x"], "argument --clients: expected comma-separated whole numbers, got '1,x'"),
        (["--requests", "0"], "argument --requests: must be at least 1, got 0"),
    ],
)
def test_bad_flags_are_usage_errors_naming_them(flags, message, tmp_path, capsys):
    (tmp_path / "1").mkdir()
    with pytest.raises(SystemExit) as exit:
        bench_serving.parse_args(["--model_base_path", str(tmp_path), *flags])
    assert exit.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(f": error: {message}")


@pytest.mark.parametrize("make", [False, True], ids=["missing", "empty"])
def test_a_base_path_without_a_version_is_refused_before_the_server_starts(make, tmp_path, capsys):
    base = tmp_path / "translator"
    if make:
        base.mkdir()
        (base / ".tmp-1-123").mkdir()  # what export.py writes before the version: not one
    with pytest.raises(SystemExit) as exit:
        bench_serving.parse_args(["--model_base_path", str(base)])
    assert exit.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        f": error: --model_base_path {base} holds no version to serve "
        "(a numbered directory such as 1/, as export.py writes)"
    )


def test_the_base_path_is_taken_from_the_current_directory_and_not_checked_with_tiny_or_url(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "exports" / "3").mkdir(parents=True)
    assert bench_serving.parse_args(["--model_base_path", "exports"]).model_base_path == str(tmp_path / "exports")
    # The default, saved_models/translator, is not under tmp_path; neither flag serves it.
    assert bench_serving.parse_args(["--tiny"]).tiny
    assert bench_serving.parse_args(["--url", "http://127.0.0.1:1"]).url == "http://127.0.0.1:1"


def failed_run(argv):
    """The SystemExit message of a run whose server fails, and the log it points to."""
    with pytest.raises(SystemExit) as exit:
        bench_serving.main(argv)
    message = exit.value.code
    log = message.rsplit("; see its log, ", 1)[1]
    return message, log


def test_a_server_that_exits_is_named_with_its_error_and_its_log_is_kept(tmp_path):
    (tmp_path / "1").mkdir()
    message, log = failed_run(
        ["--model_base_path", str(tmp_path), "--modes", "unbatched", "--server-flags", "--num_versions 0"]
    )
    try:
        assert message == (
            "bench_serving.py: error: unbatched: the server did not start "
            f"(serve.py: error: --num_versions must be at least 1, got 0); see its log, {log}"
        )
        assert "--num_versions must be at least 1, got 0" in open(log).read()
    finally:
        os.remove(log)


@pytest.mark.slow
def test_a_server_whose_versions_all_fail_to_load_is_named_with_the_cause(tmp_path):
    (tmp_path / "1").mkdir()  # a version directory without a SavedModel
    message, log = failed_run(["--model_base_path", str(tmp_path), "--modes", "batching"])
    try:
        assert message.startswith(f"bench_serving.py: error: batching: the server loaded no version of {tmp_path} (")
        assert (
            f"WARNING model translator version 1 failed to load: OSError: SavedModel file does not exist at: "
            f"{tmp_path}/1/" in message
        )
        assert "failed to load" in open(log).read()
    finally:
        os.remove(log)
