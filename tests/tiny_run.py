"""A small, real training run on a slice of Multi30k, for tests and benchmarks.

    paths = write_multi30k_slice(directory, train=300, validation=40)   # 4 plain-text files
    model_dir = train_tiny_run(directory)          # 4 steps of a 1-layer model, with settings
"""

import gzip
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def write_multi30k_slice(directory, train=300, validation=20, source_lang="en", target_lang="de"):
    """The first lines of Multi30k's train and val as plain files in `directory`.

    Returns:
        `[train.src, train.tgt, val.src, val.tgt]` paths, the order `files:` datasets take.
    """
    paths = []
    for split, count in (("train", train), ("val", validation)):
        for lang in (source_lang, target_lang):
            with gzip.open(ROOT / "data" / "multi30k" / f"{split}.{lang}.gz", "rt", encoding="utf-8") as f:
                path = Path(directory) / f"{split}.{lang}"
                path.write_text("".join(next(f) for _ in range(count)), encoding="utf-8")
                paths.append(str(path))
    return paths


def train_tiny_run(directory, lowercase=False):
    """Trains a 1-layer, 32-wide model for 4 steps in `directory`; returns it as a string.

    `lowercase` trains it as `python train.py --lowercase` would.

    The directory ends up as `python train.py` leaves one: settings.json, the vocabulary,
    checkpoints 2..4 (3 kept) and best/.
    """
    import tensorflow as tf

    from app.model.config import ModelConfig
    from app.model_dir.settings import save_settings
    from app.training.config import TrainConfig
    from app.training.loop import train
    from app.training.run_plan import RunPlan
    from data.config import DataConfig
    from data.dataset import prepare_data

    corpus = write_multi30k_slice(directory)
    data_config = DataConfig(
        dataset="files:" + ",".join(corpus), vocab_size=400, batch_tokens=512, max_length=48,
        lowercase=lowercase,
    )
    data = prepare_data(data_config, str(directory))
    model_config = ModelConfig.from_size(
        "tiny", vocab_size=data.tokenizer.vocab_size, num_layers=1, d_model=32, d_ff=64, num_heads=2, max_length=48
    )
    train_config = TrainConfig(train_steps=4, eval_every=0, checkpoint_every=1, log_every=1, keep_checkpoints=3)
    save_settings(str(directory), model_config, data_config, train_config)
    plan = RunPlan(size="tiny", variant=None, model_dir=str(directory), model_config=model_config,
                   data_config=data_config, train_config=train_config)
    train(plan, data, tf.distribute.get_strategy(), log=lambda *_: None)
    return str(directory)
