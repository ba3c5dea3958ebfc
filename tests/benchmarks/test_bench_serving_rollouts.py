"""benchmarks/bench_serving_rollouts.py on the tiny export: a canary rollout of one model of
three, in TF Serving's steps, loads that version only and fails no request."""

import re

import pytest

from benchmarks import bench_serving_rollouts


def test_the_config_of_a_step_is_one_tf_serving_takes(tmp_path):
    from app.serving.model_config import check_config, check_platforms, read_model_config

    bases = {name: str(tmp_path / name) for name in bench_serving_rollouts.MODELS}
    path = tmp_path / "models.config"
    bench_serving_rollouts.write_config(path, bases, [3, 4], {"stable": 3, "canary": 4})
    models = read_model_config(str(path))
    check_config(models)
    check_platforms(models)
    assert [(m.name, m.policy.versions, m.labels) for m in models] == [
        ("en-de", (3, 4), (("canary", 4), ("stable", 3))), ("en-fr", (), ()), ("de-en", (), ())]


@pytest.mark.slow
def test_a_rollout_loads_one_version_and_fails_no_request(exported, capsys):
    _, _, path, _ = exported
    assert bench_serving_rollouts.main(["--export", path, "--rollouts", "1"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"rollout to version 2: 1 load\(s\), 0 moved to a fresh worker", out), out
    assert re.search(r"answered \d+ requests, failed 0;", out), out
