"""The lint gate: `ruff check` (rules in ruff.toml) passes on the whole repository.

A test rather than a separate step, so that the README's one test command runs the lint
too and CI catches an unused import, an undefined name or an over-long line like any other
failure. ruff is pinned in requirements-test.txt, so the test is never skipped.
"""

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", str(REPO_ROOT)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, f"ruff check failed:\n{result.stdout}{result.stderr}"
