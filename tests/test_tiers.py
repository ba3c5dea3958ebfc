"""The two tiers' rules (tests/tiers.py), run on a small suite of their own in a pytest
process: an unmarked test over the bound and a file without a fast test fail the run, a
shared build is not counted against the test that asks for it first, and files are taken
heaviest first."""

import os
import subprocess
import sys
import textwrap

from tests import tiers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CONFTEST = """
import time
import pytest
from tests.tiers import pytest_addoption, pytest_collection_modifyitems, pytest_configure  # noqa: F401

@pytest.fixture(scope="session")
def model_dir():  # one of tiers.SHARED_BUILDS
    time.sleep(0.6)
    return "built"
"""


def inner_environment():
    """This process's environment for an inner pytest, without PYTEST_ADDOPTS: a whole run
    given `--record-file-seconds` that way would have its inner runs write their made-up
    files into the real record."""
    environment = {name: value for name, value in os.environ.items() if name != "PYTEST_ADDOPTS"}
    return {**environment, "PYTHONPATH": ROOT}


def run_suite(directory, files, bound="0.4"):
    """Runs pytest on `files` ({name: source}) in `directory`; returns (exit code, output)."""
    (directory / "pytest.ini").write_text(f"[pytest]\nmarkers =\n    slow: slow\nfast_test_seconds = {bound}\n")
    (directory / "conftest.py").write_text(CONFTEST)
    for name, source in files.items():
        (directory / name).write_text(textwrap.dedent(source))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q", "-s", str(directory)],
        cwd=directory, capture_output=True, text=True, env=inner_environment(), timeout=120,
    )
    return result.returncode, result.stdout + result.stderr


def test_an_unmarked_test_over_the_bound_fails_the_run_and_is_named(tmp_path):
    code, output = run_suite(tmp_path, {"test_a.py": """
        import time
        import pytest

        def test_quick():
            pass

        def test_too_long():
            time.sleep(0.6)

        def test_near_the_bound():
            time.sleep(0.3)

        @pytest.mark.slow
        def test_long_but_marked():
            time.sleep(0.6)

        def test_asks_for_the_shared_build(model_dir):
            assert model_dir == "built"
    """})
    assert code == 1, output
    assert "1 test(s) not marked slow took more than fast_test_seconds = 0.4 s" in output
    assert "test_a.py::test_too_long" in output
    for passed_over in ("test_quick", "test_long_but_marked", "test_asks_for_the_shared_build"):
        assert f"test_a.py::{passed_over}" not in output
    assert "tests near the fast tier's bound" in output and "test_a.py::test_near_the_bound" in output
    assert "5 passed" in output


def test_a_file_whose_every_test_is_slow_fails_the_run_unless_it_says_why(tmp_path):
    slow_only = """
        import pytest
        {reason}
        @pytest.mark.slow
        def test_slow():
            pass
    """
    code, output = run_suite(tmp_path, {"test_b.py": slow_only.format(reason="")})
    assert code == 1, output
    assert "test files without a fast test" in output and "test_b.py" in output
    code, output = run_suite(tmp_path, {"test_b.py": slow_only.format(reason='ALL_SLOW_BECAUSE = "it trains"')})
    assert code == 0, output
    assert "without a fast test" not in output


def test_files_are_taken_heaviest_first_and_unknown_ones_before_them(tmp_path, monkeypatch):
    class Item:
        def __init__(self, nodeid):
            self.nodeid = nodeid

    monkeypatch.setattr(tiers, "file_weights", lambda: {"light.py": 1.0, "heavy.py": 30.0})
    items = [Item(nodeid) for nodeid in ("light.py::a", "heavy.py::a", "new.py::a", "light.py::b", "heavy.py::b")]
    tiers.pytest_collection_modifyitems(None, None, items)
    assert [item.nodeid for item in items] == ["new.py::a", "heavy.py::a", "heavy.py::b", "light.py::a", "light.py::b"]


def test_the_record_names_only_test_files_that_exist():
    for path in tiers.file_weights():
        assert os.path.isfile(os.path.join(ROOT, path)), f"{path} is in tests/file_seconds.json but gone"
