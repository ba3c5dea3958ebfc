"""app.serve's flags made into a `ServePlan` (app/commands/serve.py), the flags left as
parsed. The server itself: tests/serving/."""

import copy
import os

import pytest

from app.commands.serve import ServePlan, main, parse_args, plan_serving
from app.serving.batching import BatchingParameters
from app.serving.model_config import LATEST, ServedModel, VersionPolicy
from app.serving.rest_api import Limits
from app.serving.worker_process import CpuThreads


def planned(*argv):
    """The plan of app.serve's flags `argv`, after checking that it left them as parsed."""
    args = parse_args(list(argv))
    before = copy.deepcopy(vars(args))
    plan = plan_serving(args)
    assert vars(args) == before
    return plan


def test_the_defaults_are_tf_servings_but_for_batching():
    assert planned() == ServePlan(
        models=(ServedModel("translator", os.path.join("saved_models", "translator"), VersionPolicy(LATEST, 1)),),
        model_config_file=None,
        config_poll_seconds=0.0,
        allow_labels_for_unavailable=False,
        poll_wait_seconds=1.0,
        max_num_load_retries=5,
        load_retry_interval_seconds=60.0,
        load_timeout_seconds=900.0,
        reclaim_bytes=1024 * 2**20,
        host="127.0.0.1",
        port=8501,
        grpc_port=8500,
        allowed_hosts="",
        allowed_origins="",
        grpc_channel_arguments=(),
        grpc_max_calls=None,
        read_timeout_seconds=30.0,
        limits=Limits(max_instances=64, max_text_length=1000),
        enable_batching=True,
        batching=BatchingParameters(32, 5000, 1, 100),
        threads=CpuThreads(intra_op=None, inter_op=0),
    )


def test_each_flag_lands_in_its_field_in_either_spelling(tmp_path):
    parameters = tmp_path / "batching.txt"
    parameters.write_text("max_batch_size { value: 8 }\nnum_batch_threads { value: 2 }\n", encoding="utf-8")
    flags = [
        "--model_name", "en-de", "--model_base_path", "/srv/en-de", "--file_system_poll_wait_seconds", "0",
        "--num_versions", "2", "--max_num_load_retries", "0", "--load_retry_interval_micros", "1500000",
        "--load_timeout_seconds", "0", "--reclaim_unloaded_memory_mb", "0.5",
        "--host", "0.0.0.0", "--rest_api_port", "0", "--port", "9000",
        "--allowed_hosts", "a.example", "--allowed_origins",
        "https://b.example", "--read_timeout_seconds", "5", "--max_instances", "4", "--max_text_length", "10",
        "--enable_batching", "false", "--batching_parameters_file", str(parameters),
        "--tensorflow_intra_op_parallelism", "3", "--tensorflow_inter_op_parallelism", "1",
        "--grpc_channel_arguments", "grpc.max_connection_age_ms=2000,grpc.lb_policy_name=grpclb",
        "--grpc_max_threads", "16",
    ]
    plan = planned(*flags)
    assert plan == ServePlan(
        models=(ServedModel("en-de", "/srv/en-de", VersionPolicy(LATEST, 2)),), model_config_file=None,
        config_poll_seconds=0.0, allow_labels_for_unavailable=False, poll_wait_seconds=0.0,
        max_num_load_retries=0, load_retry_interval_seconds=1.5, load_timeout_seconds=None, reclaim_bytes=2**19,
        host="0.0.0.0", port=0, grpc_port=9000,
        allowed_hosts="a.example", allowed_origins="https://b.example",
        grpc_channel_arguments=(("grpc.max_connection_age_ms", 2000), ("grpc.lb_policy_name", "grpclb")),
        grpc_max_calls=16, read_timeout_seconds=5.0, limits=Limits(4, 10), enable_batching=False,
        batching=BatchingParameters(8, 5000, 2, 100),
        threads=CpuThreads(3, 1),
    )
    assert planned(*(flag.replace("_", "-") if flag.startswith("--") else flag for flag in flags)) == plan


