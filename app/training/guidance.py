"""Guided alignment's settings: which cross-attention head a run supervises, how much its
loss weighs and which loss it is (app/training/alignment_loss.py computes it).

    guidance = Guidance.of(train_config)      # None for a run trained without gold alignments
    guidance.head, guidance.weight, guidance.cost_type   # AlignmentHead(3, 0), 0.05, "ce"

No TensorFlow here: train.py's flags take their choices and defaults from it before
TensorFlow loads.
"""

import dataclasses

from app.decoding.config import DEFAULT_GUIDED, AlignmentHead

# OpenNMT-tf's two types of the loss (`guided_alignment_type`): cross-entropy against the
# gold row, or its squared error.
COST_TYPES = ("ce", "mse")
# Garg et al.'s lambda and fairseq's --alignment-lambda, whose loss normalizes each gold row
# as ours does; OpenNMT-tf's weight 1 goes with unnormalized rows, another scale.
DEFAULT_WEIGHT = 0.05
# The head a guided run supervises unless told: OpenNMT-tf's, the last layer's first head.
DEFAULT_HEAD = DEFAULT_GUIDED


@dataclasses.dataclass(frozen=True)
class Guidance:
    """What the training step adds for guided alignment, from `TrainConfig`'s fields."""

    # The supervised head, its layer counted from 0 (`AlignmentHead.resolved`).
    head: AlignmentHead
    # The loss's weight, and its type (`COST_TYPES`).
    weight: float = DEFAULT_WEIGHT
    cost_type: str = "ce"

    @classmethod
    def of(cls, train_config):
        """The `Guidance` of a `TrainConfig`, or None where the run is not guided."""
        if train_config.guided_alignment_head is None:
            return None
        return cls(
            AlignmentHead.parse(train_config.guided_alignment_head), train_config.guided_alignment_weight,
            train_config.guided_alignment_type,
        )
