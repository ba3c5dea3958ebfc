"""benchmarks/bench_serving_rollouts.py: the configs of its steps are ones TF Serving takes.

Its run (a minute on the tiny export) is not repeated here: a new version loading alone into
the worker that serves the others, on real workers, is
tests/serving/test_worker_process.py's, and the rollout steps under load are
tests/serving/test_grpc_api.py's canary test."""

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
