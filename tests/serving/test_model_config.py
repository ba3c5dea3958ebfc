"""app/serving/model_config.py: TF Serving's model config file, as it reads it, and what it
refuses, with TF Serving's messages after the file and line."""

import pytest

from app.serving.model_config import (
    ALL,
    LATEST,
    SPECIFIC,
    ModelConfigError,
    ServedModel,
    VersionPolicy,
    check_config,
    check_platforms,
    parse_model_config,
    read_model_config,
)

CONFIG = """# two models, as TF Serving's documentation writes them
model_config_list {
  config {
    name: "en-de"
    base_path: "%(a)s"
    model_platform: "tensorflow"
    model_version_policy { specific { versions: 4 versions: 3 } }
    version_labels { key: "stable" value: 3 }
    version_labels { key: "canary" value: 4 }
  }
  config {
    name: "en-fr"
    base_path: "%(b)s"
    model_platform: "tensorflow"
    model_version_policy { all {} }
  }
  config { name: "de-en" base_path: "%(a)s" model_platform: "tensorflow"
           model_version_policy { latest { num_versions: 2 } } }
  config { name: "fr-en" base_path: "%(b)s" model_type: TENSORFLOW }
}
"""


@pytest.fixture
def paths(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    return {"a": str(tmp_path / "a"), "b": str(tmp_path / "b")}


def test_a_config_as_tf_serving_documents_it(paths, tmp_path):
    (tmp_path / "models.config").write_text(CONFIG % paths)
    assert read_model_config(str(tmp_path / "models.config")) == (
        ServedModel("en-de", paths["a"], VersionPolicy(SPECIFIC, versions=(3, 4)), (("canary", 4), ("stable", 3))),
        ServedModel("en-fr", paths["b"], VersionPolicy(ALL)),
        ServedModel("de-en", paths["a"], VersionPolicy(LATEST, 2)),
        # TF Serving's default policy; the deprecated model_type in place of a platform.
        ServedModel("fr-en", paths["b"], VersionPolicy(LATEST, 1), platform="", model_type=1),
    )


@pytest.mark.parametrize("policy, on_disk, aspired", [
    (VersionPolicy(), [1, 2, 5], [5]),
    (VersionPolicy(LATEST, 2), [1, 2, 5], [2, 5]),
    (VersionPolicy(LATEST, 3), [7], [7]),
    (VersionPolicy(ALL), [1, 2, 5], [1, 2, 5]),
    (VersionPolicy(SPECIFIC, versions=(2, 3)), [1, 2, 5], [2]),  # 3 is not on disk (yet)
])
def test_each_policy_asks_for_its_versions(policy, on_disk, aspired):
    assert policy.aspired(on_disk) == aspired


@pytest.mark.parametrize("change, error", [
    (("model_platform", "model_platfrm"),
     'models.config:6:5: Message type "tensorflow.serving.ModelConfig" has no field named "model_platfrm".'),
    (("  config {", "  config {{", 1), "models.config:3:11: '  config {{': Expected identifier or number, got {."),
    # ServerCore::ReloadConfig's checks, in its order.
    (('name: "fr-en"', 'name: "en-de"'), "models.config:19: Illegal to list model en-de multiple times in config list"),
    (('"%(b)s"\n    model_platform', '"relative/en-fr"\n    model_platform'),
     "models.config:12: Expected model en-fr to have an absolute path or URI; got base_path()=relative/en-fr"),
    (('base_path: "%(b)s" model_type', 'base_path: "" model_type'),
     "models.config:19: Expected model fr-en to have an absolute path or URI; got base_path()="),
    (('model_platform: "tensorflow"\n    model_version', 'model_version'),
     "models.config:4: Illegal setting neither ModelServerConfig::model_type (deprecated) nor "
     "ModelServerConfig::model_platform."),
    (('model_platform: "tensorflow"', 'model_platform: "pytorch"'),
     "models.config:4: Model en-de requests unsupported platform pytorch"),
    (("model_type: TENSORFLOW", 'model_type: TENSORFLOW model_platform: "tensorflow"'),
     "models.config:19: Illegal setting both ModelServerConfig::model_type (deprecated) and "
     "ModelServerConfig::model_platform."),
    (("model_type: TENSORFLOW", "model_type: OTHER"),
     "models.config:19: ModelServerConfig::model_type choice 2 not supported."),
])
def test_a_config_tf_serving_refuses_is_refused_with_its_message(paths, change, error):
    old, new, *count = change
    text = CONFIG.replace(old, new, *count) % paths
    with pytest.raises(ModelConfigError) as raised:
        models = parse_model_config(text, "models.config")
        check_config(models)
        check_platforms(models)
    assert str(raised.value) == error


def test_a_model_may_not_change_its_platform():
    before = (ServedModel("en-de", "/m/en-de", model_type=1, platform=""),)
    check_config((ServedModel("en-de", "/m/en-de"),), before)  # model_type TENSORFLOW is "tensorflow"
    with pytest.raises(ModelConfigError, match="^Illegal to change a model's platform. For model en-de platform was "
                                               "tensorflow and new platform requested is pytorch$"):
        check_config((ServedModel("en-de", "/m/en-de", platform="pytorch"),), before)


def test_what_tf_serving_serves_is_served(paths, caplog):
    """A base path not there (yet), `specific {}`, any name, any label: TF Serving takes each
    (the model has no version until there is one; a label is checked against the versions)."""
    text = (CONFIG % paths).replace(paths["b"], "/no/such/dir").replace("specific { versions: 4 versions: 3 }",
                                                                         "specific {}")
    text = text.replace('name: "fr-en"', 'name: "fr en"').replace("value: 3", "value: 0")
    models = parse_model_config(text, "models.config")
    check_config(models)
    check_platforms(models)
    assert [(m.name, m.base_path, m.policy.versions, m.labels) for m in models][::3] == [
        ("en-de", paths["a"], (), (("canary", 4), ("stable", 0))), ("fr en", "/no/such/dir", (), ())]
    assert "specific {} names no version" in caplog.text


def test_an_empty_file_sets_no_config():
    assert parse_model_config("# nothing\n") is None
    assert parse_model_config("model_config_list {}") == ()


def test_an_unreadable_file_is_named(tmp_path):
    with pytest.raises(ModelConfigError, match=r"missing.config: cannot read the model config: .*No such file"):
        read_model_config(str(tmp_path / "missing.config"))


def test_the_documented_example_is_one_tf_serving_starts_on(tmp_path):
    """serving/models.config: absolute paths, a platform for each model, and no label in it
    (a first config's labels name versions that are not loaded yet: TF Serving refuses them)."""
    from tests.tiny_run import ROOT

    with open(f"{ROOT}/serving/models.config", encoding="utf-8") as f:
        text = f.read().replace('"/models/', f'"{tmp_path}/')
    models = parse_model_config(text)
    check_config(models)
    check_platforms(models)
    assert models == (
        ServedModel("en-de", f"{tmp_path}/en-de", VersionPolicy(SPECIFIC, versions=(3,))),
        ServedModel("en-fr", f"{tmp_path}/en-fr"),
    )


def test_every_config_in_the_docs_is_one_tf_serving_starts_on(tmp_path):
    """Each model config written out in the docs (a code block opening `model_config_list`)
    passes TF Serving's checks as a first config, its paths made this machine's."""
    import pathlib
    import re

    from app.commands.serve import _check_first_config
    from tests.tiny_run import ROOT

    blocks = [block for page in sorted(pathlib.Path(ROOT, "docs").rglob("*.md")) + [pathlib.Path(ROOT, "README.md")]
              for block in re.findall(r"```[a-z]*\n(model_config_list \{.*?)```", page.read_text(), re.S)]
    assert blocks, "docs/serving.md writes serving/models.config out"
    for block in blocks:
        _check_first_config(parse_model_config(block.replace('"/models/', f'"{tmp_path}/')), False)
