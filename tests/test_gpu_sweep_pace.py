"""benchmarks/gpu/train_jax.py logs its pace often enough that a run cut short says how far it got.

A session's device time ended one sweep a few seconds before its only evaluation, at step
16,000, when the sweep logged nothing after step 1,000: the call came back with no figure
at all. Runs where JAX is installed; skipped elsewhere, as CI is.
"""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_sweep_logs_its_pace_early_and_then_every_2000_steps(monkeypatch):
    pytest.importorskip("jax")
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks" / "gpu"))
    monkeypatch.delitem(sys.modules, "train_jax", raising=False)
    import train_jax

    logged = [step for step in range(1, 9001) if train_jax.reports_pace(step)]
    assert logged == [100, 1000, 2000, 4000, 6000, 8000]