def test_a_channel_argument_that_is_not_key_value_exits_2_naming_it(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--grpc_channel_arguments", "grpc.max_connection_age_ms=2000,oops"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith("error: --grpc_channel_arguments: 'oops' is not key=value")


def test_a_batching_parameters_file_that_cannot_be_read_exits_2_naming_the_flag(tmp_path, capsys):
    (tmp_path / "bad.txt").write_text("max_batch_size: 8\n", encoding="utf-8")
    for path, message in (
        (tmp_path / "missing.txt", "No such file or directory"),
        (tmp_path / "bad.txt", "write max_batch_size { value: 8 }, as TF Serving reads it"),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(["--batching_parameters_file", str(path)])
        assert exit_.value.code == 2
        error = capsys.readouterr().err.splitlines()[-1]
        assert "error: --batching_parameters_file: " in error and message in error


def test_a_model_config_file_names_the_models_and_one_that_cannot_be_served_exits_2(tmp_path, capsys, caplog):
    (tmp_path / "en-de").mkdir()
    config = tmp_path / "models.config"
    config.write_text(f'model_config_list {{ config {{ name: "en-de" base_path: "{tmp_path / "en-de"}" '
                      'model_platform: "tensorflow" version_labels { key: "stable" value: 3 } } }\n')
    plan = planned("--model_config_file", str(config), "--model_config_file_poll_wait_seconds", "60",
                   "--allow_version_labels_for_unavailable_models")
    assert plan.models == (ServedModel("en-de", str(tmp_path / "en-de"), VersionPolicy(), (("stable", 3),)),)
    assert (plan.model_config_file, plan.config_poll_seconds, plan.allow_labels_for_unavailable) == (
        str(config), 60.0, True)
    # TF Serving's Docker image always passes --model_name and --model_base_path: ignored, said.
    with caplog.at_level("WARNING", logger="app.serve"):
        assert planned("--model_config_file", str(config), "--model_name", "x",
                       "--allow_version_labels_for_unavailable_models").models == plan.models
    assert "--model_name and --model_base_path are ignored" in caplog.text
    # What TF Serving would not start on, refused before anything loads, with its message.
    refused = {
        # A first config's labels name versions not loaded yet (without the flag).
        config.read_text(): "Request to assign label to version 3 of model en-de, which is not currently available "
                            "for inference",
        'model_config_list {\n config { name: "en-de" base_path: "nowhere" model_platform: "tensorflow" } }\n':
            "Expected model en-de to have an absolute path or URI; got base_path()=nowhere",
        'model_config_list {\n config { name: "en-de" base_path: "/nowhere" } }\n':
            "Illegal setting neither ModelServerConfig::model_type (deprecated) nor "
            "ModelServerConfig::model_platform.",
    }
    for text, message in refused.items():
        config.write_text(text)
        with pytest.raises(SystemExit) as exit_:
            main(["--model_config_file", str(config)])
        assert exit_.value.code == 2
        error = capsys.readouterr().err.splitlines()[-1]
        line = 1 if text.startswith("model_config_list { config") else 2
        assert error.endswith(f"error: --model_config_file: {config}:{line}: {message}")


def test_warmup_runs_each_request_once_as_tf_serving_unless_told_otherwise(capsys):
    assert planned().warmup_iterations == 1
    assert planned("--num_request_iterations_for_warmup", "3").warmup_iterations == 3
    assert planned("--num_request_iterations_for_warmup", "0").warmup_iterations == 1  # TF Serving: used if > 0
    assert planned("--enable_model_warmup", "false", "--num_request_iterations_for_warmup", "3").warmup_iterations == 0
    assert planned("--enable_model_warmup").warmup_iterations == 1
    with pytest.raises(SystemExit):
        planned("--num_request_iterations_for_warmup", "-1")
    assert "--num_request_iterations_for_warmup must be at least 0, got -1" in capsys.readouterr().err
