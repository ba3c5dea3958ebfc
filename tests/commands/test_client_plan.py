"""app.client's flags made into a `ClientPlan` (app/commands/client.py), the flags left as
parsed; the default of the option translate_with_options needs but was not given."""

import copy

from app.commands import client
from app.commands.client import ClientPlan, parse_args, plan_client


def planned(*argv):
    args = parse_args(list(argv))
    before = copy.deepcopy(vars(args))
    plan = plan_client(args)
    assert vars(args) == before
    return plan


def test_the_defaults_and_every_flag():
    assert planned() == ClientPlan(
        url="http://localhost:8501", grpc_address=None, model_name="translator", version=None, label=None,
        sentences=(), batch_size=32,
        nbest=False, scores=False, alpha=None, max_extra_length=None,
    )
    flags = ["A man.", "A dog.", "--url", "http://h:9", "--model", "en-de", "--version", "2", "--scores",
             "--alpha", "1.0", "--max-extra-length", "9", "--batch-size", "4"]
    assert planned(*flags) == ClientPlan(
        url="http://h:9", grpc_address=None, model_name="en-de", version=2, label=None,
        sentences=("A man.", "A dog."), batch_size=4, nbest=False, scores=True, alpha=1.0, max_extra_length=9,
    )
    assert planned("--grpc", "h:8500", "--label", "stable") == ClientPlan(
        url="http://localhost:8501", grpc_address="h:8500", model_name="translator", version=None, label="stable",
        sentences=(), batch_size=32, nbest=False, scores=False, alpha=None, max_extra_length=None,
    )


def test_one_option_given_sends_the_others_default(monkeypatch):
    sent = []
    monkeypatch.setattr(client, "predict", lambda url, model, instances, signature, version, label: sent.append(
        (signature, instances)) or [{"translations": "x", "scores": -1.0}])
    client.translate("http://h", "m", ["A man."], max_extra_length=9)
    client.translate("http://h", "m", ["A man."], alpha=1.0)
    assert sent == [
        ("translate_with_options", [{"inputs": "A man.", "alpha": 0.6, "max_extra_length": 9}]),
        ("translate_with_options", [{"inputs": "A man.", "alpha": 1.0, "max_extra_length": 50}]),
    ]


def test_the_steering_flags_plan_the_constrained_signature(tmp_path):
    from app.cli.steering import SteeringFlags

    (tmp_path / "g.tsv").write_text("bike\tFahrrad\n", encoding="utf-8")
    plan = planned("--glossary", str(tmp_path / "g.tsv"), "--no-repeat-ngram-size", "3", "--alpha", "0.5")
    assert plan.steering == SteeringFlags(None, None, str(tmp_path / "g.tsv"), 3)
    assert (plan.alpha, plan.max_extra_length) == (0.5, None)
    assert planned("--no-repeat-ngram-size", "0").steering is None  # 0: off, the signatures as before
