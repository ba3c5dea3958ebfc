"""How to train: `TrainConfig`, the frozen configuration of a run's optimizer, schedule,
evaluations, checkpoints and time budget (the model and the data have their own)."""

import dataclasses
import math
from typing import Optional

from app.decoding.config import AlignmentHead
from app.training.guidance import COST_TYPES, DEFAULT_WEIGHT
from app.training.precision import PRECISIONS
from app.training.schedule import cooldown_steps, resolve_warmup_steps


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """How to train; the model and the data have their own configurations."""

    # Optimizer updates to train for, in total across resumptions (None: use epochs).
    train_steps: Optional[int] = None
    # Passes over the training data (None: use train_steps; both: whichever ends first).
    epochs: Optional[int] = None
    # Micro-batches per optimizer update, to reach large token budgets on few devices.
    accumulate: int = 1
    # Optimizer updates per call of the training function: the host waits for the device
    # once per call instead of once per update. A call also ends where a record, a
    # checkpoint or an evaluation is due, so every one of them comes at the same step.
    steps_per_loop: int = 1
    # Linear warmup steps; None: the paper's 4000, shortened to 8% of a shorter run.
    warmup_steps: Optional[int] = None
    # Multiplier on the paper's learning-rate schedule.
    learning_rate_scale: float = 1.0
    # Fraction of the run, at its end, over which the learning rate falls linearly to zero
    # (0: the paper's schedule to the last step).
    cooldown_fraction: float = 0.0
    # epsilon_ls of the loss: the target puts 1 - epsilon_ls on the reference token and
    # spreads epsilon_ls over the rest of the vocabulary (the paper's 0.1; Table 3 row D).
    label_smoothing: float = 0.1
    # Adam, as in the paper.
    adam_beta_1: float = 0.9
    adam_beta_2: float = 0.98
    adam_epsilon: float = 1e-9
    # Decoupled weight decay (AdamW, Loshchilov & Hutter, 2019): before each update, every
    # weight matrix and embedding is multiplied by (1 - learning rate * weight_decay);
    # biases and layer-norm parameters are not decayed. 0: the paper's plain Adam.
    weight_decay: float = 0.0
    # Bidirectional training (Ding et al., 2021, "Improving Neural Machine Translation
    # by Bidirectional Training"): the first epochs, as many whole ones as fit in this
    # fraction of the run, train on every pair in both directions, each reversed pair
    # target to source, in one model with the shared vocabulary and no language tag;
    # the rest of the run trains source to target only. 0: off.
    bidirectional_fraction: float = 0.0
    # "float32", "mixed_float16" (with dynamic loss scaling) or "mixed_bfloat16".
    precision: str = "float32"
    # Compile the forward and backward pass with XLA.
    jit: bool = False
    # Steps between progress records in metrics.jsonl and TensorBoard.
    log_every: int = 50
    # Steps between evaluations (validation loss and BLEU); None or 0: only at the end.
    eval_every: Optional[int] = 1000
    # Sentences of the validation set decoded for BLEU (None: all).
    eval_sentences: Optional[int] = None
    # Checkpoint every this many steps, and/or every this many minutes.
    checkpoint_every: Optional[int] = 1000
    checkpoint_minutes: Optional[float] = None
    # Checkpoints kept (the newest K); averaging needs at least as many.
    keep_checkpoints: int = 5
    # How `export.py` and `python -m app.evaluate --model-dir` pick this run's weights when
    # told neither --checkpoint nor --average-last: the average of the newest K kept
    # checkpoints, or, with None, the checkpoint with the best validation BLEU. Recorded
    # in settings.json, so the run's directory says how it is meant to be exported.
    average_last: Optional[int] = None
    # Stop after this many evaluations without a better BLEU (None: never).
    patience: Optional[int] = None
    # Seed for weights and data order.
    seed: int = 1
    # Wall-clock minutes the run may take, across resumptions, final evaluation included;
    # it ends early, cooldown and all, if train_steps would not fit (None: no limit).
    time_budget_minutes: Optional[float] = None
    # Guided alignment training (app/training/alignment_loss.py), on the gold alignments
    # of the data (`DataConfig.alignments`): the decoder cross-attention it supervises,
    # "LAYER:HEAD" or "LAYER:mean" resolved against the model (layer from 0), the one the
    # run's word alignments then read (app/decoding/config.py `chosen_alignment_head`);
    # None: the run is not guided.
    guided_alignment_head: Optional[str] = None
    # The weight of its loss, added to the token loss before both are divided by the
    # batch's target tokens (Garg et al.'s lambda).
    guided_alignment_weight: float = DEFAULT_WEIGHT
    # "ce" or "mse" (app/training/guidance.py COST_TYPES).
    guided_alignment_type: str = "ce"

    def __post_init__(self):
        if self.train_steps is None and self.epochs is None:
            raise ValueError("give --train-steps or --epochs (or both)")
        for name in ("train_steps", "epochs"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        for name in ("warmup_steps", "checkpoint_every", "patience"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must not be negative, got {value}")
        if self.accumulate < 1:
            raise ValueError(f"accumulate must be at least 1, got {self.accumulate}")
        if isinstance(self.steps_per_loop, bool) or not isinstance(self.steps_per_loop, int) or self.steps_per_loop < 1:
            raise ValueError(f"steps_per_loop must be a positive integer, got {self.steps_per_loop!r}")
        if not (math.isfinite(self.learning_rate_scale) and self.learning_rate_scale > 0):
            raise ValueError(f"learning_rate_scale must be a positive number, got {self.learning_rate_scale}")
        if self.log_every < 1:
            raise ValueError(f"log_every must be at least 1, got {self.log_every}")
        if self.eval_every is not None and self.eval_every < 0:
            raise ValueError(f"eval_every must not be negative (0: only at the end), got {self.eval_every}")
        # Patience counts evaluations during the run; with none but the last it would never act.
        if self.patience and not self.eval_every:
            raise ValueError(
                f"patience {self.patience} counts evaluations, and eval_every {self.eval_every} evaluates only at "
                "the end: give --eval-every too"
            )
        # A negative count would slice off the end of the validation set, not keep its start.
        if self.eval_sentences is not None and self.eval_sentences < 1:
            raise ValueError(f"eval_sentences must be at least 1 (or all, by default), got {self.eval_sentences}")
        if self.checkpoint_minutes is not None and not self.checkpoint_minutes > 0:
            raise ValueError(f"checkpoint_minutes must be positive, got {self.checkpoint_minutes}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision={self.precision!r}, expected one of {PRECISIONS}")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise ValueError(f"weight_decay must be a non-negative number, got {self.weight_decay}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {self.label_smoothing!r}")
        if not 0.0 <= self.bidirectional_fraction < 1.0:
            raise ValueError(f"bidirectional_fraction must be in [0, 1), got {self.bidirectional_fraction}")
        if not 0.0 <= self.cooldown_fraction <= 1.0:
            raise ValueError(f"cooldown_fraction must be between 0 and 1, got {self.cooldown_fraction}")
        if self.keep_checkpoints < 1:
            raise ValueError(f"keep_checkpoints must be at least 1, got {self.keep_checkpoints}")
        if self.average_last is not None and not 1 <= self.average_last <= self.keep_checkpoints:
            raise ValueError(
                f"average_last must be between 1 and keep_checkpoints ({self.keep_checkpoints}), "
                f"got {self.average_last}"
            )
        if self.time_budget_minutes is not None and not self.time_budget_minutes > 0:
            raise ValueError(f"time_budget_minutes must be positive, got {self.time_budget_minutes}")

        if self.guided_alignment_head is not None:
            AlignmentHead.parse(self.guided_alignment_head)  # raises naming a malformed one
        if not (math.isfinite(self.guided_alignment_weight) and self.guided_alignment_weight >= 0):
            raise ValueError(
                f"guided_alignment_weight must be a non-negative number, got {self.guided_alignment_weight}"
            )
        if self.guided_alignment_type not in COST_TYPES:
            raise ValueError(
                f"guided_alignment_type must be one of {', '.join(COST_TYPES)}, got {self.guided_alignment_type!r}"
            )

    @property
    def guided(self):
        """Whether the run is trained with guided alignment."""
        return self.guided_alignment_head is not None

    def resolved_warmup(self, total_steps):
        return resolve_warmup_steps(self.warmup_steps, total_steps)

    def resolved_cooldown(self, total_steps):
        return cooldown_steps(total_steps, self.cooldown_fraction) if total_steps else 0
