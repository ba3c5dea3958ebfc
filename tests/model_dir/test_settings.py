"""settings.json (`app.model_dir.settings`): what a resumed run may change, and a damaged file named."""

import dataclasses
import json

import pytest

from app.model.config import ModelConfig
from app.training.config import TrainConfig
from data.config import DataConfig


def test_resuming_with_another_model_configuration_is_refused(tmp_path):
    from app.model_dir.settings import save_settings

    data_config = DataConfig(batch_tokens=512)
    train_config = TrainConfig(train_steps=1)
    save_settings(str(tmp_path), ModelConfig.from_size("tiny"), data_config, train_config)
    with pytest.raises(
        ValueError,
        match=r"another model configuration \(d_model: 128 -> 256, key_dim: 32 -> 64, value_dim: 32 -> 64\); "
        r"use another --model-dir",
    ):
        save_settings(str(tmp_path), ModelConfig.from_size("tiny", d_model=256), data_config, train_config)


def test_resuming_logs_changed_training_settings_and_refuses_a_change_of_loss_scaling(tmp_path):
    from app.model_dir.settings import save_settings

    model, data = ModelConfig.from_size("tiny"), DataConfig(batch_tokens=512)
    save_settings(str(tmp_path), model, data, TrainConfig(train_steps=1, precision="float32"))
    lines = []
    longer_bf16 = TrainConfig(train_steps=3, precision="mixed_bfloat16")
    save_settings(str(tmp_path), model, data, longer_bf16, log=lines.append)
    assert lines == [
        "resuming with changed training settings: precision: 'float32' -> 'mixed_bfloat16', train_steps: 1 -> 3"
    ]
    lines.clear()
    save_settings(str(tmp_path), model, data, longer_bf16, log=lines.append)
    assert lines == []  # nothing changed, nothing said
    before = (tmp_path / "settings.json").read_text()
    with pytest.raises(
        ValueError,
        match=r"holds a run trained in mixed_bfloat16, which cannot resume in mixed_float16: .* "
        r"give --precision mixed_bfloat16 or use another --model-dir",
    ):
        save_settings(str(tmp_path), model, data, TrainConfig(train_steps=3, precision="mixed_float16"))
    assert (tmp_path / "settings.json").read_text() == before  # not rewritten


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"model": {', "is not valid JSON"),
        ('{"model": {}, "data": {}}', "lacks the section(s) train"),
        ('{"model": {"no_such_field": 1}, "data": {}, "train": {}}', "does not match this version's configuration"),
    ],
)
def test_a_damaged_settings_file_is_named_in_the_error(tmp_path, text, message):
    from app.model_dir.settings import load_settings, save_settings

    path = tmp_path / "settings.json"
    path.write_text(text)
    with pytest.raises(ValueError) as error:
        load_settings(str(tmp_path))
    assert str(path) in str(error.value) and message in str(error.value)
    if "JSON" in message or "lacks" in message:
        # Resuming reads it too, and must not overwrite what it could not read.
        with pytest.raises(ValueError, match="settings.json"):
            save_settings(
                str(tmp_path), ModelConfig.from_size("tiny"), DataConfig(batch_tokens=512), TrainConfig(train_steps=1)
            )
        assert path.read_text() == text


def test_a_run_from_before_a_new_setting_resumes_with_its_default(tmp_path):
    from app.model_dir.settings import load_settings, save_settings

    model, data, train_config = ModelConfig.from_size("tiny"), DataConfig(batch_tokens=512), TrainConfig(train_steps=1)
    save_settings(str(tmp_path), model, data, train_config)
    path = tmp_path / "settings.json"
    older = json.loads(path.read_text())
    del older["data"]["bpe_dropout"]  # settings.json as written before the flag existed
    path.write_text(json.dumps(older))
    save_settings(str(tmp_path), model, data, train_config)  # resumes
    assert load_settings(str(tmp_path))[1] == data
    with pytest.raises(ValueError, match=r"another data configuration \(bpe_dropout: 0.0 -> 0.1\)"):
        save_settings(str(tmp_path), model, dataclasses.replace(data, bpe_dropout=0.1), train_config)


def test_label_smoothing_is_written_with_the_training_settings_and_read_from_an_older_model_block(tmp_path):
    from app.model_dir.settings import load_settings, save_settings

    model, data = ModelConfig.from_size("tiny"), DataConfig(batch_tokens=512)
    save_settings(str(tmp_path), model, data, TrainConfig(train_steps=1, label_smoothing=0.2))
    path = tmp_path / "settings.json"
    written = json.loads(path.read_text())
    assert written["train"]["label_smoothing"] == 0.2
    assert "label_smoothing" not in written["model"]
    # settings.json as written while label smoothing was a model field.
    older = json.loads(path.read_text())
    older["model"]["label_smoothing"] = older["train"].pop("label_smoothing")
    path.write_text(json.dumps(older))
    loaded_model, loaded_data, train_settings = load_settings(str(tmp_path))
    assert (loaded_model, loaded_data, train_settings["label_smoothing"]) == (model, data, 0.2)
    assert ModelConfig.from_dict(older["model"]) == model  # what export and serving build
    lines = []
    save_settings(str(tmp_path), model, data, TrainConfig(train_steps=1, label_smoothing=0.2), log=lines.append)
    assert lines == []  # resumed with the same label smoothing: nothing changed
    rewritten = json.loads(path.read_text())
    assert rewritten["train"]["label_smoothing"] == 0.2 and "label_smoothing" not in rewritten["model"]
