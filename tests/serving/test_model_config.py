"""app/serving/model_config.py: TF Serving's model config file, as it reads it, and what this
server refuses (with the file, line and field)."""

import pytest

from app.serving.model_config import (
    ALL,
    LATEST,
    SPECIFIC,
    ModelConfigError,
    ServedModel,
    VersionPolicy,
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
    model_version_policy { all {} }
  }
  config { name: "de-en" base_path: "%(a)s" model_version_policy { latest { num_versions: 2 } } }
  config { name: "fr-en" base_path: "%(b)s" }
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
        ServedModel("fr-en", paths["b"], VersionPolicy(LATEST, 1)),  # TF Serving's default policy
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
    (('"%(b)s"\n    model_version_policy { all {} }', '"/no/such/dir"'),
     "models.config:13: base_path of model 'en-fr': /no/such/dir does not exist"),
    (('name: "fr-en"', 'name: "en-de"'), "models.config:17: name of model 'en-de': a second model of this name"),
    (('name: "en-fr"', 'name: "en fr"'),
     "models.config:12: name of model 'en fr': use letters, digits, '.', '_' and '-' (it is part of URLs)"),
    (('model_platform: "tensorflow"', 'model_platform: "pytorch"'),
     "models.config:6: model_platform of model 'en-de': 'pytorch'; this server serves tensorflow"),
    (("specific { versions: 4 versions: 3 }", "specific {}"),
     "models.config:7: model_version_policy of model 'en-de': specific {} names no version"),
    (("value: 3", "value: 0"), "models.config:8: version_labels of model 'en-de': label 'stable' points at version 0"),
    (("  config {", "  config {{", 1), "models.config:3:11: '  config {{': Expected identifier or number, got {."),
])
def test_a_config_that_cannot_be_served_names_the_line_and_field(paths, change, error):
    old, new, *count = change
    text = (CONFIG.replace(old, new, *count) if "%(" not in old else CONFIG.replace(old, new)) % paths
    with pytest.raises(ModelConfigError) as raised:
        parse_model_config(text, "models.config")
    assert str(raised.value) == error


def test_an_unreadable_file_is_named(tmp_path):
    with pytest.raises(ModelConfigError, match=r"missing.config: cannot read the model config: .*No such file"):
        read_model_config(str(tmp_path / "missing.config"))


def test_the_documented_example_is_read_as_its_comments_say(tmp_path):
    from tests.tiny_run import ROOT

    with open(f"{ROOT}/serving/models.config", encoding="utf-8") as f:
        text = f.read().replace('"/models/', f'"{tmp_path}/')
    (tmp_path / "en-de").mkdir()
    (tmp_path / "en-fr").mkdir()
    assert parse_model_config(text) == (
        ServedModel("en-de", f"{tmp_path}/en-de", VersionPolicy(SPECIFIC, versions=(3, 4)),
                    (("canary", 4), ("stable", 3))),
        ServedModel("en-fr", f"{tmp_path}/en-fr"),
    )
