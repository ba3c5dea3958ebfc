"""`RunPlan`: what one training run needs, every decision its flags leave open made.

    devices = app.commands.train_plan.device_config_from_args(args)   # the flags of `python train.py`
    strategy = app.training.devices.start_devices(devices)
    plan = app.commands.train_plan.plan_train(args, devices)
    app.training.loop.train(plan, data, strategy)      # once the data is prepared

The command makes it from its flags once (app/commands/train_plan.py); the training
library reads it and has no flags. Frozen: a variant is a copy, `dataclasses.replace`.
"""

import dataclasses
from typing import Optional

from app.model.config import ModelConfig
from app.training.config import TrainConfig
from app.training.devices import DeviceConfig
from app.training.init_from import InitRun
from data.config import DataConfig


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """One training run, as its flags describe it."""

    # The named size whose recipe gave the training defaults (--size; with --init-from and
    # no --size, the size nearest the init run's model).
    size: str
    # The Table 3 row (--variant), or None.
    variant: Optional[str]
    # Where checkpoints, settings and logs go (--model-dir, or runs/<size>-<data>-<src>-<tgt>).
    model_dir: str
    # The model asked for; its vocabulary size is replaced by the tokenizer's once the data
    # is prepared (a small corpus may give fewer pieces).
    model_config: ModelConfig
    data_config: DataConfig
    train_config: TrainConfig
    # The trained run a fine-tuning run starts from (--init-from), or None.
    init: Optional[InitRun] = None
    # --dry-run: print the model and data summary, train nothing.
    dry_run: bool = False
    # Validation BLEU at each evaluation (False: --no-bleu, the loss only).
    bleu: bool = True
    # --precision auto chose train_config.precision (the run says why).
    auto_precision: bool = False
    # The strategy and CPU threads it runs with (started before the plan is made:
    # `app.training.devices.start_devices`).
    devices: DeviceConfig = DeviceConfig()
